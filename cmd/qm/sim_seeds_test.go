package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/quartermaster-dev/quartermaster/plan"
)

// TestSimSeeds runs qm sim --seeds as a user does: the same spread on one
// worker as on two, a table of figures, and usage mistakes refused.
func TestSimSeeds(t *testing.T) {
	dir := t.TempDir()
	scFile := filepath.Join(dir, "one-fleet.yaml")
	if err := os.WriteFile(scFile, []byte(planScenario), 0o644); err != nil {
		t.Fatal(err)
	}
	var outs [2][]byte
	for i, workers := range []string{"1", "2"} {
		out := filepath.Join(dir, "spread"+workers+".json")
		code, stdout, stderr := runQM("sim", scFile, "--seeds", "3", "--workers", workers, "--out", out)
		if code != 0 {
			t.Fatalf("exit %d\n%s\n%s", code, stdout, stderr)
		}
		if !strings.Contains(stdout, "under 3 seeds (7..9)") || !strings.Contains(stdout, "totals.successRate") ||
			!strings.Contains(stdout, "clusters.only.share") || !strings.Contains(stdout, "PASS") {
			t.Fatalf("stdout:\n%s", stdout)
		}
		b, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		outs[i] = b
	}
	if !bytes.Equal(outs[0], outs[1]) {
		t.Fatal("--workers 1 and --workers 2 wrote different results")
	}
	var res plan.SeedRuns
	if err := json.Unmarshal(outs[0], &res); err != nil {
		t.Fatal(err)
	}
	if res.Kind != plan.SpreadKind || len(res.Runs) != 3 || res.Runs[2].Results.Seed != 9 {
		t.Fatalf("%+v", res)
	}
	// Each seed run alone (--index, as an Indexed Job's pods do) and merged,
	// in any order, is byte for byte what --seeds wrote.
	var runs []string
	for _, i := range []string{"2", "0", "1"} {
		run := filepath.Join(dir, "run"+i+".json")
		if code, stdout, stderr := runQM("sim", scFile, "--quiet", "--seeds", "3", "--index", i, "--out", run); code != 0 {
			t.Fatalf("--index %s: exit %d\n%s\n%s", i, code, stdout, stderr)
		}
		runs = append(runs, run)
	}
	merged := filepath.Join(dir, "merged.json")
	code, stdout, stderr := runQM(append([]string{"sim", "merge", "--out", merged}, runs...)...)
	if code != 0 || !strings.Contains(stdout, "under 3 seeds (7..9)") {
		t.Fatalf("merge: exit %d\n%s\n%s", code, stdout, stderr)
	}
	if b, err := os.ReadFile(merged); err != nil || !bytes.Equal(b, outs[0]) {
		t.Fatalf("merged runs differ from --seeds 3 (%v):\n%s", err, b)
	}
	if code, stdout, _ := runQM("sim", "merge", "-h"); code != 0 || !strings.Contains(stdout, "usage: qm sim merge") {
		t.Errorf("qm sim merge -h: exit %d\n%s", code, stdout)
	}
	// A run twice, or a file that is no run report, is refused by name.
	if code, _, stderr := runQM("sim", "merge", runs[0], runs[0]); code != 1 || !strings.Contains(stderr, "seed 9 is in the merge twice") {
		t.Errorf("same run twice: exit %d, %s", code, stderr)
	}
	if code, _, stderr := runQM("sim", "merge", runs[0], scFile); code != 1 || !strings.Contains(stderr, scFile+": not a qm sim report") {
		t.Errorf("a scenario file merged: exit %d, %s", code, stderr)
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"sim", scFile, "--seeds", "0"}, "--seeds 0: want 1 or more"},
		{[]string{"sim", scFile, "--seeds", "2", "--workers", "0"}, "--workers 0: want 1 or more"},
		{[]string{"sim", scFile, "--seeds", "2", "--replay", "t.json"}, "--seeds and --replay"},
		{[]string{"sim", scFile, "--seeds", "2", "--index", "2"}, "--index 2: want 0..1"},
		{[]string{"sim", "merge"}, "no run reports given"},
		{[]string{"sim", "merge", "--bogus"}, "flag provided but not defined: -bogus"},
	} {
		code, _, stderr := runQM(tc.args...)
		if code != 2 || !strings.Contains(stderr, tc.want) {
			t.Errorf("%q: exit %d, stderr %q, want %q", tc.args, code, stderr, tc.want)
		}
	}
}

func TestProgressLine(t *testing.T) {
	got := progressLine("day", 6*time.Hour, 24*time.Hour, 1_000_000, 10*time.Second)
	for _, want := range []string{"day:  25.0% of 24h0m0s virtual", "1000000 events", "100000 events/s", "about 30s left"} {
		if !strings.Contains(got, want) {
			t.Errorf("%q lacks %q", got, want)
		}
	}
	if got := progressLine("day", 24*time.Hour, 24*time.Hour, 5, time.Second); strings.Contains(got, "left") {
		t.Errorf("at the end: %q", got)
	}
	// Not a terminal, or in CI: no progress.
	if progressWanted(&bytes.Buffer{}) {
		t.Error("progress to a buffer")
	}
	tty, err := os.OpenFile("/dev/tty", os.O_WRONLY, 0)
	if err != nil {
		return // no terminal here (CI): the rest needs one
	}
	defer tty.Close()
	t.Setenv("CI", "")
	if !progressWanted(tty) {
		t.Error("no progress on a terminal")
	}
	t.Setenv("CI", "true")
	if progressWanted(tty) {
		t.Error("progress in CI")
	}
}
