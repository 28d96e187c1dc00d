package reports

import (
	"fmt"
	"math"
	"sort"

	"golang.org/x/perf/benchmath"
)

const (
	apiVersion     = "quartermaster.dev/v1alpha1"
	comparisonKind = "PerformanceComparison"
)

// Verdicts of a row. Only VerdictRegression fails the gate.
const (
	VerdictRegression    = "regression"
	VerdictWorse         = "worse, within threshold"
	VerdictImprovement   = "improvement"
	VerdictNoChange      = "no significant change"
	VerdictTooFew        = "too few samples"
	VerdictNew           = "new"
	VerdictMissing       = "missing"
	VerdictSame          = "same"
	VerdictChanged       = "changed"
	VerdictZeroReference = "zero baseline"
	// VerdictDeclared is an exact figure that changed under a declared
	// change (changes.yaml): shown with the reason, not failed.
	VerdictDeclared = "changed, declared"
)

// Comparison is the outcome of comparing a run with a baseline: what the
// JSON output holds and what the Markdown and the page show.
type Comparison struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	// Baseline is the baseline directory as given ("" without one).
	Baseline string `json:"baseline"`
	// Passed is false when a gated figure regressed or an expectation
	// failed.
	Passed bool `json:"passed"`
	// Regressions name the figures that failed the gate, with how much.
	Regressions []string `json:"regressions"`
	// Failures name expectations of scenario or load results that failed.
	Failures []string `json:"failures"`
	// Missing name gated figures this run lacks though the baseline has
	// them (a benchmark renamed or no longer run), and gates that matched
	// no figure on either side: each fails the gate, since a gate that
	// measures nothing would pass whatever the code did.
	Missing []string `json:"missing"`
	// Alpha, Confidence and MinSamples are the thresholds in force.
	Alpha      float64 `json:"alpha"`
	Confidence float64 `json:"confidence"`
	MinSamples int     `json:"minSamples"`
	// Rows are every figure, gated ones first, then by name.
	Rows []Row `json:"rows"`
	// Pairs are expectation metrics predicted by the simulator and measured
	// live, for scenarios given both ways.
	Pairs []Pair `json:"pairs,omitempty"`
	// Expectations are every checked expectation of the inputs.
	Expectations []Expectation `json:"expectations,omitempty"`
	// Warnings say what could not be checked (a gate that matched nothing).
	Warnings []string `json:"warnings,omitempty"`
}

// Row is one figure compared with its baseline.
type Row struct {
	Figure string `json:"figure"`
	Kind   Kind   `json:"kind"`
	Unit   string `json:"unit"`
	// Better is "lower" or "higher".
	Better string `json:"better"`
	// Reference is the in-run reference a ratio figure is divided by.
	Reference string `json:"reference,omitempty"`
	// Gated is true when a thresholds rule applies; MaxRegression is its
	// threshold.
	Gated         bool    `json:"gated"`
	MaxRegression float64 `json:"maxRegression,omitempty"`
	Baseline      *Stat   `json:"baseline,omitempty"`
	Current       *Stat   `json:"current,omitempty"`
	// Change is the current center over the baseline's (1 is no change).
	Change float64 `json:"change,omitempty"`
	// P is the Mann-Whitney U p-value; absent when no test was made.
	P       *float64 `json:"p,omitempty"`
	Verdict string   `json:"verdict"`
	Note    string   `json:"note,omitempty"`
}

// Stat summarises one side's samples: the median and its confidence
// interval, as benchstat prints them.
type Stat struct {
	N      int       `json:"n"`
	Center float64   `json:"center"`
	Lo     float64   `json:"lo"`
	Hi     float64   `json:"hi"`
	Values []float64 `json:"values"`
}

// Expectation is a bound a result file checked on itself (a scenario's
// expectations, `qm load --expect`).
type Expectation struct {
	Source string  `json:"source"`
	Metric string  `json:"metric"`
	Value  float64 `json:"value"`
	Want   string  `json:"want"`
	Pass   bool    `json:"pass"`
}

