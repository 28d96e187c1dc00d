package reports

import (
	"fmt"
	"html/template"
	"io"
	"math"
	"regexp"
	"sort"
	"strings"

	"gonum.org/v1/plot"

	"github.com/quartermaster-dev/quartermaster/sim"
)

// section is a part of the page: a heading, plots with their tables, and
// tables of their own.
type section struct {
	ID     string
	Title  string
	Intro  string
	Charts []chart
	Tables []namedTable
}

type namedTable struct {
	Title string
	table
}

// WriteHTML writes the report as one self-contained page: inline CSS and
// inline SVG, no script and nothing fetched from elsewhere, so it opens the
// same from a CI artifact, a mail attachment or a file system.
func (r *Report) WriteHTML(w io.Writer) error {
	var secs []section
	s, err := r.baselineSection()
	if err != nil {
		return err
	}
	secs = append(secs, s)
	if r.History != nil {
		s, err := r.trendSection()
		if err != nil {
			return err
		}
		secs = append(secs, s)
	}
	for i, in := range r.Current.Sims {
		s, err := simSection(i, in)
		if err != nil {
			return fmt.Errorf("%s: %w", in.File, err)
		}
		secs = append(secs, s)
	}
	if pairs := r.Comparison.Pairs; len(pairs) > 0 {
		t := table{Head: []string{"scenario", "metric", "want", "simulated", "live"}}
		for _, p := range pairs {
			meas := "-"
			if p.HasMeasured {
				meas = passMark(num(p.Measured), p.MeasuredPass)
			}
			t.Rows = append(t.Rows, []string{p.Scenario, p.Metric, p.Bounds, passMark(num(p.Predicted), p.PredictedPass), meas})
		}
		secs = append(secs, section{ID: "pairs", Title: "Predicted and measured",
			Intro:  "Each expectation metric of a scenario, as the simulator predicted it and as a live run of the same scenario measured it.",
			Tables: []namedTable{{Title: "expectations, side by side", table: t}}})
	}
	for i, in := range r.Current.Plans {
		s, err := planSection(i, in)
		if err != nil {
			return fmt.Errorf("%s: %w", in.File, err)
		}
		secs = append(secs, s)
	}
	for i, in := range r.Current.Loads {
		s, err := loadSection(i, in)
		if err != nil {
			return fmt.Errorf("%s: %w", in.File, err)
		}
		secs = append(secs, s)
	}
	for i, in := range r.Current.Soaks {
		s, err := soakSection(i, in)
		if err != nil {
			return fmt.Errorf("%s: %w", in.File, err)
		}
		secs = append(secs, s)
	}
	secs = append(secs, r.figuresSection())
	return pageTemplate.Execute(w, struct {
		Title   string
		C       *Comparison
		Files   []string
		Base    string
		Section []section
	}{r.Title, r.Comparison, r.Current.Files, r.Comparison.Baseline, secs})
}

func (r *Report) baselineSection() (section, error) {
	c := r.Comparison
	s := section{ID: "baseline", Title: "Against the baseline"}
	if c.Baseline == "" {
		s.Intro = "No baseline was given (qm report --baseline DIR): every figure is reported, none is gated."
	} else {
		s.Intro = fmt.Sprintf("Medians with %.0f%% confidence intervals; a change counts when the Mann-Whitney U test gives p < %v with at least %d samples on each side, and fails the gate only when it is also worse than the figure's threshold.",
			100*c.Confidence, c.Alpha, c.MinSamples)
	}
	p, idx, err := ratioChart(c.Rows)
	if err != nil {
		return s, err
	}
	t := table{Head: []string{"#", "figure", "baseline", "this run", "change", "p", "threshold", "verdict"}}
	for k, i := range idx {
		row := c.Rows[i]
		t.Rows = append(t.Rows, append([]string{fmt.Sprint(k + 1)}, rowCells(row, true)...))
	}
	if p != nil {
		svg, err := svgOf(p)
		if err != nil {
			return s, err
		}
		s.Charts = append(s.Charts, chart{ID: "ratio-to-baseline", Title: "Ratio to baseline", SVG: svg, Table: t,
			Note: "Bars: this run's median over the baseline's; whiskers: this run's interval; red mark: the threshold."})
	} else {
		var gated table
		gated.Head = t.Head[1:]
		for _, row := range c.Rows {
			if row.Gated {
				gated.Rows = append(gated.Rows, rowCells(row, true))
			}
		}
		if len(gated.Rows) > 0 {
			s.Tables = append(s.Tables, namedTable{Title: "gated figures", table: gated})
		}
	}
	if len(c.Expectations) > 0 {
		et := table{Head: []string{"source", "metric", "value", "want", "holds"}}
		for _, e := range c.Expectations {
			et.Rows = append(et.Rows, []string{e.Source, e.Metric, num(e.Value), e.Want, yesNo(e.Pass)})
		}
		s.Tables = append(s.Tables, namedTable{Title: "expectations", table: et})
	}
	return s, nil
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "NO"
}

