package loadgen

import (
	"math"
	"strings"
	"testing"
	"time"
)

// dueAt is request n's due time: Pace's answer from the start.
func dueAt(t *testing.T, p Pacer, n uint64) (time.Duration, bool) {
	t.Helper()
	w, stop := p.Pace(0, n)
	return w, stop
}

// countBy counts the requests due before t by walking the schedule.
func countBy(t *testing.T, p Pacer, at time.Duration) uint64 {
	t.Helper()
	var n uint64
	for {
		d, stop := dueAt(t, p, n)
		if stop || d >= at {
			return n
		}
		n++
	}
}

func TestConstant(t *testing.T) {
	p := Constant{Rate: 1000}
	for _, c := range []struct {
		elapsed time.Duration
		hits    uint64
		want    time.Duration
	}{
		{0, 0, 0},
		{0, 1, time.Millisecond},
		{0, 2500, 2500 * time.Millisecond},
		{time.Second, 1500, 500 * time.Millisecond}, // half a second ahead
		{time.Second, 500, 0},                       // late: due at once
	} {
		got, stop := p.Pace(c.elapsed, c.hits)
		if stop || got != c.want {
			t.Errorf("Pace(%v, %d) = %v, %v; want %v, false", c.elapsed, c.hits, got, stop, c.want)
		}
	}
	if _, stop := (Constant{}).Pace(0, 0); !stop {
		t.Error("a zero rate must stop")
	}
}

func TestRampDueCountIsTheIntegral(t *testing.T) {
	p := Ramp{From: 100, To: 1100, Over: 10 * time.Second}
	// Requests due by t: 100t + 50t² during the ramp, then 1100/s.
	for _, c := range []struct {
		at   time.Duration
		want float64
	}{
		{time.Second, 150}, {5 * time.Second, 1750}, {10 * time.Second, 6000}, {12 * time.Second, 8200},
	} {
		got := float64(countBy(t, p, c.at))
		if math.Abs(got-c.want) > 1 {
			t.Errorf("due by %v: %v, want %v", c.at, got, c.want)
		}
	}
	// Downward ramps and ramps from zero work too.
	if got := countBy(t, Ramp{From: 1000, To: 0, Over: 4 * time.Second}, 10*time.Second); math.Abs(float64(got)-2000) > 1 {
		t.Errorf("ramp 1000->0 over 4s sent %d, want 2000", got)
	}
	if got := countBy(t, Ramp{From: 0, To: 200, Over: 2 * time.Second}, 2*time.Second); math.Abs(float64(got)-200) > 1 {
		t.Errorf("ramp 0->200 over 2s sent %d, want 200", got)
	}
}

func TestStepsStopAtTheEnd(t *testing.T) {
	p := Steps{{Rate: 10, For: time.Second}, {Rate: 0, For: time.Second}, {Rate: 100, For: 2 * time.Second}}
	if got := countBy(t, p, time.Second); got != 10 {
		t.Errorf("first second: %d, want 10", got)
	}
	if got := countBy(t, p, 2*time.Second); got != 10 {
		t.Errorf("a zero step sends nothing: %d by 2s, want 10", got)
	}
	d, _ := dueAt(t, p, 10)
	if d != 2*time.Second {
		t.Errorf("request 10 due at %v, want 2s (after the pause)", d)
	}
	if got := countBy(t, p, time.Hour); got != 210 {
		t.Errorf("whole schedule: %d, want 210", got)
	}
	if _, stop := dueAt(t, p, 210); !stop {
		t.Error("no stop after the last step")
	}
	if Length(p) != 4*time.Second {
		t.Errorf("Length = %v", Length(p))
	}
}

func TestPoissonIsSeededAndHasItsRate(t *testing.T) {
	a, b, c := NewPoisson(1000, 7), NewPoisson(1000, 7), NewPoisson(1000, 8)
	var gaps []float64
	var prev time.Duration
	same, differ := true, false
	for n := uint64(0); n < 20000; n++ {
		da, _ := a.Pace(0, n)
		db, _ := b.Pace(0, n)
		dc, _ := c.Pace(0, n)
		same = same && da == db
		differ = differ || da != dc
		if n > 0 {
			gaps = append(gaps, (da - prev).Seconds())
		}
		prev = da
	}
	if !same || !differ {
		t.Fatalf("same seed same schedule: %v; other seed differs: %v", same, differ)
	}
	mean, sd := meanSD(gaps)
	// Exponential gaps: mean 1/rate and standard deviation equal to the mean.
	if math.Abs(mean-0.001) > 0.00005 || math.Abs(sd/mean-1) > 0.05 {
		t.Errorf("gaps mean %v sd %v; want 1ms and sd/mean 1", mean, sd)
	}
	// Asking about an earlier request replays the schedule.
	d5, _ := a.Pace(0, 5)
	d5b, _ := b.Pace(0, 5)
	if d5 != d5b {
		t.Errorf("replayed request 5 due at %v, first time %v", d5, d5b)
	}
}

func meanSD(xs []float64) (float64, float64) {
	var s, ss float64
	for _, x := range xs {
		s += x
	}
	m := s / float64(len(xs))
	for _, x := range xs {
		ss += (x - m) * (x - m)
	}
	return m, math.Sqrt(ss / float64(len(xs)))
}

func TestRateFuncFollowsTheCurve(t *testing.T) {
	// 100/s for 1s, then 300/s, until 3s.
	f := &RateFunc{End: 3 * time.Second, Rate: func(t time.Duration) float64 {
		if t < time.Second {
			return 100
		}
		return 300
	}}
	if got := countBy(t, f, time.Second); got != 100 {
		t.Errorf("first second: %d, want 100", got)
	}
	if got := countBy(t, f, time.Hour); got < 699 || got > 701 {
		t.Errorf("whole curve: %d, want 700", got)
	}
	d, _ := f.Pace(0, 400)
	if want := 2 * time.Second; d < want-time.Millisecond || d > want+time.Millisecond {
		t.Errorf("request 400 due at %v, want 2s", d)
	}
}

func TestParseArrival(t *testing.T) {
	for _, spec := range []string{"1000", "constant:5.5", "poisson:100", "ramp:0:100", "steps:500@10s,1000@1m"} {
		if _, err := ParseArrival(spec, time.Minute, 1); err != nil {
			t.Errorf("%q: %v", spec, err)
		}
	}
	for spec, want := range map[string]string{
		"":                   `"" is not a rate`,
		"fast":               `"fast" is not a rate`,
		"-5":                 "not a rate",
		"0":                  "above 0",
		"NaN":                "not a rate",
		"linear:5":           "want RATE, constant:RATE",
		"ramp:100":           "want ramp:FROM:TO",
		"ramp:0:0":           "both rates are 0",
		"steps:500":          "want RATE@DURATION",
		"steps:500@ten":      "not a positive duration",
		"steps:500@10s,x@1s": `step "x@1s"`,
	} {
		_, err := ParseArrival(spec, time.Minute, 1)
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: err = %v, want %q", spec, err, want)
		}
	}
	if _, err := ParseArrival("ramp:1:2", 0, 1); err == nil {
		t.Error("a ramp without a duration must be refused")
	}
}
