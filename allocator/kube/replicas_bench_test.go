package kube_test

// BenchmarkReplicasNoConfig measures replicas left to find each other: three
// replicas started as an operator would scale a Deployment (default
// settings, membership through Leases), 2,000 Ready GameServers, 16
// callers per replica, 600 requests per replica; its throughput as a ratio
// to the raw Update ceiling measured in the same run against the same API
// server, in rounds (raw, replicas, raw, ...; each allocation phase against
// the mean of the raw phases on either side). It also runs the same load
// without membership (adaptive spread alone) and on one replica (exact
// Packed), and reports how well each packs: after the first fifth of the
// fleet, the fewest nodes that could hold what was allocated over the
// nodes it is on. Minutes and a cluster of its own, so never part of
// `make test`; run it alone, without -race:
//
//	go test -run '^$' -bench ReplicasNoConfig -benchtime 1x -timeout 30m ./allocator/kube/
//
// QM_BENCH_ROUNDS (default 3), QM_BENCH_SERVERS (2000), QM_BENCH_CALLERS
// (16 per replica), QM_BENCH_REQUESTS (600 per replica). Etcd fsyncs.

import (
	"context"
	"fmt"
	"math"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"

	"github.com/quartermaster-dev/quartermaster/allocator/kube"
	"github.com/quartermaster-dev/quartermaster/core"
	"github.com/quartermaster-dev/quartermaster/kindcluster"
	"github.com/quartermaster-dev/quartermaster/kindcluster/kubetest"

	. "github.com/onsi/gomega"
)

// benchNodes is how many nodes a fleet's servers are spread over.
const benchNodes = kubetest.FleetNodes

func BenchmarkReplicasNoConfig(b *testing.B) {
	RegisterTestingT(b)
	rounds := envInt("QM_BENCH_ROUNDS", 3)
	servers, callers := envInt("QM_BENCH_SERVERS", 2000), envInt("QM_BENCH_CALLERS", 16)
	perReplica := envInt("QM_BENCH_REQUESTS", 600)
	c := kindcluster.NewForTest(b, kindcluster.Options{Name: "replicas-bench"}) // fsync on
	ctx, cancel := context.WithTimeout(context.Background(), 28*time.Minute)
	defer cancel()
	api := kubetest.Clients(b, c)
	// Every fleet in a namespace of its own, which the phase's replicas
	// watch: each replica lists and follows its servers, not every
	// phase's.
	gssOf := api.GameServers
	kinds := []string{"leases", "adaptive", "one"}
	fleets := map[string]int{}
	for r := range rounds {
		for _, k := range kinds {
			fleets[fmt.Sprintf("%s-%d", k, r)] = servers
		}
	}
	raws := rounds*len(kinds) + 1
	for i := range raws {
		fleets[fmt.Sprintf("raw-%d", i)] = 3 * perReplica
	}
	start := time.Now()
	total := 0
	for fleet, n := range fleets {
		api.Namespace(b, ctx, fleet)
		api.CreateFleet(b, ctx, fleet, fleet, 0, n)
		total += n
	}
	b.Logf("created %d GameServers in %s", total, time.Since(start).Round(time.Millisecond))
	b.ResetTimer()

	var all []*phase
	rawCount := 0
	rawPhase := func() *phase {
		fleet := fmt.Sprintf("raw-%d", rawCount)
		rawCount++
		p := measured(c, func() *phase {
			return closedLoop("ceiling: raw Update, known RV", 3*callers, readyOf(ctx, b, gssOf(fleet), fleet), func(u *unstructured.Unstructured) error {
				return rawAllocate(ctx, gssOf(fleet), u)
			})
		})
		all = append(all, p)
		return p
	}
	type outcome struct {
		ratios    []float64
		packing   []float64
		conflicts int64
		failed    int
	}
	results := map[string]*outcome{}
	for _, k := range kinds {
		results[k] = &outcome{}
	}
	var seed atomic.Uint64
	allocPhase := func(kind string, round int) *phase {
		fleet := fmt.Sprintf("%s-%d", kind, round)
		rctx, stop := context.WithCancel(ctx)
		defer stop()
		n := map[string]int{"one": 1}[kind]
		if n == 0 {
			n = 3
		}
		reps := benchReplicas(rctx, b, c, fleet, n, kind == "leases")
		req := request(&core.Request{Namespace: fleet, Selectors: []core.Selector{{MatchLabels: map[string]string{core.FleetLabel: fleet}}}})
		// A fifth of the fleet, then packing, then the rest: one phase
		// whose time excludes the List in between.
		fifth := servers / 5 / n
		var first, rest *phase
		first = measured(c, func() *phase { return replicaLoad("", reps, callers, fifth, req, &seed) })
		eff := benchPacking(ctx, b, gssOf(fleet), fleet, servers/benchNodes)
		rest = measured(c, func() *phase { return replicaLoad("", reps, callers, perReplica-fifth, req, &seed) })
		p := &phase{
			name:      fmt.Sprintf("allocate, %d replica(s), %s", n, kind),
			ok:        first.ok + rest.ok,
			fail:      first.fail + rest.fail,
			elapsed:   first.elapsed + rest.elapsed,
			latencies: append(first.latencies, rest.latencies...),
			cpu:       cpuUse{first.cpu.apiserver + rest.cpu.apiserver, first.cpu.etcd + rest.cpu.etcd, first.cpu.client + rest.cpu.client},
		}
		for _, r := range reps {
			results[kind].conflicts += r.Conflicts()
		}
		results[kind].packing = append(results[kind].packing, eff)
		results[kind].failed += p.fail
		all = append(all, p)
		return p
	}

	before := rawPhase()
	var rawRates []float64
	rawRates = append(rawRates, before.rate())
	for r := range rounds {
		for _, k := range kinds {
			a := allocPhase(k, r)
			after := rawPhase()
			rawRates = append(rawRates, after.rate())
			results[k].ratios = append(results[k].ratios, a.rate()/((before.rate()+after.rate())/2))
			before = after
		}
	}
	b.StopTimer()

	load, _ := os.ReadFile("/proc/loadavg")
	var tbl strings.Builder
	fmt.Fprintf(&tbl, "\nreplicas without configuration: %d servers per phase, %d callers per replica, %d requests per replica, %d rounds, etcd fsync on, load average %s",
		servers, callers, perReplica, rounds, load)
	for _, p := range all {
		fmt.Fprintln(&tbl, p)
	}
	fmt.Fprintf(&tbl, "ceiling (median of %d raw phases): %.1f updates/s\n", len(rawRates), median(rawRates))
	for _, k := range kinds {
		o := results[k]
		fmt.Fprintf(&tbl, "%-8s ratio to the ceiling on either side: median %.2f %s; packing after a fifth: median %.2f %s; write conflicts %d; failed requests %d\n",
			k, median(o.ratios), fmtRatios(o.ratios), median(o.packing), fmtRatios(o.packing), o.conflicts, o.failed)
	}
	b.Log(tbl.String())
	fmt.Println(tbl.String())
	b.ReportMetric(median(rawRates), "ceiling_updates/s")
	b.ReportMetric(median(results["leases"].ratios), "ratio_leases")
	b.ReportMetric(median(results["adaptive"].ratios), "ratio_adaptive")
	b.ReportMetric(median(results["one"].ratios), "ratio_one")
	b.ReportMetric(median(results["leases"].packing), "packing_leases")
	b.ReportMetric(median(results["adaptive"].packing), "packing_adaptive")
	b.ReportMetric(median(results["one"].packing), "packing_one")
	b.ReportMetric(float64(results["leases"].failed+results["adaptive"].failed), "failed")
	b.ReportMetric(0, "ns/op")
}