// Compare compares cur with base (nil: no baseline) under th.
func Compare(cur, base *Set, th *Thresholds) *Comparison {
	if th == nil {
		th = DefaultThresholds()
	}
	if base == nil {
		base = newSet()
	}
	c := &Comparison{
		APIVersion: apiVersion, Kind: comparisonKind,
		Alpha: th.Alpha, Confidence: th.Confidence, MinSamples: th.MinSamples,
		Regressions: []string{}, Failures: []string{}, Missing: []string{},
	}
	// Ratio figures first: each gate with a reference divides its figures
	// by the reference, round by round, on both sides.
	type derived struct {
		name, fig, ref string
		gate           *Gate
	}
	var ratios []derived
	seen := map[string]bool{}
	matched := make([]bool, len(th.Gates))
	names := union(cur.Names(), base.Names())
	for _, n := range names {
		g, ref := th.gateFor(n)
		if g == nil {
			continue
		}
		matched[gateIndex(th, g)] = true
		if ref == "" {
			continue
		}
		name := n + " ÷ " + ref
		if !seen[name] {
			seen[name] = true
			ratios = append(ratios, derived{name: name, fig: n, ref: ref, gate: g})
		}
	}
	for i, ok := range matched {
		if !ok {
			c.Missing = append(c.Missing, fmt.Sprintf("gate %q matched no figure in this run or the baseline", th.Gates[i].Figure))
		}
	}
	var rows []Row
	for _, d := range ratios {
		curR, curNote := ratioFigure(cur, d.fig, d.ref)
		baseR, baseNote := ratioFigure(base, d.fig, d.ref)
		dir := d.gate.Better
		if dir == "" {
			if f := firstFigure(cur, base, d.fig); f != nil {
				dir = f.better()
			}
		}
		row := compareRow(d.name, KindRatio, "x", dir, curR, baseR, th, d.gate)
		row.Reference = d.ref
		row.Note = joinNotes(row.Note, curNote, baseNote)
		rows = append(rows, row)
	}
	for _, n := range names {
		g, ref := th.gateFor(n)
		f := firstFigure(cur, base, n)
		dir := f.better()
		if g != nil && g.Better != "" && ref == "" {
			dir = g.Better
		}
		if ref != "" {
			g = nil // the gate applies to the ratio, not the raw figure
		}
		rows = append(rows, compareRow(n, f.Kind, f.Unit, dir, cur.Figure(n), base.Figure(n), th, g))
	}
	sort.SliceStable(rows, func(i, j int) bool {
		if rows[i].Gated != rows[j].Gated {
			return rows[i].Gated
		}
		return rows[i].Figure < rows[j].Figure
	})
	c.Rows = rows
	for _, r := range rows {
		switch {
		case r.Verdict == VerdictRegression:
			c.Regressions = append(c.Regressions, fmt.Sprintf("%s: %s (threshold %s)", r.Figure, describeChange(r), pct(r.MaxRegression)))
		case r.Verdict == VerdictChanged && r.Gated:
			c.Regressions = append(c.Regressions, fmt.Sprintf("%s: changed from %s to %s at the same seed, and no declared change (%s) covers it",
				r.Figure, num(r.Baseline.Center), num(r.Current.Center), ChangesFile))
		case r.Verdict == VerdictMissing && r.Gated && r.Baseline != nil:
			c.Missing = append(c.Missing, fmt.Sprintf("%s: gated, in the baseline build's run but not in this one (renamed, or no longer measured?)", r.Figure))
		}
	}
	c.Expectations = cur.expectations()
	for _, e := range c.Expectations {
		if !e.Pass {
			c.Failures = append(c.Failures, fmt.Sprintf("%s %s = %v (want %s)", e.Source, e.Metric, e.Value, e.Want))
		}
	}
	c.Pairs = cur.pairs()
	c.Passed = len(c.Regressions) == 0 && len(c.Failures) == 0 && len(c.Missing) == 0
	return c
}

