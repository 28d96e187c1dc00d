package sim

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	"github.com/quartermaster-dev/quartermaster/core"
)

// lossyRun is two clusters behind a forwarder, one whose link loses
// answers, and a matchmaker that loses some answers itself, gives up at 2 s
// and retries. Requests stop at 20 minutes; sessions last 30 s, so by the
// end of the hour every server is Ready again unless something holds it.
func lossyRun(keys bool, linkLoss, callerLoss float64) *Config {
	cl := func(name string, loss float64) ClusterConfig {
		return ClusterConfig{
			Name: name, Provider: name, RTT: Const(20 * time.Millisecond),
			Nodes: 50, SlotsPerNode: 10, WriteLatency: Exp(15 * time.Millisecond),
			Replicas: 1, MaxRetries: 10, AnswerLoss: loss,
			Fleets: []FleetConfig{{Name: "game", Replicas: 200, Placement: PlacePacked,
				StartupDelay: Const(time.Second), SessionEnd: EndReady}},
		}
	}
	zero, rate := 0.0, 5.0
	return &Config{
		Name: "lossy", Seed: 7, Duration: time.Hour, ForwardTimeout: time.Second, Deadline: 30 * time.Second,
		Clusters: []ClusterConfig{cl("a", linkLoss), cl("b", 0)},
		Policies: []core.Policy{
			{Name: "a", Priority: 0, Weight: 1, Connection: core.ConnectionInfo{ClusterName: "a"}},
			{Name: "b", Priority: 1, Weight: 1, Connection: core.ConnectionInfo{ClusterName: "b"}},
		},
		Streams: []StreamConfig{{
			Name:    "matchmaker",
			Rate:    RateSpec{Steps: []Step{{At: 0, Rate: rate}, {At: 20 * time.Minute, Rate: zero}}},
			Session: Const(30 * time.Second),
			Request: core.Request{MultiCluster: core.MultiClusterSetting{Enabled: true}},
			Caller: &Caller{AnswerLoss: callerLoss, Timeout: 2 * time.Second, Retries: 3,
				RetryDelay: 500 * time.Millisecond, Keys: keys},
		}},
		Losses: &Losses{KeyRetries: 1, ReconcileDelay: time.Second, KeyWindow: 5 * time.Minute},
	}
}

// allocatedAtEnd is the servers Allocated at the last sample, from the
// fleets' own counts rather than the model's bookkeeping.
func allocatedAtEnd(r *Results) int {
	n := 0
	for _, s := range r.Series.Clusters {
		n += s.Allocated[len(s.Allocated)-1]
	}
	return n
}

func TestLostAnswersLeakWithoutKeys(t *testing.T) {
	res, err := Run(lossyRun(false, 0.05, 0.02))
	if err != nil {
		t.Fatal(err)
	}
	l := res.Losses
	if l == nil {
		t.Fatal("no losses section in a run with the loss model on")
	}
	if l.LostOnLinks == 0 || l.LostToCallers == 0 || l.CallerRetries == 0 {
		t.Fatalf("nothing lost: %+v", l)
	}
	// Every lost answer leaves a server nobody releases; no key, nothing
	// avoided or reconciled, and the forwarder never retries a cluster.
	if l.Leaked != l.LostOnLinks+l.LostToCallers+l.GaveUp || l.DuplicatesAvoided != 0 || l.Reconciled != 0 || l.ForwardRetries != 0 {
		t.Fatalf("losses = %+v", l)
	}
	if l.LeakedAtEnd != l.Leaked || l.LeakedPerHour != float64(l.Leaked) {
		t.Fatalf("leaks must last to the end of a one-hour run: %+v", l)
	}
	// The fleets agree: what is still Allocated at the end is the leaks.
	if got := allocatedAtEnd(res); got != int(l.Leaked) {
		t.Fatalf("%d servers Allocated at the end, %d leaked", got, l.Leaked)
	}
	if l.Clusters["a"].LostOnLinks != l.LostOnLinks || l.Clusters["b"].LostOnLinks != 0 {
		t.Fatalf("link losses by cluster: %+v", l.Clusters)
	}
	// The allocations made include the leaked ones: each cluster's share
	// is of those, and they add up.
	if s := res.Clusters["a"].Share + res.Clusters["b"].Share; s < 0.9999 || s > 1.0001 {
		t.Fatalf("shares add up to %v", s)
	}
	if res.Clusters["a"].Allocated+res.Clusters["b"].Allocated <= res.Totals.Allocated {
		t.Fatalf("allocations made %d+%d, answered %d: the leaked ones are missing",
			res.Clusters["a"].Allocated, res.Clusters["b"].Allocated, res.Totals.Allocated)
	}
}

