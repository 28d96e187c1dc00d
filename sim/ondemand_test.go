package sim

import (
	"encoding/json"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/quartermaster-dev/quartermaster/core"
)

// onDemandSystem is one cluster whose only fleet keeps no server (a
// template), and a stream that creates one per request. Every delay is
// constant, so the latency of a success is exact: the round trip, two
// writes and the start-up.
func onDemandSystem(startup time.Duration) *Config {
	rate := 1.0
	return &Config{
		Name:     "on-demand",
		Seed:     7,
		Duration: 10 * time.Minute,
		Deadline: 30 * time.Second,
		Clusters: []ClusterConfig{{
			Name: "c", Provider: "p", Nodes: 20, SlotsPerNode: 10, Replicas: 1, MaxRetries: 3,
			CostPerNodeHour: 1,
			RTT:             Const(10 * time.Millisecond),
			WriteLatency:    Const(20 * time.Millisecond),
			Fleets: []FleetConfig{{Name: "game", Labels: map[string]string{"game": "x"}, Replicas: 0,
				StartupDelay: Const(startup), SessionEnd: EndShutdown}},
		}},
		Streams: []StreamConfig{{
			Name:    "mm",
			Rate:    RateSpec{Constant: &rate},
			Session: Const(time.Minute),
			Cluster: "c",
			Request: core.Request{Selectors: []core.Selector{{MatchLabels: map[string]string{"game": "x"}}}},
			Create:  true,
		}},
	}
}

func TestOnDemandServesAfterStartup(t *testing.T) {
	res, err := Run(onDemandSystem(5 * time.Second))
	if err != nil {
		t.Fatal(err)
	}
	tot := res.Totals
	if tot.Allocated == 0 || tot.SuccessRate != 1 {
		t.Fatalf("a fleet of no servers must serve every Create request: %+v", tot)
	}
	// 10ms round trip + 20ms create write + 5s start-up + 20ms allocation
	// write, within the histogram's resolution (three significant digits).
	want := 5050.0
	for _, q := range []float64{tot.Latency.P50Ms, tot.Latency.P99Ms} {
		if math.Abs(q-want)/want > 0.002 {
			t.Errorf("latency %v ms, want %v (the start-up is in it)", q, want)
		}
	}
	c := res.Clusters["c"]
	od := c.OnDemand
	if od == nil {
		t.Fatal("no onDemand figures for a cluster a Create stream uses")
	}
	if od.Allocated != tot.Allocated || od.Created != od.Tries || od.DeadlineExceeded != 0 || od.NoRoom != 0 {
		t.Fatalf("onDemand = %+v, totals allocated %d", od, tot.Allocated)
	}
	// The servers exist only while they start and serve: about one a
	// second for 65 s (Little's law), never Ready, and the fleet made none.
	if c.Servers != int(od.Created) {
		t.Fatalf("%d servers for %d created: the fleet made some", c.Servers, od.Created)
	}
	s := res.Series.Clusters["c"]
	for i, r := range s.Ready {
		if r != 0 {
			t.Fatalf("sample %d: %d Ready servers; an on-demand server goes straight to its caller", i, r)
		}
	}
	if c.MeanAllocated < 50 || c.MeanAllocated > 60 {
		t.Fatalf("mean allocated %v, want about 57 (1/s for 1 min, from 5 s on)", c.MeanAllocated)
	}
	// Their node time is charged: with no fleet servers, every node-hour
	// is theirs.
	if c.NodeHours <= 0 || c.Cost != c.NodeHours {
		t.Fatalf("node-hours %v, cost %v", c.NodeHours, c.Cost)
	}
}

func TestOnDemandPastTheDeadlineIsDeletedAgain(t *testing.T) {
	res, err := Run(onDemandSystem(40 * time.Second))
	if err != nil {
		t.Fatal(err)
	}
	tot := res.Totals
	if tot.Allocated != 0 || tot.DeadlineExceeded == 0 {
		t.Fatalf("a 40 s start-up under a 30 s deadline must fail: %+v", tot)
	}
	c := res.Clusters["c"]
	if od := c.OnDemand; od.DeadlineExceeded+uint64(tot.InFlight) != od.Created || od.Created != tot.Requests || c.SuccessRate != 0 {
		t.Fatalf("onDemand %+v, requests %d (%d in flight at the end), success %v", od, tot.Requests, tot.InFlight, c.SuccessRate)
	}
	// Nothing is left behind: only the servers of the last 30 s (about 30
	// at 1/s, so 3-5 nodes of 10 slots) exist at any sample, where kept
	// servers would fill all 20 nodes within 4 minutes; none is ever
	// Allocated.
	s := res.Series.Clusters["c"]
	for i := range s.Allocated {
		if s.Allocated[i] != 0 || s.NodesInUse[i] > 6 {
			t.Fatalf("sample %d: %d allocated on %d nodes", i, s.Allocated[i], s.NodesInUse[i])
		}
	}
	// The servers made and deleted again still cost their 30 s each.
	if want := float64(c.OnDemand.Created) * 30 / 3600; c.NodeHours < want/10 {
		t.Fatalf("node-hours %v for %d servers that lived 30 s", c.NodeHours, c.OnDemand.Created)
	}
}

