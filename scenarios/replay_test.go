package scenarios

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/quartermaster-dev/quartermaster/trace"
)

const replayOneCluster = `apiVersion: quartermaster.dev/v1alpha1
kind: Scenario
metadata: {name: one}
spec:
  duration: 1h
  routing: {deadline: 5s}
  clusters:
  - name: only
    provider: onprem
    nodes: {count: 1, slots: 10}
    fleets:
    - {name: game, labels: {game: shooter}, replicas: 2, sessionEnd: Ready}
  workload:
  - name: mm
    rate: {constant: 1}
    sessionLength: {constant: 1m}
    cluster: only
    request: {gameServerSelectors: [{matchLabels: {game: shooter}}]}
  expectations:
  - {metric: totals.successRate, min: 0.99}
`

// TestReplay: the scenario's cluster takes the trace's requests (not its
// workload) for the trace's span plus the routing deadline, sessions the
// trace does not show are drawn from the workload's sessionLength, and
// the expectations are checked on the replay.
func TestReplay(t *testing.T) {
	sc, err := Parse([]byte(replayOneCluster))
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 11, 21, 20, 0, 0, 0, time.UTC)
	req := json.RawMessage(`{"gameServerSelectors":[{"matchLabels":{"game":"shooter"}}]}`)
	var recs []trace.Record
	for i := range 3 {
		recs = append(recs, trace.Record{At: t0.Add(time.Duration(i) * 10 * time.Second), Request: req, Outcome: "OK", LatencyMs: 1})
	}
	rep, replayed, err := sc.Replay(recs, Options{})
	if err != nil {
		t.Fatal(err)
	}
	r := rep.Results
	// Two servers held for a minute each: the third request finds none.
	if r.Totals.Requests != 3 || r.Totals.Allocated != 2 || r.Duration != "26s" || replayed.Span != 20*time.Second {
		t.Fatalf("totals %+v, duration %s, span %v", r.Totals, r.Duration, replayed.Span)
	}
	if rep.Passed || len(rep.Expectations) != 1 || rep.Expectations[0].Pass || !strings.HasPrefix(rep.Description, "replay of a trace of 3 requests") {
		t.Fatalf("report: %+v", rep)
	}

	// Two clusters, a workload routed by policy: a trace request that is
	// not multi-cluster has nowhere to go, and says so.
	two := strings.Replace(replayOneCluster, "  workload:", `  - name: other
    provider: cloud
    nodes: {count: 1, slots: 10}
    fleets:
    - {name: game, labels: {game: shooter}, replicas: 2}
  policies:
  - {name: p, priority: 1, connectionInfo: {clusterName: only}}
  workload:`, 1)
	two = strings.Replace(two, "    cluster: only\n", "    multiCluster: {}\n", 1)
	sc2, err := Parse([]byte(two))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := sc2.Replay(recs, Options{}); err == nil || !strings.Contains(err.Error(), "is not multi-cluster: say which cluster") {
		t.Fatalf("error %v", err)
	}
}
