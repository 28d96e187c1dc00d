package kube_test

// BenchmarkKubeThroughput is the load benchmark of issue 4 ("Speed"): the
// allocator's throughput on the kubernetes backend as a ratio to the
// ceiling, a plain client-go loop writing the same objects, measured in the
// same run against the same API server. It takes minutes and a cluster of
// its own, so it is a benchmark (never part of `make test`); run it alone,
// without -race:
//
//	go test -run '^$' -bench KubeThroughput -benchtime 1x -timeout 30m ./allocator/kube/
//
// QM_BENCH_WORKERS (default 32) sets the concurrency, QM_BENCH_N (default
// 1000) the GameServers per phase. It prints a table and reports the same
// figures as metrics (ceiling_updates/s, alloc1_allocs/s, ratio1, ratio3,
// half_p99_ratio, ...). Etcd fsyncs (the default): write
// throughput without it would flatter both sides.
//
// Phases, each on GameServers of its own fleet in one namespace:
//  1. ceiling: WORKERS goroutines Update Ready servers to Allocated (state
//     and last-allocated annotation, the allocation's own write) with the
//     resourceVersion from a List: no Get, no retry.
//  2. allocation, 1 replica: WORKERS goroutines call Backend.Allocate.
//  3. allocation, 3 replicas (replica shards, Packed spread 64), workers
//     spread over them.
//  4. open loop at half the ceiling's rate, latency from the intended send
//     time: first raw updates, then allocations through 1 replica.

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

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"

	"github.com/quartermaster-dev/quartermaster/allocator/kube"
	"github.com/quartermaster-dev/quartermaster/core"
	"github.com/quartermaster-dev/quartermaster/kindcluster"

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
	return fmt.Sprintf("%-34s %7d ok %5d failed %8.1f/s  p50 %7.1fms  p99 %7.1fms", p.name, p.ok, p.fail, p.rate(),
		float64(p.pct(0.50).Microseconds())/1000, float64(p.pct(0.99).Microseconds())/1000)
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
	// The spec helpers (agonesLike, request) assert with Gomega; outside a
	// Ginkgo suite their failures go to the benchmark.
	RegisterTestingT(b)
	workers, n := envInt("QM_BENCH_WORKERS", 32), envInt("QM_BENCH_N", 1000)
	c := kindcluster.NewForTest(b, kindcluster.Options{Name: "kube-bench"}) // fsync on
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	const ns = "bench"
	cs, err := c.Clientset()
	if err != nil {
		b.Fatal(err)
	}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	dc, err := c.Dynamic()
	if err != nil {
		b.Fatal(err)
	}
	gss := dc.Resource(kube.GameServerResource).Namespace(ns)
	fleets := []string{"raw", "one", "three", "rawhalf", "allochalf"}
	start := time.Now()
	if err := createFleets(ctx, gss, ns, fleets, n); err != nil {
		b.Fatal(err)
	}
	b.Logf("created %d GameServers in %s", n*len(fleets), time.Since(start).Round(time.Millisecond))
	b.ResetTimer()

	// 1. The ceiling.
	raw := closedLoop("ceiling: raw Update, known RV", workers, readyOf(ctx, b, gss, "raw"), func(u *unstructured.Unstructured) error {
		return rawAllocate(ctx, gss, u)
	})

	// 2. One replica, closed loop, then open loop at half the ceiling
	// against the raw update at the same rate.
	oneCtx, stopOne := context.WithCancel(ctx)
	one := startReplicas(oneCtx, b, c, ns, 1)
	alloc1 := closedLoopAllocate("allocate, 1 replica", workers, n, func(w int) *kube.Backend { return one[0] }, ctx, ns, "one")
	conflicts1 := one[0].Conflicts()

	half := raw.rate() / 2
	dur := min(10*time.Second, time.Duration(float64(n)/half*float64(time.Second)))
	rawHalf := openLoop(fmt.Sprintf("raw Update at %.0f/s (open loop)", half), half, dur, readyOf(ctx, b, gss, "rawhalf"), func(u *unstructured.Unstructured) error {
		return rawAllocate(ctx, gss, u)
	})
	req := request(&core.Request{Namespace: ns, Selectors: []core.Selector{{MatchLabels: map[string]string{core.FleetLabel: "allochalf"}}}})
	var seed atomic.Uint64
	placeholders := make([]*unstructured.Unstructured, n)
	allocHalf := openLoop(fmt.Sprintf("allocate, 1 replica at %.0f/s (open loop)", half), half, dur, placeholders, func(*unstructured.Unstructured) error {
		_, err := one[0].Allocate(ctx, req, time.Now(), seed.Add(1))
		return err
	})
	// Stop the single replica's informer: every running informer decodes
	// every write, on the same two cores as the API server and etcd.
	stopOne()

	// 3. Three replicas.
	three := startReplicas(ctx, b, c, ns, 3)
	alloc3 := closedLoopAllocate("allocate, 3 replicas", workers, n, func(w int) *kube.Backend { return three[w%3] }, ctx, ns, "three")
	var conflicts int64
	for _, r := range three {
		conflicts += r.Conflicts()
	}
	b.StopTimer()

	out, _ := os.ReadFile("/proc/loadavg")
	var tbl strings.Builder
	fmt.Fprintf(&tbl, "\nkube throughput: %d workers, %d GameServers per phase, etcd fsync on, load average %s", workers, n, out)
	for _, p := range []*phase{raw, alloc1, alloc3, rawHalf, allocHalf} {
		fmt.Fprintln(&tbl, p)
	}
	fmt.Fprintf(&tbl, "ratio to ceiling: 1 replica %.2f, 3 replicas %.2f (write conflicts: 1 replica %d, 3 replicas %d)\n",
		alloc1.rate()/raw.rate(), alloc3.rate()/raw.rate(), conflicts1, conflicts)
	fmt.Fprintf(&tbl, "p99 at half the ceiling: allocation %.1fms vs raw %.1fms = %.2fx\n",
		ms(allocHalf.pct(0.99)), ms(rawHalf.pct(0.99)), float64(allocHalf.pct(0.99))/float64(rawHalf.pct(0.99)))
	b.Log(tbl.String())
	fmt.Println(tbl.String())

	b.ReportMetric(raw.rate(), "ceiling_updates/s")
	b.ReportMetric(alloc1.rate(), "alloc1_allocs/s")
	b.ReportMetric(alloc3.rate(), "alloc3_allocs/s")
	b.ReportMetric(alloc1.rate()/raw.rate(), "ratio1")
	b.ReportMetric(alloc3.rate()/raw.rate(), "ratio3")
	b.ReportMetric(ms(raw.pct(0.99)), "ceiling_p99_ms")
	b.ReportMetric(ms(alloc1.pct(0.99)), "alloc1_p99_ms")
	b.ReportMetric(ms(alloc3.pct(0.99)), "alloc3_p99_ms")
	b.ReportMetric(ms(rawHalf.pct(0.99)), "half_raw_p99_ms")
	b.ReportMetric(ms(allocHalf.pct(0.99)), "half_alloc_p99_ms")
	b.ReportMetric(float64(allocHalf.pct(0.99))/float64(rawHalf.pct(0.99)), "half_p99_ratio")
	b.ReportMetric(0, "ns/op") // one run of minutes: ns/op says nothing
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

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

