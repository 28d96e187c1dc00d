package reports

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// editJSON reads a test data file, lets edit change it, and writes the
// result into dir under the same name.
func editJSON(t *testing.T, dir, src string, edit func(map[string]any)) string {
	t.Helper()
	b, err := os.ReadFile(src)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	edit(doc)
	out, err := json.Marshal(doc)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, filepath.Base(src))
	if err := os.WriteFile(p, out, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// A simulated and a live run of one scenario give, per expectation metric,
// the predicted and the measured value side by side, in the comparison, the
// summary and the page; a metric the live run did not check shows as
// unmeasured, and a bound the live run broke fails the report.
func TestPredictedAndMeasuredSideBySide(t *testing.T) {
	dir := t.TempDir()
	sim := editJSON(t, dir, "testdata/sim-small.json", func(d map[string]any) {
		d["expectations"] = append(d["expectations"].([]any),
			map[string]any{"metric": "totals.latency.p99Ms", "max": 2000.0, "value": 1500.0, "pass": true})
	})
	live := editJSON(t, dir, "testdata/live-small.json", func(d map[string]any) {
		e := d["expectations"].([]any)[0].(map[string]any)
		e["value"], e["pass"] = 0.85, false
	})
	r, err := Build([]string{sim, live}, "")
	if err != nil {
		t.Fatal(err)
	}
	c := r.Comparison
	want := []Pair{
		{Scenario: "small", Metric: "totals.successRate", Bounds: ">= 0.9", Predicted: 0.9954337899543378, PredictedPass: true,
			Measured: 0.85, MeasuredPass: false, HasMeasured: true},
		{Scenario: "small", Metric: "totals.latency.p99Ms", Bounds: "<= 2000", Predicted: 1500, PredictedPass: true},
	}
	if len(c.Pairs) != len(want) {
		t.Fatalf("pairs %+v, want %+v", c.Pairs, want)
	}
	for i := range want {
		if c.Pairs[i] != want[i] {
			t.Errorf("pair %d: %+v, want %+v", i, c.Pairs[i], want[i])
		}
	}
	if c.Passed || len(c.Failures) != 1 || !strings.HasPrefix(c.Failures[0], "live/small totals.successRate = 0.85") {
		t.Errorf("the live run's broken bound: passed %v, failures %q", c.Passed, c.Failures)
	}

	var md bytes.Buffer
	if err := c.WriteMarkdown(&md); err != nil {
		t.Fatal(err)
	}
	for _, row := range []string{
		"| small | `totals.successRate` | >= 0.9 | 0.9954 | 0.85 (fails) |",
		"| small | `totals.latency.p99Ms` | <= 2000 | 1500 | - |",
	} {
		if !strings.Contains(md.String(), row) {
			t.Errorf("summary lacks %q:\n%s", row, md.String())
		}
	}
	var page bytes.Buffer
	if err := r.WriteHTML(&page); err != nil {
		t.Fatal(err)
	}
	html := page.String()
	i := strings.Index(html, `<section id="pairs">`)
	if i < 0 {
		t.Fatal("the page has no predicted-and-measured section")
	}
	sec := html[i:]
	sec = sec[:strings.Index(sec, "</section>")]
	for _, row := range []string{
		`<tr><td>small</td><td>totals.successRate</td><td>&gt;= 0.9</td><td class="n">0.9954</td><td class="n">0.85 (fails)</td></tr>`,
		`<tr><td>small</td><td>totals.latency.p99Ms</td><td>&lt;= 2000</td><td class="n">1500</td><td>-</td></tr>`,
	} {
		if !strings.Contains(sec, row) {
			t.Errorf("the section lacks %s:\n%s", row, sec)
		}
	}
}

// Pairs need both sides of the same scenario: a simulation alone, or a live
// run of another scenario, gives none.
func TestNoPairsWithoutBothSides(t *testing.T) {
	dir := t.TempDir()
	other := editJSON(t, dir, "testdata/live-small.json", func(d map[string]any) { d["scenario"] = "other" })
	for _, files := range [][]string{
		{"testdata/sim-small.json"},
		{"testdata/live-small.json"},
		{"testdata/sim-small.json", other},
	} {
		r, err := Build(files, "")
		if err != nil {
			t.Fatal(err)
		}
		if len(r.Comparison.Pairs) != 0 {
			t.Errorf("%v: pairs %+v, want none", files, r.Comparison.Pairs)
		}
	}
}
