package kube_test

// BenchmarkKubeThroughput is the kubernetes backend's load benchmark: the
// allocator's throughput on the kubernetes backend as a ratio to the
// ceiling, a plain client-go loop writing the same objects, measured in the
// same run against the same API server. It takes minutes and a cluster of
// its own, so it is a benchmark (never part of `make test`); run it alone,
// without -race:
//
//	go test -run '^$' -bench KubeThroughput -benchtime 1x -timeout 30m ./allocator/kube/
//
// QM_BENCH_WORKERS (default 32) sets the concurrency, QM_BENCH_N (default
// 1000) the GameServers per phase, QM_BENCH_SPARE (default 0) how many more
// servers the allocation fleets have than the phase allocates (0: the
// phase drains its fleet to the last server, the worst case for contention
// between replicas). It prints a table (with the CPU each process spent
// per operation) and reports the same figures as metrics
// (ceiling_updates/s, alloc1_allocs/s, ratio1, ratio3, half_p99_ratio, ...).
// Etcd fsyncs (the default): write throughput without it would flatter
// both sides.
//
// QM_BENCH_ROUNDS (default 3) is how many times each comparison is made.
//
// Phases, each on GameServers of its own fleet in one namespace:
//  1. Rounds of: ceiling, 1 replica, ceiling, 3 replicas, ceiling. The
//     ceiling is WORKERS goroutines updating Ready servers to Allocated
//     (state and last-allocated annotation, the allocation's own write)
//     with the resourceVersion from a List: no Get, no retry. In the
//     allocation phases WORKERS goroutines call Backend.Allocate, spread
//     over fresh replicas (3 replicas: replica shards, Packed spread 64).
//     Each allocation phase is compared with the mean of the ceilings on
//     either side of it; the report gives the median over the rounds.
//  2. Rounds of an open loop at half the ceiling's rate, latency from the
//     intended send time: raw updates, then allocations through 1 replica.
//  3. The ceiling's raw Update again while three replicas watch: the API
//     server's cost of sending every write to three informers.

import (
	"context"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"

	"github.com/quartermaster-dev/quartermaster/allocator/kube"
	"github.com/quartermaster-dev/quartermaster/core"
	"github.com/quartermaster-dev/quartermaster/kindcluster"
	"github.com/quartermaster-dev/quartermaster/kindcluster/kubetest"

	. "github.com/onsi/gomega"
)

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// phase is one measured run: how many operations succeeded over how long,
// and their latencies.
type phase struct {
	name      string
	ok, fail  int
	elapsed   time.Duration
	latencies []time.Duration
	cpu       cpuUse // CPU spent by each process during the phase
}

func (p *phase) rate() float64 { return float64(p.ok) / p.elapsed.Seconds() }

func (p *phase) pct(q float64) time.Duration {
	if len(p.latencies) == 0 {
		return 0
	}
	s := slices.Clone(p.latencies)
	slices.Sort(s)
	return s[min(len(s)-1, int(q*float64(len(s))))]
}

func (p *phase) String() string {
	s := fmt.Sprintf("%-42s %5d ok %4d failed %7.1f/s  p50 %6.1fms  p99 %6.1fms", p.name, p.ok, p.fail, p.rate(),
		float64(p.pct(0.50).Microseconds())/1000, float64(p.pct(0.99).Microseconds())/1000)
	if p.ok > 0 && p.cpu != (cpuUse{}) {
		per := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 / float64(p.ok) }
		s += fmt.Sprintf("  CPU ms/op: apiserver %.2f etcd %.2f client %.2f", per(p.cpu.apiserver), per(p.cpu.etcd), per(p.cpu.client))
	}
	return s
}

// cpuUse is CPU time (user+system) of the API server, etcd and this
// process (the clients and allocator replicas), read from /proc: where the
// machine's two cores go per operation tells what an allocation costs
// beyond the raw write.
type cpuUse struct{ apiserver, etcd, client time.Duration }

func (c cpuUse) sub(d cpuUse) cpuUse {
	return cpuUse{c.apiserver - d.apiserver, c.etcd - d.etcd, c.client - d.client}
}

func readCPU(cl *kindcluster.Cluster) cpuUse {
	etcd, api := cl.Pids()
	return cpuUse{apiserver: procCPU(strconv.Itoa(api)), etcd: procCPU(strconv.Itoa(etcd)), client: procCPU("self")}
}

// procCPU reads utime+stime of /proc/<pid>/stat; 0 where /proc has none.
func procCPU(pid string) time.Duration {
	b, err := os.ReadFile("/proc/" + pid + "/stat")
	if err != nil {
		return 0
	}
	// The command name may hold spaces: fields count from after its ')'.
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+1:])
	if len(f) < 13 {
		return 0
	}
	ut, _ := strconv.ParseInt(f[11], 10, 64)
	st, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(ut+st) * time.Second / 100 // USER_HZ is 100 on Linux
}

