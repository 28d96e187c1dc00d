package sim

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"time"
)

// Schedule is an arrival rate over time (requests per second), compiled to a
// piecewise-linear function so that the expected number of arrivals up to t,
// and its inverse, are exact and cheap. Constant, step and spike schedules are
// represented exactly; a diurnal curve is interpolated between knots one
// minute apart (or finer for short periods), far below the noise of any run.
//
// The same Schedule paces live load (Pace: the i-th request is due when the
// expected count reaches i) and the simulator's Poisson arrivals (NextAt with
// a cumulative target grown by unit exponential draws: a time-changed Poisson
// process), so both follow one definition of "the rate at time t".
type Schedule struct {
	// segment i covers [t[i], t[i+1]) with rate r0[i] at its start and r1[i]
	// just before its end; cum[i] is the expected count before t[i].
	t      []float64 // seconds; len = segments+1
	r0, r1 []float64
	cum    []float64
}

// RateSpec describes a schedule. Exactly one of Constant, Steps or Diurnal
// gives the base rate; Spikes then modify it.
type RateSpec struct {
	Constant *float64
	Steps    []Step
	Diurnal  *Diurnal
	Spikes   []Spike
}

// Step sets the rate from At on (until the next step).
type Step struct {
	At   time.Duration
	Rate float64
}

// Diurnal is a daily (or any Period) sinusoid: Mean + Amplitude*cos(2π(t-Peak)/Period).
type Diurnal struct {
	Mean, Amplitude float64
	Period          time.Duration
	Peak            time.Duration
}

// Spike multiplies the rate by Factor and then adds Add during [Start, Start+Duration).
type Spike struct {
	Start, Duration time.Duration
	Factor          float64 // 0 means 1
	Add             float64
}

// NewSchedule compiles spec over [0, horizon].
func NewSchedule(spec RateSpec, horizon time.Duration) (*Schedule, error) {
	if horizon <= 0 {
		return nil, errors.New("schedule horizon must be positive")
	}
	H := horizon.Seconds()
	base, breaks, err := baseRate(spec, H)
	if err != nil {
		return nil, err
	}
	breaks = append(breaks, 0, H)
	for i, s := range spec.Spikes {
		if s.Duration <= 0 || s.Start < 0 {
			return nil, fmt.Errorf("spikes[%d] needs start >= 0 and duration > 0", i)
		}
		if s.Factor < 0 || s.Add < 0 || math.IsNaN(s.Factor+s.Add) || math.IsInf(s.Factor+s.Add, 0) {
			return nil, fmt.Errorf("spikes[%d] factor and add must be finite and >= 0", i)
		}
		breaks = append(breaks, s.Start.Seconds(), (s.Start + s.Duration).Seconds())
	}
	s := &Schedule{t: knots(breaks, H)}
	s.integrate(spikedRate(base, spec.Spikes), spec)
	return s, nil
}

// baseRate checks that spec sets exactly one base rate and returns it with
// the times inside [0, horizon] where it bends (beyond the ends, which the
// caller adds).
func baseRate(spec RateSpec, horizon float64) (rate func(t float64) float64, breaks []float64, err error) {
	n := 0
	if spec.Constant != nil {
		n++
	}
	if len(spec.Steps) > 0 {
		n++
	}
	if spec.Diurnal != nil {
		n++
	}
	if n != 1 {
		return nil, nil, errors.New("exactly one of constant, steps or diurnal must be set")
	}
	switch {
	case spec.Constant != nil:
		c := *spec.Constant
		if c < 0 || math.IsNaN(c) || math.IsInf(c, 0) {
			return nil, nil, fmt.Errorf("constant rate %v must be a finite number >= 0", c)
		}
		return func(float64) float64 { return c }, nil, nil
	case len(spec.Steps) > 0:
		return stepsRate(spec.Steps)
	default:
		return diurnalRate(*spec.Diurnal, horizon)
	}
}

// stepsRate is the rate of a list of steps, breaking at each step.
func stepsRate(given []Step) (func(t float64) float64, []float64, error) {
	steps := append([]Step(nil), given...)
	var breaks []float64
	for i, s := range steps {
		if s.Rate < 0 || math.IsNaN(s.Rate) || math.IsInf(s.Rate, 0) {
			return nil, nil, fmt.Errorf("steps[%d].rate %v must be a finite number >= 0", i, s.Rate)
		}
		if s.At < 0 {
			return nil, nil, fmt.Errorf("steps[%d].at must not be negative", i)
		}
		if i > 0 && s.At <= steps[i-1].At {
			return nil, nil, fmt.Errorf("steps[%d].at must be after steps[%d].at", i, i-1)
		}
		breaks = append(breaks, s.At.Seconds())
	}
	rate := func(t float64) float64 {
		r := 0.0
		for _, s := range steps {
			if s.At.Seconds() <= t {
				r = s.Rate
			}
		}
		return r
	}
	return rate, breaks, nil
}

