package reports

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/quartermaster-dev/quartermaster/loadgen"
	"github.com/quartermaster-dev/quartermaster/plan"
	"github.com/quartermaster-dev/quartermaster/soak"
)

// writeSoakResult checks a small hand-made run and writes its result
// where qm soak would: DIR/result.json.
func writeSoakResult(t *testing.T, dangling bool) string {
	t.Helper()
	t0 := time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC)
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	h := &soak.History{Run: soak.Run{Start: t0, End: at(20)}}
	for i := range 40 {
		sent := at(float64(i) / 2)
		s := soak.Session{Request: soak.Request{ID: uint64(i + 1), Caller: "c", Cluster: "a", Sent: sent,
			Answered: sent.Add(5 * time.Millisecond), Code: soak.CodeOK, Server: "gs-" + string(rune('a'+i%26)) + string(rune('a'+i/26))}}
		if i >= 10 && i < 16 {
			s.Code, s.Server = "Unavailable", ""
		} else {
			s.Release = &soak.Release{ID: s.ID, At: sent.Add(100 * time.Millisecond), Result: soak.CodeOK}
		}
		h.Sessions = append(h.Sessions, s)
	}
	h.Faults = []soak.Fault{{Kind: soak.FaultLinkCut, Target: "a->b", Start: at(5), End: at(8)}}
	snap := &soak.Snapshot{Clusters: []soak.ClusterRead{{Name: "a"}}}
	if dangling {
		snap.GameServers = append(snap.GameServers, soak.GameServer{Cluster: "a", Namespace: "default", Name: "gs-z", State: soak.StateAllocated})
	}
	dir := filepath.Join(t.TempDir(), "night-run")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := soak.Check(h, snap, soak.Config{}).WriteJSON(&b); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "result.json")
	if err := os.WriteFile(file, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return file
}

func TestSoakResultIsDrawnWithItsFaults(t *testing.T) {
	r, err := Build([]string{writeSoakResult(t, false)}, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Current.Soaks) != 1 {
		t.Fatalf("%d soak inputs, want 1", len(r.Current.Soaks))
	}
	for _, e := range r.Comparison.Expectations {
		if !e.Pass {
			t.Errorf("a clean soak failed %s", e.Metric)
		}
	}
	var page bytes.Buffer
	if err := r.WriteHTML(&page); err != nil {
		t.Fatal(err)
	}
	html := page.String()
	for _, want := range []string{"Soak run", "Answered OK per second", "Failed per second", "Latency per second",
		"the promises", "no-double-hold", "the cost of each kind of fault", "the fault timeline", "a-&gt;b", "link-cut"} {
		if !strings.Contains(html, want) {
			t.Errorf("the page has no %q", want)
		}
	}
	if got := strings.Count(html, "<svg"); got < 3 {
		t.Errorf("%d plots, want the three of the soak at least", got)
	}
}

func TestSoakViolationFailsTheReport(t *testing.T) {
	r, err := Build([]string{writeSoakResult(t, true)}, "")
	if err != nil {
		t.Fatal(err)
	}
	failed := 0
	for _, e := range r.Comparison.Expectations {
		if !e.Pass {
			failed++
			if e.Source != "soak/night-run" || e.Metric != "no-dangling violations" || e.Value != 1 {
				t.Errorf("failed expectation %+v, want soak/night-run's no-dangling violations = 1", e)
			}
		}
	}
	if failed != 1 {
		t.Fatalf("%d failed expectations, want 1", failed)
	}
}

func TestUnknownKindNamesEveryKnownKind(t *testing.T) {
	file := filepath.Join(t.TempDir(), "other.json")
	if err := os.WriteFile(file, []byte(`{"apiVersion": "v1", "kind": "Pod"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Load(file)
	if err == nil {
		t.Fatal("a Pod was read as a result")
	}
	for _, kind := range []string{`kind "Pod"`, simReportKind, loadgen.Kind, plan.Kind, soak.ResultKind, "go test -bench"} {
		if !strings.Contains(err.Error(), kind) {
			t.Errorf("the error %q does not name %s", err, kind)
		}
	}
}
