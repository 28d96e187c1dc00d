package live

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/quartermaster-dev/quartermaster/reports"
	"github.com/quartermaster-dev/quartermaster/scenarios"
)

// fidelityCases are the scenarios whose live runs must agree with the
// simulator, each at a time scale that keeps its live run near 90 s.
var fidelityCases = []struct {
	name  string
	scale float64
}{
	{"burst-to-cloud", 120},      // 3h in 90s; up to 360 requests/s
	{"provider-preference", 100}, // 2h30m in 90s, an outage from 36s to 54s
	{"load-spreading", 80},       // 2h in 90s; up to 480 requests/s
}

// TestFidelity runs scenarios in the simulator and live on memory-backend
// `qm serve` processes, and checks that the live cluster shares agree with
// the simulated ones within 5 points and the success rates within 1 point,
// with the live run under 3 minutes; the two reports give `qm report` a
// predicted-and-measured pair per expectation.
//
// `make test` runs provider-preference only (outages, forwarding and
// releases across clusters: the most of the live path in one run, about
// 2 minutes); QM_LIVE_FIDELITY=all (`make live-fidelity`) runs all three,
// or a comma-separated list of names. QM_LIVE_OUT keeps the reports there.
func TestFidelity(t *testing.T) {
	if testing.Short() {
		t.Skip("runs allocator processes for minutes")
	}
	want := map[string]bool{"provider-preference": true}
	if v := os.Getenv("QM_LIVE_FIDELITY"); v == "all" {
		for _, c := range fidelityCases {
			want[c.name] = true
		}
	} else if v != "" {
		want = map[string]bool{}
		for _, n := range strings.Split(v, ",") {
			want[strings.TrimSpace(n)] = true
		}
	}
	qm := buildQM(t)
	out := os.Getenv("QM_LIVE_OUT")
	if out == "" {
		out = t.TempDir()
	} else if err := os.MkdirAll(out, 0o755); err != nil {
		t.Fatal(err)
	}
	ran := 0
	for _, c := range fidelityCases {
		if !want[c.name] {
			continue
		}
		ran++
		t.Run(c.name, func(t *testing.T) {
			s := load(t, filepath.Join("..", c.name+".yaml"))
			simRep, err := s.Run(scenarios.Options{})
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
			defer cancel()
			start := time.Now()
			rep, err := Run(ctx, s, Options{Scale: c.scale, QM: qm, Progress: testLog{t}})
			if err != nil {
				t.Fatal(err)
			}
			wall := time.Since(start)
			t.Logf("%s: live run %v at time scale %v (%.0f s of load)", c.name, wall.Round(time.Second), c.scale, rep.Live.WallSeconds)
			if wall > 3*time.Minute {
				t.Errorf("the live run took %v; it must stay under 3 minutes", wall.Round(time.Second))
			}
			for _, st := range rep.Live.Streams {
				if st.NotSent > 0 {
					t.Errorf("stream %s: %d of %d arrivals not sent", st.Name, st.NotSent, st.Intended)
				}
			}
			sr, lr := simRep.Results, rep.Results
			names := make([]string, 0, len(sr.Clusters))
			for n := range sr.Clusters {
				names = append(names, n)
			}
			sort.Strings(names)
			for _, n := range names {
				p, m := sr.Clusters[n].Share, lr.Clusters[n].Share
				t.Logf("%s share: simulated %.4f, live %.4f", n, p, m)
				if math.Abs(p-m) > 0.05 {
					t.Errorf("%s's share: simulated %.4f, live %.4f: more than 5 points apart", n, p, m)
				}
			}
			t.Logf("success rate: simulated %.5f, live %.5f", sr.Totals.SuccessRate, lr.Totals.SuccessRate)
			if math.Abs(sr.Totals.SuccessRate-lr.Totals.SuccessRate) > 0.01 {
				t.Errorf("success rate: simulated %.5f, live %.5f: more than 1 point apart", sr.Totals.SuccessRate, lr.Totals.SuccessRate)
			}

			// Both reports, as qm sim --out and qm scenario run --live
			// --out write them, make one predicted/measured pair per
			// expectation in qm report.
			simFile, liveFile := filepath.Join(out, c.name+"-sim.json"), filepath.Join(out, c.name+"-live.json")
			writeJSON(t, simFile, simRep)
			writeJSON(t, liveFile, rep)
			r, err := reports.Build([]string{simFile, liveFile}, "")
			if err != nil {
				t.Fatal(err)
			}
			pairs := r.Comparison.Pairs
			if len(pairs) != len(s.Spec.Expectations) {
				t.Fatalf("%d pairs in the report, want one per expectation (%d)", len(pairs), len(s.Spec.Expectations))
			}
			for _, p := range pairs {
				if !p.HasMeasured {
					t.Errorf("pair %s has no measured value", p.Metric)
				}
				t.Logf("%-45s %-22s predicted %-10.4g %-5v measured %-10.4g %v", p.Metric, p.Bounds, p.Predicted, pass(p.PredictedPass), p.Measured, pass(p.MeasuredPass))
			}
		})
	}
	if ran == 0 {
		t.Fatalf("QM_LIVE_FIDELITY=%q names none of the cases", os.Getenv("QM_LIVE_FIDELITY"))
	}
}

