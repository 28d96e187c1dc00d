package soakrun

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/dynamic"

	"github.com/quartermaster-dev/quartermaster/allocator/mtls"
	"github.com/quartermaster-dev/quartermaster/kindcluster"
	"github.com/quartermaster-dev/quartermaster/kindcluster/rig"
	"github.com/quartermaster-dev/quartermaster/soak"
)

// qmDir holds the qm buildQM builds; TestMain removes it.
var qmDir string

func TestMain(m *testing.M) {
	code := m.Run()
	if qmDir != "" {
		os.RemoveAll(qmDir)
	}
	os.Exit(code)
}

// buildQM builds the qm of this tree once per test binary, for the rig's
// allocators and fleet agents.
var buildQM = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "qm-soak-test-")
	if err != nil {
		return "", err
	}
	qmDir = dir
	qm := filepath.Join(dir, "qm")
	cmd := exec.Command("go", "build", "-o", qm, "./cmd/qm")
	cmd.Dir = ".." // the module root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", &buildError{out: out, err: err}
	}
	return qm, nil
})

type buildError struct {
	out []byte
	err error
}

func (e *buildError) Error() string {
	return "go build ./cmd/qm: " + e.err.Error() + "\n" + string(e.out)
}

// rigForTest returns what a real soak needs: the qm binary and the
// directory of etcd and kube-apiserver. It skips under -short.
func rigForTest(t *testing.T) (qm, binDir string) {
	t.Helper()
	if testing.Short() {
		t.Skip("brings up a multi-cluster rig of real API servers; skipped under -short")
	}
	binDir, err := kindcluster.DefaultBinDir()
	if err != nil {
		t.Fatal(err)
	}
	if err := kindcluster.CheckBinaries(binDir, kindcluster.EtcdBinary, kindcluster.APIServerBinary); err != nil {
		t.Fatal(err)
	}
	qm, err = buildQM()
	if err != nil {
		t.Fatal(err)
	}
	return qm, binDir
}

// TestShortSoak runs a one-minute soak with every kind of fault once on a
// rig of two clusters and checks that every promise held: the product's
// mutations in hack/mutations that break a promise (a released server left
// Allocated, say) make it fail.
func TestShortSoak(t *testing.T) {
	qm, binDir := rigForTest(t)
	top, err := rig.Load("testdata/topology.yaml")
	if err != nil {
		t.Fatal(err)
	}
	sched, err := soak.LoadSchedule("testdata/short.yaml")
	if err != nil {
		t.Fatal(err)
	}
	out := keptOnFailure(t)
	var log bytes.Buffer
	defer func() {
		// The run's log beside its files, for a failure to be read with them.
		_ = os.WriteFile(filepath.Join(out, "run.log"), log.Bytes(), 0o644)
	}()
	res, err := Run(context.Background(), Options{
		Duration: time.Minute, Schedule: sched, Out: out, Topology: top, QM: qm, BinDir: binDir,
		RigDir: filepath.Join(t.TempDir(), "rig"), Log: &syncWriter{w: &log},
	})
	if err != nil {
		t.Fatalf("soak: %v\n%s", err, log.String())
	}
	var table bytes.Buffer
	if err := res.Result.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	t.Logf("result:\n%s", table.String())
	if n := res.Result.Violations(); n > 0 {
		t.Errorf("%d violations:\n%s", n, violationSummary(res.Result, out))
	}
	for _, k := range soak.FaultKinds {
		if res.Injected[k] != 1 {
			t.Errorf("fault %s injected %d times, want once", k, res.Injected[k])
		}
	}
	if len(res.Failed) > 0 || len(res.Skipped) > 0 {
		t.Errorf("faults failed: %q; skipped: %v", res.Failed, res.Skipped)
	}
	r := res.Result
	// The promises were held against something: answers, releases, servers
	// held to the end (which the snapshot must show as theirs), requests
	// forwarded to the other cluster, and every cluster read.
	if r.OK < 500 || r.Released < 300 || r.Live == 0 {
		t.Errorf("too little checked: %d OK, %d released, %d held at the end", r.OK, r.Released, r.Live)
	}
	if len(r.Unread) > 0 {
		t.Errorf("clusters not read: %v", r.Unread)
	}
	h, err := readBack(filepath.Join(out, HistoryFile), soak.ReadHistory)
	if err != nil {
		t.Fatal(err)
	}
	// Every request carried a key, the faults lost answers that were
	// retried with it, and dangling servers were counted strictly.
	if r.Retries == 0 || !r.Strict {
		t.Errorf("retries %d, strict %v: want tries sent again after lost answers, and a strict count", r.Retries, r.Strict)
	}
	forwarded := 0
	for _, s := range h.Sessions {
		if s.Key == "" {
			t.Errorf("request %d carried no key", s.ID)
		}
		if s.Code == soak.CodeOK && s.Source != "" {
			forwarded++
			if s.Owner != rig.ForwarderIdentity(s.Cluster) {
				t.Errorf("request %d forwarded from %s to %s: owner %q, want %q", s.ID, s.Cluster, s.Source, s.Owner, rig.ForwarderIdentity(s.Cluster))
			}
		}
	}
	if forwarded < r.OK/5 {
		t.Errorf("%d of %d OK answers forwarded; the spread policy should forward about half", forwarded, r.OK)
	}
	if len(h.Faults) != len(soak.FaultKinds) {
		t.Errorf("%d faults in the history, want %d", len(h.Faults), len(soak.FaultKinds))
	}
	for _, f := range []string{SnapshotFile, ResultFile, TableFile, LoadFile} {
		if _, err := os.Stat(filepath.Join(out, f)); err != nil {
			t.Error(err)
		}
	}
	if t.Failed() {
		t.Logf("the run's log, last lines (all of it in %s):\n%s", filepath.Join(out, "run.log"), lastLines(log.String(), 60))
	}
}

