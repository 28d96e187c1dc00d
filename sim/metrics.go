package sim

import (
	"math"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"
)

// histogram records latencies as loadgen records measured ones: whole
// microseconds, at least one, in an HdrHistogram from 1 µs with three
// significant digits (loadgen.HistogramLowest and HistogramDigits), so that
// simulated and live percentiles come from one estimator. Its range reaches
// past the run's duration, where loadgen's stops at ten minutes: a simulated
// latency is never clamped, and the range changes no estimate below it. The
// mean is exact, as the live scenario runner's is.
type histogram struct {
	h   *hdrhistogram.Histogram
	n   uint64
	sum float64
}

const (
	histLowestMicros = 1
	histDigits       = 3
	// histMinHighest is loadgen.HistogramHighest: ten minutes in µs.
	histMinHighest = int64(10 * time.Minute / time.Microsecond)
)

// newHistogram returns an empty histogram for the latencies of a run of
// duration d.
func newHistogram(d time.Duration) histogram {
	highest := max(histMinHighest, (d + time.Hour).Microseconds())
	return histogram{h: hdrhistogram.New(histLowestMicros, highest, histDigits)}
}

// add records a latency of v nanoseconds.
func (h *histogram) add(v int64) {
	us := min(max(v/int64(time.Microsecond), histLowestMicros), h.h.HighestTrackableValue())
	_ = h.h.RecordValue(us) // in range by construction
	h.n++
	h.sum += float64(v)
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
	l := Latency{Count: h.n}
	if h.n == 0 {
		return l
	}
	ms := func(us int64) float64 { return round4(float64(us) / 1e3) }
	l.MeanMs = round4(h.sum / float64(h.n) / 1e6)
	l.P50Ms = ms(h.h.ValueAtPercentile(50))
	l.P90Ms = ms(h.h.ValueAtPercentile(90))
	l.P99Ms = ms(h.h.ValueAtPercentile(99))
	l.P999Ms = ms(h.h.ValueAtPercentile(99.9))
	l.MaxMs = ms(h.h.Max())
	return l
}

// buckets returns the distribution coarsened to bounds doubling from 1 ms,
// which is what a plot needs and keeps the JSON small. A bar of the
// histogram counts in the first bound at or above its lowest value (the
// bounds fall on bar edges, so no bar straddles one).
func (h *histogram) buckets() []Bucket {
	if h.n == 0 {
		return nil
	}
	var out []Bucket
	bound := int64(time.Millisecond / time.Microsecond)
	var c uint64
	for _, bar := range h.h.Distribution() {
		if bar.Count == 0 {
			continue
		}
		for bar.From > bound {
			out = append(out, Bucket{UpToMs: float64(bound) / 1e3, Count: c})
			c = 0
			bound *= 2
		}
		c += uint64(bar.Count)
	}
	out = append(out, Bucket{UpToMs: float64(bound) / 1e3, Count: c})
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