// recorder collects results from many goroutines.
type recorder struct {
	mu   sync.Mutex
	p    phase
	fail atomic.Int64
}

func (r *recorder) add(d time.Duration) {
	r.mu.Lock()
	r.p.ok++
	r.p.latencies = append(r.p.latencies, d)
	r.mu.Unlock()
}

func (r *recorder) done(start time.Time) *phase {
	r.p.elapsed = time.Since(start)
	r.p.fail = int(r.fail.Load())
	return &r.p
}

func BenchmarkKubeThroughput(b *testing.B) {
	// The spec helpers (request) assert with Gomega; outside a Ginkgo
	// suite their failures go to the benchmark.
	RegisterTestingT(b)
	workers, n := envInt("QM_BENCH_WORKERS", 32), envInt("QM_BENCH_N", 1000)
	spare := envInt("QM_BENCH_SPARE", 0)
	rounds := envInt("QM_BENCH_ROUNDS", 3)
	c := kindcluster.NewForTest(b, kindcluster.Options{Name: "kube-bench"}) // fsync on
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	const ns = "bench"
	api := kubetest.Clients(b, c)
	api.Namespace(b, ctx, ns)
	gss := api.GameServers(ns)
	fleets := map[string]int{"rawwatched": n}
	for r := range rounds {
		fleets[fmt.Sprintf("one-%d", r)] = n + spare
		fleets[fmt.Sprintf("three-%d", r)] = n + spare
		fleets[fmt.Sprintf("rawhalf-%d", r)] = n
		fleets[fmt.Sprintf("allochalf-%d", r)] = n
	}
	for i := range 2*rounds + 1 {
		fleets[fmt.Sprintf("raw-%d", i)] = n
	}
	start := time.Now()
	total, err := createFleets(ctx, gss, ns, fleets)
	if err != nil {
		b.Fatal(err)
	}
	b.Logf("created %d GameServers in %s", total, time.Since(start).Round(time.Millisecond))
	b.ResetTimer()

	var all []*phase
	rawCount := 0
	rawPhase := func() *phase {
		fleet := fmt.Sprintf("raw-%d", rawCount)
		rawCount++
		p := measured(c, func() *phase {
			return closedLoop("ceiling: raw Update, known RV", workers, readyOf(ctx, b, gss, fleet), func(u *unstructured.Unstructured) error {
				return rawAllocate(ctx, gss, u)
			})
		})
		all = append(all, p)
		return p
	}
	// allocPhase runs WORKERS allocation loops spread over replicas fresh
	// replicas (their informers stopped afterwards: every running informer
	// decodes every write, on the same two cores as the API server).
	var conflicts [4]int64
	allocPhase := func(replicas int, fleet string) *phase {
		rctx, stop := context.WithCancel(ctx)
		defer stop()
		be := startReplicas(rctx, b, c, ns, replicas)
		p := measured(c, func() *phase {
			return closedLoopAllocate(fmt.Sprintf("allocate, %d replica(s)", replicas), workers, n,
				func(w int) *kube.Backend { return be[w%replicas] }, ctx, ns, fleet)
		})
		for _, r := range be {
			conflicts[replicas] += r.Conflicts()
		}
		all = append(all, p)
		return p
	}

	// 1. Rounds of ceiling, 1 replica, ceiling, 3 replicas, ceiling...: the
	// machine's speed drifts by tens of percent over minutes (other tenants,
	// GC, etcd's growing history until the API server compacts it), so each
	// allocation phase is compared with the mean of the raw phases on either
	// side of it, and the report gives the median over the rounds.
	var ratio1, ratio3, rawRates []float64
	before := rawPhase()
	rawRates = append(rawRates, before.rate())
	for r := range rounds {
		a1 := allocPhase(1, fmt.Sprintf("one-%d", r))
		mid := rawPhase()
		a3 := allocPhase(3, fmt.Sprintf("three-%d", r))
		after := rawPhase()
		ratio1 = append(ratio1, a1.rate()/((before.rate()+mid.rate())/2))
		ratio3 = append(ratio3, a3.rate()/((mid.rate()+after.rate())/2))
		rawRates = append(rawRates, mid.rate(), after.rate())
		before = after
	}
	ceiling := median(rawRates)

	// 2. Open loop at half the ceiling, raw updates and allocations
	// through one replica taking turns, so that both see the same machine
	// at the same moments (separate phases differ in p99 by several times
	// on this shared machine whatever runs in them); latency from the
	// intended send time. Rounds again, for the median of the p99 ratios.
	half := ceiling / 2
	dur := min(10*time.Second, time.Duration(float64(n)/half*float64(time.Second)))
	var p99Ratios []float64
	var seed atomic.Uint64
	for r := range rounds {
		rctx, stop := context.WithCancel(ctx)
		one := startReplicas(rctx, b, c, ns, 1)[0]
		req := request(&core.Request{Namespace: ns, Selectors: []core.Selector{{MatchLabels: map[string]string{core.FleetLabel: fmt.Sprintf("allochalf-%d", r)}}}})
		items := readyOf(ctx, b, gss, fmt.Sprintf("rawhalf-%d", r))
		phases := openLoop(half, dur, 2*n, []openKind{
			{fmt.Sprintf("raw Update, half of %.0f/s (open loop)", half), func(i int) error { return rawAllocate(ctx, gss, items[i]) }},
			{fmt.Sprintf("allocate, 1 replica, half of %.0f/s", half), func(int) error {
				_, err := one.Allocate(ctx, req, time.Now(), seed.Add(1))
				return err
			}},
		})
		stop()
		all = append(all, phases...)
		p99Ratios = append(p99Ratios, float64(phases[1].pct(0.99))/float64(phases[0].pct(0.99)))
	}

	// 3. The raw write with three replicas' informers watching: what the
	// API server spends sending every write to three watchers.
	wctx, stopWatchers := context.WithCancel(ctx)
	startReplicas(wctx, b, c, ns, 3)
	rawWatched := measured(c, func() *phase {
		return closedLoop("raw Update, 3 replicas watching", workers, readyOf(ctx, b, gss, "rawwatched"), func(u *unstructured.Unstructured) error {
			return rawAllocate(ctx, gss, u)
		})
	})
	stopWatchers()
	all = append(all, rawWatched)
	b.StopTimer()

	out, _ := os.ReadFile("/proc/loadavg")
	var tbl strings.Builder
	fmt.Fprintf(&tbl, "\nkube throughput: %d workers, %d GameServers per phase (allocation fleets %d more), %d rounds, etcd fsync on, load average %s",
		workers, n, spare, rounds, out)
	for _, p := range all {
		fmt.Fprintln(&tbl, p)
	}
	fmt.Fprintf(&tbl, "ceiling (median of %d raw phases): %.1f updates/s\n", len(rawRates), ceiling)
	fmt.Fprintf(&tbl, "ratio to the ceiling on either side: 1 replica median %.2f %s, 3 replicas median %.2f %s\n",
		median(ratio1), fmtRatios(ratio1), median(ratio3), fmtRatios(ratio3))
	fmt.Fprintf(&tbl, "write conflicts: 1 replica %d, 3 replicas %d\n", conflicts[1], conflicts[3])
	fmt.Fprintf(&tbl, "raw Update with 3 replicas watching: %.2f of the ceiling\n", rawWatched.rate()/ceiling)
	fmt.Fprintf(&tbl, "p99 at half the ceiling, allocation / raw: median %.2fx %s\n", median(p99Ratios), fmtRatios(p99Ratios))
	b.Log(tbl.String())
	fmt.Println(tbl.String())

	b.ReportMetric(ceiling, "ceiling_updates/s")
	b.ReportMetric(median(ratio1), "ratio1")
	b.ReportMetric(median(ratio3), "ratio3")
	b.ReportMetric(rawWatched.rate()/ceiling, "watched_ratio")
	b.ReportMetric(median(p99Ratios), "half_p99_ratio")
	b.ReportMetric(0, "ns/op") // one run of minutes: ns/op says nothing
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func fmtRatios(xs []float64) string {
	parts := make([]string, len(xs))
	for i, x := range xs {
		parts[i] = fmt.Sprintf("%.2f", x)
	}
	return "(" + strings.Join(parts, " ") + ")"
}

// rawAllocate is the allocation's write without the allocator: Ready to
// Allocated with the last-allocated annotation, on the resourceVersion read.
func rawAllocate(ctx context.Context, gss dynamic.ResourceInterface, u *unstructured.Unstructured) error {
	u = u.DeepCopy()
	ann := u.GetAnnotations()
	ann[core.LastAllocatedAnnotation] = time.Now().UTC().Format(time.RFC3339Nano)
	u.SetAnnotations(ann)
	if err := unstructured.SetNestedField(u.Object, "Allocated", "status", "state"); err != nil {
		return err
	}
	_, err := gss.Update(ctx, u, metav1.UpdateOptions{})
	return err
}

// createFleets creates each fleet's Ready GameServers in ns, and returns
// how many it created.
func createFleets(ctx context.Context, gss dynamic.ResourceInterface, ns string, fleets map[string]int) (int, error) {
	total := 0
	for f, n := range fleets {
		if err := kubetest.CreateFleet(ctx, gss, ns, f, 0, n); err != nil {
			return 0, err
		}
		total += n
	}
	return total, nil
}

func readyOf(ctx context.Context, b *testing.B, gss dynamic.ResourceInterface, fleet string) []*unstructured.Unstructured {
	l, err := gss.List(ctx, metav1.ListOptions{LabelSelector: core.FleetLabel + "=" + fleet})
	if err != nil {
		b.Fatal(err)
	}
	out := make([]*unstructured.Unstructured, len(l.Items))
	for i := range l.Items {
		out[i] = &l.Items[i]
	}
	return out
}

func startReplicas(ctx context.Context, b *testing.B, c *kindcluster.Cluster, ns string, n int) []*kube.Backend {
	var out []*kube.Backend
	for i := range n {
		cfg := kube.Config{REST: c.RESTConfig(), Namespace: ns}
		if n > 1 {
			cfg.PackedSpread, cfg.ReplicaShard, cfg.Replicas = 64, i, n
		}
		be, err := kube.New(cfg)
		if err != nil {
			b.Fatal(err)
		}
		if err := be.Start(ctx); err != nil {
			b.Fatal(err)
		}
		out = append(out, be)
	}
	return out
}

// measured runs one phase and records the CPU each process spent in it.
func measured(cl *kindcluster.Cluster, run func() *phase) *phase {
	before := readCPU(cl)
	p := run()
	p.cpu = readCPU(cl).sub(before)
	return p
}

// closedLoop runs fn on every item with workers goroutines.
func closedLoop(name string, workers int, items []*unstructured.Unstructured, fn func(*unstructured.Unstructured) error) *phase {
	r := &recorder{p: phase{name: name}}
	next := make(chan *unstructured.Unstructured)
	var wg sync.WaitGroup
	start := time.Now()
	for range workers {
		wg.Go(func() {
			for u := range next {
				t := time.Now()
				if err := fn(u); err != nil {
					r.fail.Add(1)
					continue
				}
				r.add(time.Since(t))
			}
		})
	}
	for _, u := range items {
		next <- u
	}
	close(next)
	wg.Wait()
	return r.done(start)
}

// closedLoopAllocate makes n allocations from fleet with workers
// goroutines; a worker stops at its first UnAllocated (the fleet is used
// up) or after a bounded number of failures.
func closedLoopAllocate(name string, workers, n int, backend func(w int) *kube.Backend, ctx context.Context, ns, fleet string) *phase {
	r := &recorder{p: phase{name: name}}
	req := request(&core.Request{Namespace: ns, Selectors: []core.Selector{{MatchLabels: map[string]string{core.FleetLabel: fleet}}}})
	var left atomic.Int64
	left.Store(int64(n))
	var wg sync.WaitGroup
	start := time.Now()
	for w := range workers {
		wg.Go(func() {
			be := backend(w)
			for i := 0; left.Add(-1) >= 0 && int(r.fail.Load()) < n; i++ {
				t := time.Now()
				if _, err := be.Allocate(ctx, req, t, uint64(w)<<32|uint64(i)); err != nil {
					r.fail.Add(1)
					continue
				}
				r.add(time.Since(t))
			}
		})
	}
	wg.Wait()
	return r.done(start)
}

// openKind is one kind of call in an open loop; call gets the kind's own
// count of calls so far.
type openKind struct {
	name string
	call func(i int) error
}

// openLoop starts one call every 1/rate for dur regardless of how earlier
// ones fare, the kinds taking turns, and measures each from its intended
// start, so a stall shows as latency instead of hiding as a lower rate. At
// most max calls and 512 in flight. It returns a phase per kind.
func openLoop(rate float64, dur time.Duration, max int, kinds []openKind) []*phase {
	recs := make([]*recorder, len(kinds))
	for k, kind := range kinds {
		recs[k] = &recorder{p: phase{name: kind.name}}
	}
	total := min(max, int(rate*dur.Seconds()))
	sem := make(chan struct{}, 512)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range total {
		intended := start.Add(time.Duration(float64(i) / rate * float64(time.Second)))
		time.Sleep(time.Until(intended))
		sem <- struct{}{}
		k, nth := i%len(kinds), i/len(kinds)
		wg.Go(func() {
			defer func() { <-sem }()
			if err := kinds[k].call(nth); err != nil {
				recs[k].fail.Add(1)
				return
			}
			recs[k].add(time.Since(intended))
		})
	}
	wg.Wait()
	out := make([]*phase, len(kinds))
	for k, r := range recs {
		out[k] = r.done(start)
	}
	return out
}
