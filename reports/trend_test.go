package reports

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
)

// gatedSide writes what mk/report.sh writes for one side of a run of every
// in-process family and the two from-outside ones: each gate benchmark's
// output (a round of processes per round, the suite's configuration
// lines) and each round's load results. Every CPU figure is scaled by
// cpu; allocations and bytes stay put, as they do between builds.
func gatedSide(t *testing.T, dir string, cpu float64) []string {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	const rounds = 6
	noise := func(r, k int) float64 { return 1 + 0.01*float64((r*7+k*3)%5) }
	type bench struct {
		file, pkg, line string // line: name and metrics, %[1]g the CPU in ns
		cpuNs           float64
	}
	benches := []bench{
		{"bench-core.txt", "core", "BenchmarkGateAllocate/packed-1k\t1000\t%[2]g ns/op\t%[1]g cpu-ns/op\t0 B/op\t0 allocs/op", 1900},
		{"bench-core.txt", "core", "BenchmarkGateAllocate/distributed-1k\t1000\t%[2]g ns/op\t%[1]g cpu-ns/op\t0 B/op\t0 allocs/op", 3000},
		{"bench-core.txt", "core", "BenchmarkGateAllocate/packed-10k\t1000\t%[2]g ns/op\t%[1]g cpu-ns/op\t16 B/op\t1 allocs/op", 2500},
		{"bench-core.txt", "core", "BenchmarkGateAllocate/distributed-10k\t1000\t%[2]g ns/op\t%[1]g cpu-ns/op\t16 B/op\t1 allocs/op", 9000},
		{"bench-sim.txt", "sim", "BenchmarkGateSim\t1\t%[2]g ns/op\t%[1]g cpu-ns/event\t412345 events/op\t98765432 B/op\t123456 allocs/op", 700},
		{"bench-service.txt", "allocator", "BenchmarkGateService\t2000\t%[2]g ns/op\t%[1]g cpu-mean-ns/op\t%[1]g cpu-ns/op\t3994 server-B/op\t57.76 server-allocs/op", 38000},
		{"bench-forward.txt", "allocator/forward", "BenchmarkGateForward\t1500\t%[2]g ns/op\t%[1]g cpu-mean-ns/op\t%[1]g cpu-ns/op\t12657 server-B/op\t177.0 server-allocs/op", 77000},
		{"bench-kube.txt", "allocator/kube", "BenchmarkGateKube\t200\t%[2]g ns/op\t%[1]g cpu-mean-ns/op\t%[1]g cpu-ns/op\t44108 server-B/op\t570.8 server-allocs/op", 545000},
	}
	text := map[string]*strings.Builder{}
	var files []string
	for r := range rounds {
		for k, b := range benches {
			w, ok := text[b.file]
			if !ok {
				w = &strings.Builder{}
				text[b.file] = w
				files = append(files, b.file)
			}
			ns := b.cpuNs * cpu * noise(r, k)
			fmt.Fprintf(w, "round: %d\ngomaxprocs: 1\ngoos: linux\ngoarch: amd64\npkg: github.com/quartermaster-dev/quartermaster/%s\n", r, b.pkg)
			fmt.Fprintf(w, b.line+"\nPASS\n", ns, 2*ns)
		}
	}
	var out []string
	for _, f := range files {
		p := filepath.Join(dir, f)
		if err := os.WriteFile(p, []byte(text[f].String()), 0o644); err != nil {
			t.Fatal(err)
		}
		out = append(out, p)
	}
	for r := range rounds {
		for _, l := range []struct {
			name, target string
			cpuUs        float64
		}{{"load-echo", "alloc", 40}, {"forward", "forwarded", 90}} {
			p := filepath.Join(dir, fmt.Sprintf("%s.r%d.json", l.name, r))
			writeLoadWithServerCPU(t, p, l.target, l.cpuUs*cpu*noise(r, 9))
			out = append(out, p)
		}
	}
	return out
}

// writeLoadWithServerCPU writes testdata/load-small.json with its measured
// target renamed and the server's CPU per request set, as qm load
// --server-pid writes it.
func writeLoadWithServerCPU(t *testing.T, path, target string, cpuUs float64) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join("testdata", "load-small.json"))
	if err != nil {
		t.Fatal(err)
	}
	data = []byte(strings.ReplaceAll(string(data), `"quartermaster"`, fmt.Sprintf("%q", target)))
	var res map[string]any
	if err := json.Unmarshal(data, &res); err != nil {
		t.Fatal(err)
	}
	res["targets"].([]any)[0].(map[string]any)["serverCPUPerRequestMicros"] = cpuUs
	b, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// everyGatedFigure is every figure thresholds.yaml gates that has a
