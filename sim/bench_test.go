package sim

import (
	"runtime"
	"runtime/debug"
	"testing"
	"time"

	"github.com/quartermaster-dev/quartermaster/core"
)

// dayAt100k is the speed benchmark's scenario: 100,000 game servers in four
// clusters of two providers, a day of a diurnal matchmaker load averaging
// 58 requests/s (about 5 million allocations), routed by policy: two
// priority tiers, weighted within each. Sessions average 15 minutes, so
// about half the fleet is Allocated at the peak; each cluster runs the given
// number of allocator replicas (the benchmark: one; the cost of more is what
// the cache-staleness scenario shows), whose caches lag 50-150 ms. A server whose session ends goes back
// to Ready (SDK.Ready()), so the fleet is the same 100k servers all day.
func dayAt100k(replicas int, dur time.Duration) *Config {
	cfg := &Config{
		Name:           "day-100k",
		Seed:           2026,
		Duration:       dur,
		SampleInterval: 5 * time.Minute,
		ForwardTimeout: 2 * time.Second,
		Deadline:       30 * time.Second,
	}
	for i, name := range []string{"onprem-a", "onprem-b", "cloud-a", "cloud-b"} {
		provider, cost := "onprem", 0.1
		if i >= 2 {
			provider, cost = "cloud", 0.45
		}
		cfg.Clusters = append(cfg.Clusters, ClusterConfig{
			Name: name, Provider: provider, CostPerNodeHour: cost,
			RTT:   Dist{Kind: LogNormal, Median: 10 * time.Millisecond, P99: 40 * time.Millisecond},
			Nodes: 2500, SlotsPerNode: 10,
			WriteLatency:  Dist{Kind: LogNormal, Median: 15 * time.Millisecond, P99: 60 * time.Millisecond},
			Replicas:      replicas,
			InformerDelay: Dist{Kind: Uniform, Min: 50 * time.Millisecond, Max: 150 * time.Millisecond},
			MaxRetries:    10,
			Fleets: []FleetConfig{{
				Name: "game", Labels: map[string]string{"game": "shooter"}, Replicas: 25000,
				Placement: PlacePacked, StartupDelay: Dist{Kind: Uniform, Min: 5 * time.Second, Max: 15 * time.Second},
				SessionEnd: EndReady,
			}},
		})
		prio := int32(0)
		if i >= 2 {
			prio = 1
		}
		cfg.Policies = append(cfg.Policies, core.Policy{
			Name: name, Priority: prio, Weight: 1 + i%2,
			Connection: core.ConnectionInfo{ClusterName: name},
		})
	}
	cfg.Streams = []StreamConfig{{
		Name:    "matchmaker",
		Rate:    RateSpec{Diurnal: &Diurnal{Mean: 58, Amplitude: 40, Period: 24 * time.Hour, Peak: 20 * time.Hour}},
		Session: Dist{Kind: LogNormal, Median: 12 * time.Minute, P99: 50 * time.Minute},
		Request: core.Request{
			Selectors:    []core.Selector{{MatchLabels: map[string]string{"game": "shooter"}}},
			MultiCluster: core.MultiClusterSetting{Enabled: true},
		},
	}}
	return cfg
}

// BenchmarkDay100k runs the 24-hour, 100k-server scenario. Run it alone:
//
//	go test -run '^$' -bench Day100k -benchtime 1x ./sim/
//
// It reports virtual events per wall second, allocations, and the heap in
// use at the end of the run. The collector is tuned as qm sim tunes it.
func BenchmarkDay100k(b *testing.B) {
	defer debug.SetGCPercent(debug.SetGCPercent(400))
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(2 << 30))
	for range b.N {
		start := time.Now()
		res, err := Run(dayAt100k(1, 24*time.Hour))
		if err != nil {
			b.Fatal(err)
		}
		wall := time.Since(start)
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		b.ReportMetric(float64(res.Events)/wall.Seconds(), "events/s")
		b.ReportMetric(float64(res.Events), "events")
		b.ReportMetric(float64(res.Totals.Allocated), "allocations")
		b.ReportMetric(wall.Seconds(), "wall-s")
		b.ReportMetric(float64(ms.HeapInuse)/(1<<20), "heap-MiB")
		b.Logf("%d requests, %d allocated, success %.5f, retries %d, p99 %.1f ms, packing %.3f",
			res.Totals.Requests, res.Totals.Allocated, res.Totals.SuccessRate, res.Totals.Retries,
			res.Totals.Latency.P99Ms, res.Totals.PackingEfficiency)
	}
}

// BenchmarkHour100k is the same scenario for one hour: a quick profile.
func BenchmarkHour100k(b *testing.B) {
	for range b.N {
		res, err := Run(dayAt100k(1, 2*time.Hour))
		if err != nil {
			b.Fatal(err)
		}
		b.ReportMetric(float64(res.Events), "events")
	}
}
