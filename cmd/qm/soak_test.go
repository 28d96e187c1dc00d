package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/quartermaster-dev/quartermaster/soak"
	"github.com/quartermaster-dev/quartermaster/soakrun"
)

// writeSoakRun writes a history of two sessions (alice released gs-1,
// bob still holds gs-2) and a snapshot with the given servers.
func writeSoakRun(t *testing.T, servers ...soak.GameServer) (history, snapshot string) {
	t.Helper()
	dir := t.TempDir()
	start := time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC)
	sec := func(s int) time.Time { return start.Add(time.Duration(s) * time.Second) }
	history = filepath.Join(dir, "history.jsonl")
	f, err := os.Create(history)
	if err != nil {
		t.Fatal(err)
	}
	w := soak.NewWriter(f, soak.Run{Start: start})
	w.Request(soak.Request{ID: 1, Caller: "alice", Cluster: "a", Sent: sec(1), Answered: sec(2), Code: soak.CodeOK, Server: "gs-1"})
	w.Request(soak.Request{ID: 2, Caller: "bob", Cluster: "a", Sent: sec(3), Answered: sec(4), Code: soak.CodeOK, Server: "gs-2"})
	w.Release(soak.Release{ID: 1, At: sec(5), Result: soak.CodeOK})
	w.Fault(soak.Fault{Kind: soak.FaultReplicaKill, Start: sec(6), End: sec(7)})
	w.End(sec(10))
	if err := w.Err(); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	snapshot = filepath.Join(dir, "snapshot.json")
	f, err = os.Create(snapshot)
	if err != nil {
		t.Fatal(err)
	}
	if err := soak.WriteSnapshot(f, &soak.Snapshot{Taken: sec(20), Clusters: []soak.ClusterRead{{Name: "a"}}, GameServers: servers}); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	return history, snapshot
}

