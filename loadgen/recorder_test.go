package loadgen

import (
	"testing"
	"time"

	"google.golang.org/grpc/codes"
)

// liveHistograms counts the per-second histograms held decoded.
func liveHistograms(r *Recorder) int {
	n := 0
	for _, sec := range r.seconds {
		if sec.hist != nil {
			n++
		}
	}
	return n
}

// A long run holds one decoded histogram per second in progress, not one
// per second of the run: counting a whole turn's time at its end (every
// second of it) and a late answer for an old second reopen at most that
// second. A decoded histogram is large, so one per second of a long run
// would grow without bound.
func TestRecorderMemoryStaysFlat(t *testing.T) {
	const secs = 200
	r := NewRecorder()
	for s := 0; s < secs; s++ {
		for i := 1; i <= 10; i++ {
			r.Dispatch(s)
			r.Add(Sample{Second: s, Latency: time.Duration(i) * time.Millisecond, Code: codes.OK})
		}
		r.Flush(s + 1)
		if n := liveHistograms(r); n > 1 {
			t.Fatalf("second %d: %d histograms decoded", s, n)
		}
	}
	p20 := r.seconds[20].point
	// The runner counts a single target's one long turn at its end.
	for s := 0; s < secs; s++ {
		r.Active(s, time.Second)
	}
	if n := liveHistograms(r); n != 0 {
		t.Errorf("after counting the turn's time: %d histograms decoded, want 0", n)
	}
	// A late answer for second 10 reopens second 10 alone.
	r.Dispatch(10)
	if n := liveHistograms(r); n != 1 || r.seconds[10].hist == nil {
		t.Errorf("a late request for second 10: %d histograms decoded", n)
	}
	r.Add(Sample{Second: 10, Latency: time.Second, Code: codes.Unavailable})
	r.Flush(secs)
	if n := liveHistograms(r); n != 0 {
		t.Errorf("after the flush: %d histograms decoded", n)
	}

	res := r.Result(TargetConfig{Name: "x"})
	if len(res.Series) != secs || res.Latency.Count != secs*10+1 || res.OK != secs*10 {
		t.Fatalf("series %d, count %d, ok %d", len(res.Series), res.Latency.Count, res.OK)
	}
	p10, q20 := res.Series[10], res.Series[20]
	if p10.Errors != 1 || p10.OK != 10 || p10.MaxMs < 999 || p10.Histogram == "" {
		t.Errorf("second 10 with its late answer: %+v", p10)
	}
	h, err := DecodeHistogram(p10.Histogram)
	if err != nil || h.TotalCount() != 11 {
		t.Errorf("second 10's histogram: %v, %d values, want 11", err, h.TotalCount())
	}
	// The seconds after it kept their figures, and their throughput comes
	// from the time counted after they were encoded.
	if q20.P50Ms != p20.P50Ms || q20.Histogram != p20.Histogram || q20.Throughput != 10 || q20.ActiveSeconds != 1 {
		t.Errorf("second 20: %+v, was %+v", q20, p20)
	}
}
