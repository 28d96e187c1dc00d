package sim

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/quartermaster-dev/quartermaster/core"
	"github.com/quartermaster-dev/quartermaster/trace"
)

var replayT0 = time.Date(2026, 11, 21, 20, 0, 0, 0, time.UTC)

func traceAlloc(at time.Duration, outcome, cluster, gs string, req string) trace.Record {
	return trace.Record{At: replayT0.Add(at), Request: json.RawMessage(req), Outcome: outcome, Cluster: cluster, GameServer: gs, LatencyMs: 2}
}

func traceRelease(at time.Duration, gs string) trace.Record {
	return trace.Record{At: replayT0.Add(at), Event: trace.EventRelease, Outcome: "OK", GameServer: gs, LatencyMs: 1}
}

const (
	reqShooter = `{"namespace":"default","gameServerSelectors":[{"matchLabels":{"game":"shooter"}}]}`
	reqOther   = `{"gameServerSelectors":[{"matchLabels":{"game":"shooter"}}],"scheduling":"Distributed"}`
)

func replayConfig(replicas int) *Config {
	return &Config{
		Name: "replay", Seed: 1, Duration: time.Minute, Deadline: 30 * time.Second, ForwardTimeout: time.Second,
		Clusters: []ClusterConfig{{
			Name: "only", Nodes: 1, SlotsPerNode: 10, Replicas: 1,
			Fleets: []FleetConfig{{Name: "game", Labels: map[string]string{"game": "shooter"}, Replicas: replicas, SessionEnd: EndReady}},
		}},
	}
}

// TestReplayStreams: arrivals at the recorded times from the first
// request, one stream per distinct request, sessions from the releases,
// refusals the simulator cannot produce left out and counted.
func TestReplayStreams(t *testing.T) {
	recs := []trace.Record{
		traceAlloc(0, "OK", "only", "default/a", reqShooter),
		traceAlloc(100*time.Millisecond, "OK", "only", "default/b", reqOther),
		traceAlloc(150*time.Millisecond, "PermissionDenied", "", "", reqShooter),
		traceRelease(1002*time.Millisecond, "default/a"), // 1 s after the answer at 2 ms
		traceAlloc(3*time.Second, "ResourceExhausted", "", "", reqShooter),
		traceRelease(4*time.Second, "default/zzz"), // nothing of ours
	}
	streams, rep, err := ReplayStreams(recs, ReplayOptions{Cluster: "only", Session: Const(time.Minute)})
	if err != nil {
		t.Fatal(err)
	}
	if len(streams) != 2 || rep.Requests != 3 || rep.Sessions != 1 || rep.Span != 3*time.Second ||
		!reflect.DeepEqual(rep.Skipped, map[string]int{"PermissionDenied": 1}) || !reflect.DeepEqual(rep.Recorded, map[string]int{"only": 2}) {
		t.Fatalf("streams %d, %+v", len(streams), rep)
	}
	s0, s1 := streams[0], streams[1]
	if !reflect.DeepEqual(s0.Arrivals, []time.Duration{0, 3 * time.Second}) || !reflect.DeepEqual(s0.Sessions, []time.Duration{time.Second, -1}) {
		t.Fatalf("stream 0: arrivals %v sessions %v", s0.Arrivals, s0.Sessions)
	}
	if !reflect.DeepEqual(s1.Arrivals, []time.Duration{100 * time.Millisecond}) || s1.Request.Scheduling != core.Distributed || s1.Cluster != "only" {
		t.Fatalf("stream 1: %+v", s1)
	}

	for _, tc := range []struct {
		recs []trace.Record
		o    ReplayOptions
		want string
	}{
		{nil, ReplayOptions{Cluster: "only"}, "no allocation to replay"},
		{recs[:1], ReplayOptions{}, "is not multi-cluster: say which cluster"},
		{[]trace.Record{traceAlloc(0, "OK", "", "", `{"scheduling":"Sideways"}`)}, ReplayOptions{Cluster: "only"}, `request.scheduling: "Sideways"`},
		{recs[:1], ReplayOptions{Cluster: "only", Session: Dist{Kind: Exponential}}, "session: exponential mean must be positive"},
	} {
		if _, _, err := ReplayStreams(tc.recs, tc.o); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("error %v, want %q", err, tc.want)
		}
	}
}

