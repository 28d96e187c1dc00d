package core

import "math/bits"

// rng is a small deterministic generator (splitmix64). The core draws all its
// randomness from one seeded from an argument, never from the global source,
// so the same seed replays the same decision. It is a value type so that a
// decision needs no heap allocation.
type rng struct{ state uint64 }

func newRNG(seed uint64) rng { return rng{state: seed} }

func (r *rng) uint64() uint64 {
	r.state += 0x9e3779b97f4a7c15
	z := r.state
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// intN returns a uniform value in [0, n) without modulo bias (Lemire's
// multiply-and-reject). n must be positive.
func (r *rng) intN(n uint64) uint64 {
	hi, lo := bits.Mul64(r.uint64(), n)
	if lo < n {
		threshold := -n % n
		for lo < threshold {
			hi, lo = bits.Mul64(r.uint64(), n)
		}
	}
	return hi
}