// violationSummary names each broken promise with its examples, and how
// to look at the run again from its kept files.
func violationSummary(r *soak.Result, dir string) string {
	var b strings.Builder
	for _, p := range r.Promises {
		if p.Violations == 0 {
			continue
		}
		fmt.Fprintf(&b, "%s: %d (%s)\n", p.Name, p.Violations, p.Description)
		for _, e := range p.Examples {
			fmt.Fprintf(&b, "  - %s\n", e)
		}
	}
	fmt.Fprintf(&b, "files (history, snapshot, result, the allocators' logs in logs/, this run's log in run.log) in %s; look again with\n", dir)
	fmt.Fprintf(&b, "  qm soak check --examples 50 %s %s\n", filepath.Join(dir, HistoryFile), filepath.Join(dir, SnapshotFile))
	fmt.Fprintf(&b, "  qm report --out %s %s", filepath.Join(dir, "report"), filepath.Join(dir, ResultFile))
	return b.String()
}

// lastLines is the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	if len(lines) <= n {
		return strings.Join(lines, "\n")
	}
	return fmt.Sprintf("(%d lines before)\n%s", len(lines)-n, strings.Join(lines[len(lines)-n:], "\n"))
}

// keptOnFailure is a directory for a run's files that outlives a failed
// test (its history, snapshot and allocator logs are what explains the
// failure) and is removed after a passing one.
func keptOnFailure(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "qm-soak-"+t.Name()+"-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the run's files are kept in %s", dir)
			return
		}
		os.RemoveAll(dir)
	})
	return dir
}