// TestReplayUsesRecordedSessions: two servers, three requests. When the
// trace shows the first session ending before the third request, the
// replay serves all three; when it does not, the drawn minute-long
// sessions leave the third without a server. Either way the run is the
// same on every repeat.
func TestReplayUsesRecordedSessions(t *testing.T) {
	base := []trace.Record{
		traceAlloc(0, "OK", "only", "default/a", reqShooter),
		traceAlloc(100*time.Millisecond, "OK", "only", "default/b", reqShooter),
		traceAlloc(2*time.Second, "OK", "only", "default/a", reqShooter),
	}
	run := func(recs []trace.Record) *Results {
		t.Helper()
		streams, _, err := ReplayStreams(recs, ReplayOptions{Cluster: "only", Session: Const(time.Minute)})
		if err != nil {
			t.Fatal(err)
		}
		cfg := replayConfig(2)
		cfg.Streams = streams
		res, err := Run(cfg)
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	released := append([]trace.Record{traceRelease(time.Second, "default/a")}, base...)
	if r := run(released); r.Totals.Requests != 3 || r.Totals.Allocated != 3 {
		t.Fatalf("with the release: %+v", r.Totals)
	}
	r1 := run(base)
	if r1.Totals.Requests != 3 || r1.Totals.Allocated != 2 || r1.Totals.UnAllocated != 1 {
		t.Fatalf("without it: %+v", r1.Totals)
	}
	b1, _ := json.Marshal(r1)
	b2, _ := json.Marshal(run(base))
	if string(b1) != string(b2) {
		t.Fatal("the same replay gave different results")
	}
}

// TestReplayArrivalTimes: a replayed request arrives when the trace says:
// with one server and sessions of exactly 1 s, requests 1.5 s apart are
// all served and requests 0.5 s apart alternate.
func TestReplayArrivalTimes(t *testing.T) {
	for _, tc := range []struct {
		gap       time.Duration
		allocated uint64
	}{{1500 * time.Millisecond, 10}, {500 * time.Millisecond, 5}} {
		var recs []trace.Record
		for i := range 10 {
			recs = append(recs, traceAlloc(time.Duration(i)*tc.gap, "OK", "only", fmt.Sprintf("default/s%d", i), reqShooter))
		}
		streams, _, err := ReplayStreams(recs, ReplayOptions{Cluster: "only", Session: Const(time.Second)})
		if err != nil {
			t.Fatal(err)
		}
		cfg := replayConfig(1)
		cfg.Clusters[0].WriteLatency = Const(0)
		cfg.Streams = streams
		res, err := Run(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if res.Totals.Requests != 10 || res.Totals.Allocated != tc.allocated {
			t.Errorf("gap %v: %d of %d allocated, want %d", tc.gap, res.Totals.Allocated, res.Totals.Requests, tc.allocated)
		}
	}
}

func TestStreamArrivalsChecked(t *testing.T) {
	cfg := replayConfig(1)
	cfg.Streams = []StreamConfig{{Name: "x", Cluster: "only", Arrivals: []time.Duration{2, 1}}}
	if _, err := Run(cfg); err == nil || !strings.Contains(err.Error(), "ascending") {
		t.Fatalf("error %v", err)
	}
	cfg.Streams = []StreamConfig{{Name: "x", Cluster: "only", Arrivals: []time.Duration{1}, Sessions: []time.Duration{1, 2}}}
	if _, err := Run(cfg); err == nil || !strings.Contains(err.Error(), "2 sessions for 1 arrivals") {
		t.Fatalf("error %v", err)
	}
}
