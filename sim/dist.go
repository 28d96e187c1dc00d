package sim

import (
	"errors"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"time"

	"gonum.org/v1/gonum/stat/distuv"
)

// DistKind names a duration distribution.
type DistKind string

// The distributions a scenario can use for latencies, delays and session
// lengths.
const (
	Constant    DistKind = "constant"
	Exponential DistKind = "exponential"
	LogNormal   DistKind = "lognormal"
	Uniform     DistKind = "uniform"
	Normal      DistKind = "normal"
)

// Dist is a distribution of durations. The zero Dist is the constant 0.
//
//   - constant: Value
//   - exponential: Mean
//   - lognormal: Median and P99 (the 99th percentile), the way latencies are
//     usually quoted
//   - uniform: Min, Max
//   - normal: Mean, Stddev, truncated at 0
type Dist struct {
	Kind                  DistKind
	Value, Mean, Median   time.Duration
	P99, Min, Max, Stddev time.Duration
}

// Const is the constant distribution at d.
func Const(d time.Duration) Dist { return Dist{Kind: Constant, Value: d} }

// Exp is the exponential distribution with mean m.
func Exp(m time.Duration) Dist { return Dist{Kind: Exponential, Mean: m} }

// Validate reports a distribution whose parameters make no sense.
func (d Dist) Validate() error {
	switch d.Kind {
	case "", Constant:
		if d.Value < 0 {
			return errors.New("constant value must not be negative")
		}
	case Exponential:
		if d.Mean <= 0 {
			return errors.New("exponential mean must be positive")
		}
	case LogNormal:
		if d.Median <= 0 || d.P99 < d.Median {
			return errors.New("lognormal needs median > 0 and p99 >= median")
		}
	case Uniform:
		if d.Min < 0 || d.Max < d.Min {
			return errors.New("uniform needs 0 <= min <= max")
		}
	case Normal:
		if d.Mean < 0 || d.Stddev < 0 {
			return errors.New("normal needs mean >= 0 and stddev >= 0")
		}
	default:
		return fmt.Errorf("unknown distribution %q", d.Kind)
	}
	return nil
}

// MeanValue is the distribution's mean (ignoring the truncation of normal).
func (d Dist) MeanValue() time.Duration {
	switch d.Kind {
	case Exponential, Normal:
		return d.Mean
	case LogNormal:
		mu, sigma := d.LogNormalParams()
		return time.Duration(math.Exp(mu + sigma*sigma/2))
	case Uniform:
		return (d.Min + d.Max) / 2
	}
	return d.Value
}

// z99 is the standard normal's 99th percentile.
const z99 = 2.3263478740408408

// LogNormalParams are a LogNormal's mu and sigma (of the logarithm, in
// nanoseconds) from its median and p99.
func (d Dist) LogNormalParams() (mu, sigma float64) {
	mu = math.Log(float64(d.Median))
	sigma = (math.Log(float64(d.P99)) - mu) / z99
	return mu, sigma
}

// sampler draws durations (nanoseconds) from one distribution with its own
// random stream.
type sampler struct {
	kind  DistKind
	value int64
	rnd   distuv.Rander
}

func newSampler(d Dist, src rand.Source) *sampler {
	s := &sampler{kind: d.Kind}
	switch d.Kind {
	case Exponential:
		s.rnd = distuv.Exponential{Rate: 1 / float64(d.Mean), Src: src}
	case LogNormal:
		mu, sigma := d.LogNormalParams()
		s.rnd = distuv.LogNormal{Mu: mu, Sigma: sigma, Src: src}
	case Uniform:
		if d.Max == d.Min {
			s.kind, s.value = Constant, int64(d.Min)
		} else {
			s.rnd = distuv.Uniform{Min: float64(d.Min), Max: float64(d.Max), Src: src}
		}
	case Normal:
		if d.Stddev == 0 {
			s.kind, s.value = Constant, int64(d.Mean)
		} else {
			s.rnd = distuv.Normal{Mu: float64(d.Mean), Sigma: float64(d.Stddev), Src: src}
		}
	default:
		s.kind, s.value = Constant, int64(d.Value)
	}
	return s
}

// maxSample caps a draw at about 100 days: a heavy tail must not overflow
// the virtual clock.
const maxSample = float64(100 * 24 * time.Hour)

func (s *sampler) next() int64 {
	if s.kind == Constant {
		return s.value
	}
	x := s.rnd.Rand()
	if !(x > 0) { // also catches NaN
		return 0
	}
	return int64(math.Min(x, maxSample))
}

// streamSource returns the random source for the stream called name in a run
// seeded with seed. Streams are independent of each other and of the order
// in which they are created.
func streamSource(seed uint64, name string) *rand.PCG {
	h := fnv.New64a()
	h.Write([]byte(name))
	k := h.Sum64()
	return rand.NewPCG(mix(seed^k), mix(k+0x632be59bd9b4e019))
}

// mix is splitmix64's finaliser.
func mix(z uint64) uint64 {
	z += 0x9e3779b97f4a7c15
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}