// A full cluster answers no match, and a multi-cluster request creates its
// server in the next cluster instead.
func TestOnDemandNoRoomGoesToTheNextCluster(t *testing.T) {
	cfg := onDemandSystem(time.Second)
	small := cfg.Clusters[0]
	small.Name, small.Nodes, small.SlotsPerNode = "small", 1, 2
	big := cfg.Clusters[0]
	big.Name = "big"
	cfg.Clusters = []ClusterConfig{small, big}
	cfg.Policies = []core.Policy{
		{Name: "first", Priority: 0, Weight: 1, Connection: core.ConnectionInfo{ClusterName: "small"}},
		{Name: "then", Priority: 1, Weight: 1, Connection: core.ConnectionInfo{ClusterName: "big"}},
	}
	cfg.Streams[0].Cluster = ""
	cfg.Streams[0].Request.MultiCluster = core.MultiClusterSetting{Enabled: true}
	res, err := Run(cfg)
	if err != nil {
		t.Fatal(err)
	}
	s, b := res.Clusters["small"], res.Clusters["big"]
	if res.Totals.SuccessRate != 1 || s.OnDemand.NoRoom == 0 || b.Allocated == 0 {
		t.Fatalf("totals %+v; small %+v; big %+v", res.Totals, s.OnDemand, b.OnDemand)
	}
	if s.MeanAllocated > 2 {
		t.Fatalf("small holds %v servers on its 2 slots", s.MeanAllocated)
	}
}

// An on-demand server is its caller's: a stream that allocates from the
// fleet never gets one, even though its labels match.
func TestOnDemandServersAreNotHandedToOthers(t *testing.T) {
	cfg := onDemandSystem(time.Second)
	warm := cfg.Streams[0]
	warm.Name, warm.Create = "warm", false
	cfg.Streams = append(cfg.Streams, warm)
	cfg.Clusters[0].Replicas = 2
	cfg.Clusters[0].InformerDelay = Const(time.Second)
	res, err := Run(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c := res.Clusters["c"]
	if c.OnDemand.Allocated == 0 || c.Allocated != c.OnDemand.Allocated || c.UnAllocated == 0 {
		t.Fatalf("cluster %+v, onDemand %+v", c, c.OnDemand)
	}
}

func TestOnDemandIsDeterministic(t *testing.T) {
	run := func() string {
		cfg := onDemandSystem(0)
		cfg.Clusters[0].Fleets[0].StartupDelay = Dist{Kind: LogNormal, Median: 20 * time.Second, P99: 45 * time.Second}
		cfg.Clusters[0].WriteLatency = Exp(15 * time.Millisecond)
		cfg.Streams[0].Session = Exp(time.Minute)
		res, err := Run(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if od := res.Clusters["c"].OnDemand; od.Allocated == 0 || od.DeadlineExceeded == 0 {
			t.Fatalf("want both outcomes from a start-up around the deadline: %+v", od)
		}
		b, err := json.Marshal(res)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	if a, b := run(), run(); a != b {
		t.Fatal("the same seed gave different results")
	}
}

func TestOnDemandConfigErrors(t *testing.T) {
	for name, c := range map[string]struct {
		mut  func(*Config)
		want string
	}{
		"no such template": {func(c *Config) { c.Streams[0].Template = "nope" }, `has no fleet named "nope"`},
		"no matching fleet": {func(c *Config) {
			c.Streams[0].Request.Selectors[0].MatchLabels = map[string]string{"game": "y"}
		}, "has no fleet matching"},
		"template without create": {func(c *Config) { c.Streams[0].Create, c.Streams[0].Template = false, "game" }, "without create"},
	} {
		cfg := onDemandSystem(time.Second)
		c.mut(cfg)
		_, err := Run(cfg)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err = %v, want %q", name, err, c.want)
		}
	}
}

// Adding a Create stream and the cluster it creates in leaves another
// cluster's results exactly as they were (its draws are seeded by name).
func TestOnDemandLeavesOtherDrawsAlone(t *testing.T) {
	warm := func() *Config {
		cfg := onDemandSystem(time.Second)
		cfg.Clusters[0].Name = "warm"
		cfg.Clusters[0].WriteLatency = Exp(15 * time.Millisecond)
		cfg.Clusters[0].Fleets[0].Replicas = 100
		cfg.Clusters[0].Fleets[0].StartupDelay = Exp(5 * time.Second)
		cfg.Streams[0].Name, cfg.Streams[0].Cluster, cfg.Streams[0].Create = "w", "warm", false
		cfg.Streams[0].Session = Exp(time.Minute)
		return cfg
	}
	alone, err := Run(warm())
	if err != nil {
		t.Fatal(err)
	}
	cfg := warm()
	od := onDemandSystem(time.Second)
	od.Clusters[0].WriteLatency = Exp(15 * time.Millisecond)
	cfg.Clusters = append(cfg.Clusters, od.Clusters[0])
	cfg.Streams = append(cfg.Streams, od.Streams[0])
	both, err := Run(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if both.Clusters["c"].OnDemand.Allocated == 0 {
		t.Fatal("the Create stream served nothing")
	}
	a, b := alone.Clusters["warm"], both.Clusters["warm"]
	b.OnDemand = nil // present (zeros) only in the run with a Create stream
	b.Share = a.Share
	ja, _ := json.Marshal(a)
	jb, _ := json.Marshal(b)
	if string(ja) != string(jb) {
		t.Fatalf("the warm cluster changed when a Create stream was added:\n%s\n%s", ja, jb)
	}
}
