package reports

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/quartermaster-dev/quartermaster/plan"
)

func writePlan(t *testing.T, r *plan.Result) string {
	t.Helper()
	b, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "plan.json")
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func samplePlan() *plan.Result {
	return &plan.Result{
		APIVersion: plan.APIVersion, Kind: plan.Kind, Scenario: "erlang", Seed: 7,
		Vary: "fleets.game.replicas", From: 1, To: 64, Target: []string{"successRate>=0.99", "p99<200ms"},
		Found: true, Answer: 18,
		Points: []plan.Point{
			{Value: 17, Metrics: map[string]float64{"successRate": 0.9873, "p99": 3}, Failed: []string{"successRate>=0.99"}},
			{Value: 18, Pass: true, Metrics: map[string]float64{"successRate": 0.9931, "p99": 3}},
			{Value: 64, Pass: true, Metrics: map[string]float64{"successRate": 1, "p99": 3}},
		},
	}
}

// TestPlanReport: qm report reads a plan, gives its answer as a figure,
// and draws one curve per target clause with the points beside it.
func TestPlanReport(t *testing.T) {
	r, err := Build([]string{writePlan(t, samplePlan())}, "")
	if err != nil {
		t.Fatal(err)
	}
	f := r.Current.Figure("plan/erlang fleets.game.replicas answer")
	if f == nil || len(f.Samples) != 1 || f.Samples[0].Value != 18 || !f.Deterministic {
		t.Fatalf("answer figure: %+v", f)
	}
	var page bytes.Buffer
	if err := r.WriteHTML(&page); err != nil {
		t.Fatal(err)
	}
	html := page.String()
	for _, want := range []string{
		"Capacity plan: fleets.game.replicas in erlang",
		"the smallest value meeting the target is 18",
		`id="plan-0-0"`, `id="plan-0-1"`, "target successRate&gt;=0.99", "0.9873",
	} {
		if !strings.Contains(html, want) {
			t.Errorf("the page lacks %q", want)
		}
	}
	if n := strings.Count(html, "<svg"); n < 2 {
		t.Errorf("%d plots on the page, want one per clause", n)
	}

	// What a page could not draw honestly is refused, naming the field.
	for _, tc := range []struct {
		edit func(*plan.Result)
		want string
	}{
		{func(r *plan.Result) { r.Vary = "" }, "vary: missing"},
		{func(r *plan.Result) { r.Points = nil }, "points: none"},
		{func(r *plan.Result) { r.Points[2].Value = 17 }, "points[2]: value 17 after 18"},
		{func(r *plan.Result) { r.APIVersion = "v0" }, `apiVersion: got "v0"`},
	} {
		p := samplePlan()
		tc.edit(p)
		if _, err := Build([]string{writePlan(t, p)}, ""); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("error %v, want %q", err, tc.want)
		}
	}
	bad := filepath.Join(t.TempDir(), "bad.json")
	os.WriteFile(bad, []byte(`{"kind":"CapacityPlan","apiVersion":"quartermaster.dev/v1alpha1","colour":1}`), 0o644)
	if _, err := Build([]string{bad}, ""); err == nil || !strings.Contains(err.Error(), `unknown field "colour"`) {
		t.Errorf("unknown field: %v", err)
	}
}