// benchReplicas starts n replicas with default settings; with leases they
// take part in the membership (in ns) and the call waits until all agree.
func benchReplicas(ctx context.Context, b *testing.B, c *kindcluster.Cluster, ns string, n int, leases bool) []*kube.Backend {
	var out []*kube.Backend
	var ms []*kube.Membership
	for i := range n {
		be, err := kube.New(kube.Config{REST: c.RESTConfig(), Namespace: ns})
		if err != nil {
			b.Fatal(err)
		}
		if err := be.Start(ctx); err != nil {
			b.Fatal(err)
		}
		out = append(out, be)
		if !leases {
			continue
		}
		m, err := kube.NewMembership(kube.MembershipConfig{REST: c.RESTConfig(), Namespace: ns, Identity: fmt.Sprintf("bench-%d", i)}, be)
		if err != nil {
			b.Fatal(err)
		}
		var done sync.WaitGroup
		done.Go(func() { m.Run(ctx) })
		b.Cleanup(done.Wait)
		ms = append(ms, m)
	}
	for deadline := time.Now().Add(30 * time.Second); leases; time.Sleep(20 * time.Millisecond) {
		agreed := true
		for _, m := range ms {
			agreed = agreed && m.View().Replicas == n
		}
		if agreed {
			break
		}
		if time.Now().After(deadline) {
			b.Fatalf("replicas did not find each other within 30s")
		}
	}
	return out
}

// replicaLoad runs callers goroutines per replica, perReplica requests on
// each replica in all.
func replicaLoad(name string, reps []*kube.Backend, callers, perReplica int, req *core.Request, seed *atomic.Uint64) *phase {
	r := &recorder{p: phase{name: name}}
	var wg sync.WaitGroup
	start := time.Now()
	for _, be := range reps {
		var left atomic.Int64
		left.Store(int64(perReplica))
		for range callers {
			wg.Go(func() {
				for left.Add(-1) >= 0 {
					t := time.Now()
					n := seed.Add(1)
					if _, err := be.Allocate(context.Background(), req, t, n); err != nil {
						r.fail.Add(1)
						continue
					}
					r.add(time.Since(t))
				}
			})
		}
	}
	wg.Wait()
	return r.done(start)
}

// benchPacking is the fewest nodes that could hold fleet's Allocated
// servers (perNode each) over the nodes they are on.
func benchPacking(ctx context.Context, b *testing.B, gss dynamic.ResourceInterface, fleet string, perNode int) float64 {
	used := map[string]bool{}
	n := 0
	for _, u := range readyOf(ctx, b, gss, fleet) {
		if s, _, _ := unstructured.NestedString(u.Object, "status", "state"); s == "Allocated" {
			node, _, _ := unstructured.NestedString(u.Object, "status", "nodeName")
			used[node] = true
			n++
		}
	}
	if n == 0 {
		return 1
	}
	return math.Ceil(float64(n)/float64(perNode)) / float64(len(used))
}
