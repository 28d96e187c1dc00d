package loadgen

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
	"strings"
	"time"
)

// A Pacer says when the next request is due, given the time since the start
// of the load and the number of requests already sent (hits). It returns
// how long to wait from elapsed until request number hits is due (0 when
// it is already due or late), and stop when the schedule sends no more.
//
// Every pacer here answers exactly from the schedule, with no clock of its
// own, so Pace(0, n) is request n's due time from the start: the runner
// charges each request's latency from that instant, not from when it
// managed to send it.
type Pacer interface {
	Pace(elapsed time.Duration, hits uint64) (wait time.Duration, stop bool)
}

// due turns a due time into Pace's answer.
func due(at time.Duration, elapsed time.Duration) time.Duration {
	if at <= elapsed {
		return 0
	}
	return at - elapsed
}

// seconds converts float seconds to a Duration, saturating far in the future.
func seconds(s float64) time.Duration {
	if s >= float64(math.MaxInt64)/float64(time.Second) {
		return time.Duration(math.MaxInt64)
	}
	return time.Duration(s * float64(time.Second))
}

// Constant sends Rate requests per second, evenly spaced.
type Constant struct{ Rate float64 }

// Pace implements Pacer.
func (c Constant) Pace(elapsed time.Duration, hits uint64) (time.Duration, bool) {
	if c.Rate <= 0 {
		return 0, true
	}
	return due(seconds(float64(hits)/c.Rate), elapsed), false
}

// Ramp goes linearly from rate From to rate To over Over, then stays at To.
type Ramp struct {
	From, To float64
	Over     time.Duration
}

// Pace implements Pacer. The number of requests due by t is the integral of
// the rate, From·t + (To-From)·t²/2·Over during the ramp; request n is due
// where that reaches n.
func (r Ramp) Pace(elapsed time.Duration, hits uint64) (time.Duration, bool) {
	n := float64(hits)
	d := r.Over.Seconds()
	if d <= 0 {
		return Constant{r.To}.Pace(elapsed, hits)
	}
	a := (r.To - r.From) / (2 * d)
	b := r.From
	inRamp := b*d + a*d*d // requests due during the whole ramp
	var t float64
	switch {
	case n >= inRamp:
		if r.To <= 0 {
			return 0, true
		}
		t = d + (n-inRamp)/r.To
	case a == 0:
		t = n / b
	default:
		// Root of a·t² + b·t - n = 0, written so it stays accurate when a
		// is small next to b.
		t = 2 * n / (b + math.Sqrt(b*b+4*a*n))
	}
	return due(seconds(t), elapsed), false
}

// Step is one stage of a Steps schedule.
type Step struct {
	Rate float64
	For  time.Duration
}

// Steps holds each rate for its duration, in order, then stops.
type Steps []Step

// Pace implements Pacer.
func (s Steps) Pace(elapsed time.Duration, hits uint64) (time.Duration, bool) {
	n := float64(hits)
	var start time.Duration
	for _, st := range s {
		in := st.Rate * st.For.Seconds()
		if n < in {
			return due(start+seconds(n/st.Rate), elapsed), false
		}
		n -= in
		start += st.For
	}
	return 0, true
}

// Poisson sends at a mean Rate with exponentially distributed gaps, as
// independent callers do. The gaps come from a generator seeded with Seed,
// so a run's schedule can be replayed.
type Poisson struct {
	Rate float64
	Seed uint64

	rng  *rand.Rand
	n    uint64        // the request whose due time is at
	at   time.Duration // request n's due time
	init bool
}

// NewPoisson returns a Poisson pacer.
func NewPoisson(rate float64, seed uint64) *Poisson {
	return &Poisson{Rate: rate, Seed: seed}
}

// Pace implements Pacer. It walks the schedule forward as hits grow (the
// runner asks in order, so this costs one draw per request) and starts over
// from the seed if asked about an earlier request.
func (p *Poisson) Pace(elapsed time.Duration, hits uint64) (time.Duration, bool) {
	if p.Rate <= 0 {
		return 0, true
	}
	if !p.init || hits < p.n {
		p.rng = rand.New(rand.NewPCG(p.Seed, 0x9e3779b97f4a7c15))
		p.n, p.at, p.init = 0, 0, true
	}
	for p.n < hits {
		p.at += seconds(p.rng.ExpFloat64() / p.Rate)
		p.n++
	}
	return due(p.at, elapsed), false
}