func TestSoakCheck(t *testing.T) {
	ready := soak.GameServer{Cluster: "a", Namespace: "default", Name: "gs-1", State: "Ready"}
	held := soak.GameServer{Cluster: "a", Namespace: "default", Name: "gs-2", State: "Allocated", Owner: "bob"}
	leaked := soak.GameServer{Cluster: "a", Namespace: "default", Name: "gs-3", State: "Allocated", Owner: "carol"}

	h, s := writeSoakRun(t, ready, held)
	out := filepath.Join(t.TempDir(), "result.json")
	code, stdout, stderr := runQM("soak", "check", h, s, "--json", out)
	if code != 0 || !strings.Contains(stdout, "violations: 0") || !strings.Contains(stdout, "| replica-kill | 1 |") || stderr != "" {
		t.Errorf("clean run: exit %d, stderr %q, stdout:\n%s", code, stderr, stdout)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var res soak.Result
	if err := json.Unmarshal(data, &res); err != nil || res.Requests != 2 || res.Live != 1 {
		t.Errorf("--json: %+v, %v", res, err)
	}

	// A server Allocated that no one was answered with fails the run.
	h, s = writeSoakRun(t, ready, held, leaked)
	code, stdout, stderr = runQM("soak", "check", "--examples", "1", h, s)
	if code != 2 || !strings.Contains(stdout, "| no-dangling | 1 |") || !strings.Contains(stdout, "a/default/gs-3 is Allocated") ||
		!strings.Contains(stderr, "1 violations") {
		t.Errorf("dangling server: exit %d, stderr %q, stdout:\n%s", code, stderr, stdout)
	}

	// bob's server back to Ready while he holds it: answered, not written.
	h, s = writeSoakRun(t, ready, soak.GameServer{Cluster: "a", Namespace: "default", Name: "gs-2", State: "Ready"})
	if code, stdout, _ := runQM("soak", "check", h, s); code != 2 || !strings.Contains(stdout, "| no-unwritten-ok | 1 |") {
		t.Errorf("unwritten: exit %d, stdout:\n%s", code, stdout)
	}

	// A bad file is an error naming the file and line, status 1.
	bad := filepath.Join(t.TempDir(), "bad.jsonl")
	if err := os.WriteFile(bad, []byte(`{"type":"request"}`+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := runQM("soak", "check", bad, s); code != 1 || !strings.Contains(stderr, bad+": line 1: the first line must be of type") {
		t.Errorf("bad history: exit %d, stderr %q", code, stderr)
	}
}

func TestSoakUsage(t *testing.T) {
	for _, tc := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"soak", "run"}, 2, `unknown subcommand "run"`},
		{[]string{"soak", "--duration", "0s"}, 2, "--duration must be positive"},
		{[]string{"soak", "--rate", "-1"}, 2, "--rate must be positive"},
		{[]string{"soak", "--examples", "0"}, 2, "--examples must be at least 1"},
		{[]string{"soak", "--schedule", "no-such-schedule.yaml"}, 2, "--schedule: open no-such-schedule.yaml"},
		{[]string{"soak", "--topology", "no-such-topology.yaml"}, 2, "--topology: open no-such-topology.yaml"},
		{[]string{"soak", "--kubeconfig", "a=k"}, 2, "--kubeconfig is for --target runs"},
		{[]string{"soak", "--identity", "me"}, 2, "--identity is for --target runs"},
		{[]string{"soak", "--target", "a=h:1", "--topology", "t.yaml"}, 2, "--topology is for a rig; --target drives allocators running elsewhere"},
		{[]string{"soak", "--target", "h:1", "--identity", "me", "--insecure"}, 2, `--target "h:1": want CLUSTER=HOST:PORT`},
		{[]string{"soak", "--target", "a=h:1", "--kubeconfig", "k", "--identity", "me", "--insecure"}, 2, `--kubeconfig "k": want CLUSTER=FILE`},
		{[]string{"soak", "--target", "a=h:1", "--insecure"}, 2, "--identity is needed with --target"},
		{[]string{"soak", "--target", "a=h:1", "--identity", "me"}, 2, "--target needs credentials"},
		{[]string{"soak", "--target", "a=h:1", "--identity", "me", "--insecure", "--policy-selector", "=x"}, 2, `--policy-selector "=x": want KEY=VALUE`},
		{[]string{"soak", "check", "only-one"}, 2, "want two files, HISTORY and SNAPSHOT; got 1"},
		{[]string{"soak", "check", "--window", "0s", "a", "b"}, 2, "--window must be positive"},
		{[]string{"soak", "check", "--no-such-flag"}, 2, "Run 'qm soak check -h' for usage."},
		{[]string{"soak", "check", "missing-history", "missing-snapshot"}, 1, "missing-history"},
		{[]string{"soak", "--duration", "5"}, 2, `invalid value "5" for flag -duration: want a duration with its unit, such as 90s, 5m or 1h30m`},
		{[]string{"soak", "--session", "1"}, 2, `invalid value "1" for flag -session: want a duration with its unit`},
		{[]string{"soak", "check", "--window", "ten", "a", "b"}, 2, `invalid value "ten" for flag -window: want a duration with its unit`},
		{[]string{"soak", "--timeout", "0s"}, 2, "--timeout must be positive, got 0s"},
		{[]string{"soak", "--settle", "-1s"}, 2, "--settle must not be negative, got -1s"},
		{[]string{"soak", "--session", "-2s"}, 2, "--session must not be negative, got -2s"},
		{[]string{"soak", "--rate", "NaN"}, 2, "--rate must be positive, got NaN"},
		{[]string{"soak", "--rate", "+Inf"}, 2, "--rate must be positive, got +Inf"},
		{[]string{"soak", "--qm", "no-such-qm"}, 2, "--qm: stat no-such-qm: no such file"},
		{[]string{"soak", "--qm", "."}, 2, "--qm .: not an executable file"},
		{[]string{"soak", "--bin-dir", "."}, 2, "--bin-dir: control-plane binaries missing: etcd, kube-apiserver not in ."},
	} {
		code, _, stderr := runQM(tc.args...)
		if code != tc.code || !strings.Contains(stderr, tc.want) {
			t.Errorf("qm %s: exit %d, stderr %q; want %d and %q", strings.Join(tc.args, " "), code, stderr, tc.code, tc.want)
		}
	}
	for args, want := range map[string]string{"soak -h": "usage: qm soak [--duration 5m]", "soak check -h": "usage: qm soak check"} {
		if code, stdout, _ := runQM(strings.Fields(args)...); code != 0 || !strings.Contains(stdout, want) {
			t.Errorf("qm %s: exit %d, stdout %q", args, code, stdout)
		}
	}
}