func rowCells(r Row, gated bool) []string {
	p := "-"
	if r.P != nil {
		p = fmt.Sprintf("%.3f", *r.P)
	}
	change := "-"
	if r.Change != 0 {
		change = fmt.Sprintf("%+.1f%%", 100*(r.Change-1))
	}
	verdict := r.Verdict
	if r.Note != "" {
		verdict += " (" + r.Note + ")"
	}
	cells := []string{r.Figure, FormatStat(r.Baseline, r.Unit), FormatStat(r.Current, r.Unit), change, p}
	if gated {
		cells = append(cells, pct(r.MaxRegression))
	}
	return append(cells, verdict)
}

func (r *Report) figuresSection() section {
	t := table{Head: []string{"figure", "baseline", "this run", "change", "p", "verdict"}}
	for _, row := range r.Comparison.Rows {
		t.Rows = append(t.Rows, rowCells(row, false))
	}
	return section{ID: "figures", Title: "Every figure", Intro: "Every figure read, gated or not, with its unit; benchmark times are per operation.",
		Tables: []namedTable{{Title: "figures", table: t}}}
}

// simSection plots one scenario report's time series and its latency
// distribution.
func simSection(i int, in *SimInput) (section, error) {
	res := in.Report.Results
	mode := "simulated"
	if in.Live {
		mode = "live"
	}
	s := section{ID: fmt.Sprintf("sim-%d", i), Title: fmt.Sprintf("Scenario %s (%s)", in.Report.Scenario, mode),
		Intro: fmt.Sprintf("Seed %d, %s of virtual time, %d requests; from %s.", res.Seed, res.Duration, res.Totals.Requests, in.File)}
	if d := strings.TrimSpace(in.Report.Description); d != "" {
		s.Intro = strings.ToUpper(d[:1]) + d[1:] + ". " + s.Intro
	}
	charts, err := newSimSeries(res).charts(s.ID)
	s.Charts = append(s.Charts, charts...)
	if err != nil {
		return s, err
	}
	c, ok, err := latencyChart(s.ID, &res.Totals)
	if err != nil {
		return s, err
	}
	if ok {
		s.Charts = append(s.Charts, c)
	}
	return s, nil
}

// simSeries is a scenario report's time series as the page plots them:
// the clusters in name order, the sample times in virtual minutes.
type simSeries struct {
	res     *sim.Results
	ser     sim.Series
	names   []string
	minutes []float64
}

func newSimSeries(res *sim.Results) *simSeries {
	v := &simSeries{res: res, ser: res.Series}
	for n := range v.ser.Clusters {
		v.names = append(v.names, n)
	}
	sort.Strings(v.names)
	v.minutes = make([]float64, len(v.ser.T))
	for k, t := range v.ser.T {
		v.minutes[k] = t / 60
	}
	return v
}