func TestLostAnswersDoNotLeakWithKeys(t *testing.T) {
	res, err := Run(lossyRun(true, 0.05, 0.02))
	if err != nil {
		t.Fatal(err)
	}
	l := res.Losses
	if l.LostOnLinks == 0 || l.LostToCallers == 0 {
		t.Fatalf("nothing lost: %+v", l)
	}
	if l.Leaked != 0 || l.LeakedServerHours != 0 {
		t.Fatalf("keys leaked: %+v", l)
	}
	if l.DuplicatesAvoided == 0 || l.ForwardRetries == 0 {
		t.Fatalf("keys avoided nothing: %+v", l)
	}
	// A keyed request never moves on from a cluster that may hold its
	// allocation, so nothing is left for reconciliation.
	if l.Reconciled != 0 || l.Clusters["a"].Reconciled != 0 {
		t.Fatalf("keyed allocations reconciled: %+v", l)
	}
	// Every server is back to Ready by the end: nothing holds one.
	if got := allocatedAtEnd(res); got != 0 {
		t.Fatalf("%d servers still Allocated at the end of a run whose callers all had keys", got)
	}
	// Fewer allocations than without keys for the same load and losses.
	unkeyed, err := Run(lossyRun(false, 0.05, 0.02))
	if err != nil {
		t.Fatal(err)
	}
	made := func(r *Results) uint64 { return r.Clusters["a"].Allocated + r.Clusters["b"].Allocated }
	if made(res) >= made(unkeyed) {
		t.Fatalf("keys made %d allocations, no keys %d", made(res), made(unkeyed))
	}
}

// A caller that gives up at its timeout, while the allocator is slow,
// leaks the server that commits after it left, unless it has a key.
func TestCallerGivingUpLeaksWithoutKeys(t *testing.T) {
	for _, keys := range []bool{false, true} {
		cfg := lossyRun(keys, 0, 0)
		for i := range cfg.Clusters {
			cfg.Clusters[i].WriteLatency = Dist{Kind: LogNormal, Median: 300 * time.Millisecond, P99: 4 * time.Second}
		}
		res, err := Run(cfg)
		if err != nil {
			t.Fatal(err)
		}
		l := res.Losses
		if l.GaveUp == 0 || l.LostOnLinks != 0 || l.LostToCallers != 0 {
			t.Fatalf("keys %v: %+v", keys, l)
		}
		if keys && (l.Leaked != 0 || allocatedAtEnd(res) != 0 || l.DuplicatesAvoided == 0) {
			t.Fatalf("keys: %+v, %d Allocated at the end", l, allocatedAtEnd(res))
		}
		if !keys && (l.Leaked != l.GaveUp || allocatedAtEnd(res) != int(l.Leaked)) {
			t.Fatalf("no keys: %+v, %d Allocated at the end", l, allocatedAtEnd(res))
		}
	}
}

// A fleet whose servers shut down when nobody joins reclaims leaks.
func TestIdleShutdownReclaimsLeaks(t *testing.T) {
	cfg := lossyRun(false, 0.05, 0.02)
	for i := range cfg.Clusters {
		cfg.Clusters[i].Fleets[0].IdleShutdown = 10 * time.Minute
	}
	res, err := Run(cfg)
	if err != nil {
		t.Fatal(err)
	}
	l := res.Losses
	if l.Leaked == 0 || l.Reclaimed != l.Leaked || l.LeakedAtEnd != 0 || allocatedAtEnd(res) != 0 {
		t.Fatalf("losses %+v, %d Allocated at the end", l, allocatedAtEnd(res))
	}
	// Each leak held its server ten minutes.
	if want := float64(l.Leaked) / 6; l.LeakedServerHours < want*0.999 || l.LeakedServerHours > want*1.001 {
		t.Fatalf("leaked server-hours %v, want %v", l.LeakedServerHours, want)
	}
}