// RateFunc follows any rate over time (requests per second at t), such as
// a scenario's diurnal curve with spikes, up to End. Request n is due where
// the integral of the rate reaches n, found by integrating in Resolution
// steps (1 ms when zero) as the runner moves forward.
type RateFunc struct {
	Rate       func(t time.Duration) float64
	End        time.Duration
	Resolution time.Duration

	t   time.Duration // integrated up to here
	sum float64       // requests due by t
}

// Pace implements Pacer.
func (f *RateFunc) Pace(elapsed time.Duration, hits uint64) (time.Duration, bool) {
	step := f.Resolution
	if step <= 0 {
		step = time.Millisecond
	}
	n := float64(hits)
	if n < f.sum {
		f.t, f.sum = 0, 0 // due before where we are: start over
	}
	for {
		r := math.Max(0, f.Rate(f.t+step/2))
		next := f.sum + r*step.Seconds()
		if n < next {
			// Within this step: interpolate at its rate.
			at := f.t + time.Duration(float64(step)*(n-f.sum)/(next-f.sum))
			if at >= f.End {
				return 0, true
			}
			return due(at, elapsed), false
		}
		f.t += step
		f.sum = next
		if f.t >= f.End {
			return 0, true
		}
	}
}

// ParseArrival reads an open-loop schedule as --rate takes it:
//
//	1000 or constant:1000       1000 requests/s, evenly spaced
//	poisson:1000                Poisson arrivals at a mean of 1000/s
//	ramp:100:2000               linear from 100/s to 2000/s over the duration
//	steps:500@10s,1000@20s      500/s for 10s, then 1000/s for 20s, then stop
//
// duration is the run's measured length (the ramp's span).
func ParseArrival(spec string, duration time.Duration, seed uint64) (Pacer, error) {
	return ParseArrivalShare(spec, duration, seed, 1)
}

// ParseArrivalShare is ParseArrival with every rate multiplied by share:
// one generator's part when several split a load (share 1/N each; with
// Poisson arrivals the parts add up to Poisson arrivals at the full rate
// as long as each generator has its own seed).
func ParseArrivalShare(spec string, duration time.Duration, seed uint64, share float64) (Pacer, error) {
	if !(share > 0 && share <= 1) {
		return nil, fmt.Errorf("share %v: want a fraction in (0, 1]", share)
	}
	kind, arg, ok := strings.Cut(spec, ":")
	if !ok {
		kind, arg = "constant", spec
	}
	rate := func(s string) (float64, error) {
		r, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
		if err != nil || math.IsNaN(r) || math.IsInf(r, 0) || r < 0 {
			return 0, fmt.Errorf("%q is not a rate (requests per second, a number >= 0)", s)
		}
		return r * share, nil
	}
	positive := func(s string) (float64, error) {
		r, err := rate(s)
		if err == nil && r == 0 {
			err = fmt.Errorf("rate must be above 0")
		}
		return r, err
	}
	switch kind {
	case "constant":
		r, err := positive(arg)
		if err != nil {
			return nil, err
		}
		return Constant{r}, nil
	case "poisson":
		r, err := positive(arg)
		if err != nil {
			return nil, err
		}
		return NewPoisson(r, seed), nil
	case "ramp":
		from, to, ok := strings.Cut(arg, ":")
		if !ok {
			return nil, fmt.Errorf("ramp %q: want ramp:FROM:TO (requests per second)", arg)
		}
		f, err := rate(from)
		if err != nil {
			return nil, err
		}
		t, err := rate(to)
		if err != nil {
			return nil, err
		}
		if f == 0 && t == 0 {
			return nil, fmt.Errorf("ramp %q: both rates are 0", arg)
		}
		if duration <= 0 {
			return nil, fmt.Errorf("a ramp needs a duration to ramp over")
		}
		return Ramp{From: f, To: t, Over: duration}, nil
	case "steps":
		var s Steps
		for _, part := range strings.Split(arg, ",") {
			r, d, ok := strings.Cut(part, "@")
			if !ok {
				return nil, fmt.Errorf("step %q: want RATE@DURATION, like 500@10s", part)
			}
			rv, err := rate(r)
			if err != nil {
				return nil, fmt.Errorf("step %q: %w", part, err)
			}
			dv, err := time.ParseDuration(strings.TrimSpace(d))
			if err != nil || dv <= 0 {
				return nil, fmt.Errorf("step %q: %q is not a positive duration (like 10s)", part, d)
			}
			s = append(s, Step{Rate: rv, For: dv})
		}
		return s, nil
	}
	return nil, fmt.Errorf("%q: want RATE, constant:RATE, poisson:RATE, ramp:FROM:TO or steps:RATE@DURATION[,RATE@DURATION]", spec)
}