// perCluster is one series per cluster of f's value at each sample.
func (v *simSeries) perCluster(f func(c string, k int) float64) []series {
	var out []series
	for _, n := range v.names {
		y := make([]float64, len(v.ser.T))
		for k := range y {
			y[k] = f(n, k)
		}
		out = append(out, series{name: n, x: v.minutes, y: y})
	}
	return out
}

// totalAt is every cluster's allocations in sample k's interval.
func (v *simSeries) totalAt(k int) float64 {
	var t float64
	for _, n := range v.names {
		t += float64(v.ser.Clusters[n].Allocations[k])
	}
	return t
}

// share is cluster c's share of sample k's allocations (NaN when there
// were none).
func (v *simSeries) share(c string, k int) float64 {
	t := v.totalAt(k)
	if t == 0 {
		return math.NaN()
	}
	return float64(v.ser.Clusters[c].Allocations[k]) / t
}

// throughput is allocations per second in each interval, per cluster and
// in total.
func (v *simSeries) throughput() []series {
	thr := v.perCluster(func(c string, k int) float64 {
		return float64(v.ser.Clusters[c].Allocations[k]) / v.ser.IntervalSeconds
	})
	tot := make([]float64, len(v.ser.T))
	for k := range tot {
		tot[k] = v.totalAt(k) / v.ser.IntervalSeconds
	}
	return append(thr, series{name: "total", x: v.minutes, y: tot})
}

// providerShares is each provider's share of the allocations over time
// (clusters without one under "(none)"), providers in name order.
func (v *simSeries) providerShares() []series {
	provOf := map[string]string{}
	var provs []string
	for _, n := range v.names {
		p := v.res.Clusters[n].Provider
		if p == "" {
			p = "(none)"
		}
		if _, ok := provOf[n]; !ok {
			provOf[n] = p
		}
		if !contains(provs, p) {
			provs = append(provs, p)
		}
	}
	sort.Strings(provs)
	var pshares []series
	for _, p := range provs {
		y := make([]float64, len(v.ser.T))
		for k := range y {
			y[k] = 0
			for _, n := range v.names {
				if provOf[n] == p {
					y[k] += v.share(n, k)
				}
			}
		}
		pshares = append(pshares, series{name: p, x: v.minutes, y: y})
	}
	return pshares
}

// packing is each cluster's packing efficiency over time, left out
// (NaN) where it had nothing allocated.
func (v *simSeries) packing() []series {
	return v.perCluster(func(c string, k int) float64 {
		cs := v.ser.Clusters[c]
		if cs.NodesWithAllocated != nil && k < len(cs.NodesWithAllocated) && cs.NodesWithAllocated[k] == 0 {
			return math.NaN() // nothing allocated: nothing to pack
		}
		return cs.PackingEfficiency[k]
	})
}

// charts draws the time series: throughput, cluster and provider shares,
// packing efficiency, each with its table. The charts drawn before an
// error are returned with it.
func (v *simSeries) charts(id string) ([]chart, error) {
	var out []chart
	for _, spec := range []struct {
		id, title, ylabel, unit string
		ss                      []series
		fix                     func(*plot.Plot)
	}{
		{"throughput", "Throughput over time", "allocations/s", "allocations/s", v.throughput(), nil},
		{"cluster-shares", "Cluster shares over time", "share of allocations", "share", v.perCluster(v.share), unitRange},
		{"provider-shares", "Provider shares over time", "share of allocations", "share", v.providerShares(), unitRange},
		{"packing", "Packing efficiency over time", "packing efficiency (1 = perfectly packed)", "efficiency", v.packing(), unitRange},
	} {
		p, err := lineChart(spec.title, "virtual time (min)", spec.ylabel, spec.ss)
		if err != nil {
			return out, err
		}
		if spec.fix != nil {
			spec.fix(p)
		}
		svg, err := svgOf(p)
		if err != nil {
			return out, err
		}
		out = append(out, chart{ID: id + "-" + spec.id, Title: spec.title, SVG: svg, Table: seriesTable("time (min)", spec.unit, spec.ss)})
	}
	return out, nil
}

