package reports

import (
	"sort"
	"strings"
)

// Kind says where a figure comes from, which decides how it is compared.
type Kind string

const (
	// KindBench figures come from `go test -bench` output: several noisy
	// samples, compared with the Mann-Whitney U test.
	KindBench Kind = "bench"
	// KindSim figures come from the simulator: one sample, and the same seed
	// gives the same value, so any change is a change of behaviour, not
	// noise.
	KindSim Kind = "sim"
	// KindLoad figures come from `qm load`.
	KindLoad Kind = "load"
	// KindRatio figures are a figure divided by its in-run reference, one
	// ratio per round in which both were measured.
	KindRatio Kind = "ratio"
)

// Sample is one measurement. Round names the run it belongs to (the
// "round" configuration line of benchmark output, else its ordinal), so that
// a figure and its reference can be divided round by round.
type Sample struct {
	Value float64
	Round string
}

// Figure is one named quantity with its samples.
type Figure struct {
	// Name identifies the figure across runs: "core.Allocate/packed-1k
	// sec/op", "sim/burst-to-cloud totals.successRate".
	Name    string
	Kind    Kind
	Unit    string
	Samples []Sample
	// Source is the file the samples came from (the first, if several).
	Source string
	// Deterministic figures need one sample (a simulation with a fixed seed).
	Deterministic bool
	// Better is "higher" or "lower" when the input says so; else it is told
	// from the unit.
	Better string
}

// better returns the figure's direction.
func (f *Figure) better() string {
	if f.Better != "" {
		return f.Better
	}
	return better(f.Unit)
}

// Values returns the sample values in input order.
func (f *Figure) Values() []float64 {
	out := make([]float64, len(f.Samples))
	for i, s := range f.Samples {
		out[i] = s.Value
	}
	return out
}

// Set is a collection of figures by name, plus the richer results (time
// series, histograms) that only the plots use.
type Set struct {
	figures map[string]*Figure
	// Sims are the scenario reports read, in input order.
	Sims []*SimInput
	// Loads are the `qm load` results read, in input order.
	Loads []*LoadInput
	// Plans are the capacity plans read (qm plan --out), in input order.
	Plans []*PlanInput
	// Soaks are the soak results read (qm soak), in input order.
	Soaks []*SoakInput
	// Files are the inputs' names, in the order given.
	Files []string
}

func newSet() *Set { return &Set{figures: map[string]*Figure{}} }

// add appends a sample to the named figure, creating it on first use.
func (s *Set) add(name string, kind Kind, unit, source string, v Sample) {
	f := s.figures[name]
	if f == nil {
		f = &Figure{Name: name, Kind: kind, Unit: unit, Source: source, Deterministic: kind == KindSim}
		s.figures[name] = f
	}
	f.Samples = append(f.Samples, v)
}

// Figure returns the named figure or nil.
func (s *Set) Figure(name string) *Figure { return s.figures[name] }

// Names returns every figure name, sorted.
func (s *Set) Names() []string {
	out := make([]string, 0, len(s.figures))
	for n := range s.figures {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Len is the number of figures.
func (s *Set) Len() int { return len(s.figures) }

// better returns "higher" when a larger value of unit is an improvement
// (rates, throughput, shares of a ceiling) and "lower" otherwise (times,
// bytes, allocations, latencies). A threshold rule can override it.
func better(unit string) string {
	u := strings.ToLower(unit)
	switch {
	case strings.HasSuffix(u, "/s"), strings.Contains(u, "successrate"), strings.Contains(u, "packingefficiency"):
		return "higher"
	}
	return "lower"
}
