package sim

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/quartermaster-dev/quartermaster/core"
)

// hourlyConfig has a fallback cluster always in force (priority 1) and
// six clusters, each preferred (priority 0) for one hour of the run by a
// from/until window: seven distinct policy sets, more than maxMemoSets.
func hourlyConfig(t *testing.T) *Config {
	start := time.Date(2026, 11, 23, 0, 0, 0, 0, time.UTC)
	cfg := &Config{
		Name: "hourly", Seed: 7, Duration: 7 * time.Hour, Start: start,
		ForwardTimeout: time.Second, Deadline: 30 * time.Second,
	}
	names := []string{"fallback", "h1", "h2", "h3", "h4", "h5", "h6"}
	for i, name := range names {
		cfg.Clusters = append(cfg.Clusters, ClusterConfig{
			Name: name, Provider: "p", RTT: Const(time.Millisecond), Nodes: 10, SlotsPerNode: 10,
			WriteLatency: Const(time.Millisecond), Replicas: 1, InformerDelay: Const(0), DecisionTime: Const(0), MaxRetries: 10,
			Fleets: []FleetConfig{{Name: "f", Replicas: 50, Placement: PlacePacked, StartupDelay: Const(time.Second), SessionEnd: EndReady}},
		})
		p := core.Policy{Name: name, Priority: 1, Weight: 1, Connection: core.ConnectionInfo{ClusterName: name}}
		if i > 0 {
			w, err := core.ParseWindow(start.Add(time.Duration(i)*time.Hour).Format(time.RFC3339), start.Add(time.Duration(i+1)*time.Hour).Format(time.RFC3339), "", "")
			if err != nil {
				t.Fatal(err)
			}
			p.Priority, p.Window = 0, &w
		}
		cfg.Policies = append(cfg.Policies, p)
		cfg.Phases = append(cfg.Phases, Phase{Name: fmt.Sprintf("hour%d", i), Start: time.Duration(i) * time.Hour, End: time.Duration(i+1) * time.Hour})
	}
	one := 1.0
	cfg.Streams = []StreamConfig{{
		Name: "w", Rate: RateSpec{Constant: &one}, Session: Const(10 * time.Second),
		Request: core.Request{MultiCluster: core.MultiClusterSetting{Enabled: true}},
	}}
	return cfg
}

// TestWindowsRouteByVirtualClock: each hour's preferred cluster takes every
// request of its hour, the fallback the first hour's; the sets past the
// memoized ones route the same way.
func TestWindowsRouteByVirtualClock(t *testing.T) {
	res, err := Run(hourlyConfig(t))
	if err != nil {
		t.Fatal(err)
	}
	for i, name := range []string{"fallback", "h1", "h2", "h3", "h4", "h5", "h6"} {
		ph := res.Phases[fmt.Sprintf("hour%d", i)]
		if ph.Requests < 3000 || ph.Allocated != ph.Requests || ph.Clusters[name].Share != 1 {
			t.Errorf("hour %d: %d requests, %d allocated, %s's share %v; want all on %s",
				i, ph.Requests, ph.Allocated, name, ph.Clusters[name].Share, name)
		}
	}
}

// TestWindowChangesBounded: windows that change the policies in force
// more often than the bound are refused with a clear error, not followed.
func TestWindowChangesBounded(t *testing.T) {
	defer func(n int) { maxSegments = n }(maxSegments)
	maxSegments = 5
	_, err := Run(hourlyConfig(t))
	if err == nil || !strings.Contains(err.Error(), "more than 5 times") || !strings.Contains(err.Error(), "stream w") {
		t.Fatalf("got %v, want the bound named", err)
	}
}
