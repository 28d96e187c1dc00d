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
// Each round can test several points between the bounds at once
// (Plan.Points), one run per worker; which points are tested depends on
// Points alone, so the workers change how long a plan takes, never what it
// finds.
package plan

import (
	"bytes"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
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

// Options tune a plan without changing its answer or the points it runs.
type Options struct {
	// Progress, when set, is told of each run as it starts and ends; its
	// calls never overlap.
	Progress func(value int, done *Point)
	// Stop is polled by the runs; true ends the plan with sim.ErrStopped.
	// Runs under way at once poll it concurrently.
	Stop func() bool
	// Workers is how many simulator runs go on at once (below 1: one).
	Workers int
}

// Plan is a question: which value of Vary meets Target in the scenario.
type Plan struct {
	data   []byte // the scenario file, re-parsed for every run
	sc     *scenarios.Scenario
	Vary   Vary
	Target Target
	// Points is how many values a round tests between the bounds, evenly
	// spaced (below 1: one, the midpoint: plain bisection). With more than
	// one the ends are also tested together in the first round.
	Points int
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

// Run bisects: it runs To (and From), then points between the bounds left
// until two neighbours separate a miss from a pass.
func (p *Plan) Run(o Options) (*Result, error) {
	res := &Result{
		APIVersion: APIVersion, Kind: Kind,
		Scenario: p.sc.Metadata.Name, Seed: *p.sc.Spec.Seed,
		Vary: p.Vary.Path, From: p.Vary.From, To: p.Vary.To,
	}
	for _, b := range p.Target {
		res.Target = append(res.Target, b.String())
	}
	var mu sync.Mutex
	if o.Progress != nil {
		progress := o.Progress
		o.Progress = func(v int, done *Point) {
			mu.Lock()
			defer mu.Unlock()
			progress(v, done)
		}
	}
	// eval runs values (ascending) and returns their points.
	eval := func(values []int) ([]*Point, error) {
		pts := make([]*Point, len(values))
		err := parallel(len(values), o.Workers, func(i int) error {
			pt, err := p.point(values[i], o)
			pts[i] = pt
			return err
		})
		return pts, err
	}
	if err := p.search(res, eval); err != nil {
		return nil, err
	}
	return res, nil
}

// search is the plan's bisection, round by round, each round's values
// handed to eval; the points eval returns go into res, and the answer.
// Run evaluates by running the simulator, Merge by looking the values up
// in runs made elsewhere: the same rounds and the same answer.
func (p *Plan) search(res *Result, eval func(values []int) ([]*Point, error)) error {
	round := func(values []int) ([]bool, error) {
		pts, err := eval(values)
		if err != nil {
			return nil, err
		}
		pass := make([]bool, len(values))
		for i, pt := range pts {
			res.Points = append(res.Points, *pt)
			pass[i] = pt.Pass
		}
		return pass, nil
	}
	k := max(p.Points, 1)
	lo, hi := p.Vary.From, p.Vary.To
	var loOK, hiOK bool
	if k == 1 || lo == hi {
		ok, err := round([]int{hi})
		if err != nil {
			return err
		}
		if hiOK = ok[0]; hiOK && lo != hi {
			if ok, err = round([]int{lo}); err != nil {
				return err
			}
			loOK = ok[0]
		}
	} else {
		ok, err := round([]int{lo, hi})
		if err != nil {
			return err
		}
		loOK, hiOK = ok[0], ok[1]
	}
	if hiOK {
		res.Found = true
		if loOK {
			hi = lo
		}
		// Invariant: lo misses, hi passes.
		for hi-lo > 1 {
			values := between(lo, hi, k)
			ok, err := round(values)
			if err != nil {
				return err
			}
			// The first value that passes is the new hi; the last miss
			// below it the new lo.
			newHi := hi
			for i, v := range values {
				if ok[i] {
					newHi = v
					break
				}
			}
			for i, v := range values {
				if !ok[i] && v < newHi {
					lo = v
				}
			}
			hi = newHi
		}
		res.Answer = hi
	}
	sort.Slice(res.Points, func(i, j int) bool { return res.Points[i].Value < res.Points[j].Value })
	return nil
}

// between returns up to k distinct values strictly between lo and hi
// (lo+1 < hi), evenly spaced, ascending; with k = 1 the midpoint
// lo + (hi-lo)/2.
func between(lo, hi, k int) []int {
	var out []int
	for i := 1; i <= k; i++ {
		v := lo + (hi-lo)*i/(k+1)
		if v > lo && v < hi && (len(out) == 0 || v > out[len(out)-1]) {
			out = append(out, v)
		}
	}
	return out
}

// parallel calls f(0) .. f(n-1) on up to workers goroutines (below 1:
// one) and returns the error of the lowest index that failed, so which
// error is reported does not depend on the workers either. Once one
// fails, indexes not yet started are skipped.
func parallel(n, workers int, f func(i int) error) error {
	workers = min(max(workers, 1), n)
	errs := make([]error, n)
	var next atomic.Int64
	var failed atomic.Bool
	var wg sync.WaitGroup
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n || failed.Load() {
					return
				}
				if errs[i] = f(i); errs[i] != nil {
					failed.Store(true)
				}
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
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
