package live

import (
	"fmt"
	"strings"
	"time"

	"github.com/quartermaster-dev/quartermaster/allocator/pb/allocation"
	"github.com/quartermaster-dev/quartermaster/allocator/wire"
	"github.com/quartermaster-dev/quartermaster/loadgen"
	"github.com/quartermaster-dev/quartermaster/scenarios"
	"github.com/quartermaster-dev/quartermaster/sim"
)

// Workload is what one stream of a scenario's workload asks of a live
// allocator (`qm load --scenario`): the same arrival schedule the
// simulator follows, the same request, and session lengths drawn from the
// same distribution.
type Workload struct {
	Stream   string
	Duration time.Duration
	// NewPacer returns the stream's schedule (sim.Schedule, the very
	// definition of the rate the simulator uses), arrivals evenly spaced.
	NewPacer func() loadgen.Pacer
	Request  *allocation.AllocationRequest
	// SessionLength draws a session length (safe for concurrent use).
	SessionLength func() time.Duration
}

// WorkloadOf picks stream (the only one when stream is "") from a
// scenario. share scales the rate for one of several generators.
func WorkloadOf(s *scenarios.Scenario, stream string, seed uint64, share float64) (*Workload, error) {
	cfg, err := s.Config()
	if err != nil {
		return nil, err
	}
	var names []string
	idx := -1
	for i, st := range cfg.Streams {
		names = append(names, st.Name)
		if st.Name == stream || (stream == "" && len(cfg.Streams) == 1) {
			idx = i
		}
	}
	if idx < 0 {
		if stream == "" {
			return nil, fmt.Errorf("scenario %s has %d workload streams (%s): choose one with --stream", s.Metadata.Name, len(names), strings.Join(names, ", "))
		}
		return nil, fmt.Errorf("scenario %s has no workload stream %q (it has %s)", s.Metadata.Name, stream, strings.Join(names, ", "))
	}
	st := cfg.Streams[idx]
	rate := shareRate(st.Rate, share)
	if _, err := sim.NewSchedule(rate, cfg.Duration); err != nil {
		return nil, fmt.Errorf("stream %s: %w", st.Name, err)
	}
	req, err := wire.RequestFromCore(&st.Request)
	if err != nil {
		return nil, fmt.Errorf("stream %s request: %w", st.Name, err)
	}
	return &Workload{
		Stream:   st.Name,
		Duration: cfg.Duration,
		NewPacer: func() loadgen.Pacer {
			sc, _ := sim.NewSchedule(rate, cfg.Duration) // checked above
			return sc
		},
		Request:       req,
		SessionLength: sessionSampler(st.Session, seed),
	}, nil
}

// shareRate multiplies every rate of a schedule by f, leaving its time
// axis alone: one generator's share of the load.
func shareRate(r sim.RateSpec, f float64) sim.RateSpec {
	if f == 1 {
		return r
	}
	out := r
	if r.Constant != nil {
		c := *r.Constant * f
		out.Constant = &c
	}
	out.Steps = nil
	for _, s := range r.Steps {
		out.Steps = append(out.Steps, sim.Step{At: s.At, Rate: s.Rate * f})
	}
	if r.Diurnal != nil {
		d := *r.Diurnal
		d.Mean, d.Amplitude = d.Mean*f, d.Amplitude*f
		out.Diurnal = &d
	}
	out.Spikes = nil
	for _, s := range r.Spikes {
		s.Add *= f // the factor scales the already scaled rate
		out.Spikes = append(out.Spikes, s)
	}
	return out
}
