package scenarios

import (
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/quartermaster-dev/quartermaster/core"
	"github.com/quartermaster-dev/quartermaster/sim"
)

// maxArrivals bounds the expected requests of one run, so that a typo in a
// rate (1e6 for a year) is refused rather than running for days.
const maxArrivals = 200e6

// Config converts a validated scenario into the simulator's configuration.
func (s *Scenario) Config() (*sim.Config, error) {
	sp := &s.Spec
	cfg := &sim.Config{
		Name:           s.Metadata.Name,
		Seed:           *sp.Seed,
		Duration:       sp.Duration.D(),
		SampleInterval: sp.SampleInterval.D(),
		ForwardTimeout: sp.Routing.ForwardTimeout.D(),
		Deadline:       sp.Routing.Deadline.D(),
	}
	for _, c := range sp.Clusters {
		cc := sim.ClusterConfig{
			Name:            c.Name,
			Provider:        c.Provider,
			Region:          c.Region,
			CostPerNodeHour: c.CostPerNodeHour,
			RTT:             c.RTT.sim(),
			Nodes:           c.Nodes.Count,
			SlotsPerNode:    c.Nodes.Slots,
			WriteLatency:    c.APIServer.WriteLatency.sim(),
			Replicas:        *c.Allocator.Replicas,
			InformerDelay:   c.Allocator.InformerDelay.sim(),
			Workers:         c.Allocator.Workers,
			DecisionTime:    c.Allocator.DecisionTime.sim(),
			MaxRetries:      *c.Allocator.MaxRetries,
			PackedSpread:    c.Allocator.PackedSpread,
			ReplicaShards:   c.Allocator.ReplicaShards,
		}
		if c.AnswerLoss != nil {
			cc.AnswerLoss = *c.AnswerLoss
		}
		for _, f := range c.Fleets {
			fc := sim.FleetConfig{
				Name:         f.Name,
				Labels:       f.Labels,
				Replicas:     f.Replicas,
				Placement:    sim.Placement(f.Scheduling),
				StartupDelay: f.StartupDelay.sim(),
				SessionEnd:   sim.SessionEnd(f.SessionEnd),
				IdleShutdown: f.IdleShutdown.D(),
			}
			if b := f.Buffer; b != nil {
				fc.Buffer = &sim.Buffer{Size: b.Size, Min: b.Min, Max: b.Max, SyncInterval: b.SyncInterval.D()}
			}
			cc.Fleets = append(cc.Fleets, fc)
		}
		cfg.Clusters = append(cfg.Clusters, cc)
	}
	for _, p := range sp.Policies {
		cfg.Policies = append(cfg.Policies, core.Policy{
			Name:       p.Name,
			Priority:   p.Priority,
			Weight:     *p.Weight,
			Labels:     p.Labels,
			Connection: core.ConnectionInfo{ClusterName: p.ConnectionInfo.ClusterName},
			Window:     p.Window.Core(sp.StartTime()),
		})
	}
	if sp.Start != nil {
		cfg.Start = sp.Start.Time
	}
	var arrivals float64
	for i, w := range sp.Workload {
		st := sim.StreamConfig{
			Name:     w.Name,
			Rate:     w.Rate.sim(),
			Session:  w.SessionLength.sim(),
			Cluster:  w.Cluster,
			Create:   w.Create,
			Template: w.Template,
		}
		if c := w.Caller; c != nil {
			st.Caller = &sim.Caller{AnswerLoss: c.AnswerLoss, Timeout: c.Timeout.D(), Retries: c.Retries,
				RetryDelay: c.RetryDelay.D(), Keys: c.Keys}
		}
		req := core.Request{}
		if w.Request.Scheduling == "Distributed" {
			req.Scheduling = core.Distributed
		}
		for _, sel := range w.Request.Selectors {
			req.Selectors = append(req.Selectors, core.Selector{MatchLabels: sel.MatchLabels})
		}
		if w.MultiCluster != nil {
			req.MultiCluster = core.MultiClusterSetting{Enabled: true, PolicySelector: w.MultiCluster.PolicySelector}
		}
		if _, err := core.Normalize(&req); err != nil {
			return nil, fmt.Errorf("spec.workload[%d].request: %v", i, err)
		}
		st.Request = req
		sched, err := sim.NewSchedule(st.Rate, cfg.Duration)
		if err != nil {
			return nil, fmt.Errorf("spec.workload[%d].rate: %v", i, err)
		}
		arrivals += sched.Expected(cfg.Duration)
		cfg.Streams = append(cfg.Streams, st)
	}
	if arrivals > maxArrivals {
		return nil, fmt.Errorf("spec.workload: %.3g requests expected; the limit is %.0g", arrivals, maxArrivals)
	}
	if sp.lossModel() {
		cfg.Losses = sp.Routing.losses()
	}
	for _, f := range sp.Faults {
		cfg.Outages = append(cfg.Outages, sim.Outage{Cluster: f.Cluster, Start: f.Start.D(), End: f.End.D()})
	}
	for _, p := range sp.Phases {
		cfg.Phases = append(cfg.Phases, sim.Phase{Name: p.Name, Start: p.Start.D(), End: p.End.D()})
	}
	return cfg, nil
}

