package scenarios

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

func TestValidFixtures(t *testing.T) {
	files, _ := filepath.Glob("testdata/valid-*.yaml")
	if len(files) == 0 {
		t.Fatal("no valid fixtures")
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			s, err := Load(f)
			if err != nil {
				t.Fatal(err)
			}
			rep, err := s.Run(Options{})
			if err != nil {
				t.Fatal(err)
			}
			if rep.Results.Totals.Requests == 0 {
				t.Error("no requests")
			}
		})
	}
}

// Each invalid fixture starts with "# error: <text>"; loading it must fail
// with an error that contains the text.
func TestInvalidFixtures(t *testing.T) {
	files, _ := filepath.Glob("testdata/invalid-*.yaml")
	if len(files) == 0 {
		t.Fatal("no invalid fixtures")
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			data, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			first, _, _ := strings.Cut(string(data), "\n")
			want, ok := strings.CutPrefix(first, "# error: ")
			if !ok {
				t.Fatal(`fixture must start with "# error: <expected message>"`)
			}
			_, err = Parse(data)
			if err == nil {
				t.Fatalf("loaded without error; want %q", want)
			}
			if !strings.Contains(err.Error(), want) {
				t.Fatalf("error %q does not contain %q", err, want)
			}
		})
	}
}

// Every problem is reported, each with its path, not only the first.
func TestValidationListsEveryProblem(t *testing.T) {
	_, err := Parse([]byte(`apiVersion: quartermaster.dev/v1alpha1
kind: Scenario
metadata: {name: x}
spec:
  duration: 0s
  clusters:
  - {name: c, provider: p, nodes: {count: 0, slots: 1}, fleets: []}
  workload: []
`))
	if err == nil {
		t.Fatal("no error")
	}
	for _, want := range []string{"spec.duration: must be positive", "spec.clusters[0].nodes.count: must be positive", "spec.workload: at least one stream"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q lacks %q", err, want)
		}
	}
}

func TestDefaults(t *testing.T) {
	s, err := Load("testdata/valid-minimal.yaml")
	if err != nil {
		t.Fatal(err)
	}
	c := s.Spec.Clusters[0]
	if *s.Spec.Seed != 1 || *c.Allocator.Replicas != 1 || *c.Allocator.MaxRetries != 10 ||
		c.Fleets[0].Scheduling != "Packed" || c.Fleets[0].SessionEnd != "Shutdown" ||
		c.APIServer.WriteLatency.LogNormal == nil || s.Spec.Routing.Deadline.D().Seconds() != 30 {
		b, _ := json.MarshalIndent(s, "", "  ")
		t.Fatalf("defaults not applied:\n%s", b)
	}
}

// The golden test pins the whole results JSON of a small scenario: any
// change to the simulator's behaviour shows up as a diff to review. Rerun
// with -update only when the diff is understood.
func TestGolden(t *testing.T) {
	s, err := Load("testdata/valid-small.yaml")
	if err != nil {
		t.Fatal(err)
	}
	got := runJSON(t, s)
	again := runJSON(t, s)
	if !bytes.Equal(got, again) {
		t.Fatal("two runs of the same scenario gave different JSON")
	}
	golden := "testdata/golden-small.json"
	if *update {
		if err := os.WriteFile(golden, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		gl, wl := strings.Split(string(got), "\n"), strings.Split(string(want), "\n")
		for i := range min(len(gl), len(wl)) {
			if gl[i] != wl[i] {
				t.Fatalf("results differ from %s at line %d:\n got: %s\nwant: %s\n(run with -update if the change is intended)", golden, i+1, gl[i], wl[i])
			}
		}
		t.Fatalf("results differ from %s in length (run with -update if the change is intended)", golden)
	}
}

func runJSON(t *testing.T, s *Scenario) []byte {
	t.Helper()
	rep, err := s.Run(Options{})
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return append(b, '\n')
}

// The shipped scenarios run and meet their expectations.
func TestShippedScenarios(t *testing.T) {
	files, _ := filepath.Glob("*.yaml")
	if len(files) < 5 {
		t.Fatalf("want the 5 shipped scenarios, found %v", files)
	}
	for _, f := range files {
		t.Run(strings.TrimSuffix(f, ".yaml"), func(t *testing.T) {
			t.Parallel() // independent runs: use both cores
			s, err := Load(f)
			if err != nil {
				t.Fatal(err)
			}
			rep, err := s.Run(Options{})
			if err != nil {
				t.Fatal(err)
			}
			if len(rep.Expectations) == 0 {
				t.Error("a shipped scenario must state expectations")
			}
			for _, c := range rep.Expectations {
				if !c.Pass {
					t.Errorf("%s = %v, want min %v max %v (%s)", c.Metric, c.Value, ptr(c.Min), ptr(c.Max), c.Description)
				}
			}
		})
	}
}

func ptr(p *float64) any {
	if p == nil {
		return "-"
	}
	return *p
}

func FuzzParse(f *testing.F) {
	for _, pat := range []string{"testdata/*.yaml", "*.yaml"} {
		files, _ := filepath.Glob(pat)
		for _, file := range files {
			if b, err := os.ReadFile(file); err == nil {
				f.Add(b)
			}
		}
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := Parse(data)
		if err != nil {
			if s != nil {
				t.Fatal("a scenario returned with an error")
			}
			return
		}
		// A scenario that parses converts without error.
		if _, err := s.Config(); err != nil {
			t.Fatalf("parsed, but Config failed: %v", err)
		}
	})
}