// The loss model with every rate at zero, and callers that wait as long as
// it takes, changes nothing but adding its (empty) figures.
func TestZeroLossChangesNothing(t *testing.T) {
	for _, keys := range []bool{false, true} {
		plain := lossyRun(keys, 0, 0)
		plain.Streams[0].Caller = nil
		plain.Losses = nil
		off, err := Run(plain)
		if err != nil {
			t.Fatal(err)
		}
		if off.Losses != nil {
			t.Fatal("a losses section with the model off")
		}
		cfg := lossyRun(keys, 0, 0)
		cfg.Streams[0].Caller.Timeout, cfg.Streams[0].Caller.Retries = 0, 0
		on, err := Run(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if on.Losses == nil {
			t.Fatal("no losses section with the model on")
		}
		empty := LossResult{Clusters: map[string]ClusterLosses{"a": {}, "b": {}}}
		if b1, b2 := mustJSON(t, on.Losses), mustJSON(t, &empty); !bytes.Equal(b1, b2) {
			t.Fatalf("losses at zero rates: %s", b1)
		}
		on.Losses = nil
		if b1, b2 := mustJSON(t, on), mustJSON(t, off); !bytes.Equal(b1, b2) {
			t.Fatal("results with the loss model at zero differ from those without it")
		}
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Runs stay reproducible with losses: the same seed, the same results.
func TestLossesReproducible(t *testing.T) {
	a, err := Run(lossyRun(true, 0.05, 0.02))
	if err != nil {
		t.Fatal(err)
	}
	b, err := Run(lossyRun(true, 0.05, 0.02))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(mustJSON(t, a), mustJSON(t, b)) {
		t.Fatal("two runs of one seed differ")
	}
}

func TestCallerChecked(t *testing.T) {
	for _, c := range []Caller{
		{AnswerLoss: 1.5, Timeout: time.Second},
		{AnswerLoss: -0.1, Timeout: time.Second},
		{AnswerLoss: 0.1},
		{Retries: 2},
		{Timeout: -time.Second},
		{Timeout: time.Second, Retries: maxCallerRetries + 1},
	} {
		cfg := lossyRun(false, 0, 0)
		cfg.Streams[0].Caller = &c
		if _, err := Run(cfg); err == nil {
			t.Errorf("caller %+v accepted", c)
		}
	}
	cfg := lossyRun(false, 0, 0)
	cfg.Clusters[0].AnswerLoss = 2
	if _, err := Run(cfg); err == nil {
		t.Error("answerLoss 2 accepted")
	}
}

// A keyed allocation that no retry takes (the caller does not retry) is
// released when the key's window closes: held, never leaked.
func TestKeyWindowReleasesUntakenAllocations(t *testing.T) {
	cfg := lossyRun(true, 0, 0.05)
	cfg.Streams[0].Caller.Retries = 0
	res, err := Run(cfg)
	if err != nil {
		t.Fatal(err)
	}
	l := res.Losses
	if l.LostToCallers == 0 || l.CallersFailed != l.LostToCallers+l.GaveUp {
		t.Fatalf("losses %+v", l)
	}
	if l.KeyReleases != l.LostToCallers+l.GaveUp || l.Leaked != 0 || allocatedAtEnd(res) != 0 {
		t.Fatalf("losses %+v, %d Allocated at the end", l, allocatedAtEnd(res))
	}
}

// keyedPair is two clusters, a tried first and b after it, and a keyed
// caller whose calls arrive at the given instants; the forwarder does not
// try a cluster again after a lost answer (KeyRetries 0), so each lost
// answer ends its try Unavailable to the caller at once.
func keyedPair(linkLoss float64, arrivals []time.Duration) *Config {
	cfg := lossyRun(true, linkLoss, 0)
	cfg.Duration = 10 * time.Minute
	cfg.Streams[0].Rate = RateSpec{}
	cfg.Streams[0].Arrivals = arrivals
	cfg.Streams[0].Caller = &Caller{Timeout: 10 * time.Second, Retries: 40, RetryDelay: 100 * time.Millisecond, Keys: true}
	cfg.Losses = &Losses{KeyRetries: 0, ReconcileDelay: time.Second, KeyWindow: 5 * time.Minute}
	return cfg
}

// After a lost answer a keyed request does not move on to the next
// cluster: its caller is answered Unavailable, and its retry is served by
// the cluster holding the key's allocation, with that allocation. Nothing
// is ever allocated at the other cluster, and each call allocates once.
func TestKeyedRetryServedWhereTheKeyIsHeld(t *testing.T) {
	var arrivals []time.Duration
	for i := range 60 {
		arrivals = append(arrivals, time.Duration(i)*3*time.Second)
	}
	res, err := Run(keyedPair(0.4, arrivals))
	if err != nil {
		t.Fatal(err)
	}
	l := res.Losses
	if l.LostOnLinks < 10 {
		t.Fatalf("too few answers lost to test anything: %+v", l)
	}
	if got := res.Clusters["b"].Allocated; got != 0 {
		t.Fatalf("cluster b allocated %d servers: keyed requests moved on past a cluster holding their allocation", got)
	}
	if got := res.Clusters["a"].Allocated; got != uint64(len(arrivals)) {
		t.Fatalf("cluster a made %d allocations for %d calls", got, len(arrivals))
	}
	if res.Totals.Allocated != uint64(len(arrivals)) || l.CallersFailed != 0 {
		t.Fatalf("%d of %d calls served, %d callers failed", res.Totals.Allocated, len(arrivals), l.CallersFailed)
	}
	// Every lost answer was answered Unavailable, retried by its caller
	// and replayed from the key's allocation (a replay's answer may be
	// lost again, and retried again).
	if res.Totals.Unavailable != l.LostOnLinks || l.CallerRetries != l.LostOnLinks || l.DuplicatesAvoided != l.LostOnLinks {
		t.Fatalf("%d unavailable, losses %+v", res.Totals.Unavailable, l)
	}
	if l.Reconciled != 0 || l.Leaked != 0 || l.KeyReleases != 0 || l.ForwardRetries != 0 {
		t.Fatalf("losses %+v", l)
	}
	if got := allocatedAtEnd(res); got != 0 {
		t.Fatalf("%d servers Allocated at the end", got)
	}
}

// A keyed request whose retry cannot reach the cluster holding its key's
// allocation is answered Unavailable, and is not served by the other
// cluster; the allocation is released when the key's window closes.
func TestKeyedRetryWaitsForTheClusterHoldingTheKey(t *testing.T) {
	cfg := keyedPair(1, []time.Duration{0})
	cfg.Losses.KeyRetries = 1
	cfg.Streams[0].Caller.Retries = 5
	// The forwarder's own retry reaches a (and loses its answer too);
	// every retry of the caller's finds a down.
	cfg.Outages = []Outage{{Cluster: "a", Start: 1500 * time.Millisecond, End: 2 * time.Minute}}
	res, err := Run(cfg)
	if err != nil {
		t.Fatal(err)
	}
	l := res.Losses
	if res.Clusters["b"].Allocated != 0 || res.Totals.Allocated != 0 {
		t.Fatalf("served elsewhere: b allocated %d, %d answered", res.Clusters["b"].Allocated, res.Totals.Allocated)
	}
	if res.Clusters["a"].Allocated != 1 || l.LostOnLinks != 2 || l.ForwardRetries != 1 {
		t.Fatalf("a allocated %d; losses %+v", res.Clusters["a"].Allocated, l)
	}
	if l.CallerRetries != 5 || l.CallersFailed != 1 || res.Totals.Unavailable != 6 {
		t.Fatalf("%d unavailable; losses %+v", res.Totals.Unavailable, l)
	}
	if l.KeyReleases != 1 || l.Leaked != 0 || l.Reconciled != 0 || allocatedAtEnd(res) != 0 {
		t.Fatalf("losses %+v, %d Allocated at the end", l, allocatedAtEnd(res))
	}
}

// A keyed retry whose key's allocation is at a cluster no policy in force
// names any more is answered Unavailable without a try anywhere: the
// forwarder can neither ask that cluster nor go past it.
func TestKeyedRetryAfterItsClusterLeftThePolicies(t *testing.T) {
	cfg := keyedPair(1, []time.Duration{29 * time.Second})
	start := time.Date(2026, 11, 23, 0, 0, 0, 0, time.UTC)
	cfg.Start = start
	w, err := core.ParseWindow("", start.Add(30*time.Second).Format(time.RFC3339), "", "")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Policies[0].Window = &w
	cfg.Streams[0].Caller.Retries = 3
	res, err := Run(cfg)
	if err != nil {
		t.Fatal(err)
	}
	l := res.Losses
	if res.Clusters["a"].Allocated != 1 || res.Clusters["b"].Allocated != 0 || res.Totals.Allocated != 0 {
		t.Fatalf("a allocated %d, b %d, %d answered", res.Clusters["a"].Allocated, res.Clusters["b"].Allocated, res.Totals.Allocated)
	}
	// One try of a, lost; the three retries are answered Unavailable
	// without a try of either cluster.
	if a, b := res.Clusters["a"].Tries, res.Clusters["b"].Tries; a != 1 || b != 0 {
		t.Fatalf("tries: a %d, b %d", a, b)
	}
	if l.LostOnLinks != 1 || l.CallerRetries != 3 || l.CallersFailed != 1 || res.Totals.Unavailable != 4 || l.DuplicatesAvoided != 0 {
		t.Fatalf("%d unavailable; losses %+v", res.Totals.Unavailable, l)
	}
	if l.KeyReleases != 1 || allocatedAtEnd(res) != 0 {
		t.Fatalf("losses %+v, %d Allocated at the end", l, allocatedAtEnd(res))
	}
}
