package plan

import (
	"errors"
	"fmt"
	"math"
	"sort"

	"github.com/quartermaster-dev/quartermaster/scenarios"
)

// SpreadKind identifies a multi-seed result document.
const SpreadKind = "SeedSpread"

// Spread is one figure of the results across seeds.
type Spread struct {
	// Metric is the figure's path in the results, as expectations and
	// targets address it (totals.successRate, clusters.onprem-a.share).
	Metric string  `json:"metric"`
	Mean   float64 `json:"mean"`
	// SD is the sample standard deviation (0 for one seed).
	SD  float64 `json:"sd"`
	Min float64 `json:"min"`
	Max float64 `json:"max"`
	// Values are the figure per seed, in the order of SeedRuns.Seeds.
	Values []float64 `json:"values"`
}

// SeedRuns is a scenario run under several seeds: every figure's spread
// and each seed's own report.
type SeedRuns struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Scenario   string   `json:"scenario"`
	Seeds      []uint64 `json:"seeds"`
	// Passed is how many of the runs met every expectation of the file.
	Passed  int                 `json:"passed"`
	Figures []Spread            `json:"figures"`
	Runs    []*scenarios.Report `json:"runs"`
}

// Seeds returns the n seeds a multi-seed run of a scenario uses: its own
// seed and the n-1 after it.
func Seeds(sc *scenarios.Scenario, n int) []uint64 {
	out := make([]uint64, n)
	for i := range out {
		out[i] = *sc.Spec.Seed + uint64(i)
	}
	return out
}

// RunSeed runs the scenario file with its seed replaced by seed.
func RunSeed(scenarioFile []byte, seed uint64, o scenarios.Options) (*scenarios.Report, error) {
	sc, err := scenarios.Parse(scenarioFile)
	if err != nil {
		return nil, err
	}
	sc.Spec.Seed = &seed
	rep, err := sc.Run(o)
	if err != nil {
		return nil, fmt.Errorf("seed %d: %w", seed, err)
	}
	return rep, nil
}

// RunSeeds runs the scenario file once per seed, o.Workers runs at a time,
// and merges the reports with MergeSeeds. The result does not depend on
// the number of workers.
func RunSeeds(scenarioFile []byte, seeds []uint64, o Options) (*SeedRuns, error) {
	if len(seeds) == 0 {
		return nil, errors.New("no seeds to run")
	}
	reps := make([]*scenarios.Report, len(seeds))
	err := parallel(len(seeds), o.Workers, func(i int) error {
		rep, err := RunSeed(scenarioFile, seeds[i], scenarios.Options{Stop: o.Stop})
		reps[i] = rep
		return err
	})
	if err != nil {
		return nil, err
	}
	return MergeSeeds(reps)
}

// MergeSeeds summarises reports of one scenario under distinct seeds, in
// the order given: for every number in the results (but the seed and the
// time series), its mean, spread and extremes. A figure missing from some
// runs (a phase or cluster only some have) is an error, as are reports of
// different scenarios or a seed twice.
func MergeSeeds(reps []*scenarios.Report) (*SeedRuns, error) {
	if len(reps) == 0 {
		return nil, errors.New("no reports to merge")
	}
	out := &SeedRuns{APIVersion: APIVersion, Kind: SpreadKind, Scenario: reps[0].Scenario, Runs: reps}
	values := map[string][]float64{}
	seen := map[uint64]bool{}
	for i, rep := range reps {
		if rep == nil || rep.Results == nil {
			return nil, fmt.Errorf("report %d: no results", i)
		}
		if rep.Scenario != out.Scenario {
			return nil, fmt.Errorf("report %d is of scenario %q, report 0 of %q", i, rep.Scenario, out.Scenario)
		}
		seed := rep.Results.Seed
		if seen[seed] {
			return nil, fmt.Errorf("report %d: seed %d is in the merge twice", i, seed)
		}
		seen[seed] = true
		out.Seeds = append(out.Seeds, seed)
		if rep.Passed {
			out.Passed++
		}
		tree, err := toTree(rep.Results)
		if err != nil {
			return nil, err
		}
		figures := map[string]float64{}
		numbers(tree, "", figures)
		delete(figures, "seed")
		if i > 0 && len(figures) != len(values) {
			return nil, fmt.Errorf("report %d (seed %d) has %d figures, report 0 has %d: not runs of one scenario", i, seed, len(figures), len(values))
		}
		for k, v := range figures {
			if i > 0 && values[k] == nil {
				return nil, fmt.Errorf("report %d (seed %d) has %s, report 0 does not", i, seed, k)
			}
			values[k] = append(values[k], v)
		}
	}
	for k, vs := range values {
		out.Figures = append(out.Figures, spreadOf(k, vs))
	}
	sort.Slice(out.Figures, func(i, j int) bool { return out.Figures[i].Metric < out.Figures[j].Metric })
	return out, nil
}

// numbers collects the numbers of a decoded JSON tree by dotted path,
// skipping lists (time series, histogram buckets).
func numbers(t any, path string, into map[string]float64) {
	switch x := t.(type) {
	case map[string]any:
		for k, v := range x {
			p := k
			if path != "" {
				p = path + "." + k
			}
			numbers(v, p, into)
		}
	case float64:
		into[path] = x
	}
}

func spreadOf(metric string, vs []float64) Spread {
	s := Spread{Metric: metric, Values: vs, Min: vs[0], Max: vs[0]}
	var sum float64
	for _, v := range vs {
		sum += v
		s.Min, s.Max = math.Min(s.Min, v), math.Max(s.Max, v)
	}
	s.Mean = sum / float64(len(vs))
	if len(vs) > 1 {
		var ss float64
		for _, v := range vs {
			ss += (v - s.Mean) * (v - s.Mean)
		}
		s.SD = math.Sqrt(ss / float64(len(vs)-1))
	}
	return s
}

// Figure returns the spread of the named figure, if the runs have it.
func (r *SeedRuns) Figure(metric string) (Spread, bool) {
	i := sort.Search(len(r.Figures), func(i int) bool { return r.Figures[i].Metric >= metric })
	if i < len(r.Figures) && r.Figures[i].Metric == metric {
		return r.Figures[i], true
	}
	return Spread{}, false
}