// Length is how long a schedule runs by itself: the sum of the steps, or 0
// when it runs until stopped.
func Length(p Pacer) time.Duration {
	if s, ok := p.(Steps); ok {
		var d time.Duration
		for _, st := range s {
			d += st.For
		}
		return d
	}
	return 0
}

// The open loop's waits. A Go timer on Linux wakes up to a millisecond
// late (the runtime's network poller waits in whole milliseconds), and
// that error lands in every request's latency, which runs from its due
// time. Waiting the last stretch before an arrival precisely (nanosleep,
// see preciseSleep) removes most of it, but blocks a thread per arrival:
// at high rates, or on a machine busy enough to deschedule the generator,
// that costs the senders more than the precision is worth: precise waits
// at every arrival of a high rate leave arrivals unsent. precision
// decides, arrival by arrival, which wait is affordable.
const (
	// DefaultPrecise is the stretch before each arrival waited precisely:
	// just over a Go timer's worst usual lateness, so a timer aimed that
	// early wakes before the arrival.
	DefaultPrecise = time.Millisecond
	// preciseMinGap: arrivals closer together than this on average (above
	// 2,500/s) are paced by timers alone; the loop then sends several per
	// wake-up anyway and the blocked thread would cost sending capacity.
	preciseMinGap = 400 * time.Microsecond
	// preciseSlack: an arrival reached this late means the generator is
	// behind (descheduled, or short of CPU), and precise waits stop until
	// preciseCooldown passes without another late arrival, so that it
	// can catch up on timers alone. A lone stall (a few milliseconds of
	// the process's own collector, say) then costs a tenth of a second
	// of timer pacing, while a machine that keeps the generator behind
	// keeps extending it. (A much longer cooldown would put a large share
	// of a quiet run's arrivals on timers, which would set its p99
	// lateness.)
	preciseSlack    = 2 * time.Millisecond
	preciseCooldown = 100 * time.Millisecond
)

// precision is the open loop's choice of wait for each arrival. It has no
// clock of its own: the runner passes the time (from any fixed origin), so
// tests drive it with made-up instants.
type precision struct {
	stretch  time.Duration // longest precise wait; <= 0: timers only
	minGap   time.Duration
	slack    time.Duration
	cooldown time.Duration

	gap      time.Duration // the arrivals' mean gap, smoothed
	lastDue  time.Duration
	arrivals int           // seen so far (the gap is known from the second)
	offUntil time.Duration // precise waits off until then (behind)

	precise int64 // arrivals whose last stretch was waited precisely
	behind  int64 // times the generator was found behind
}

func newPrecision(stretch time.Duration) *precision {
	return &precision{stretch: stretch, minGap: preciseMinGap, slack: preciseSlack, cooldown: preciseCooldown}
}

// plan is how to wait, at now, for an arrival due at due: sleep timer on
// a Go timer, then, when fine, wait precisely until due. Arrivals are
// planned in order, once each.
func (p *precision) plan(now, due time.Duration) (timer time.Duration, fine bool) {
	if p.arrivals > 0 {
		g := max(due-p.lastDue, 0)
		if p.arrivals == 1 {
			p.gap = g
		} else {
			p.gap += (g - p.gap) / 8 // a Poisson schedule's gaps vary; their mean decides
		}
	}
	p.arrivals++
	p.lastDue = due
	wait := due - now
	if wait <= 0 {
		p.woke(now, due)
		return 0, false
	}
	if p.stretch <= 0 || p.arrivals < 2 || p.gap < p.minGap || now < p.offUntil {
		return wait, false
	}
	p.precise++
	return max(wait-p.stretch, 0), true
}

// woke notes that the loop was ready to send the arrival due at due at
// now (after its wait, or finding it already due): later than the slack
// means the generator is behind, and precise waits pause.
func (p *precision) woke(now, due time.Duration) {
	if now-due > p.slack {
		if now >= p.offUntil {
			p.behind++
		}
		p.offUntil = now + p.cooldown
	}
}
