package reports

import (
	"fmt"
	"image/color"
	"math"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"

	"github.com/quartermaster-dev/quartermaster/soak"
)

// SoakInput is one soak result: qm soak's result.json, or what qm soak
// check --json wrote.
type SoakInput struct {
	File   string
	Result *soak.Result
}

func isSoakKind(kind string) bool { return kind == soak.ResultKind }

// KindSoak figures come from a soak's result (qm soak): what the run
// sent and how the faults cost, one sample per run. No gate rule names
// them; a soak is judged by its checker, its promises' expectations.
const KindSoak Kind = "soak"

// readSoak decodes a soak result and adds its run's figures (soakFigures),
// so that the summary and comparison.json carry them beside the
// promises' expectations.
func readSoak(set *Set, file string, data []byte) error {
	res, err := soak.ReadResult(data)
	if err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	in := &SoakInput{File: file, Result: res}
	set.Soaks = append(set.Soaks, in)
	p := "soak/" + soakName(file) + " "
	for _, f := range soakFigures(res) {
		set.add(p+f.name, KindSoak, f.unit, file, Sample{Value: f.value, Round: file})
		set.Figure(p + f.name).Better = f.better
	}
	return nil
}

type soakFigure struct {
	name, unit, better string
	value              float64
}

// soakFigures are a run's figures, named after the result's fields: the
// requests and their answers, the tries that keys sent again and the
// requests they resolved, and the error rate and p99 latency outside the
// faults.
func soakFigures(r *soak.Result) []soakFigure {
	return []soakFigure{
		{"requests", "requests", "higher", float64(r.Requests)},
		{"ok", "requests", "higher", float64(r.OK)},
		{"retries", "tries", "lower", float64(r.Retries)},
		{"resolves", "requests", "lower", float64(r.Resolves)},
		{"resolvedHeld", "servers", "lower", float64(r.ResolvedHeld)},
		{"faults", "faults", "higher", float64(len(r.FaultSpans))},
		{"errorRateOutside", "fraction", "lower", r.ErrorRateOutside},
		{"p99Outside", "ms", "lower", float64(r.P99Outside) / float64(time.Millisecond)},
	}
}

// expectations are the soak's promises: each held when it has no
// violation, so a report of a soak that broke one fails as qm soak did.
// The no-dangling one says how its count was made: strictly, or beyond
// what the run explained.
func (in *SoakInput) expectations() []Expectation {
	var out []Expectation
	r := in.Result
	for _, p := range r.Promises {
		want := "= 0"
		switch {
		case p.Name == soak.PromiseNoDangling && r.Strict:
			want = "= 0, counted strictly"
		case p.Explained > 0:
			want = fmt.Sprintf("= 0 beyond %d explained", p.Explained)
		}
		out = append(out, Expectation{Source: "soak/" + soakName(in.File), Metric: p.Name + " violations",
			Value: float64(p.Violations), Want: want, Pass: p.Violations == 0})
	}
	return out
}

// soakName names a soak after its file, or after its directory when the
// file is qm soak's result.json.
func soakName(file string) string {
	base := strings.TrimSuffix(filepath.Base(file), filepath.Ext(file))
	if base == "result" {
		if dir := filepath.Base(filepath.Dir(file)); dir != "." && dir != "/" {
			return dir
		}
	}
	return base
}