// TestKubernetesBackend runs a small burst to cloud on the multi-cluster
// rig (API servers, fleet agents, two cloud replicas) and checks the
// cluster shares against the simulator's. Only with QM_LIVE_FIDELITY=all
// or kube (`make live-fidelity`): it takes about 80 s.
func TestKubernetesBackend(t *testing.T) {
	if v := os.Getenv("QM_LIVE_FIDELITY"); testing.Short() || (v != "all" && !strings.Contains(v, "kube")) {
		t.Skip("QM_LIVE_FIDELITY=all or kube runs it (make live-fidelity)")
	}
	qm := buildQM(t)
	s := load(t, "testdata/kube-small.yaml")
	simRep, err := s.Run(scenarios.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	rep, err := Run(ctx, s, Options{Scale: 20, QM: qm, Backend: BackendKubernetes, Progress: testLog{t}})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Live.Backend != BackendKubernetes {
		t.Errorf("backend %q", rep.Live.Backend)
	}
	for _, n := range []string{"on-prem", "cloud"} {
		p, m := simRep.Results.Clusters[n].Share, rep.Results.Clusters[n].Share
		t.Logf("%s share: simulated %.4f, live %.4f", n, p, m)
		if math.Abs(p-m) > 0.05 {
			t.Errorf("%s's share: simulated %.4f, live %.4f: more than 5 points apart", n, p, m)
		}
	}
	t.Logf("success rate: simulated %.4f, live %.4f (not compared: see scenarios/README.md)", simRep.Results.Totals.SuccessRate, rep.Results.Totals.SuccessRate)
	if !containsPrefix(rep.Live.NotModelled, "spec.clusters[1].apiServer.writeLatency: the rig's API server is real") {
		t.Errorf("the kubernetes rig's differences are not named:\n%s", strings.Join(rep.Live.NotModelled, "\n"))
	}
	if out := os.Getenv("QM_LIVE_OUT"); out != "" {
		writeJSON(t, filepath.Join(out, "kube-small-sim.json"), simRep)
		writeJSON(t, filepath.Join(out, "kube-small-live.json"), rep)
	}
}

// A run stopped early (Ctrl-C) still returns its report, marked
// interrupted, with what ran until then, and leaves no allocator running.
func TestInterruptedRun(t *testing.T) {
	if testing.Short() {
		t.Skip("runs allocator processes")
	}
	qm := buildQM(t)
	dir := t.TempDir()
	s := load(t, "../load-spreading.yaml")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var progress strings.Builder
	var mu sync.Mutex
	stopped := make(chan struct{})
	go func() {
		defer close(stopped)
		// Cancel once load flows: the first progress line says the rig is up.
		for ctx.Err() == nil {
			mu.Lock()
			up := strings.Contains(progress.String(), "allocators up")
			mu.Unlock()
			if up {
				time.Sleep(3 * time.Second)
				cancel()
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()
	start := time.Now()
	rep, err := Run(ctx, s, Options{Scale: 80, QM: qm, Dir: dir, Progress: lockedWriter{&mu, &progress}})
	<-stopped
	if err != nil {
		t.Fatal(err)
	}
	if time.Since(start) > time.Minute {
		t.Errorf("an interrupted 90 s run took %v to return", time.Since(start))
	}
	if !rep.Live.Interrupted || rep.Results.Totals.Requests == 0 || rep.Results.Totals.Allocated == 0 {
		t.Errorf("interrupted %v, %d requests, %d allocated; want a partial report marked interrupted",
			rep.Live.Interrupted, rep.Results.Totals.Requests, rep.Results.Totals.Allocated)
	}
	if n := len(rep.Results.Series.T); n == 0 || n >= 240 {
		t.Errorf("%d samples; want the ones before the interruption (0 < n < 240)", n)
	}
	for _, c := range []string{"gcp-east", "azure-east"} {
		b, err := os.ReadFile(filepath.Join(dir, c, "allocator.ready"))
		if err != nil {
			t.Fatal(err)
		}
		var addrs struct{ GRPC string }
		if err := json.Unmarshal(b, &addrs); err != nil {
			t.Fatal(err)
		}
		if conn, err := net.DialTimeout("tcp", addrs.GRPC, time.Second); err == nil {
			conn.Close()
			t.Errorf("%s's allocator still listens on %s after the run", c, addrs.GRPC)
		}
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	b  *strings.Builder
}

func (w lockedWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.b.Write(p)
}

func pass(ok bool) string {
	if ok {
		return "ok"
	}
	return "FAIL"
}

func writeJSON(t *testing.T, path string, v any) {
	t.Helper()
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
}

// buildQM builds the qm binary the allocators run as, once per test
// binary, without the race detector: the allocators are the system under
// test, not this package's code.
func buildQM(t *testing.T) string {
	t.Helper()
	qmOnce.Do(func() {
		qmDir, qmErr = os.MkdirTemp("", "qm-live-test-")
		if qmErr != nil {
			return
		}
		qm := filepath.Join(qmDir, "qm")
		if out, err := exec.Command("go", "build", "-o", qm, "../../cmd/qm").CombinedOutput(); err != nil {
			qmErr = fmt.Errorf("go build qm: %v\n%s", err, out)
			return
		}
		qmPath = qm
	})
	if qmErr != nil {
		t.Fatal(qmErr)
	}
	return qmPath
}

var (
	qmOnce        sync.Once
	qmDir, qmPath string
	qmErr         error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if qmDir != "" {
		os.RemoveAll(qmDir)
	}
	os.Exit(code)
}

// testLog writes progress lines to the test's log.
type testLog struct{ t *testing.T }

func (l testLog) Write(b []byte) (int, error) {
	l.t.Log(strings.TrimRight(string(b), "\n"))
	return len(b), nil
}