// history (the scenarios' outputs, gated exactly, have none), as the
// suite names them.
var everyGatedFigure = func() []string {
	var names []string
	for _, c := range []string{"packed-1k", "distributed-1k", "packed-10k", "distributed-10k"} {
		for _, u := range []string{"cpu-sec/op", "allocs/op", "B/op"} {
			names = append(names, "core.GateAllocate/"+c+" "+u)
		}
	}
	names = append(names, "sim.GateSim cpu-sec/event", "sim.GateSim events/op", "sim.GateSim allocs/op", "sim.GateSim B/op")
	for _, b := range []string{"allocator.GateService", "allocator/forward.GateForward", "allocator/kube.GateKube"} {
		names = append(names, b+" cpu-sec/op", b+" server-allocs/op", b+" server-B/op")
	}
	names = append(names, "load/load-echo alloc serverCPU", "load/forward forwarded serverCPU")
	slices.Sort(names)
	return names
}()

// svgPath is one path gonum's SVG canvas writes: its d attribute's
// commands.
var svgPath = regexp.MustCompile(`<path d="(M[^"]*)"`)

// TestTrendForEveryGatedFigure runs the trend end to end with the gate as
// committed (baseline/thresholds.yaml): two baselines recorded as `make
// perf-baseline` records them, then a run with a baseline build, must draw
// one line per gated figure through all four points, oldest first.
func TestTrendForEveryGatedFigure(t *testing.T) {
	th, ok, err := LoadThresholds(filepath.Join("baseline", ThresholdsFile))
	if err != nil || !ok {
		t.Fatalf("baseline/%s: %v (found %v)", ThresholdsFile, err, ok)
	}
	tmp := t.TempDir()
	historyPath := filepath.Join(tmp, HistoryFile)
	// make perf-baseline: one side alone, recorded under its commit.
	for i, rec := range []struct {
		commit string
		cpu    float64
	}{{"1111111111111111111111111111111111111111", 1.00}, {"2222222222222222222222222222222222222222", 1.03}} {
		r, err := Build(gatedSide(t, filepath.Join(tmp, fmt.Sprint("recorded-", i)), rec.cpu), "")
		if err != nil {
			t.Fatal(err)
		}
		r.UseThresholds(th)
		h, err := LoadHistory(historyPath)
		if err != nil {
			t.Fatal(err)
		}
		if err := h.Record(rec.commit, fmt.Sprintf("2026-11-2%dT06:00:00Z", i+4), r.Comparison); err != nil {
			t.Fatal(err)
		}
		if err := h.Write(historyPath); err != nil {
			t.Fatal(err)
		}
	}
	h, err := LoadHistory(historyPath)
	if err != nil {
		t.Fatal(err)
	}
	for i, e := range h.Entries {
		var got []string
		for name := range e.Figures {
			got = append(got, name)
		}
		slices.Sort(got)
		if !slices.Equal(got, everyGatedFigure) {
			t.Errorf("recorded baseline %d holds %q,\nwant every gated figure %q", i, got, everyGatedFigure)
		}
	}

	// make perf-report: both sides, with the history.
	baseDir := filepath.Join(tmp, "base")
	gatedSide(t, baseDir, 1.05)
	th0, err := os.ReadFile(filepath.Join("baseline", ThresholdsFile))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(baseDir, ThresholdsFile), th0, 0o644); err != nil {
		t.Fatal(err)
	}
	r, err := Build(gatedSide(t, filepath.Join(tmp, "cur"), 1.06), baseDir)
	if err != nil {
		t.Fatal(err)
	}
	r.History = h
	s, err := r.trendSection()
	if err != nil {
		t.Fatal(err)
	}
	var drawn []string
	for _, c := range s.Charts {
		drawn = append(drawn, c.Title)
		// The median, the interval's low and high: each a line through
		// the two recorded baselines and this run's two sides.
		lines := 0
		for _, m := range svgPath.FindAllStringSubmatch(string(c.SVG), -1) {
			if strings.Count(m[1], "L") == 3 {
				lines++
			}
		}
		if lines < 3 {
			t.Errorf("%s: %d lines through four points in its plot, want the median and the interval's two ends", c.Title, lines)
		}
		var labels []string
		for _, row := range c.Table.Rows {
			labels = append(labels, row[1])
		}
		want := []string{"111111111111", "222222222222", "this run: baseline build", "this run: this build"}
		if !slices.Equal(labels, want) {
			t.Errorf("%s: the trend's points %q, want %q", c.Title, labels, want)
		}
	}
	slices.Sort(drawn)
	if !slices.Equal(drawn, everyGatedFigure) {
		t.Errorf("trends drawn for %q,\nwant one for every gated figure %q", drawn, everyGatedFigure)
	}
}
