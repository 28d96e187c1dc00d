package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/quartermaster-dev/quartermaster/scenarios"
	"github.com/quartermaster-dev/quartermaster/trace"
)

// replayFleets are the live clusters' fleets: servers whose sessions end
// on their own after a second (shut down and replaced at once, as the
// scenario below models them), so that no Release has to find its way to
// the cluster that allocated.
const replayFleets = `apiVersion: quartermaster.dev/v1alpha1
kind: Fleets
nodes: 4
fleets:
- name: game
  namespace: default
  replicas: %d
  labels: {game: shooter}
  sessionDuration: 1s
`

// replayScenario is the same three clusters for the simulator: on-prem
// first, then cloud-a and cloud-b at 3:1 (examples/multicluster's
// policies), sessions of a second, no API-server latency (the memory
// backend's writes are in memory).
const replayScenario = `apiVersion: quartermaster.dev/v1alpha1
kind: Scenario
metadata: {name: three-allocators}
spec:
  duration: 1m
  clusters:
  - name: onprem
    provider: onprem
    rtt: {constant: 1ms}
    nodes: {count: 4, slots: 50}
    apiServer: {writeLatency: {constant: 0s}}
    fleets:
    - {name: game, labels: {game: shooter}, replicas: %d, startupDelay: {constant: 0s}}
  - name: cloud-a
    provider: cloud
    rtt: {constant: 2ms}
    nodes: {count: 4, slots: 50}
    apiServer: {writeLatency: {constant: 0s}}
    fleets:
    - {name: game, labels: {game: shooter}, replicas: %d, startupDelay: {constant: 0s}}
  - name: cloud-b
    provider: cloud
    rtt: {constant: 2ms}
    nodes: {count: 4, slots: 50}
    apiServer: {writeLatency: {constant: 0s}}
    fleets:
    - {name: game, labels: {game: shooter}, replicas: %d, startupDelay: {constant: 0s}}
  policies:
  - {name: onprem, priority: 1, weight: 100, labels: {route: burst}, connectionInfo: {clusterName: onprem}}
  - {name: cloud-a, priority: 2, weight: 300, labels: {route: burst}, connectionInfo: {clusterName: cloud-a}}
  - {name: cloud-b, priority: 2, weight: 100, labels: {route: burst}, connectionInfo: {clusterName: cloud-b}}
  workload:
  - name: matchmaker
    rate: {constant: 50}
    sessionLength: {constant: 1s}
    multiCluster: {policySelector: {route: burst}}
    request: {gameServerSelectors: [{matchLabels: {game: shooter}}]}
`

const replayRequest = `{"namespace":"default",
 "multiClusterSetting":{"enabled":true,"policySelector":{"matchLabels":{"route":"burst"}}},
 "gameServerSelectors":[{"matchLabels":{"game":"shooter"}}]}`