// soakSection draws a soak's faults as bands over its throughput, errors
// and latency, second by second, and gives the checker's tables.
func soakSection(i int, in *SoakInput) (section, error) {
	r := in.Result
	s := section{ID: fmt.Sprintf("soak-%d", i), Title: "Soak run " + in.File,
		Intro: fmt.Sprintf("qm soak, %s from %s: %d requests, %d answered OK (%d released, %d held at the end), %d faults; violations: %d%s. Shaded bands are the faults, one colour per kind; the numbers per second are by the second each request was sent.",
			r.End.Sub(r.Start).Round(time.Second), r.Start.UTC().Format(time.RFC3339), r.Requests, r.OK, r.Released, r.Live, len(r.FaultSpans), r.Violations(), soakIntroNotes(r))}
	var x, ok, failed, p50, p99 []float64
	for _, sec := range r.Timeline {
		x = append(x, float64(sec.At))
		ok = append(ok, float64(sec.OK))
		failed = append(failed, float64(sec.Failed))
		p50 = append(p50, soakMs(sec.P50, sec.Sent))
		p99 = append(p99, soakMs(sec.P99, sec.Sent))
	}
	for _, spec := range []struct {
		id, title, ylabel, unit string
		ss                      []series
	}{
		{"throughput", "Answered OK per second", "allocations/s", "allocations/s", []series{{name: "OK", x: x, y: ok}}},
		{"errors", "Failed per second", "requests/s", "requests/s", []series{{name: "failed", x: x, y: failed}}},
		{"latency", "Latency per second (answer less send)", "latency (ms)", "ms", []series{{name: "p50", x: x, y: p50}, {name: "p99", x: x, y: p99}}},
	} {
		// An empty chart first: the bands go under the lines.
		p, err := lineChart(spec.title, "time since the start (s)", spec.ylabel, nil)
		if err != nil {
			return s, err
		}
		if err := faultBands(p, r, spec.ss); err != nil {
			return s, err
		}
		if err := addLines(p, spec.ss); err != nil {
			return s, fmt.Errorf("%s: %w", spec.title, err)
		}
		svg, err := svgOf(p)
		if err != nil {
			return s, err
		}
		s.Charts = append(s.Charts, chart{ID: s.ID + "-" + spec.id, Title: spec.title, SVG: svg, Table: seriesTable("time (s)", spec.unit, spec.ss)})
	}

	s.Tables = append(s.Tables, namedTable{Title: "the run", table: soakRunTable(r)})

	pt := table{Head: []string{"promise", "violations", "explained", "meaning", "examples"}}
	for _, p := range r.Promises {
		ex := ""
		for k, e := range p.Examples {
			if k > 0 {
				ex += " · "
			}
			ex += e
		}
		pt.Rows = append(pt.Rows, []string{p.Name, strconv.Itoa(p.Violations), strconv.Itoa(p.Explained), p.Description, ex})
	}
	s.Tables = append(s.Tables, namedTable{Title: "the promises", table: pt})

	ft := table{Head: []string{"fault", "count", "failed during", "failed after", "max recovery (s)", "unrecovered", "p99 during (ms)"}}
	ft.Rows = append(ft.Rows, []string{"(outside faults)", "-", soakPct(r.ErrorRateOutside), "-", "-", "-", num(float64(r.P99Outside) / float64(time.Millisecond))})
	for _, f := range r.Faults {
		ft.Rows = append(ft.Rows, []string{f.Kind, strconv.Itoa(f.Count),
			shareOf(f.DuringFailed, f.During), shareOf(f.AfterFailed, f.After),
			num(f.MaxRecovery.Seconds()), strconv.Itoa(f.Unrecovered), num(float64(f.P99During) / float64(time.Millisecond))})
	}
	s.Tables = append(s.Tables, namedTable{Title: "the cost of each kind of fault", table: ft})

	tt := table{Head: []string{"fault", "target", "start (s)", "end (s)"}}
	for _, f := range r.FaultSpans {
		tt.Rows = append(tt.Rows, []string{f.Kind, f.Target, num(f.Start.Sub(r.Start).Seconds()), num(f.End.Sub(r.Start).Seconds())})
	}
	s.Tables = append(s.Tables, namedTable{Title: "the fault timeline", table: tt})
	return s, nil
}

// soakIntroNotes adds to a soak's introduction what qualifies its
// violation count: dangling servers counted strictly, clusters unread.
func soakIntroNotes(r *soak.Result) string {
	out := ""
	if r.Strict {
		out += ", dangling servers counted strictly"
	}
	if len(r.Unread) > 0 {
		out += "; not checked against objects on " + strings.Join(r.Unread, ", ") + " (could not be read)"
	}
	return out
}