// A schedule file whose targets name what the rig does not have fails
// at once, naming the entry, before any rig comes up.
func TestSoakScheduleTargetsCheckedFirst(t *testing.T) {
	sched := filepath.Join(t.TempDir(), "typo.yaml")
	if err := os.WriteFile(sched, []byte(`apiVersion: quartermaster.dev/v1alpha1
kind: SoakSchedule
spec:
  faults:
  - {kind: replica-kill, every: 1m, duration: 5s, targets: [esat/0]}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, stderr := runQM("soak", "--schedule", sched, "--duration", "1m", "--out", filepath.Join(t.TempDir(), "run"), "--quiet")
	if code != 2 || !strings.Contains(stderr, `spec.faults[0].targets[0]: replica-kill "esat/0": no cluster "esat" (the run has east, west)`) {
		t.Errorf("exit %d, stderr %q", code, stderr)
	}
}

// A directory that holds a run is not written over: qm soak says so
// before it brings anything up.
func TestSoakKeepsAnEarlierRun(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, soakrun.HistoryFile), []byte("{}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, stderr := runQM("soak", "--out", dir, "--quiet")
	if code != 2 || !strings.Contains(stderr, dir+" holds a run already (its history.jsonl)") {
		t.Errorf("exit %d, stderr %q", code, stderr)
	}
}

// qm soak check given its files the wrong way round, or the result
// instead of the snapshot, says what the file is.
func TestSoakCheckNamesAFileInTheWrongPlace(t *testing.T) {
	h, s := writeSoakRun(t, soak.GameServer{Cluster: "a", Namespace: "default", Name: "gs-2", State: "Allocated", Owner: "bob"})
	code, _, stderr := runQM("soak", "check", s, h)
	if code != 1 || !strings.Contains(stderr, s+" reads as a snapshot: qm soak check takes HISTORY, then SNAPSHOT") {
		t.Errorf("swapped: exit %d, stderr %q", code, stderr)
	}
	res := filepath.Join(t.TempDir(), "result.json")
	if code, _, _ := runQM("soak", "check", "--json", res, h, s); code != 0 {
		t.Fatalf("check: exit %d", code)
	}
	code, _, stderr = runQM("soak", "check", h, res)
	if code != 1 || !strings.Contains(stderr, res+" reads as a soak result (qm report reads it)") {
		t.Errorf("result for snapshot: exit %d, stderr %q", code, stderr)
	}
	code, _, stderr = runQM("soak", "check", h, h)
	if code != 1 || !strings.Contains(stderr, h+" reads as a history") {
		t.Errorf("history twice: exit %d, stderr %q", code, stderr)
	}
}

func TestSoakNotesSayWhatTheRunWillNotDo(t *testing.T) {
	// The shipped schedule in one minute: its later kinds fall outside.
	notes := soakNotes(&soakrun.Options{Duration: time.Minute})
	if len(notes) != 1 || !strings.Contains(notes[0], "fault ends within --duration 1m0s (the schedule's times, seed 1)") {
		t.Fatalf("notes %q", notes)
	}
	all := soak.DefaultSchedule()
	for _, f := range all.Schedule(all.Seed(), time.Minute) {
		if strings.Contains(notes[0], " "+f.Kind+",") || strings.HasPrefix(notes[0], "no "+f.Kind+",") {
			t.Errorf("%s is scheduled within the minute, yet the note names it: %s", f.Kind, notes[0])
		}
	}
	if got := soakNotes(&soakrun.Options{Duration: 30 * time.Minute}); len(got) != 0 {
		t.Errorf("half an hour of the shipped schedule: notes %q, want none", got)
	}
	notes = soakNotes(&soakrun.Options{Duration: 30 * time.Minute, Targets: []soakrun.Target{{Cluster: "a", Addr: "h:1"}, {Cluster: "b", Addr: "h:2"}},
		Kubeconfigs: map[string]string{"a": "k"}})
	if len(notes) != 1 || !strings.Contains(notes[0], "no --kubeconfig for b: its GameServers are not read") {
		t.Errorf("a target without a kubeconfig: notes %q", notes)
	}
}
