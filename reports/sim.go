package reports

import (
	"bytes"
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/quartermaster-dev/quartermaster/scenarios"
	"github.com/quartermaster-dev/quartermaster/sim"
)

// simReportKind is what `qm sim --out` writes.
const simReportKind = "SimulationReport"

// SimInput is one scenario report: a simulation (predicted) or a live run
// of the same scenario written in the simulator's result format (measured).
type SimInput struct {
	File   string
	Live   bool
	Report *scenarios.Report
}

// Prefix is the start of this input's figure names: "sim/NAME" or
// "live/NAME".
func (in *SimInput) Prefix() string {
	if in.Live {
		return "live/" + in.Report.Scenario
	}
	return "sim/" + in.Report.Scenario
}

// readSim decodes a scenario report and adds its figures to set.
func readSim(set *Set, file string, data []byte, kind string) error {
	var rep scenarios.Report
	dec := json.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&rep); err != nil {
		return fmt.Errorf("%s: %s", file, jsonError(data, err))
	}
	if rep.APIVersion != scenarios.APIVersion {
		return fmt.Errorf("%s: apiVersion: got %q, want %q", file, rep.APIVersion, scenarios.APIVersion)
	}
	if rep.Scenario == "" {
		return fmt.Errorf("%s: %s: scenario: missing", file, kind)
	}
	if rep.Results == nil {
		return fmt.Errorf("%s: %s: results: missing", file, kind)
	}
	if err := checkSeries(&rep.Results.Series); err != nil {
		return fmt.Errorf("%s: results.series: %w", file, err)
	}
	in := &SimInput{File: file, Live: kind != simReportKind, Report: &rep}
	set.Sims = append(set.Sims, in)
	kindOf := KindSim
	if in.Live {
		// A live run is measured once; it is not deterministic, but it has
		// one sample all the same, so it is compared for information only.
		kindOf = KindLoad
	}
	for _, m := range simMetrics(rep.Results) {
		set.add(in.Prefix()+" "+m.path, kindOf, m.unit, file, Sample{Value: m.value, Round: "0"})
	}
	return nil
}

// checkSeries rejects series whose columns do not line up with the sample
// times: a plot of them would be silently wrong.
func checkSeries(s *sim.Series) error {
	n := len(s.T)
	for name, c := range s.Clusters {
		if c == nil {
			return fmt.Errorf("clusters.%s: null", name)
		}
		for field, l := range map[string]int{
			"allocated": len(c.Allocated), "ready": len(c.Ready), "nodesInUse": len(c.NodesInUse),
			"packingEfficiency": len(c.PackingEfficiency), "allocations": len(c.Allocations),
		} {
			if l != n {
				return fmt.Errorf("clusters.%s.%s: %d values for %d sample times", name, field, l, n)
			}
		}
	}
	if n > 0 && s.IntervalSeconds <= 0 {
		return fmt.Errorf("intervalSeconds: must be positive, got %v", s.IntervalSeconds)
	}
	return nil
}

type metric struct {
	path  string
	unit  string
	value float64
}

// simMetrics lists a result's figures by the same paths scenario
// expectations use (totals.successRate, clusters.on-prem.share), sorted.
func simMetrics(r *sim.Results) []metric {
	t := r.Totals
	out := []metric{
		{"totals.requests", "requests", float64(t.Requests)},
		{"totals.allocated", "requests", float64(t.Allocated)},
		{"totals.successRate", "fraction", t.SuccessRate},
		{"totals.unAllocatedRate", "fraction", t.UnAllocatedRate},
		{"totals.retriesPerAllocation", "retries/allocation", t.RetriesPerAllocation},
		{"totals.latency.p50Ms", "ms", t.Latency.P50Ms},
		{"totals.latency.p99Ms", "ms", t.Latency.P99Ms},
		{"totals.latency.p999Ms", "ms", t.Latency.P999Ms},
		{"totals.packingEfficiency", "fraction", t.PackingEfficiency},
		{"totals.nodeHours", "node-hours", t.NodeHours},
		{"totals.cost", "cost", t.Cost},
	}
	for name, c := range r.Clusters {
		p := "clusters." + name + "."
		out = append(out,
			metric{p + "share", "fraction", c.Share},
			metric{p + "successRate", "fraction", c.SuccessRate},
			metric{p + "latency.p99Ms", "ms", c.Latency.P99Ms},
			metric{p + "packingEfficiency", "fraction", c.PackingEfficiency},
			metric{p + "cost", "cost", c.Cost},
		)
	}
	for name, p := range r.Providers {
		out = append(out, metric{"providers." + name + ".share", "fraction", p.Share})
	}
	if l := r.Losses; l != nil {
		out = append(out,
			metric{"losses.leaked", "servers", float64(l.Leaked)},
			metric{"losses.leakedPerHour", "servers/hour", l.LeakedPerHour},
			metric{"losses.duplicatesAvoided", "allocations", float64(l.DuplicatesAvoided)},
			metric{"losses.retries", "requests", float64(l.Retries)},
		)
	}
	for name, ph := range r.Phases {
		for cl, pc := range ph.Clusters {
			out = append(out, metric{"phases." + name + ".clusters." + cl + ".share", "fraction", pc.Share})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].path < out[j].path })
	return out
}

// pairs returns, for each scenario given both simulated and live, the
// predicted and measured value of every expectation metric, for the page's
// side-by-side table.
func (s *Set) pairs() []Pair {
	var out []Pair
	for _, pred := range s.Sims {
		if pred.Live {
			continue
		}
		for _, meas := range s.Sims {
			if !meas.Live || meas.Report.Scenario != pred.Report.Scenario {
				continue
			}
			measured := map[string]scenarios.Check{}
			for _, c := range meas.Report.Expectations {
				measured[c.Metric] = c
			}
			for _, c := range pred.Report.Expectations {
				m, ok := measured[c.Metric]
				p := Pair{Scenario: pred.Report.Scenario, Metric: c.Metric, Predicted: c.Value,
					PredictedPass: c.Pass, Bounds: bounds(c)}
				if ok {
					p.Measured, p.MeasuredPass, p.HasMeasured = m.Value, m.Pass, true
				}
				out = append(out, p)
			}
		}
	}
	return out
}

// Pair is one expectation metric, predicted by the simulator and measured
// on a live run of the same scenario.
type Pair struct {
	Scenario      string  `json:"scenario"`
	Metric        string  `json:"metric"`
	Bounds        string  `json:"bounds"`
	Predicted     float64 `json:"predicted"`
	PredictedPass bool    `json:"predictedPass"`
	Measured      float64 `json:"measured"`
	MeasuredPass  bool    `json:"measuredPass"`
	HasMeasured   bool    `json:"hasMeasured"`
}

func bounds(c scenarios.Check) string {
	var parts []string
	if c.Min != nil {
		parts = append(parts, fmt.Sprintf(">= %v", *c.Min))
	}
	if c.Max != nil {
		parts = append(parts, fmt.Sprintf("<= %v", *c.Max))
	}
	return strings.Join(parts, " and ")
}
