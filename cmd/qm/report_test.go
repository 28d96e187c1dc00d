package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/quartermaster-dev/quartermaster/reports"
)

// The report command's inputs are the reports package's test data: a
// baseline with thresholds and runs with and without a regression.
const reportTestdata = "../../reports/testdata"

func runReportCmd(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	err := commands["report"].run(context.Background(), args, &out, &errOut)
	return out.String(), errOut.String(), err
}

func TestReportCommandPasses(t *testing.T) {
	out := t.TempDir()
	// Files before and after the flags, as with qm sim.
	stdout, stderr, err := runReportCmd(t, filepath.Join(reportTestdata, "bench-same.txt"),
		"--baseline", filepath.Join(reportTestdata, "baseline"), "--out", out, filepath.Join(reportTestdata, "sim-small.json"))
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr)
	}
	if !strings.Contains(stdout, "## Performance report: PASS") {
		t.Errorf("summary not printed:\n%s", stdout)
	}
	for _, f := range []string{reports.HTMLFile, reports.MarkdownFile, reports.JSONFile} {
		if _, err := os.Stat(filepath.Join(out, f)); err != nil {
			t.Error(err)
		}
	}
	var c reports.Comparison
	b, _ := os.ReadFile(filepath.Join(out, reports.JSONFile))
	if err := json.Unmarshal(b, &c); err != nil || !c.Passed || len(c.Rows) == 0 {
		t.Fatalf("comparison.json: %v %+v", err, c)
	}
	md, _ := os.ReadFile(filepath.Join(out, reports.MarkdownFile))
	if string(md) != stdout {
		t.Errorf("%s is not what was printed", reports.MarkdownFile)
	}
}

func TestReportCommandRegression(t *testing.T) {
	_, _, err := runReportCmd(t, "--quiet", "--out", t.TempDir(), "--baseline", filepath.Join(reportTestdata, "baseline"),
		filepath.Join(reportTestdata, "bench-slow.txt"))
	if err == nil {
		t.Fatal("a slowed allocator passed the gate")
	}
	if _, isExit := err.(exitError); isExit {
		t.Fatalf("want an error naming the figure (exit 1), got %v", err)
	}
	if !strings.Contains(err.Error(), "regression: core.Allocate/packed-1k sec/op ÷ core.NaiveAllocate/packed-1k sec/op: +") {
		t.Errorf("error does not name the figure: %v", err)
	}
}

func TestReportCommandBadInput(t *testing.T) {
	dir := t.TempDir()
	write := func(name, s string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	bad := []struct {
		name, content, want string
	}{
		{"broken.json", "{\"apiVersion\": \"quartermaster.dev/v1alpha1\",\n \"kind\": \"SimulationReport\",\n \"results\": [}", "broken.json: line 3, column"},
		{"other.json", `{"apiVersion": "v1", "kind": "Pod"}`, `other.json: kind "Pod" is not a result qm report reads`},
		{"notes.txt", "some notes\nnothing here\n", "notes.txt: neither benchmark output"},
		{"badbench.txt", "BenchmarkX-2  100  12 ns/op  7\n", "badbench.txt:1:"},
		{"empty.txt", "\n", "empty.txt: empty file"},
		{"nosim.json", `{"apiVersion": "quartermaster.dev/v1alpha1", "kind": "SimulationReport", "scenario": "x"}`, "nosim.json: SimulationReport: results: missing"},
		{"load.json", `{"apiVersion": "quartermaster.dev/v1alpha1", "kind": "LoadResult", "targets": [{"name": "a", "histogram": "!!"}]}`, "load.json: targets[0] (a): histogram is not base64"},
	}
	for _, b := range bad {
		t.Run(b.name, func(t *testing.T) {
			p := write(b.name, b.content)
			_, _, err := runReportCmd(t, "--out", filepath.Join(dir, "out"), p)
			if err == nil || !strings.Contains(err.Error(), b.want) {
				t.Fatalf("error %v, want it to contain %q", err, b.want)
			}
		})
	}
	_, stderr, err := runReportCmd(t, "--out", filepath.Join(dir, "out"))
	if e, ok := err.(exitError); !ok || e.code != 2 || !strings.Contains(stderr, "no result files given") {
		t.Fatalf("no files: %v %q", err, stderr)
	}
	_, _, err = runReportCmd(t, "--baseline", filepath.Join(dir, "nope"), filepath.Join(reportTestdata, "bench-same.txt"))
	if err == nil || !strings.Contains(err.Error(), "nope") {
		t.Fatalf("missing baseline: %v", err)
	}
	bth := filepath.Join(dir, "bl")
	os.MkdirAll(bth, 0o755)
	write("bl/thresholds.yaml", "apiVersion: quartermaster.dev/v1alpha1\nkind: ReportThresholds\ngates:\n- figure: 'x'\n  maxRegresion: 0.5\n")
	write("bl/b.txt", "BenchmarkX-2  100  12 ns/op\n")
	_, _, err = runReportCmd(t, "--out", filepath.Join(dir, "out"), "--baseline", bth, filepath.Join(reportTestdata, "bench-same.txt"))
	if err == nil || !strings.Contains(err.Error(), "thresholds.yaml") || !strings.Contains(err.Error(), "maxRegresion") {
		t.Fatalf("misspelt threshold field: %v", err)
	}
}