// syncWriter lets the rig's goroutines and the faults' share a buffer.
type syncWriter struct {
	mu sync.Mutex
	w  *bytes.Buffer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

func TestDefaultTopologyAndScheduleParse(t *testing.T) {
	top := DefaultTopology()
	if len(top.Spec.Clusters) != 2 || soakSelector(top)["route"] != "soak" {
		t.Fatalf("default topology: %d clusters, selector %v", len(top.Spec.Clusters), soakSelector(top))
	}
	sched, err := soak.LoadSchedule("testdata/short.yaml")
	if err != nil {
		t.Fatal(err)
	}
	faults := sched.Schedule(sched.Seed(), time.Minute)
	if len(faults) != len(soak.FaultKinds) {
		t.Fatalf("the short schedule has %d faults in a minute, want one of each of the %d kinds", len(faults), len(soak.FaultKinds))
	}
	for i := 1; i < len(faults); i++ {
		if faults[i].Start < faults[i-1].End {
			t.Errorf("%s overlaps %s: each kind's cost should be its own", faults[i].Kind, faults[i-1].Kind)
		}
	}
}

func TestOptionsNameWhatIsWrong(t *testing.T) {
	for _, tc := range []struct {
		opt  Options
		want string
	}{
		{Options{Out: "x"}, "duration must be positive"},
		{Options{Duration: time.Second}, "an output directory is needed"},
		{Options{Duration: time.Second, Out: "x", Rate: -1}, "rate must be positive"},
		{Options{Duration: time.Second, Out: "x", Session: -time.Second}, "session must not be negative"},
		{Options{Duration: time.Second, Out: "x", Targets: []Target{{Cluster: "a", Addr: "h:1"}}}, "identity is needed"},
		{Options{Duration: time.Second, Out: "x", Caller: "c", Targets: []Target{{Cluster: "a"}}}, "want CLUSTER=HOST:PORT"},
		{Options{Duration: time.Second, Out: "x", Caller: "c", Targets: []Target{{Cluster: "a", Addr: "h:1"}},
			Kubeconfigs: map[string]string{"b": "f"}}, `kubeconfig for "b", which no target names`},
	} {
		err := tc.opt.defaults()
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: got %v, want %q", tc.opt, err, tc.want)
		}
	}
}

func TestReplicaTarget(t *testing.T) {
	if _, _, err := replicaTarget("east"); err == nil || !strings.Contains(err.Error(), "want CLUSTER/REPLICA") {
		t.Errorf("a replica target without a replica: %v", err)
	}
	if cl, n, err := replicaTarget("east/1"); err != nil || cl != "east" || n != 1 {
		t.Errorf("east/1: %s %d %v", cl, n, err)
	}
}

// Two faults that slow one link overlap: the first one's end must leave
// the link slow until the second's.
func TestOverlappingLinkFaultsCount(t *testing.T) {
	ps := rig.NewProxies()
	defer ps.Close()
	l, err := ps.Add("east", "west", 0, "127.0.0.1:1", rig.Link{})
	if err != nil {
		t.Fatal(err)
	}
	in := &injector{links: map[linkFault]int{}}
	links := []*rig.Proxy{l}
	slow := func() bool {
		for _, f := range l.Faults() {
			if f == rig.FaultSlow {
				return true
			}
		}
		return false
	}
	for _, step := range []struct {
		on   bool
		want bool
	}{{true, true}, {true, true}, {false, true}, {false, false}, {false, false}} {
		if err := in.setLinks(links, rig.FaultSlow, step.on); err != nil {
			t.Fatal(err)
		}
		if slow() != step.want {
			t.Fatalf("after set %v: slow %v, want %v", step.on, slow(), step.want)
		}
	}
}

