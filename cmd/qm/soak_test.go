package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/quartermaster-dev/quartermaster/soak"
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
