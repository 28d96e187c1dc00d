package sim

import (
	"math"
	"math/bits"
	"time"
)

// histogram records durations with a bounded relative error: exact below
// 64 ns, then 64 linear buckets per power of two (under 1.6% error), in a
// fixed array, so recording costs no allocation and the result does not
// depend on the order of the values.
type histogram struct {
	counts [64 + 58*64]uint64
	n      uint64
	sum    float64
	max    int64
}

func bucketOf(v int64) int {
	if v < 64 {
		return int(max(v, 0))
	}
	e := bits.Len64(uint64(v)) - 7 // v>>e is in [64, 128)
	return 64 + e*64 + int(v>>e) - 64
}

// bucketMid is the middle of a bucket's range.
func bucketMid(i int) float64 {
	if i < 64 {
		return float64(i)
	}
	e := (i - 64) / 64
	lo := int64(64+(i-64)%64) << e
	return float64(lo) + float64(int64(1)<<e)/2 - 0.5
}

func (h *histogram) add(v int64) {
	h.counts[bucketOf(v)]++
	h.n++
	h.sum += float64(v)
	h.max = max(h.max, v)
}

// quantile returns an estimate of the q-quantile in nanoseconds.
func (h *histogram) quantile(q float64) float64 {
	if h.n == 0 {
		return 0
	}
	rank := uint64(math.Ceil(q * float64(h.n)))
	rank = max(rank, 1)
	var c uint64
	for i, n := range h.counts {
		c += n
		if c >= rank {
			return math.Min(bucketMid(i), float64(h.max))
		}
	}
	return float64(h.max)
}

// Latency summarises a latency distribution, in milliseconds.
type Latency struct {
	Count  uint64  `json:"count"`
	MeanMs float64 `json:"meanMs"`
	P50Ms  float64 `json:"p50Ms"`
	P90Ms  float64 `json:"p90Ms"`
	P99Ms  float64 `json:"p99Ms"`
	P999Ms float64 `json:"p999Ms"`
	MaxMs  float64 `json:"maxMs"`
}

// Bucket is one histogram bucket: Count values at most UpToMs.
type Bucket struct {
	UpToMs float64 `json:"upToMs"`
	Count  uint64  `json:"count"`
}

func (h *histogram) summary() Latency {
	ms := func(ns float64) float64 { return round4(ns / 1e6) }
	l := Latency{Count: h.n, MaxMs: ms(float64(h.max))}
	if h.n == 0 {
		return l
	}
	l.MeanMs = ms(h.sum / float64(h.n))
	l.P50Ms = ms(h.quantile(0.5))
	l.P90Ms = ms(h.quantile(0.9))
	l.P99Ms = ms(h.quantile(0.99))
	l.P999Ms = ms(h.quantile(0.999))
	return l
}

// buckets returns the distribution coarsened to bounds doubling from 1 ms,
// which is what a plot needs and keeps the JSON small.
func (h *histogram) buckets() []Bucket {
	if h.n == 0 {
		return nil
	}
	var out []Bucket
	bound := float64(time.Millisecond)
	var c uint64
	for i, n := range h.counts {
		for bucketMid(i) > bound {
			out = append(out, Bucket{UpToMs: bound / 1e6, Count: c})
			c = 0
			bound *= 2
		}
		c += n
	}
	out = append(out, Bucket{UpToMs: bound / 1e6, Count: c})
	// Drop empty buckets at the start; keep the rest so the bounds stay regular.
	for len(out) > 1 && out[0].Count == 0 {
		out = out[1:]
	}
	return out
}

// round4 keeps four significant decimals' worth of precision after the
// point, so that the JSON is readable and stable across platforms whose
// last float bits might differ.
func round4(x float64) float64 {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return 0
	}
	return math.Round(x*1e4) / 1e4
}