// soakRunTable is every count of the result that is not a promise's or a
// fault kind's: what was sent and answered, what the allocation keys did,
// how the dangling servers were counted and which clusters the snapshot
// could not read.
func soakRunTable(r *soak.Result) table {
	counting := "beyond what the run explains (failed releases, answers lost to faults)"
	if r.Strict {
		counting = "strictly: none is explained (the requests carried keys, or --strict)"
	}
	unread := "none"
	if len(r.Unread) > 0 {
		unread = strings.Join(r.Unread, ", ") + " (what was answered there is not checked against objects)"
	}
	t := table{Head: []string{"", "value"}}
	for _, row := range [][2]string{
		{"duration", r.End.Sub(r.Start).Round(time.Second).String()},
		{"requests (a keyed request's tries are one)", strconv.Itoa(r.Requests)},
		{"answered OK", strconv.Itoa(r.OK)},
		{"released", strconv.Itoa(r.Released)},
		{"held at the end (checked against the snapshot)", strconv.Itoa(r.Live)},
		{"tries sent again with their key after a lost answer", strconv.Itoa(r.Retries)},
		{"requests given up and resolved by their key", strconv.Itoa(r.Resolves)},
		{"of those, holding a server (given back)", strconv.Itoa(r.ResolvedHeld)},
		{"dangling servers counted", counting},
		{"clusters the snapshot could not read", unread},
		{"faults", strconv.Itoa(len(r.FaultSpans))},
		{"error rate outside faults", soakPct(r.ErrorRateOutside)},
		{"p99 outside faults (ms)", num(float64(r.P99Outside) / float64(time.Millisecond))},
		{"violations", strconv.Itoa(r.Violations())},
	} {
		t.Rows = append(t.Rows, row[:])
	}
	return t
}

// soakMs is a latency in milliseconds, NaN for a second without requests
// (lineChart leaves a gap there rather than draw a zero latency).
func soakMs(d time.Duration, n int) float64 {
	if n == 0 {
		return math.NaN()
	}
	return float64(d) / float64(time.Millisecond)
}

func soakPct(f float64) string { return strconv.FormatFloat(100*f, 'f', 1, 64) + "%" }

func shareOf(n, of int) string {
	if of == 0 {
		return "-"
	}
	return fmt.Sprintf("%s of %d", soakPct(float64(n)/float64(of)), of)
}

// faultBands shades each fault's span, the full height of the plot, in
// its kind's colour, under the lines already added; each kind is named
// once in the legend.
func faultBands(p *plot.Plot, r *soak.Result, ss []series) error {
	top := 1.0
	for _, s := range ss {
		for _, y := range s.y {
			if !math.IsNaN(y) && y > top {
				top = y
			}
		}
	}
	top *= 1.05
	p.Y.Min, p.Y.Max = 0, top
	// Room on the right for the legend, clear of the lines.
	p.X.Min, p.X.Max = 0, 1.3*r.End.Sub(r.Start).Seconds()
	colours := map[string]color.Color{}
	for i, k := range soak.FaultKinds {
		colours[k] = plotutil.Color(i + 1)
	}
	var bands []plot.Plotter
	named := map[string]bool{}
	for _, f := range r.FaultSpans {
		from, to := f.Start.Sub(r.Start).Seconds(), f.End.Sub(r.Start).Seconds()
		poly, err := plotter.NewPolygon(plotter.XYs{{X: from, Y: 0}, {X: to, Y: 0}, {X: to, Y: top}, {X: from, Y: top}})
		if err != nil {
			return fmt.Errorf("fault %s at %gs: %w", f.Kind, from, err)
		}
		c, ok := colours[f.Kind]
		if !ok {
			c = color.Gray{Y: 128}
		}
		rr, g, b, _ := c.RGBA()
		poly.Color = color.NRGBA{R: uint8(rr >> 8), G: uint8(g >> 8), B: uint8(b >> 8), A: 48}
		poly.Width = 0
		bands = append(bands, poly)
		if !named[f.Kind] {
			named[f.Kind] = true
			p.Legend.Add(f.Kind, poly)
		}
	}
	p.Add(bands...)
	return nil
}