// latencyChart draws the latency distribution from the coarse buckets the
// result keeps, with the exact percentiles on top; ok is false when there
// are no buckets to draw.
func latencyChart(id string, tot *sim.Totals) (c chart, ok bool, err error) {
	b := tot.LatencyBuckets
	// The simulator keeps empty buckets up to its histogram's range; they
	// would stretch the axis to years.
	for len(b) > 0 && b[len(b)-1].Count == 0 {
		b = b[:len(b)-1]
	}
	if len(b) == 0 {
		return chart{}, false, nil
	}
	var n uint64
	for _, x := range b {
		n += x.Count
	}
	var qs, ms []float64
	var cum uint64
	for _, x := range b {
		cum += x.Count
		q := float64(cum) / float64(n)
		if cum == n {
			q = 1 - 1/float64(n) // the last value: put it at the max's rank
		}
		qs = append(qs, q)
		// A bucket's bound can lie past the largest value seen.
		ms = append(ms, x.UpToMs)
		if m := tot.Latency.MaxMs; m > 0 && m < x.UpToMs {
			ms[len(ms)-1] = m
		}
	}
	l := tot.Latency
	p, err := distributionChart("Latency distribution", []series{{name: "bucket bounds (doubling from 1 ms)", x: qs, y: ms}})
	if err != nil {
		return chart{}, false, err
	}
	// The exact percentiles the simulator computed, on top of the coarse
	// buckets.
	if err := addPoints(p, "exact percentiles", []float64{0.5, 0.9, 0.99, 0.999}, []float64{l.P50Ms, l.P90Ms, l.P99Ms, l.P999Ms}); err != nil {
		return chart{}, false, err
	}
	svg, err := svgOf(p)
	if err != nil {
		return chart{}, false, err
	}
	t := table{Head: []string{"percentile", "latency (ms)"}, Rows: [][]string{
		{"50%", num(l.P50Ms)}, {"90%", num(l.P90Ms)}, {"99%", num(l.P99Ms)}, {"99.9%", num(l.P999Ms)}, {"max", num(l.MaxMs)}, {"mean", num(l.MeanMs)},
	}}
	return chart{ID: id + "-latency-distribution", Title: "Latency distribution", SVG: svg, Table: t,
		Note: "Buckets double from 1 ms, so the curve is a staircase; the table has the exact percentiles."}, true, nil
}

func unitRange(p *plot.Plot) { p.Y.Min, p.Y.Max = 0, 1.05 }

func contains(xs []string, s string) bool {
	for _, x := range xs {
		if x == s {
			return true
		}
	}
	return false
}

// seriesTable lists series side by side by x.
func seriesTable(xhead, unit string, ss []series) table {
	t := table{Head: []string{xhead}}
	for _, s := range ss {
		t.Head = append(t.Head, s.name+" ("+unit+")")
	}
	if len(ss) == 0 {
		return t
	}
	for k := range ss[0].x {
		row := []string{num(ss[0].x[k])}
		for _, s := range ss {
			v := "-"
			if k < len(s.y) && !math.IsNaN(s.y[k]) {
				v = num(s.y[k])
			}
			row = append(row, v)
		}
		t.Rows = append(t.Rows, row)
	}
	return t
}

