package sim

import (
	"math/rand/v2"
	"testing"
	"time"

	"github.com/quartermaster-dev/quartermaster/loadgen"
)

// The simulator's latencies and loadgen's measured ones go through one
// estimator: the same values give the same percentiles and maximum, to the
// microsecond.
func TestHistogramMatchesLoadgen(t *testing.T) {
	if histLowestMicros != loadgen.HistogramLowest || histDigits != loadgen.HistogramDigits || histMinHighest != loadgen.HistogramHighest {
		t.Fatalf("histogram bounds (%d µs, %d digits, %d µs) differ from loadgen's (%d, %d, %d)",
			histLowestMicros, histDigits, histMinHighest, loadgen.HistogramLowest, loadgen.HistogramDigits, loadgen.HistogramHighest)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	sim := newHistogram(time.Hour)
	live := loadgen.NewHistogram()
	for i := range 20000 {
		// Log-uniform from 100 ns to 6.5 ms (where a bucket is one µs
		// wide, so the percentiles show how a value is cut to µs), a few
		// up to 100 s, and some exact zeros.
		e := rng.IntN(16)
		if i%100 == 0 {
			e = rng.IntN(30)
		}
		d := time.Duration(100 * float64(uint64(1)<<e) * (1 + rng.Float64()))
		if i%1000 == 0 {
			d = 0
		}
		sim.add(int64(d))
		us := min(max(d.Microseconds(), loadgen.HistogramLowest), loadgen.HistogramHighest)
		if err := live.RecordValue(us); err != nil {
			t.Fatal(err)
		}
	}
	got, want := sim.summary(), loadgen.Summarize(live)
	pairs := []struct {
		name      string
		got, want float64
	}{
		{"p50", got.P50Ms, want.P50Ms}, {"p90", got.P90Ms, want.P90Ms}, {"p99", got.P99Ms, want.P99Ms},
		{"p999", got.P999Ms, want.P999Ms}, {"max", got.MaxMs, want.MaxMs},
	}
	for _, p := range pairs {
		if p.got != round4(p.want) {
			t.Errorf("%s: simulator %v ms, loadgen %v ms", p.name, p.got, p.want)
		}
	}
	if got.Count != uint64(want.Count) {
		t.Errorf("count: simulator %d, loadgen %d", got.Count, want.Count)
	}
}

// A latency longer than loadgen's ten-minute range is not clamped in the
// simulator: its run may be long, and its requests may wait that long.
func TestHistogramKeepsLongLatencies(t *testing.T) {
	h := newHistogram(48 * time.Hour)
	h.add(int64(3 * time.Hour))
	got := h.summary().MaxMs
	want := float64(3 * time.Hour / time.Millisecond)
	if got < want || got > want*1.001 {
		t.Fatalf("max %v ms, want %v within the histogram's resolution", got, want)
	}
}

// Buckets count every value once, under bounds doubling from 1 ms.
func TestHistogramBuckets(t *testing.T) {
	h := newHistogram(time.Hour)
	for _, ms := range []float64{0.2, 1, 1.5, 2, 3, 7.9, 8.5, 100} {
		h.add(int64(ms * float64(time.Millisecond)))
	}
	got := h.buckets()
	want := []Bucket{{1, 2}, {2, 2}, {4, 1}, {8, 1}, {16, 1}, {32, 0}, {64, 0}, {128, 1}}
	if len(got) != len(want) {
		t.Fatalf("buckets %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("buckets %v, want %v", got, want)
		}
	}
}