func gateIndex(th *Thresholds, g *Gate) int {
	for i := range th.Gates {
		if &th.Gates[i] == g {
			return i
		}
	}
	return -1
}

func firstFigure(a, b *Set, name string) *Figure {
	if f := a.Figure(name); f != nil {
		return f
	}
	return b.Figure(name)
}

func union(a, b []string) []string {
	m := map[string]bool{}
	for _, s := range append(append([]string{}, a...), b...) {
		m[s] = true
	}
	out := make([]string, 0, len(m))
	for s := range m {
		out = append(out, s)
	}
	sort.Strings(out)
	return out
}

// ratioFigure divides figure name by ref round by round within set. It
// returns nil when either is absent, with a note saying which.
func ratioFigure(set *Set, name, ref string) (*Figure, string) {
	f, r := set.Figure(name), set.Figure(ref)
	if f == nil {
		return nil, ""
	}
	if r == nil {
		return nil, fmt.Sprintf("reference %q is not in %s", ref, sideName(set))
	}
	byRound := map[string]float64{}
	for _, s := range r.Samples {
		byRound[s.Round] = s.Value
	}
	out := &Figure{Name: name + " ÷ " + ref, Kind: KindRatio, Unit: "x", Source: f.Source}
	unpaired := 0
	for _, s := range f.Samples {
		d, ok := byRound[s.Round]
		if !ok || d == 0 {
			unpaired++
			continue
		}
		out.Samples = append(out.Samples, Sample{Value: s.Value / d, Round: s.Round})
	}
	note := ""
	if unpaired > 0 {
		note = fmt.Sprintf("%d sample(s) in %s had no reference in the same round", unpaired, sideName(set))
	}
	return out, note
}

func sideName(set *Set) string {
	if len(set.Files) == 0 {
		return "the baseline"
	}
	return set.Files[0]
}

func joinNotes(notes ...string) string {
	out := ""
	for _, n := range notes {
		if n == "" {
			continue
		}
		if out != "" {
			out += "; "
		}
		out += n
	}
	return out
}

