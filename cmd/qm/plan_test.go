package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/quartermaster-dev/quartermaster/plan"
)

// planScenario is one fleet of n servers under Poisson load of 2 erlangs
// (plan's Erlang-B check): cheap runs, an answer of 6 servers for 2%.
const planScenario = `apiVersion: quartermaster.dev/v1alpha1
kind: Scenario
metadata: {name: one-fleet}
spec:
  seed: 7
  duration: 2000s
  clusters:
  - name: only
    provider: onprem
    nodes: {count: 4, slots: 10}
    apiServer: {writeLatency: {constant: 0s}}
    fleets:
    - {name: game, replicas: 1, sessionEnd: Ready, startupDelay: {constant: 0s}}
  workload:
  - name: mm
    rate: {constant: 4}
    sessionLength: {exponential: {mean: 500ms}}
    cluster: only
    request: {gameServerSelectors: [{matchLabels: {agones.dev/fleet: game}}]}
`

// TestPlanCommand runs qm plan as a user does: the curve on stdout,
// progress on stderr, the plan in --out; and its usage mistakes, each
// named on one line with exit status 2.
func TestPlanCommand(t *testing.T) {
	dir := t.TempDir()
	scFile := filepath.Join(dir, "one-fleet.yaml")
	if err := os.WriteFile(scFile, []byte(planScenario), 0o644); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "plan.json")
	code, stdout, stderr := runQM("plan", scFile,
		"--target", "successRate>=0.98,p99<200ms", "--vary", "fleets.game.replicas=1..32", "--out", out)
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, stdout, stderr)
	}
	var res plan.Result
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &res); err != nil {
		t.Fatal(err)
	}
	if res.Kind != plan.Kind || !res.Found || res.Answer != 6 {
		t.Fatalf("plan: %+v", res)
	}
	// The answer meets the target and the value below it misses: both
	// were run, and both are in the printed curve.
	var below, at *plan.Point
	for i := range res.Points {
		switch res.Points[i].Value {
		case res.Answer - 1:
			below = &res.Points[i]
		case res.Answer:
			at = &res.Points[i]
		}
	}
	if below == nil || at == nil || below.Pass || !at.Pass {
		t.Fatalf("answer %d not bracketed by the points run: %+v", res.Answer, res.Points)
	}
	if !strings.Contains(stdout, "answer: fleets.game.replicas = 6") ||
		strings.Count(stdout, "\n") < len(res.Points)+3 || !strings.Contains(stderr, "meets the target") {
		t.Fatalf("stdout:\n%s\nstderr:\n%s", stdout, stderr)
	}

	// One worker or two: the same points and answer; only wall times differ.
	var plans [2]plan.Result
	for i, workers := range []string{"1", "2"} {
		out := filepath.Join(dir, "plan"+workers+".json")
		code, stdout, stderr := runQM("plan", scFile, "--quiet", "--workers", workers, "--points", "3",
			"--target", "successRate>=0.98,p99<200ms", "--vary", "fleets.game.replicas=1..32", "--out", out)
		if code != 0 {
			t.Fatalf("--workers %s: exit %d\n%s\n%s", workers, code, stdout, stderr)
		}
		b, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		if err := json.Unmarshal(b, &plans[i]); err != nil {
			t.Fatal(err)
		}
		for j := range plans[i].Points {
			plans[i].Points[j].WallSeconds = 0
		}
	}
	pa, _ := json.Marshal(plans[0])
	pb, _ := json.Marshal(plans[1])
	if string(pa) != string(pb) || plans[0].Answer != 6 {
		t.Fatalf("one worker:\n%s\ntwo:\n%s", pa, pb)
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"plan", "--vary", "x=1..2"}, "no scenario file given"},
		{[]string{"plan", "f.yaml", "--vary", "x=1..2"}, "--target is required"},
		{[]string{"plan", "f.yaml", "--target", "successRate>=1"}, "--vary is required"},
		{[]string{"plan", "f.yaml", "--target", "p99<200", "--vary", "x=1..2"}, `--target: "p99<200": p99 is a latency`},
		{[]string{"plan", "f.yaml", "--target", "successRate>=1", "--vary", "x=9..2"}, "--vary: \"x=9..2\": range 9..2"},
		{[]string{"plan", "f.yaml", "--target", "successRate>=1", "--vary", "x=1..2", "--workers", "0"}, "--workers 0: want 1 or more"},
		{[]string{"plan", "f.yaml", "--target", "successRate>=1", "--vary", "x=1..2", "--points", "0"}, "--points 0: want 1 or more"},
	} {
		code, _, stderr := runQM(tc.args...)
		if code != 2 || !strings.Contains(stderr, tc.want) {
			t.Errorf("%q: exit %d, stderr %q, want %q", tc.args, code, stderr, tc.want)
		}
	}
	// A path naming nothing, or a range end the scenario refuses, is an
	// error about the file (exit 1).
	code, _, stderr = runQM("plan", "../../scenarios/burst-to-cloud.yaml", "--target", "successRate>=0.9", "--vary", "clusters.cloud.nodes.count=0..5")
	if code != 1 || !strings.Contains(stderr, "with clusters.cloud.nodes.count=0 the scenario is not valid") || !strings.Contains(stderr, "nodes.count: must be positive") {
		t.Errorf("bad range: exit %d, %s", code, stderr)
	}
	code, _, stderr = runQM("plan", "../../scenarios/burst-to-cloud.yaml", "--target", "successRate>=0.9", "--vary", "clusters.cloud.fleets.game.bufer.size=0..5")
	if code != 1 || !strings.Contains(stderr, `has no "bufer"`) {
		t.Errorf("bad path: exit %d, %s", code, stderr)
	}
	// No answer in the range: exit 2, and the curve says so.
	code, stdout, _ = runQM("plan", scFile, "--quiet", "--target", "successRate>=0.99", "--vary", "fleets.game.replicas=1..2")
	if code != 2 || !strings.Contains(stdout, "no answer: the target is missed even at fleets.game.replicas = 2") {
		t.Errorf("no answer: exit %d\n%s", code, stdout)
	}
}

// TestLoadTraceFlags: --trace is one allocate target's traffic.
func TestLoadTraceFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"load", "--trace-max-bytes", "100000"}, "--trace-max-bytes needs --trace"},
		{[]string{"load", "--trace", "t.jsonl", "--trace-max-bytes", "-1"}, "--trace-max-bytes -1"},
		{[]string{"load", "--trace", "t.jsonl", "--target", "a=localhost:1", "--target", "b=localhost:2"}, "2 targets are given"},
		{[]string{"load", "--trace", "t.jsonl", "--target", "a=localhost:1", "--echo", "a"}, "the target is an --echo"},
	} {
		code, _, stderr := runQM(tc.args...)
		if code != 2 || !strings.Contains(stderr, tc.want) {
			t.Errorf("%q: exit %d, stderr %q, want %q", tc.args, code, stderr, tc.want)
		}
	}
}
