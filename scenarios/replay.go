package scenarios

import (
	"fmt"
	"time"

	"github.com/quartermaster-dev/quartermaster/sim"
	"github.com/quartermaster-dev/quartermaster/trace"
)

// Replay runs the scenario's clusters, policies, faults and phases against
// the arrivals and requests a trace recorded, in place of its workload
// (see sim.ReplayStreams). Requests that are not multi-cluster go to the
// scenario's one cluster, or to the cluster its workload streams name when
// they agree; sessions the trace does not show are drawn from the first
// workload stream's sessionLength. The run lasts the trace's span plus the
// routing deadline, so that every replayed request ends. Expectations are
// checked as in Run; the Report's Description says it is a replay.
func (s *Scenario) Replay(recs []trace.Record, opt Options) (*Report, *sim.Replayed, error) {
	cfg, err := s.Config()
	if err != nil {
		return nil, nil, err
	}
	ro := sim.ReplayOptions{}
	if len(s.Spec.Clusters) == 1 {
		ro.Cluster = s.Spec.Clusters[0].Name
	}
	for i, w := range s.Spec.Workload {
		if i == 0 {
			ro.Session = w.SessionLength.sim()
		}
		if w.Cluster != "" && (ro.Cluster == "" || i == 0) {
			ro.Cluster = w.Cluster
		}
	}
	streams, rep, err := sim.ReplayStreams(recs, ro)
	if err != nil {
		return nil, nil, err
	}
	cfg.Streams = streams
	cfg.Duration = (rep.Span + cfg.Deadline + time.Second).Truncate(time.Second)
	if opt.Progress != nil {
		total := cfg.Duration
		cfg.Progress = func(now time.Duration, events uint64) { opt.Progress(now, total, events) }
	}
	cfg.Stop = opt.Stop
	res, err := sim.Run(cfg)
	if err != nil {
		return nil, nil, err
	}
	out := &Report{
		APIVersion:   APIVersion,
		Kind:         "SimulationReport",
		Scenario:     s.Metadata.Name,
		Description:  fmt.Sprintf("replay of a trace of %d requests from %s (%s) on %s", rep.Requests, rep.Start.UTC().Format(time.RFC3339), rep.Span.Round(time.Second), s.Metadata.Name),
		Passed:       true,
		Expectations: []Check{},
		Results:      res,
	}
	tree, err := toTree(res)
	if err != nil {
		return nil, nil, err
	}
	for i, e := range s.Spec.Expectations {
		v, err := lookup(tree, e.Metric)
		if err != nil {
			return nil, nil, fmt.Errorf("spec.expectations[%d].metric: %v", i, err)
		}
		ok := (e.Min == nil || v >= *e.Min) && (e.Max == nil || v <= *e.Max)
		out.Expectations = append(out.Expectations, Check{
			Metric: e.Metric, Description: e.Description, Min: e.Min, Max: e.Max, Value: v, Pass: ok,
		})
		out.Passed = out.Passed && ok
	}
	return out, rep, nil
}