// Sim is the distribution as the simulator takes it (a nil Dist is the
// constant 0).
func (d *Dist) Sim() sim.Dist { return d.sim() }

func (d *Dist) sim() sim.Dist {
	switch {
	case d == nil:
		return sim.Dist{}
	case d.Constant != nil:
		return sim.Const(d.Constant.D())
	case d.Exponential != nil:
		return sim.Exp(d.Exponential.Mean.D())
	case d.LogNormal != nil:
		return sim.Dist{Kind: sim.LogNormal, Median: d.LogNormal.Median.D(), P99: d.LogNormal.P99.D()}
	case d.Uniform != nil:
		return sim.Dist{Kind: sim.Uniform, Min: d.Uniform.Min.D(), Max: d.Uniform.Max.D()}
	case d.Normal != nil:
		return sim.Dist{Kind: sim.Normal, Mean: d.Normal.Mean.D(), Stddev: d.Normal.Stddev.D()}
	}
	return sim.Dist{}
}

func (r Rate) sim() sim.RateSpec {
	out := sim.RateSpec{Constant: r.Constant}
	for _, s := range r.Steps {
		out.Steps = append(out.Steps, sim.Step{At: s.At.D(), Rate: s.Rate})
	}
	if d := r.Diurnal; d != nil {
		out.Diurnal = &sim.Diurnal{Mean: d.Mean, Amplitude: d.Amplitude, Period: d.Period.D(), Peak: d.PeakAt.D()}
	}
	for _, s := range r.Spikes {
		out.Spikes = append(out.Spikes, sim.Spike{Start: s.Start.D(), Duration: s.Duration.D(), Factor: s.Factor, Add: s.Add})
	}
	return out
}

// Check is one expectation's outcome.
type Check struct {
	Metric      string   `json:"metric"`
	Description string   `json:"description,omitempty"`
	Min         *float64 `json:"min,omitempty"`
	Max         *float64 `json:"max,omitempty"`
	Value       float64  `json:"value"`
	Pass        bool     `json:"pass"`
}

// Report is a scenario run: the simulator's results and the expectations
// checked against them. It is what `qm sim --out` writes.
type Report struct {
	APIVersion   string       `json:"apiVersion"`
	Kind         string       `json:"kind"`
	Scenario     string       `json:"scenario"`
	Description  string       `json:"description,omitempty"`
	Passed       bool         `json:"passed"`
	Expectations []Check      `json:"expectations"`
	Results      *sim.Results `json:"results"`
}

// Options tune a run without changing the scenario's meaning.
type Options struct {
	// Progress is called now and then with the virtual time reached.
	Progress func(now, total time.Duration, events uint64)
	// Stop is polled now and then; true ends the run with sim.ErrStopped.
	Stop func() bool
}

