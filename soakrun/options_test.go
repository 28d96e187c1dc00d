package soakrun

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/quartermaster-dev/quartermaster/soak"
)

// A schedule's targets are held against the run's clusters, replicas,
// links and fleets before anything starts; the error names the entry and
// what the run has.
func TestScheduleTargetsNameWhatIsWrong(t *testing.T) {
	sched := func(kind string, targets ...string) *soak.ScheduleFile {
		return &soak.ScheduleFile{Spec: soak.ScheduleSpec{Faults: []soak.FaultEntry{{Kind: soak.FaultLinkCut}, {Kind: kind, Targets: targets}}}}
	}
	for _, tc := range []struct {
		s    *soak.ScheduleFile
		want string // "" for no error
	}{
		{sched(soak.FaultReplicaKill, "east/0", "west/1"), ""},
		{sched(soak.FaultReplicaKill, "esat/0"), `spec.faults[1].targets[0]: replica-kill "esat/0": no cluster "esat" (the run has east, west)`},
		{sched(soak.FaultReplicaKill, "east/0", "east/2"), `spec.faults[1].targets[1]: replica-kill "east/2": cluster east has 2 allocator replicas, numbered from 0`},
		{sched(soak.FaultReplicaKill, "east"), `replica-kill "east": want CLUSTER/REPLICA, like east/0`},
		{sched(soak.FaultLinkCut, "east->west", "callers->east"), ""},
		{sched(soak.FaultLinkSlow, "east-west"), `link-slow "east-west": want FROM->TO`},
		{sched(soak.FaultAnswerLost, "caller->east"), `answer-lost "caller->east": from: no cluster "caller" (the run has east, west) (or callers)`},
		{sched(soak.FaultLinkLossy, "east->nowhere"), `to: no cluster "nowhere"`},
		{sched(soak.FaultLinkCut, "east->east"), "a cluster has no link to itself"},
		{sched(soak.FaultFleetScale, "west", "west/game"), ""},
		{sched(soak.FaultFleetScale, "west/gmae"), `fleet-scale "west/gmae": cluster west has no fleet "gmae" (it has game)`},
		{sched(soak.FaultAPIServerRestart, "north"), `apiserver-restart "north": no cluster "north"`},
		{sched(soak.FaultSecretRotate, "east"), ""},
		{sched(soak.FaultSlowRemote, "West"), `slow-remote "West": no cluster "West"`},
	} {
		opt := Options{Duration: time.Minute, Out: "x", Schedule: tc.s}
		err := opt.defaults()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%v: %v", tc.s.Spec.Faults[1], err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%v: got %v, want %q", tc.s.Spec.Faults[1], err, tc.want)
		}
	}
	// Against allocators elsewhere only a fleet's cluster can be checked;
	// the kinds that need a rig are skipped, whatever they name.
	targets := []Target{{Cluster: "solo", Addr: "127.0.0.1:1"}}
	opt := Options{Duration: time.Minute, Out: "x", Caller: "c", Targets: targets, Schedule: sched(soak.FaultFleetScale, "duo/game")}
	if err := opt.defaults(); err == nil || !strings.Contains(err.Error(), `no cluster "duo" (the run has solo)`) {
		t.Errorf("a fleet on a cluster no target names: %v", err)
	}
	opt = Options{Duration: time.Minute, Out: "x", Caller: "c", Targets: targets, Schedule: sched(soak.FaultReplicaKill, "anything/9")}
	if err := opt.defaults(); err != nil {
		t.Errorf("a rig's fault against targets: %v", err)
	}
}

// A directory that holds a run's history is not written over.
func TestRunKeepsAnEarlierRun(t *testing.T) {
	dir := t.TempDir()
	hist := filepath.Join(dir, HistoryFile)
	if err := os.WriteFile(hist, []byte("the last night's run\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := Run(t.Context(), Options{Duration: time.Minute, Out: dir})
	if err == nil || !strings.Contains(err.Error(), dir+" holds a run already (its history.jsonl): choose another output directory") {
		t.Fatalf("Run into a directory holding a run: %v", err)
	}
	if b, _ := os.ReadFile(hist); string(b) != "the last night's run\n" {
		t.Errorf("the earlier history was changed: %q", b)
	}
}

func TestProgressLineSaysWhenTheLoadIsOver(t *testing.T) {
	c := &counters{}
	c.requests.Store(120)
	c.ok.Store(100)
	c.released.Store(90)
	c.retries.Store(7)
	c.fail("Unavailable")
	line := progressLine(30*time.Second, time.Minute, false, c, "link-cut east->west")
	if want := "30s/1m0s  requests 120  ok 100  released 90  tries again 7  errors Unavailable=1  fault: link-cut east->west"; line != want {
		t.Errorf("during the load:\n got %q\nwant %q", line, want)
	}
	line = progressLine(75*time.Second, time.Minute, false, c, "none")
	if want := "load over 15s ago, waiting for releases and resolves (up to 2m0s)  requests 120"; !strings.HasPrefix(line, want) {
		t.Errorf("after the load:\n got %q\nwant it to start %q", line, want)
	}
	line = progressLine(40*time.Second, time.Minute, true, c, "link-cut east->west")
	if want := "interrupted at 40s, ending the faults, waiting for releases and resolves (up to 2m0s)  requests 120"; !strings.HasPrefix(line, want) ||
		!strings.HasSuffix(line, "fault: link-cut east->west") {
		t.Errorf("interrupted:\n got %q\nwant it to start %q", line, want)
	}
}