// diurnalRate is the sinusoid d, with knots at most a minute apart (a
// 256th of the period when that is shorter) up to horizon.
func diurnalRate(d Diurnal, horizon float64) (func(t float64) float64, []float64, error) {
	if d.Period <= 0 {
		return nil, nil, errors.New("diurnal.period must be positive")
	}
	if d.Mean < 0 || d.Amplitude < 0 || d.Amplitude > d.Mean {
		return nil, nil, errors.New("diurnal needs mean >= amplitude >= 0 (the rate must not go negative)")
	}
	P, peak := d.Period.Seconds(), d.Peak.Seconds()
	rate := func(t float64) float64 {
		return d.Mean + d.Amplitude*math.Cos(2*math.Pi*(t-peak)/P)
	}
	step := math.Min(60, P/256)
	if horizon/step > 1e6 {
		return nil, nil, errors.New("diurnal period too short for the run's duration")
	}
	var breaks []float64
	for x := step; x < horizon; x += step {
		breaks = append(breaks, x)
	}
	return rate, breaks, nil
}

// spikedRate is base with spikes applied, each multiplying and then adding
// over its interval.
func spikedRate(base func(t float64) float64, spikes []Spike) func(t float64) float64 {
	return func(t float64) float64 {
		r := base(t)
		for _, s := range spikes {
			if t >= s.Start.Seconds() && t < (s.Start+s.Duration).Seconds() {
				f := s.Factor
				if f == 0 {
					f = 1
				}
				r = r*f + s.Add
			}
		}
		return r
	}
}

// knots sorts breaks and keeps each distinct one up to horizon.
func knots(breaks []float64, horizon float64) []float64 {
	sort.Float64s(breaks)
	var t []float64
	for _, b := range breaks {
		if b > horizon {
			break
		}
		if len(t) > 0 && b == t[len(t)-1] {
			continue
		}
		t = append(t, b)
	}
	return t
}

// integrate fills each segment's end rates and the expected counts from
// rate, evaluated at s's knots.
func (s *Schedule) integrate(rate func(t float64) float64, spec RateSpec) {
	s.cum = make([]float64, len(s.t))
	for i := 0; i+1 < len(s.t); i++ {
		a, b := s.t[i], s.t[i+1]
		// Evaluate just inside the segment so that a step at a boundary
		// belongs to the segment it starts.
		eps := math.Min(1e-9, (b-a)/4)
		r0, r1 := rate(a), rate(b-eps)
		if spec.Diurnal != nil {
			// A smooth curve is taken at the knot itself, except where a
			// spike starts or ends there.
			r1 = rate(b)
			for _, sp := range spec.Spikes {
				if b == sp.Start.Seconds() || b == (sp.Start+sp.Duration).Seconds() {
					r1 = rate(b - eps)
				}
			}
		}
		s.r0 = append(s.r0, r0)
		s.r1 = append(s.r1, r1)
		s.cum[i+1] = s.cum[i] + (r0+r1)/2*(b-a)
	}
}

// Horizon is the end of the schedule.
func (s *Schedule) Horizon() time.Duration { return seconds(s.t[len(s.t)-1]) }

// Expected is the expected number of arrivals in [0, t).
func (s *Schedule) Expected(t time.Duration) float64 {
	x := t.Seconds()
	if x <= 0 {
		return 0
	}
	i := sort.SearchFloat64s(s.t, x) - 1
	if i >= len(s.r0) {
		return s.cum[len(s.cum)-1]
	}
	if i < 0 {
		i = 0
	}
	L := s.t[i+1] - s.t[i]
	d := x - s.t[i]
	return s.cum[i] + s.r0[i]*d + (s.r1[i]-s.r0[i])/(2*L)*d*d
}

// Rate is the rate at t.
func (s *Schedule) Rate(t time.Duration) float64 {
	x := t.Seconds()
	i := sort.SearchFloat64s(s.t, x)
	if i < len(s.t) && s.t[i] == x {
		i++
	}
	i--
	if i < 0 || i >= len(s.r0) {
		return 0
	}
	return s.r0[i] + (s.r1[i]-s.r0[i])*(x-s.t[i])/(s.t[i+1]-s.t[i])
}

// NextAt returns the time at which the expected count reaches x, and false
// when it never does within the horizon.
func (s *Schedule) NextAt(x float64) (time.Duration, bool) {
	if x <= 0 {
		return 0, true
	}
	last := len(s.cum) - 1
	if x >= s.cum[last] {
		return 0, false
	}
	// The segment that ends at the first knot whose count reaches x.
	i := sort.SearchFloat64s(s.cum, x) - 1
	dx := x - s.cum[i]
	r0, r1 := s.r0[i], s.r1[i]
	L := s.t[i+1] - s.t[i]
	a := (r1 - r0) / (2 * L)
	var d float64
	if math.Abs(a)*L < 1e-12*math.Max(r0, 1e-300) || a == 0 {
		d = dx / r0
	} else {
		// a d² + r0 d - dx = 0, the root in [0, L], in the stable form.
		d = 2 * dx / (r0 + math.Sqrt(math.Max(r0*r0+4*a*dx, 0)))
	}
	d = math.Min(math.Max(d, 0), L)
	return seconds(s.t[i] + d), true
}

// Pace is a pacer in vegeta's sense: given the time elapsed since the start
// and the number of hits already sent, it returns how long to wait before the
// next hit, and stop once the schedule will send no more. The next hit is due
// when the expected count reaches hits: hit 0 at once, hit i at the time the
// rate has integrated to i.
func (s *Schedule) Pace(elapsed time.Duration, hits uint64) (wait time.Duration, stop bool) {
	due, ok := s.NextAt(float64(hits))
	if !ok {
		return 0, true
	}
	if due <= elapsed {
		return 0, false
	}
	return due - elapsed, false
}

func seconds(x float64) time.Duration { return time.Duration(math.Round(x * 1e9)) }