// TestTargetSoak drives an allocator the run does not own: a rig's
// allocator, reached only by its address, credentials and kubeconfig, as
// Agones' would be. The fault that needs only the API server is injected,
// the one that needs the rig skipped with a note, every promise holds,
// and what the run kept to the end is given back afterwards.
func TestTargetSoak(t *testing.T) {
	qm, binDir := rigForTest(t)
	top, err := rig.Load("testdata/target-topology.yaml")
	if err != nil {
		t.Fatal(err)
	}
	r, err := rig.Up(context.Background(), top, rig.Options{Dir: filepath.Join(t.TempDir(), "rig"), QM: qm, BinDir: binDir})
	if err != nil {
		t.Fatal(err)
	}
	defer r.Stop()
	sched, err := soak.LoadSchedule("testdata/target.yaml")
	if err != nil {
		t.Fatal(err)
	}
	l := r.CallerCerts()
	tlsCfg, err := mtls.ClientConfig(mtls.ClientFiles{CertFile: l.ClientCert(rig.CallerIdentity), KeyFile: l.ClientKey(rig.CallerIdentity), CAFile: l.CACert()})
	if err != nil {
		t.Fatal(err)
	}
	var targets []Target
	for _, a := range r.CallerAddrs("solo") {
		targets = append(targets, Target{Cluster: "solo", Addr: a})
	}
	out := t.TempDir()
	res, err := Run(context.Background(), Options{
		Duration: 20 * time.Second, Schedule: sched, Out: out, Rate: 10,
		Targets: targets, TLS: tlsCfg, Caller: rig.CallerIdentity,
		Kubeconfigs: map[string]string{"solo": r.Cluster("solo").Kube.KubeconfigPath()},
	})
	if err != nil {
		t.Fatal(err)
	}
	var table bytes.Buffer
	if err := res.Result.WriteTable(&table); err != nil {
		t.Fatal(err)
	}
	t.Logf("result:\n%s", table.String())
	if n := res.Result.Violations(); n > 0 {
		t.Errorf("%d violations (files in %s)", n, out)
	}
	if res.Injected[soak.FaultFleetScale] != 1 || res.Injected[soak.FaultLinkCut] != 0 {
		t.Errorf("injected %v; want the fleet scaled once and no link cut", res.Injected)
	}
	if why := res.Skipped[soak.FaultLinkCut]; !strings.Contains(why, "needs the rig") {
		t.Errorf("link-cut skipped because %q; want a note that it needs the rig", why)
	}
	if res.Result.OK < 100 || res.Result.Live == 0 || len(res.Result.Unread) > 0 {
		t.Errorf("%d OK, %d held at the end, unread %v", res.Result.OK, res.Result.Live, res.Result.Unread)
	}
	if res.GiveBack != nil {
		t.Errorf("giving back: %v", res.GiveBack)
	}
	// The servers held to the end were given back: none is Allocated now
	// (a released server goes to Shutdown, and the fleet agent replaces it).
	dc, err := dynamic.NewForConfig(r.Cluster("solo").Kube.RESTConfig())
	if err != nil {
		t.Fatal(err)
	}
	snap := takeSnapshot(context.Background(), []string{"solo"}, map[string]dynamic.Interface{"solo": dc}, "default")
	for _, gs := range snap.GameServers {
		if gs.State == soak.StateAllocated {
			t.Errorf("%s is still Allocated after the run gave back what it kept", gs.Name)
		}
	}
}

func TestViolationSummaryNamesExamplesAndFiles(t *testing.T) {
	r := &soak.Result{Promises: []soak.Promise{
		{Name: soak.PromiseNoDoubleHold, Description: "no server held twice"},
		{Name: soak.PromiseNoDangling, Description: "no server left Allocated", Violations: 2,
			Examples: []string{"east/default/gs-1 is Allocated (one key, two servers)", "west/default/gs-9 is Allocated"}},
	}}
	got := violationSummary(r, "/kept")
	for _, want := range []string{
		"no-dangling: 2 (no server left Allocated)\n  - east/default/gs-1 is Allocated (one key, two servers)\n  - west/default/gs-9 is Allocated\n",
		"in /kept;", "qm soak check --examples 50 /kept/history.jsonl /kept/snapshot.json", "qm report --out /kept/report /kept/result.json",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("summary lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, soak.PromiseNoDoubleHold) {
		t.Errorf("a promise held is named:\n%s", got)
	}
	if got := lastLines("a\nb\nc\n", 2); got != "(1 lines before)\nb\nc" {
		t.Errorf("lastLines = %q", got)
	}
}