// loadSection plots a `qm load` result: latency percentiles and throughput
// per second, and each target's latency distribution from its histogram.
func loadSection(i int, in *LoadInput) (section, error) {
	res := in.Result
	s := section{ID: fmt.Sprintf("load-%d", i), Title: "Load run " + in.Name,
		Intro: fmt.Sprintf("qm load, %s mode %s, %d target(s), %.0f s measured; from %s. Latency is from each request's intended send time.",
			res.Config.Mode, res.Config.Arrival, len(res.Targets), res.DurationSeconds, in.File)}
	if res.Interrupted {
		s.Intro += " The run was interrupted: figures cover what ran."
	}
	var lat, thr []series
	for _, t := range res.Targets {
		var x, p50, p90, p99, tp []float64
		for _, pt := range t.Series {
			if pt.ActiveSeconds == 0 {
				continue // another target's turn
			}
			x = append(x, float64(pt.Second))
			p50 = append(p50, pt.P50Ms)
			p90 = append(p90, pt.P90Ms)
			p99 = append(p99, pt.P99Ms)
			tp = append(tp, pt.Throughput)
		}
		lat = append(lat, series{name: t.Name + " p50", x: x, y: p50}, series{name: t.Name + " p90", x: x, y: p90}, series{name: t.Name + " p99", x: x, y: p99})
		thr = append(thr, series{name: t.Name, x: x, y: tp})
	}
	for _, spec := range []struct {
		id, title, ylabel, unit string
		ss                      []series
	}{
		{"latency-over-time", "Latency percentiles over time", "latency (ms)", "ms", lat},
		{"throughput", "Throughput over time", "successful allocations/s", "allocations/s", thr},
	} {
		p, err := lineChart(spec.title, "time (s)", spec.ylabel, spec.ss)
		if err != nil {
			return s, err
		}
		svg, err := svgOf(p)
		if err != nil {
			return s, err
		}
		s.Charts = append(s.Charts, chart{ID: s.ID + "-" + spec.id, Title: spec.title, SVG: svg, Table: multiXTable("time (s)", spec.unit, spec.ss)})
	}
	var dist []series
	t := table{Head: []string{"target", "p50 (ms)", "p90 (ms)", "p99 (ms)", "p99.9 (ms)", "max (ms)", "throughput (allocations/s)", "success rate"}}
	for k, tr := range res.Targets {
		h := in.Histograms[k]
		if h.TotalCount() == 0 {
			continue
		}
		var qs, ms []float64
		for e := 0.0; e <= 5; e += 0.05 {
			q := 1 - math.Pow(10, -e)
			qs = append(qs, q)
			ms = append(ms, float64(h.ValueAtQuantile(100*q))/1000)
		}
		dist = append(dist, series{name: tr.Name, x: qs, y: ms})
		l := tr.Latency
		t.Rows = append(t.Rows, []string{tr.Name, num(l.P50Ms), num(l.P90Ms), num(l.P99Ms), num(l.P999Ms), num(l.MaxMs), num(tr.Throughput), num(tr.SuccessRate)})
	}
	if len(dist) > 0 {
		p, err := distributionChart("Latency distribution", dist)
		if err != nil {
			return s, err
		}
		svg, err := svgOf(p)
		if err != nil {
			return s, err
		}
		s.Charts = append(s.Charts, chart{ID: s.ID + "-latency-distribution", Title: "Latency distribution", SVG: svg, Table: t})
	}
	if len(res.Ratios) > 0 {
		rt := table{Head: []string{"target ÷ reference", "throughput (x)", "median of rounds (x)", "p50 (x)", "p99 (x)"}}
		for _, r := range res.Ratios {
			rt.Rows = append(rt.Rows, []string{r.Target + " ÷ " + r.Reference, num(r.Throughput), num(r.ThroughputMedian), num(r.P50), num(r.P99)})
		}
		s.Tables = append(s.Tables, namedTable{Title: "ratios to the reference target, same run", table: rt})
	}
	return s, nil
}

// multiXTable lists series whose x values may differ (targets taking
// turns), one row per x.
func multiXTable(xhead, unit string, ss []series) table {
	t := table{Head: []string{xhead}}
	xs := map[float64]bool{}
	for _, s := range ss {
		t.Head = append(t.Head, s.name+" ("+unit+")")
		for _, x := range s.x {
			xs[x] = true
		}
	}
	var keys []float64
	for x := range xs {
		keys = append(keys, x)
	}
	sort.Float64s(keys)
	for _, x := range keys {
		row := []string{num(x)}
		for _, s := range ss {
			v := "-"
			for k, sx := range s.x {
				if sx == x {
					v = num(s.y[k])
					break
				}
			}
			row = append(row, v)
		}
		t.Rows = append(t.Rows, row)
	}
	return t
}