// TestReplayReproducesLiveShares records a live run and replays it. Three
// `qm serve --policies` processes as in examples/multicluster (on-prem
// first, bursting to cloud-a and cloud-b at 3:1) take Poisson load from
// `qm load --trace` at twice what on-prem's servers hold, so about half of
// the requests burst to the cloud; then `qm sim --replay` runs the trace
// against a scenario of the same three clusters. The cluster shares the
// live run recorded and the replay's agree within 5 points. The on-prem
// allocator records its own trace (qm serve --trace) of the same run,
// which shows the same shares and replays within 5 points too.
func TestReplayReproducesLiveShares(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three qm serve processes and drives 15 s of load")
	}
	const (
		onpremServers = 25
		cloudServers  = 60
		rate          = 50 // per second; sessions of 1 s: 50 erlangs offered
		duration      = "15s"
	)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	certsDir := filepath.Join(dir, "certs")
	var o, e bytes.Buffer
	if err := commands["certs"].run(ctx, []string{"--dir", certsDir, "--hosts", "localhost,127.0.0.1", "--clients", "caller,forwarder"}, &o, &e); err != nil {
		t.Fatalf("qm certs: %v\n%s", err, e.String())
	}
	examples := filepath.Join("..", "..", "examples", "multicluster")
	secret, err := exec.CommandContext(ctx, "sh", filepath.Join(examples, "secret.sh"), certsDir, "forwarder", "to-cloud").Output()
	if err != nil {
		t.Fatalf("secret.sh: %v", err)
	}
	serveTrace := filepath.Join(dir, "onprem.jsonl")
	names := []string{"onprem", "cloud-a", "cloud-b"}
	fixed := map[string]string{"onprem": "127.0.0.1:8443", "cloud-a": "127.0.0.1:8444", "cloud-b": "127.0.0.1:8445"}
	addr := map[string]string{}
	for _, n := range names {
		addr[n] = freePort(t)
	}
	for _, n := range names {
		b, err := os.ReadFile(filepath.Join(examples, n+".yaml"))
		if err != nil {
			t.Fatal(err)
		}
		s := string(b)
		for _, m := range names {
			s = strings.ReplaceAll(s, fixed[m], addr[m])
		}
		policies := filepath.Join(dir, n+"-policies.yaml")
		if err := os.WriteFile(policies, append([]byte(s), secret...), 0o600); err != nil {
			t.Fatal(err)
		}
		size := cloudServers
		if n == "onprem" {
			size = onpremServers
		}
		fleets := filepath.Join(dir, n+"-fleets.yaml")
		if err := os.WriteFile(fleets, []byte(fmt.Sprintf(replayFleets, size)), 0o600); err != nil {
			t.Fatal(err)
		}
		ready := filepath.Join(dir, n+"-ready.json")
		args := []string{"serve", "--addr", addr[n], "--http-addr", "", "--log-format", "json", "--log-level", "error",
			"--tls-dir", filepath.Join(certsDir, "server"), "--client-ca-dir", filepath.Join(certsDir, "client-ca"),
			"--fleets", fleets, "--policies", policies, "--cluster-name", n, "--ready-file", ready}
		if n == "onprem" {
			// The allocator records too: the requests as it received
			// them, the clusters by their policies' names.
			args = append(args, "--trace", serveTrace)
		}
		waitReady(t, startQM(t, args...), ready)
	}

	reqFile := filepath.Join(dir, "request.json")
	if err := os.WriteFile(reqFile, []byte(replayRequest), 0o600); err != nil {
		t.Fatal(err)
	}
	tracePath := filepath.Join(dir, "live.jsonl")
	o.Reset()
	e.Reset()
	err = commands["load"].run(ctx, []string{"--addr", addr["onprem"], "--certs-dir", certsDir, "--identity", "caller",
		"--request", reqFile, "--rate", fmt.Sprintf("poisson:%d", rate), "--duration", duration, "--release=false",
		"--progress", "never", "--trace", tracePath}, &o, &e)
	if err != nil {
		t.Fatalf("qm load: %v\n%s\n%s", err, o.String(), e.String())
	}

	// What the live run did, from the trace: the answers' sources are
	// "local" (on-prem) or the cloud allocator forwarded to.
	recs, err := trace.ReadFiles(tracePath)
	if err != nil {
		t.Fatal(err)
	}
	source := map[string]string{"local": "onprem", addr["cloud-a"]: "cloud-a", addr["cloud-b"]: "cloud-b"}
	live := map[string]float64{}
	var allocated, requests int
	for _, r := range recs {
		if r.Event != trace.EventAllocate {
			continue
		}
		requests++
		if r.Outcome != "OK" {
			t.Errorf("live request at %s: %s (the cloud has room for every request)", r.At.Format(time.RFC3339Nano), r.Outcome)
			continue
		}
		c, ok := source[r.Cluster]
		if !ok {
			t.Fatalf("an answer from %q, none of the three allocators", r.Cluster)
		}
		live[c]++
		allocated++
	}
	if requests < 10*rate || allocated == 0 {
		t.Fatalf("the live run made %d requests (%d allocated); want about %d", requests, allocated, 15*rate)
	}
	for c := range live {
		live[c] /= float64(allocated)
	}
	// Half the load must have burst, or the test shows nothing about
	// routing.
	if live["onprem"] < 0.3 || live["onprem"] > 0.7 || live["cloud-a"] < 0.15 || live["cloud-b"] < 0.05 {
		t.Fatalf("live shares %v: not a burst to both clouds", live)
	}

	scFile := filepath.Join(dir, "scenario.yaml")
	if err := os.WriteFile(scFile, []byte(fmt.Sprintf(replayScenario, onpremServers, cloudServers, cloudServers)), 0o600); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "replay.json")
	code, stdout, stderr := runQM("sim", "--replay", tracePath, scFile, "--out", out,
		"--cluster-name", "local=onprem", "--cluster-name", addr["cloud-a"]+"=cloud-a", "--cluster-name", addr["cloud-b"]+"=cloud-b")
	if code != 0 {
		t.Fatalf("qm sim --replay: exit %d\n%s\n%s", code, stdout, stderr)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var rep scenarios.Report
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	if got := rep.Results.Totals.Requests; int(got) != requests {
		t.Errorf("the replay made %d requests, the trace has %d", got, requests)
	}
	for _, c := range names {
		sim := rep.Results.Clusters[c].Share
		t.Logf("%-8s live %5.1f%%  replay %5.1f%%", c, 100*live[c], 100*sim)
		if d := sim - live[c]; d > 0.05 || d < -0.05 {
			t.Errorf("%s: replayed share %.1f%%, live %.1f%%: more than 5 points apart", c, 100*sim, 100*live[c])
		}
		if !strings.Contains(stdout, fmt.Sprintf("%.1f%%", 100*live[c])) {
			t.Errorf("the recorded share of %s (%.1f%%) is not in the output:\n%s", c, 100*live[c], stdout)
		}
	}
	if !strings.Contains(stdout, "cluster shares, recorded in the trace and replayed") || !strings.Contains(stderr, fmt.Sprintf("replay: %d requests", requests)) {
		t.Errorf("stdout:\n%s\nstderr:\n%s", stdout, stderr)
	}

	// The allocator's own trace: every request qm load sent, recorded
	// where it arrived (written off the request path, so give the writer
	// a moment), with the clusters under their policies' names.
	var srecs []trace.Record
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if srecs, err = trace.ReadFiles(serveTrace); err == nil && len(srecs) >= requests {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("qm serve --trace holds %d records (%v); qm load sent %d", len(srecs), err, requests)
		}
	}
	counts := map[string]int{}
	for _, r := range srecs {
		if r.Allocated() {
			counts[r.Cluster]++
		}
	}
	for _, c := range names {
		if got, want := float64(counts[c])/float64(allocated), live[c]; got != want {
			t.Errorf("%s: the allocator's trace has a share of %.3f, qm load's %.3f", c, got, want)
		}
	}
	out2 := filepath.Join(dir, "replay-serve.json")
	code, stdout, stderr = runQM("sim", "--replay", serveTrace, scFile, "--out", out2)
	if code != 0 {
		t.Fatalf("qm sim --replay (the allocator's trace): exit %d\n%s\n%s", code, stdout, stderr)
	}
	if b, err = os.ReadFile(out2); err != nil {
		t.Fatal(err)
	}
	var rep2 scenarios.Report
	if err := json.Unmarshal(b, &rep2); err != nil {
		t.Fatal(err)
	}
	for _, c := range names {
		sim := rep2.Results.Clusters[c].Share
		t.Logf("%-8s live %5.1f%%  replay of the allocator's trace %5.1f%%", c, 100*live[c], 100*sim)
		if d := sim - live[c]; d > 0.05 || d < -0.05 {
			t.Errorf("%s: replayed share %.1f%% (allocator's trace), live %.1f%%: more than 5 points apart", c, 100*sim, 100*live[c])
		}
	}
}