// Run simulates the scenario and checks its expectations.
func (s *Scenario) Run(opt Options) (*Report, error) {
	cfg, err := s.Config()
	if err != nil {
		return nil, err
	}
	if opt.Progress != nil {
		total := cfg.Duration
		cfg.Progress = func(now time.Duration, events uint64) { opt.Progress(now, total, events) }
	}
	cfg.Stop = opt.Stop
	res, err := sim.Run(cfg)
	if err != nil {
		return nil, err
	}
	rep := &Report{
		APIVersion:   APIVersion,
		Kind:         "SimulationReport",
		Scenario:     s.Metadata.Name,
		Description:  s.Metadata.Description,
		Passed:       true,
		Expectations: []Check{},
		Results:      res,
	}
	tree, err := toTree(res)
	if err != nil {
		return nil, err
	}
	for i, e := range s.Spec.Expectations {
		v, err := lookup(tree, e.Metric)
		if err != nil {
			return nil, fmt.Errorf("spec.expectations[%d].metric: %v", i, err)
		}
		ok := (e.Min == nil || v >= *e.Min) && (e.Max == nil || v <= *e.Max)
		rep.Expectations = append(rep.Expectations, Check{
			Metric: e.Metric, Description: e.Description, Min: e.Min, Max: e.Max, Value: v, Pass: ok,
		})
		rep.Passed = rep.Passed && ok
	}
	return rep, nil
}

func toTree(v any) (any, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var t any
	err = json.Unmarshal(b, &t)
	return t, err
}

// lookup resolves a dotted path (clusters.on-prem.share) to a number.
func lookup(tree any, path string) (float64, error) {
	cur := tree
	for i, part := range strings.Split(path, ".") {
		m, ok := cur.(map[string]any)
		if !ok {
			return 0, fmt.Errorf("%q: %s is not an object", path, strings.Join(strings.Split(path, ".")[:i], "."))
		}
		next, ok := m[part]
		if !ok {
			return 0, fmt.Errorf("%q: no %q here; there is %s", path, part, names(m))
		}
		cur = next
	}
	switch x := cur.(type) {
	case float64:
		if math.IsNaN(x) {
			return 0, fmt.Errorf("%q is not a number", path)
		}
		return x, nil
	case bool:
		if x {
			return 1, nil
		}
		return 0, nil
	}
	return 0, fmt.Errorf("%q is not a number", path)
}

// checkMetric tells whether path names a number in the results of s, before
// running it, from an empty result of the same shape.
func checkMetric(s *Scenario, path string) error {
	r := &sim.Results{
		Clusters:  map[string]sim.ClusterResult{},
		Providers: map[string]sim.ProviderResult{},
		Phases:    map[string]sim.PhaseResult{},
	}
	pc := map[string]sim.PhaseCluster{}
	create := false
	for _, w := range s.Spec.Workload {
		create = create || w.Create
	}
	if s.Spec.lossModel() {
		r.Losses = &sim.LossResult{Clusters: map[string]sim.ClusterLosses{}}
	}
	for _, c := range s.Spec.Clusters {
		if r.Losses != nil {
			r.Losses.Clusters[c.Name] = sim.ClusterLosses{}
		}
		r.Clusters[c.Name] = sim.ClusterResult{}
		if create {
			// Results carry onDemand for every cluster when a stream
			// creates.
			r.Clusters[c.Name] = sim.ClusterResult{OnDemand: &sim.OnDemandResult{}}
		}
		r.Providers[c.Provider] = sim.ProviderResult{}
		pc[c.Name] = sim.PhaseCluster{}
	}
	for _, p := range s.Spec.Phases {
		r.Phases[p.Name] = sim.PhaseResult{Clusters: pc}
	}
	tree, err := toTree(r)
	if err != nil {
		return err
	}
	_, err = lookup(tree, path)
	return err
}

// lossModel reports whether the scenario turns the loss model on: a
// cluster's answerLoss or a stream's caller, even at zero rates.
func (sp *Spec) lossModel() bool {
	for _, c := range sp.Clusters {
		if c.AnswerLoss != nil {
			return true
		}
	}
	for _, w := range sp.Workload {
		if w.Caller != nil {
			return true
		}
	}
	return false
}

// losses are the routing's settings for lost answers, defaulted.
func (r *Routing) losses() *sim.Losses {
	l := &sim.Losses{KeyRetries: 1, ReconcileDelay: time.Second, KeyWindow: sim.DefaultKeyWindow}
	if r.KeyRetries != nil {
		l.KeyRetries = *r.KeyRetries
	}
	if r.ReconcileDelay > 0 {
		l.ReconcileDelay = r.ReconcileDelay.D()
	}
	if r.KeyWindow > 0 {
		l.KeyWindow = r.KeyWindow.D()
	}
	return l
}
