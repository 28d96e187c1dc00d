package reports

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
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

// fullSoakResult is a result with every field set to a value of its own,
// so that a test can find each one in what the report writes.
func fullSoakResult() *soak.Result {
	t0 := time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC)
	return &soak.Result{APIVersion: soak.ResultAPIVersion, Kind: soak.ResultKind,
		Start: t0, End: t0.Add(90 * time.Second),
		FaultSpans: []soak.Fault{{Kind: soak.FaultAnswerLost, Target: "callers->east", Start: t0.Add(10 * time.Second), End: t0.Add(15 * time.Second)}},
		Timeline:   []soak.Second{{At: 0, Sent: 3, OK: 2, Failed: 1, P50: 7 * time.Millisecond, P99: 9 * time.Millisecond}},
		Requests:   1001, OK: 1002, Retries: 1003, Resolves: 1004, ResolvedHeld: 1005, Released: 1006, Live: 1007,
		Strict: true,
		Promises: []soak.Promise{{Name: soak.PromiseNoDangling, Description: "no server left Allocated that no live session holds",
			Violations: 1008, Examples: []string{"east/default/gs-example is Allocated"}, Explained: 1009}},
		Unread:           []string{"west-unread"},
		ErrorRateOutside: 0.1234, P99Outside: 1010 * time.Millisecond,
		Faults: []soak.FaultStats{{Kind: soak.FaultAnswerLost, Count: 1011, During: 1012, DuringFailed: 506, After: 1013, AfterFailed: 0,
			MaxRecovery: 1014 * time.Second, Unrecovered: 1015, P99During: 1016 * time.Millisecond}},
	}
}

func writeResultFile(t *testing.T, r *soak.Result) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "keyed-run")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := r.WriteJSON(&b); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(dir, "result.json")
	if err := os.WriteFile(file, b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	return file
}

// Every field of a soak result is on the page: a field added to
// soak.Result that this test does not know fails it, until the page
// shows the field and the test looks for it.
func TestSoakPageShowsEveryResultField(t *testing.T) {
	rep, err := Build([]string{writeResultFile(t, fullSoakResult())}, "")
	if err != nil {
		t.Fatal(err)
	}
	var page bytes.Buffer
	if err := rep.WriteHTML(&page); err != nil {
		t.Fatal(err)
	}
	html := page.String()
	cell := func(label, value string) string { return "<td>" + label + "</td><td class=\"n\">" + value + "</td>" }
	shown := map[string][]string{
		"APIVersion":   nil, // read, not shown: it only marks the document
		"Kind":         nil,
		"Start":        {"from 2026-01-02T03:00:00Z"},
		"End":          {cell("duration", "1m30s")},
		"FaultSpans":   {"<td>answer-lost</td><td>callers-&gt;east</td><td class=\"n\">10</td><td class=\"n\">15</td>", cell("faults", "1")},
		"Timeline":     {"Answered OK per second", "Failed per second", "Latency per second"},
		"Requests":     {cell("requests (a keyed request&#39;s tries are one)", "1001")},
		"OK":           {cell("answered OK", "1002")},
		"Retries":      {cell("tries sent again with their key after a lost answer", "1003")},
		"Resolves":     {cell("requests given up and resolved by their key", "1004")},
		"ResolvedHeld": {cell("of those, holding a server (given back)", "1005")},
		"Released":     {cell("released", "1006")},
		"Live":         {cell("held at the end (checked against the snapshot)", "1007")},
		"Strict":       {"<td>dangling servers counted</td><td>strictly: none is explained", "violations: 1008, dangling servers counted strictly"},
		"Promises": {"<td>no-dangling</td><td class=\"n\">1008</td><td class=\"n\">1009</td><td>no server left Allocated that no live session holds</td><td>east/default/gs-example is Allocated</td>",
			cell("violations", "1008")},
		"Unread":           {"<td>clusters the snapshot could not read</td><td>west-unread (what was answered there", "not checked against objects on west-unread"},
		"ErrorRateOutside": {cell("error rate outside faults", "12.3%")},
		"P99Outside":       {cell("p99 outside faults (ms)", "1010")},
		"Faults":           {"<td>answer-lost</td><td class=\"n\">1011</td><td class=\"n\">50.0% of 1012</td><td class=\"n\">0.0% of 1013</td><td class=\"n\">1014</td><td class=\"n\">1015</td><td class=\"n\">1016</td>"},
	}
	fields := reflect.TypeOf(soak.Result{})
	for i := range fields.NumField() {
		name := fields.Field(i).Name
		wants, ok := shown[name]
		if !ok {
			t.Errorf("soak.Result.%s: a field this test does not know; show it on the page (reports/soak.go) and add it here", name)
			continue
		}
		for _, w := range wants {
			if !strings.Contains(html, w) {
				t.Errorf("soak.Result.%s: the page has no %q", name, w)
			}
		}
	}
}

// The summary qm report prints (and writes beside its page) carries the
// run's figures, and the no-dangling expectation says it was counted
// strictly.
func TestSoakSummaryCarriesTheRunsFigures(t *testing.T) {
	rep, err := Build([]string{writeResultFile(t, fullSoakResult())}, "")
	if err != nil {
		t.Fatal(err)
	}
	var md bytes.Buffer
	if err := rep.Comparison.WriteMarkdown(&md); err != nil {
		t.Fatal(err)
	}
	text := md.String()
	for _, want := range []string{
		"| `soak/keyed-run requests` | - | 1001 requests |",
		"| `soak/keyed-run ok` | - | 1002 requests |",
		"| `soak/keyed-run retries` | - | 1003 tries |",
		"| `soak/keyed-run resolves` | - | 1004 requests |",
		"| `soak/keyed-run resolvedHeld` | - | 1005 servers |",
		"| `soak/keyed-run faults` | - | 1 faults |",
		"| `soak/keyed-run errorRateOutside` | - | 0.1234 |",
		"| `soak/keyed-run p99Outside` | - | 1010 ms |",
		"| soak/keyed-run | `no-dangling violations` | 1008 | = 0, counted strictly | **FAIL** |",
		"soak/keyed-run no-dangling violations = 1008 (want = 0, counted strictly)",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("the summary has no %q:\n%s", want, text)
		}
	}
	for _, f := range rep.Comparison.Rows {
		if strings.HasPrefix(f.Figure, "soak/") && (f.Gated || f.Kind != KindSoak) {
			t.Errorf("%s: gated %v, kind %s; want an ungated soak figure", f.Figure, f.Gated, f.Kind)
		}
	}
}

// A run that explained some dangling servers (not strict) says how many
// beside its expectation.
func TestSoakExpectationNamesWhatWasExplained(t *testing.T) {
	r := fullSoakResult()
	r.Strict = false
	r.Promises[0].Violations = 0
	rep, err := Build([]string{writeResultFile(t, r)}, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Comparison.Expectations) != 1 {
		t.Fatalf("expectations %+v, want the one promise's", rep.Comparison.Expectations)
	}
	if e := rep.Comparison.Expectations[0]; !e.Pass || e.Want != "= 0 beyond 1009 explained" {
		t.Errorf("expectation %+v, want a pass with \"= 0 beyond 1009 explained\"", e)
	}
}
