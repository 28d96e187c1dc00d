package live

import (
	"context"
	"encoding/json"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
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

// buildQM builds the qm binary the allocators run as, without the race
// detector: they are the system under test, not this package's code.
func buildQM(t *testing.T) string {
	t.Helper()
	qm := filepath.Join(t.TempDir(), "qm")
	cmd := exec.Command("go", "build", "-o", qm, "../../cmd/qm")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build qm: %v\n%s", err, out)
	}
	return qm
}

// testLog writes progress lines to the test's log.
type testLog struct{ t *testing.T }

func (l testLog) Write(b []byte) (int, error) {
	l.t.Log(strings.TrimRight(string(b), "\n"))
	return len(b), nil
}
