package scenarios

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// windowScenario starts at midnight in Paris on the night the clocks go
// forward (2026-03-29, 02:00 CET becomes 03:00 CEST at virtual 2h).
const windowScenario = `apiVersion: quartermaster.dev/v1alpha1
kind: Scenario
metadata: {name: windows}
spec:
  duration: 6h
  start: 2026-03-29T00:00:00+01:00
  clusters:
  - {name: a, provider: p, nodes: {count: 1, slots: 100}, fleets: [{name: f, replicas: 50}]}
  - {name: b, provider: p, nodes: {count: 1, slots: 100}, fleets: [{name: f, replicas: 50}]}
  - {name: c, provider: p, nodes: {count: 1, slots: 100}, fleets: [{name: f, replicas: 50}]}
  policies:
  - {name: a-always, priority: 1, connectionInfo: {clusterName: a}}
  - name: b-night
    priority: 0
    connectionInfo: {clusterName: b}
    window: {during: "sun 02:30-04:00 Europe/Paris"}
  - name: c-hour
    priority: 0
    connectionInfo: {clusterName: c}
    window: {from: 4h, until: 2026-03-29T06:00:00+02:00}
  workload:
  - {name: w, multiCluster: {}, rate: {constant: 1}, sessionLength: {constant: 5s}}
  phases:
  - {name: before, start: 0s, end: 2h}
  - {name: skipped-start, start: 2h, end: 3h}
  - {name: between, start: 3h, end: 4h}
  - {name: hour, start: 4h, end: 5h}
  - {name: after, start: 5h, end: 6h}
`

// TestScenarioWindows: the simulator routes by the policies in force at
// its virtual clock. The 02:30 start that the clocks skip opens at 03:00
// local (virtual 2h), the window closes at 04:00 local (3h, an hour of
// real time), and a window given by a duration and an instant holds
// exactly its hour.
func TestScenarioWindows(t *testing.T) {
	s, err := Parse([]byte(windowScenario))
	if err != nil {
		t.Fatal(err)
	}
	rep, err := s.Run(Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]map[string]float64{
		"before":        {"a": 1},
		"skipped-start": {"b": 1},
		"between":       {"a": 1},
		"hour":          {"c": 1},
		"after":         {"a": 1},
	}
	for phase, shares := range want {
		ph := rep.Results.Phases[phase]
		if ph.Requests < 3000 || ph.Allocated != ph.Requests {
			t.Errorf("%s: %d requests, %d allocated", phase, ph.Requests, ph.Allocated)
		}
		for _, c := range []string{"a", "b", "c"} {
			if got := ph.Clusters[c].Share; got != shares[c] {
				t.Errorf("%s: cluster %s share %v, want %v", phase, c, got, shares[c])
			}
		}
	}

	// The window reads back as written.
	b, err := json.Marshal(s.Spec.Policies[2].Window)
	if err != nil {
		t.Fatal(err)
	}
	if got := string(b); got != `{"from":"4h0m0s","until":"2026-03-29T06:00:00+02:00"}` {
		t.Errorf("window as JSON: %s", got)
	}
	cfg, err := s.Config()
	if err != nil {
		t.Fatal(err)
	}
	if w := cfg.Policies[2].Window; !w.From.Equal(time.Date(2026, 3, 29, 3, 0, 0, 0, time.UTC)) {
		t.Errorf("from 4h after the start is %v", w.From)
	}
}

// A window that cannot be read names the line; one that can never open
// names the policy.
func TestScenarioWindowErrors(t *testing.T) {
	for _, tc := range []struct{ old, new, want string }{
		{`during: "sun 02:30-04:00 Europe/Paris"`, `during: "sun 02:30-04:00 Paris"`, `line 16: "sun 02:30-04:00 Paris": unknown time zone "Paris"`},
		{`during: "sun 02:30-04:00 Europe/Paris"`, `during: {days: sun}`, "line 16: a mapping is not a recurrence"},
		{`during: "sun 02:30-04:00 Europe/Paris"`, `during: ["sun 02:30-04:00 UTC", "someday 01:00-02:00 UTC"]`, `line 16: "someday 01:00-02:00 UTC": days: "someday" is not a day`},
		{`from: 4h`, `from: tomorrow`, `line 20: "tomorrow" is neither an RFC 3339 instant`},
		{`from: 4h`, `from: 6h`, "spec.policies[2].window: until (2026-03-29T06:00:00+02:00) must be after from"},
		{`start: 2026-03-29T00:00:00+01:00`, `start: 2026-03-29 00:00`, `line 6: "2026-03-29 00:00" is not an RFC 3339 instant`},
		{`window: {during:`, `window: {since:`, `unknown field "since"`},
	} {
		if !strings.Contains(windowScenario, tc.old) {
			t.Fatalf("fixture lacks %q", tc.old)
		}
		_, err := Parse([]byte(strings.Replace(windowScenario, tc.old, tc.new, 1)))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error %v, want it to say %q", tc.new, err, tc.want)
		}
	}
}

func TestScenarioWindowRecurrencesBounded(t *testing.T) {
	many := strings.Repeat(`"daily 01:00-02:00 UTC", `, 201)
	_, err := Parse([]byte(strings.Replace(windowScenario, `during: "sun 02:30-04:00 Europe/Paris"`, "during: ["+many+"]", 1)))
	if err == nil || !strings.Contains(err.Error(), "spec.policies: at most 200 window recurrences in all, got 201") {
		t.Fatalf("got %v", err)
	}
}
