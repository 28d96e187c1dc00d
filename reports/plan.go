package reports

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"

	"github.com/quartermaster-dev/quartermaster/plan"
)

// PlanInput is one capacity plan (qm plan --out): the question, its answer
// and the curve the bisection explored.
type PlanInput struct {
	File string
	Plan *plan.Result
}

// readPlan decodes a plan strictly and adds its answer as a figure
// ("plan/SCENARIO PATH answer"), deterministic like a simulation's.
func readPlan(set *Set, file string, data []byte) error {
	var res plan.Result
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&res); err != nil {
		return fmt.Errorf("%s: %s", file, jsonError(data, err))
	}
	if err := checkPlan(&res); err != nil {
		return fmt.Errorf("%s: %s: %w", file, plan.Kind, err)
	}
	set.Plans = append(set.Plans, &PlanInput{File: file, Plan: &res})
	if res.Found {
		set.add("plan/"+res.Scenario+" "+res.Vary+" answer", KindSim, "value", file, Sample{Value: float64(res.Answer), Round: "0"})
	}
	return nil
}

// checkPlan rejects a plan a page could not draw honestly.
func checkPlan(r *plan.Result) error {
	switch {
	case r.APIVersion != plan.APIVersion:
		return fmt.Errorf("apiVersion: got %q, want %q", r.APIVersion, plan.APIVersion)
	case r.Scenario == "":
		return errors.New("scenario: missing")
	case r.Vary == "":
		return errors.New("vary: missing")
	case len(r.Points) == 0:
		return errors.New("points: none")
	}
	for i, p := range r.Points {
		if i > 0 && p.Value <= r.Points[i-1].Value {
			return fmt.Errorf("points[%d]: value %d after %d: want ascending values", i, p.Value, r.Points[i-1].Value)
		}
		for k, v := range p.Metrics {
			if math.IsNaN(v) || math.IsInf(v, 0) {
				return fmt.Errorf("points[%d].metrics.%s: not a number", i, k)
			}
		}
	}
	return nil
}

// planSection draws the curve a plan explored: each target metric against
// the varied value, with the target's bound as a flat line, and the points
// in a table.
func planSection(i int, in *PlanInput) (section, error) {
	r := in.Plan
	answer := fmt.Sprintf("no value in %d..%d meets the target", r.From, r.To)
	if r.Found {
		answer = fmt.Sprintf("the smallest value meeting the target is %d", r.Answer)
	}
	s := section{ID: fmt.Sprintf("plan-%d", i), Title: fmt.Sprintf("Capacity plan: %s in %s", r.Vary, r.Scenario),
		Intro: fmt.Sprintf("Bisection over %s = %d..%d for %s (seed %d, one simulator run per point): %s; from %s.",
			r.Vary, r.From, r.To, strings.Join(r.Target, ", "), r.Seed, answer, in.File)}
	xs := make([]float64, len(r.Points))
	for k, p := range r.Points {
		xs[k] = float64(p.Value)
	}
	for j, clause := range r.Target {
		tg, err := plan.ParseTarget(clause)
		if err != nil || len(tg) != 1 {
			return s, fmt.Errorf("target[%d] %q: %v", j, clause, err)
		}
		b := tg[0]
		ys := make([]float64, len(r.Points))
		bound := make([]float64, len(r.Points))
		for k, p := range r.Points {
			v, ok := p.Metrics[b.Name]
			if !ok {
				v = math.NaN()
			}
			ys[k], bound[k] = v, b.Value
		}
		ss := []series{{name: b.Name, x: xs, y: ys}, {name: "target " + clause, x: xs, y: bound}}
		p, err := lineChart(b.Name+" against "+r.Vary, r.Vary, b.Name, ss)
		if err != nil {
			return s, err
		}
		svg, err := svgOf(p)
		if err != nil {
			return s, err
		}
		t := table{Head: []string{r.Vary, b.Name, "meets " + clause}}
		for k, pt := range r.Points {
			t.Rows = append(t.Rows, []string{fmt.Sprint(pt.Value), num(ys[k]), yesNo(b.Holds(ys[k]))})
		}
		s.Charts = append(s.Charts, chart{ID: fmt.Sprintf("plan-%d-%d", i, j), Title: b.Name, SVG: svg, Table: t})
	}
	return s, nil
}
