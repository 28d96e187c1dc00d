// Package plan answers capacity questions with the simulator: "the
// smallest buffer (or fleet, or node count) for which this scenario still
// meets its target". It varies one field of a scenario over an integer
// range and bisects, each point one deterministic simulator run, so the
// answer and the curve explored are the same on every machine; `qm plan`
// is its command and `qm report` draws the curve.
//
// Bisection presumes the target gets easier as the value grows (more
// servers, a larger buffer). The plan checks the ends first: a target met
// at FROM needs no search, one missed at TO has no answer in the range.
package plan

import (
	"bytes"
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/quartermaster-dev/quartermaster/scenarios"
)

// Kind and APIVersion identify a plan's result document.
const (
	APIVersion = scenarios.APIVersion
	Kind       = "CapacityPlan"
)

// Point is one simulator run of the plan.
type Point struct {
	Value int  `json:"value"`
	Pass  bool `json:"pass"`
	// Metrics are the target's metrics (by the names the target used) and
	// a few that describe any run: successRate, p99Ms, cost, nodeHours.
	Metrics map[string]float64 `json:"metrics"`
	// Failed names the clauses the run missed.
	Failed []string `json:"failed,omitempty"`
	// Events and WallSeconds say what the run cost.
	Events      uint64  `json:"events"`
	WallSeconds float64 `json:"wallSeconds"`
}

// Result is a plan: the question, its answer and the points explored, in
// value order.
type Result struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Scenario   string   `json:"scenario"`
	Seed       uint64   `json:"seed"`
	Vary       string   `json:"vary"`
	From       int      `json:"from"`
	To         int      `json:"to"`
	Target     []string `json:"target"`
	// Found is false when the target was missed even at To.
	Found bool `json:"found"`
	// Answer is the smallest value meeting the target (when Found).
	Answer int     `json:"answer"`
	Points []Point `json:"points"`
}

// Options tune a plan without changing its answer.
type Options struct {
	// Progress, when set, is told of each run as it starts and ends.
	Progress func(value int, done *Point)
	// Stop is polled by the runs; true ends the plan with sim.ErrStopped.
	Stop func() bool
}

// Plan is a question: which value of Vary meets Target in the scenario.
type Plan struct {
	data   []byte // the scenario file, re-parsed for every run
	sc     *scenarios.Scenario
	Vary   Vary
	Target Target
}

// New checks the question before any run: the scenario parses, the path
// names a number in it and the target's metrics exist in its results.
func New(scenarioFile []byte, vary Vary, target Target) (*Plan, error) {
	sc, err := scenarios.Parse(scenarioFile)
	if err != nil {
		return nil, err
	}
	if len(target) == 0 {
		return nil, errors.New("target: no clauses")
	}
	if err := target.Check(sc); err != nil {
		return nil, fmt.Errorf("target: %w", err)
	}
	p := &Plan{data: bytes.Clone(scenarioFile), sc: sc, Vary: vary, Target: target}
	// Both ends must make valid scenarios (a buffer size past its max is
	// refused here, not after an hour of runs).
	for _, v := range []int{vary.From, vary.To} {
		if _, err := p.scenario(v); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// scenario is the scenario with the varied field set to v, validated.
func (p *Plan) scenario(v int) (*scenarios.Scenario, error) {
	sc, err := scenarios.Parse(p.data)
	if err != nil {
		return nil, err
	}
	if err := p.Vary.Set(sc, v); err != nil {
		return nil, fmt.Errorf("vary: %w", err)
	}
	if err := sc.Validate(); err != nil {
		return nil, fmt.Errorf("vary: with %s=%d the scenario is not valid: %w", p.Vary.Path, v, err)
	}
	return sc, nil
}

// Run bisects: it runs To, then From, then the middle of what is left until
// two neighbours separate a miss from a pass.
func (p *Plan) Run(o Options) (*Result, error) {
	res := &Result{
		APIVersion: APIVersion, Kind: Kind,
		Scenario: p.sc.Metadata.Name, Seed: *p.sc.Spec.Seed,
		Vary: p.Vary.Path, From: p.Vary.From, To: p.Vary.To,
	}
	for _, b := range p.Target {
		res.Target = append(res.Target, b.String())
	}
	eval := func(v int) (bool, error) {
		pt, err := p.point(v, o)
		if err != nil {
			return false, err
		}
		res.Points = append(res.Points, *pt)
		return pt.Pass, nil
	}
	lo, hi := p.Vary.From, p.Vary.To
	ok, err := eval(hi)
	if err != nil {
		return nil, err
	}
	if ok {
		res.Found = true
		if ok, err = eval(lo); err != nil {
			return nil, err
		}
		if ok {
			hi = lo
		}
		// Invariant: lo misses, hi passes.
		for hi-lo > 1 {
			mid := lo + (hi-lo)/2
			ok, err := eval(mid)
			if err != nil {
				return nil, err
			}
			if ok {
				hi = mid
			} else {
				lo = mid
			}
		}
		res.Answer = hi
	}
	sort.Slice(res.Points, func(i, j int) bool { return res.Points[i].Value < res.Points[j].Value })
	return res, nil
}

func (p *Plan) point(v int, o Options) (*Point, error) {
	sc, err := p.scenario(v)
	if err != nil {
		return nil, err
	}
	if o.Progress != nil {
		o.Progress(v, nil)
	}
	start := time.Now()
	rep, err := sc.Run(scenarios.Options{Stop: o.Stop})
	if err != nil {
		return nil, fmt.Errorf("%s=%d: %w", p.Vary.Path, v, err)
	}
	tree, err := toTree(rep.Results)
	if err != nil {
		return nil, err
	}
	pt := &Point{Value: v, Pass: true, Metrics: map[string]float64{}, Events: rep.Results.Events,
		WallSeconds: time.Since(start).Seconds()}
	t := rep.Results.Totals
	pt.Metrics["successRate"] = t.SuccessRate
	pt.Metrics["p99Ms"] = t.Latency.P99Ms
	pt.Metrics["cost"] = t.Cost
	pt.Metrics["nodeHours"] = t.NodeHours
	for _, b := range p.Target {
		x, err := lookup(tree, b.Metric)
		if err != nil {
			return nil, fmt.Errorf("target %s: %w", b.Name, err)
		}
		pt.Metrics[b.Name] = x
		if !b.Holds(x) {
			pt.Pass = false
			pt.Failed = append(pt.Failed, b.String())
		}
	}
	if o.Progress != nil {
		o.Progress(v, pt)
	}
	return pt, nil
}
