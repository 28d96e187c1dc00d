package live

import (
	"context"
	"math"
	"path/filepath"
	"testing"
	"time"

	"github.com/quartermaster-dev/quartermaster/scenarios"
	"github.com/quartermaster-dev/quartermaster/trace"
)

// TestReplayOfLiveRun records a live run's trace and replays it in the
// simulator against the same file: the replay's cluster shares agree with
// the live run's within 5 points. The run is kube-small (a burst that
// overflows on-prem into the cloud) on the memory backend at time scale
// 40, 30 s of wall time; the trace is on the scenario's timeline, so the
// replay needs no word of the scale.
func TestReplayOfLiveRun(t *testing.T) {
	if testing.Short() {
		t.Skip("runs allocator processes for half a minute")
	}
	qm := buildQM(t)
	s := load(t, "testdata/kube-small.yaml")
	tracePath := filepath.Join(t.TempDir(), "live.jsonl")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const scale = 40
	rep, err := Run(ctx, s, Options{Scale: scale, QM: qm, Progress: testLog{t}, Trace: tracePath})
	if err != nil {
		t.Fatal(err)
	}
	ti := rep.Live.Trace
	if ti == nil || ti.Path != tracePath || ti.Written == 0 || ti.Dropped != 0 {
		t.Fatalf("the report's trace: %+v", ti)
	}
	recs, err := trace.ReadFiles(tracePath)
	if err != nil {
		t.Fatal(err)
	}
	if uint64(len(recs)) != ti.Written {
		t.Errorf("%d records in the file, the report says %d written", len(recs), ti.Written)
	}

	// The records are on the scenario's timeline: the arrivals span most
	// of its 20 minutes (not the 30 s of wall time), and every cluster
	// is named as the file names it.
	first, last := recs[0].At, recs[0].At
	allocs := 0
	for _, r := range recs {
		if r.At.Before(first) {
			first = r.At
		}
		if r.At.After(last) {
			last = r.At
		}
		if r.Allocated() {
			allocs++
			if _, ok := rep.Results.Clusters[r.Cluster]; !ok {
				t.Fatalf("an allocation by %q, not a cluster of the scenario", r.Cluster)
			}
		}
	}
	if span := last.Sub(first); span < 18*time.Minute || span > 21*time.Minute {
		t.Errorf("the trace spans %v; want about the scenario's 20m", span)
	}
	if first.Before(ti.Start) || first.Sub(ti.Start) > time.Minute {
		t.Errorf("the first record at %v, the run started at %v", first, ti.Start)
	}

	replay, replayed, err := s.Replay(recs, scenarios.Options{})
	if err != nil {
		t.Fatal(err)
	}
	// Almost every session's length comes from the trace's releases (the
	// last few may end after the run).
	if replayed.Sessions < allocs*9/10 {
		t.Errorf("%d of %d session lengths from the trace", replayed.Sessions, allocs)
	}
	// Session lengths on the scenario's timeline too: the file's mean is
	// 20 s, which is half a second of wall time at this scale.
	open := map[string]time.Time{}
	var sum time.Duration
	n := 0
	for _, r := range recs {
		switch {
		case r.Allocated():
			open[r.GameServer] = r.At.Add(r.Latency())
		case r.Event == trace.EventRelease && r.Outcome == "OK":
			if at, ok := open[r.GameServer]; ok {
				sum += r.At.Sub(at)
				n++
				delete(open, r.GameServer)
			}
		}
	}
	if n == 0 {
		t.Fatal("no release in the trace")
	}
	if mean := sum / time.Duration(n); mean < 15*time.Second || mean > 30*time.Second {
		t.Errorf("sessions in the trace last %v on average; the scenario draws 20s", mean)
	}
	for _, n := range []string{"on-prem", "cloud"} {
		l, r := rep.Results.Clusters[n].Share, replay.Results.Clusters[n].Share
		t.Logf("%s share: live %.4f, replayed %.4f", n, l, r)
		if math.Abs(l-r) > 0.05 {
			t.Errorf("%s's share: live %.4f, replayed %.4f: more than 5 points apart", n, l, r)
		}
	}
	if c := rep.Results.Clusters["cloud"].Share; c < 0.03 {
		t.Errorf("the live run sent %.4f to the cloud; the burst must overflow on-prem for the test to show routing", c)
	}
	t.Logf("success rate: live %.5f, replayed %.5f; requests: live trace %d, replayed %d",
		rep.Results.Totals.SuccessRate, replay.Results.Totals.SuccessRate, allocs, replayed.Requests)
}
