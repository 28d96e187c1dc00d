package main

import (
	"context"
	"encoding/json"
	"errors"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestScenarioLiveTraceReplay replays a live run's trace as a user would:
// `qm scenario run FILE --live --time-scale 60 --trace T --out L` (a real
// qm process, which starts its allocators as qm serve processes), then `qm
// sim --replay T FILE --out R`; the replay's cluster shares agree with the
// live run's within 5 points, and the table qm sim prints says the same.
func TestScenarioLiveTraceReplay(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a live scenario for 20 s")
	}
	file := filepath.Join("..", "..", "scenarios", "live", "testdata", "kube-small.yaml")
	dir := t.TempDir()
	tr, liveOut, replayOut := filepath.Join(dir, "live.jsonl"), filepath.Join(dir, "live.json"), filepath.Join(dir, "replay.json")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "scenario", "run", file, "--live", "--time-scale", "60", "--trace", tr, "--out", liveOut)
	cmd.Env = append(os.Environ(), runAsQM+"=1")
	out, err := cmd.CombinedOutput()
	// Exit 2 is a failed expectation of the file's (kube-small's are set
	// for its simulated run); the trace is what this test is about.
	var ee *exec.ExitError
	if err != nil && !(errors.As(err, &ee) && ee.ExitCode() == 2) {
		t.Fatalf("qm scenario run --live --trace: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "replay it with qm sim --replay "+tr+" "+file) {
		t.Errorf("the live run does not say how to replay its trace:\n%s", out)
	}
	var live struct {
		Results struct {
			Clusters map[string]struct{ Share float64 }
		}
		Live struct {
			Trace struct {
				Path    string
				Written uint64
			}
		}
	}
	b, err := os.ReadFile(liveOut)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &live); err != nil {
		t.Fatal(err)
	}
	if live.Live.Trace.Path != tr || live.Live.Trace.Written == 0 {
		t.Errorf("live.trace in the report: %+v", live.Live.Trace)
	}

	code, stdout, stderr := runQM("sim", "--replay", tr, file, "--out", replayOut)
	if code != 0 && code != 2 { // 2: an expectation of the file's failed, as live
		t.Fatalf("qm sim --replay: exit %d\n%s\n%s", code, stdout, stderr)
	}
	var replay struct {
		Results struct {
			Clusters map[string]struct{ Share float64 }
		}
	}
	if b, err = os.ReadFile(replayOut); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &replay); err != nil {
		t.Fatal(err)
	}
	for _, n := range []string{"on-prem", "cloud"} {
		l, r := live.Results.Clusters[n].Share, replay.Results.Clusters[n].Share
		t.Logf("%s share: live %.4f, replayed %.4f", n, l, r)
		if math.Abs(l-r) > 0.05 {
			t.Errorf("%s's share: live %.4f, replayed %.4f: more than 5 points apart", n, l, r)
		}
		// qm sim's table: the trace's share (the live run's) beside the
		// replay's, under the scenario's cluster names.
		m := regexp.MustCompile(`(?m)^\s*` + regexp.QuoteMeta(n) + `\s+([0-9.]+)%\s+([0-9.]+)%`).FindStringSubmatch(stdout)
		if m == nil {
			t.Errorf("no row for %s in qm sim's shares:\n%s", n, stdout)
			continue
		}
		if rec, _ := strconv.ParseFloat(m[1], 64); math.Abs(rec-100*l) > 0.1 {
			t.Errorf("qm sim says the trace gave %s %.1f%%; the live run's report says %.2f%%", n, rec, 100*l)
		}
	}
	if live.Results.Clusters["cloud"].Share < 0.03 {
		t.Errorf("the burst did not overflow on-prem (cloud's share %.4f): the test shows nothing about routing", live.Results.Clusters["cloud"].Share)
	}
}

// qm scenario run refuses --trace without --live (the simulator records
// no trace).
func TestScenarioTraceNeedsLive(t *testing.T) {
	valid := filepath.Join("..", "..", "scenarios", "testdata", "valid-minimal.yaml")
	code, _, errOut := runQM("scenario", "run", valid, "--trace", filepath.Join(t.TempDir(), "t.jsonl"))
	if code != 2 || !strings.Contains(errOut, "--trace applies to --live runs only") {
		t.Errorf("exit %d, stderr %q", code, errOut)
	}
	code, _, errOut = runQM("scenario", "run", valid, "--live", "--trace", filepath.Join(t.TempDir(), "no", "such", "dir", "t.jsonl"))
	if code != 1 || !strings.Contains(errOut, "trace") {
		t.Errorf("a trace that cannot be created: exit %d, stderr %q", code, errOut)
	}
}