// compareRow compares one figure. g is the gate that applies (nil: the
// figure is reported, not gated).
func compareRow(name string, kind Kind, unit, dir string, cur, base *Figure, th *Thresholds, g *Gate) Row {
	row := Row{Figure: name, Kind: kind, Unit: unit, Better: dir}
	if g != nil {
		row.Gated, row.MaxRegression = true, g.MaxRegression
	}
	exact := g != nil && g.Exact
	thr := &benchmath.Thresholds{CompareAlpha: th.Alpha}
	var cs, bs *benchmath.Sample
	if cur != nil && len(cur.Samples) > 0 {
		cs = benchmath.NewSample(cur.Values(), thr)
		row.Current = stat(cs, th.Confidence)
	}
	if base != nil && len(base.Samples) > 0 {
		bs = benchmath.NewSample(base.Values(), thr)
		row.Baseline = stat(bs, th.Confidence)
	}
	switch {
	case cs == nil && bs == nil:
		row.Verdict = VerdictMissing
		row.Note = "no samples on either side"
		return row
	case cs == nil:
		row.Verdict = VerdictMissing
		row.Note = "in the baseline, not in this run"
		return row
	case bs == nil:
		row.Verdict = VerdictNew
		if row.Gated {
			// The baseline build predates the figure: nothing to compare
			// with until the baseline moves past it.
			row.Note = "not in the baseline; gated once the baseline includes it"
		}
		return row
	}
	if exact {
		row.Change = 1
		if row.Baseline.Center != 0 {
			row.Change = row.Current.Center / row.Baseline.Center
		}
		switch d := th.declared(name); {
		case sameValues(cs.Values, bs.Values):
			row.Verdict = VerdictSame
		case d != nil:
			row.Verdict = VerdictDeclared
			row.Note = d.Reason
		default:
			row.Verdict = VerdictChanged
		}
		return row
	}
	if row.Baseline.Center == 0 {
		if row.Current.Center == 0 {
			row.Change = 1
			row.Verdict = VerdictSame
		} else {
			row.Verdict = VerdictZeroReference
			row.Note = "the baseline is 0, so no ratio"
		}
		return row
	}
	row.Change = row.Current.Center / row.Baseline.Center
	if cur.Deterministic && base.Deterministic {
		// The same seed gives the same value: any difference is real, and a
		// test over one sample would say nothing.
		if row.Current.Center == row.Baseline.Center {
			row.Verdict = VerdictSame
		} else {
			row.Verdict = VerdictChanged
		}
		return row
	}
	if len(cs.Values) < th.MinSamples || len(bs.Values) < th.MinSamples {
		// Too few to tell noise from change: say so, and do not gate.
		row.Verdict = VerdictTooFew
		row.Note = fmt.Sprintf("%d sample(s) in the baseline and %d in this run; a test needs %d on each side", len(bs.Values), len(cs.Values), th.MinSamples)
		return row
	}
	cmp := benchmath.AssumeNothing.Compare(bs, cs)
	p := cmp.P
	row.P = &p
	worse := row.Change - 1 // how much worse, as a fraction
	if dir == "higher" {
		worse = 1 - row.Change
	}
	switch {
	case p >= th.Alpha:
		row.Verdict = VerdictNoChange
	case worse <= 0:
		row.Verdict = VerdictImprovement
	case row.Gated && worse > row.MaxRegression:
		row.Verdict = VerdictRegression
	default:
		row.Verdict = VerdictWorse
	}
	return row
}

// sameValues reports whether every sample of both sides has one value:
// what a figure gated as exact must show.
func sameValues(a, b []float64) bool {
	for _, v := range a {
		if v != b[0] {
			return false
		}
	}
	for _, v := range b {
		if v != b[0] {
			return false
		}
	}
	return true
}

func stat(s *benchmath.Sample, confidence float64) *Stat {
	sum := benchmath.AssumeNothing.Summary(s, confidence)
	st := &Stat{N: len(s.Values), Center: sum.Center, Lo: sum.Lo, Hi: sum.Hi, Values: append([]float64(nil), s.Values...)}
	// With too few samples for the level asked, benchmath gives an
	// infinite interval; JSON has no infinity, and the page shows the
	// extreme samples instead, which is what is known.
	if math.IsInf(st.Lo, 0) || math.IsNaN(st.Lo) {
		st.Lo = s.Values[0]
	}
	if math.IsInf(st.Hi, 0) || math.IsNaN(st.Hi) {
		st.Hi = s.Values[len(s.Values)-1]
	}
	return st
}

// describeChange says how a row moved, in the direction that matters:
// "+23.1% (worse)".
func describeChange(r Row) string {
	if r.Change == 0 {
		return "no ratio"
	}
	d := r.Change - 1
	word := "better"
	if (d > 0) == (r.Better == "lower") {
		word = "worse"
	}
	if d == 0 {
		return "±0%"
	}
	return fmt.Sprintf("%+.1f%% (%s)", 100*d, word)
}

func pct(f float64) string { return fmt.Sprintf("%.0f%%", 100*f) }

// expectations gathers every scenario and load expectation of the inputs.
func (s *Set) expectations() []Expectation {
	var out []Expectation
	for _, in := range s.Sims {
		for _, c := range in.Report.Expectations {
			out = append(out, Expectation{Source: in.Prefix(), Metric: c.Metric, Value: c.Value, Want: bounds(c), Pass: c.Pass})
		}
	}
	for _, in := range s.Loads {
		out = append(out, in.expectations()...)
	}
	for _, in := range s.Soaks {
		out = append(out, in.expectations()...)
	}
	return out
}