func createFleets(ctx context.Context, gss dynamic.ResourceInterface, ns string, fleets []string, n int) error {
	type job struct {
		fleet string
		i     int
	}
	jobs := make(chan job)
	var wg sync.WaitGroup
	var firstErr atomic.Value
	for range 16 {
		wg.Go(func() {
			for j := range jobs {
				u := agonesLike(ns, fmt.Sprintf("%s-%05d", j.fleet, j.i), j.fleet, fmt.Sprintf("node-%02d", j.i%75))
				if _, err := gss.Create(ctx, u, metav1.CreateOptions{}); err != nil {
					firstErr.CompareAndSwap(nil, err)
				}
			}
		})
	}
	for _, f := range fleets {
		for i := range n {
			jobs <- job{f, i}
		}
	}
	close(jobs)
	wg.Wait()
	if err, _ := firstErr.Load().(error); err != nil {
		return fmt.Errorf("creating GameServers: %w", err)
	}
	return nil
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

// openLoop starts one call every 1/rate for dur regardless of how earlier
// ones fare, and measures each from its intended start, so a stall shows
// as latency instead of hiding as a lower rate. At most len(items) calls
// and 512 in flight.
func openLoop(name string, rate float64, dur time.Duration, items []*unstructured.Unstructured, fn func(*unstructured.Unstructured) error) *phase {
	r := &recorder{p: phase{name: name}}
	total := min(len(items), int(rate*dur.Seconds()))
	sem := make(chan struct{}, 512)
	var wg sync.WaitGroup
	start := time.Now()
	for i := range total {
		intended := start.Add(time.Duration(float64(i) / rate * float64(time.Second)))
		time.Sleep(time.Until(intended))
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			if err := fn(items[i]); err != nil {
				r.fail.Add(1)
				return
			}
			r.add(time.Since(intended))
		})
	}
	wg.Wait()
	return r.done(start)
}