// numeric tells the template which cells to right-align.
var numeric = regexp.MustCompile(`^[-+±]?[0-9.]+`)

var pageTemplate = template.Must(template.New("page").Funcs(template.FuncMap{
	"num": func(s string) bool { return numeric.MatchString(s) },
}).Parse(`<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{.Title}}</title>
<style>
body { font-family: system-ui, -apple-system, "Segoe UI", Arial, sans-serif; margin: 1.5rem auto; max-width: 1400px; padding: 0 1rem; color: #1d1d1f; }
h1 { font-size: 1.5rem; } h2 { font-size: 1.25rem; margin-top: 2.5rem; border-bottom: 1px solid #ddd; } h3 { font-size: 1rem; }
.verdict { display: inline-block; padding: .15rem .6rem; border-radius: .3rem; color: #fff; font-weight: 600; }
.pass { background: #2e7d32; } .fail { background: #c62828; }
figure.plot { display: flex; flex-wrap: wrap; gap: 1rem; align-items: flex-start; margin: 1rem 0 2rem; }
figure.plot .svg { flex: 0 1 620px; min-width: 320px; background: #fff; }
figure.plot .numbers { flex: 1 1 320px; max-height: 26rem; overflow: auto; }
figcaption { font-size: .85rem; color: #555; }
table { border-collapse: collapse; font-size: .8rem; }
th, td { border: 1px solid #ddd; padding: .2rem .45rem; text-align: left; max-width: 30rem; overflow-wrap: break-word; }
td.n { text-align: right; white-space: nowrap; }
th { background: #f4f4f6; position: sticky; top: 0; }
ul.fails li { color: #c62828; }
code { font-size: .85em; }
</style>
</head>
<body>
<h1>{{.Title}} <span class="verdict {{if .C.Passed}}pass{{else}}fail{{end}}">{{if .C.Passed}}PASS{{else}}FAIL{{end}}</span></h1>
<p>Inputs: {{range $i, $f := .Files}}{{if $i}}, {{end}}<code>{{$f}}</code>{{end}}.{{if .Base}} Baseline: <code>{{.Base}}</code>.{{end}}</p>
{{if .C.Regressions}}<h3>Regressions</h3><ul class="fails">{{range .C.Regressions}}<li>{{.}}</li>{{end}}</ul>{{end}}
{{if .C.Failures}}<h3>Failed expectations</h3><ul class="fails">{{range .C.Failures}}<li>{{.}}</li>{{end}}</ul>{{end}}
{{if .C.Warnings}}<h3>Warnings</h3><ul>{{range .C.Warnings}}<li>{{.}}</li>{{end}}</ul>{{end}}
{{range .Section}}
<section id="{{.ID}}">
<h2>{{.Title}}</h2>
{{if .Intro}}<p>{{.Intro}}</p>{{end}}
{{range .Charts}}
<figure class="plot" id="{{.ID}}">
<div class="svg">{{.SVG}}<figcaption>{{.Title}}{{if .Note}}. {{.Note}}{{end}}</figcaption></div>
<div class="numbers"><table>
<thead><tr>{{range .Table.Head}}<th>{{.}}</th>{{end}}</tr></thead>
<tbody>{{range .Table.Rows}}<tr>{{range .}}<td{{if num .}} class="n"{{end}}>{{.}}</td>{{end}}</tr>{{end}}</tbody>
</table></div>
</figure>
{{end}}
{{range .Tables}}
<h3>{{.Title}}</h3>
<div class="numbers"><table>
<thead><tr>{{range .Head}}<th>{{.}}</th>{{end}}</tr></thead>
<tbody>{{range .Rows}}<tr>{{range .}}<td{{if num .}} class="n"{{end}}>{{.}}</td>{{end}}</tr>{{end}}</tbody>
</table></div>
{{end}}
</section>
{{end}}
</body>
</html>
`))
