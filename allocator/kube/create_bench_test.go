package kube_test

// BenchmarkCreateLatency puts the AllocationAdmin API's Create (a server
// made for the caller, waited for and allocated) beside an allocation from
// a warm fleet, on a local API server (etcd fsyncing) with the fleet agent
// playing Agones' controller. It starts a cluster of its own and runs for
// tens of seconds, so it is a benchmark, never part of `make test`:
//
//	go test -run '^$' -bench CreateLatency -benchtime 1x -timeout 10m ./allocator/kube/
//
// Rounds (QM_BENCH_ROUNDS, default 3) interleave the two phases, each of
// QM_BENCH_N (default 40) calls one after another through the service:
// Allocate from the fleet "warm" (Ready servers waiting), then Create from
// a template. Untimed, each allocation is released and each created server
// destroyed. The agent passes every QM_BENCH_AGENT_INTERVAL (default
// 100ms) and readies servers after QM_BENCH_STARTUP (default 0): Create's
// latency is then the allocator's and the control loop's own (POST, the
// agent scheduling the server and then marking it Ready on a later pass,
// the informer's event, the allocating Update); a real game server's
// start-up comes on top. It reports p50 and p99 of both and their ratio.

import (
	"context"
	"fmt"
	"os"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/quartermaster-dev/quartermaster/allocator"
	"github.com/quartermaster-dev/quartermaster/allocator/kube"
	"github.com/quartermaster-dev/quartermaster/allocator/pb/allocation"
	qmv1 "github.com/quartermaster-dev/quartermaster/allocator/pb/quartermaster/v1"
	"github.com/quartermaster-dev/quartermaster/fleetagent"
	"github.com/quartermaster-dev/quartermaster/kindcluster"
	"github.com/quartermaster-dev/quartermaster/kindcluster/kubetest"
)

func envDuration(name string, def time.Duration) time.Duration {
	if d, err := time.ParseDuration(os.Getenv(name)); err == nil && d >= 0 {
		return d
	}
	return def
}

func BenchmarkCreateLatency(b *testing.B) {
	RegisterTestingT(b)
	n, rounds := envInt("QM_BENCH_N", 40), envInt("QM_BENCH_ROUNDS", 3)
	interval := envDuration("QM_BENCH_AGENT_INTERVAL", 100*time.Millisecond)
	startup := envDuration("QM_BENCH_STARTUP", 0)
	c := kindcluster.NewForTest(b, kindcluster.Options{Name: "create-bench"}) // fsync on
	ctx, cancel := context.WithTimeout(context.Background(), 9*time.Minute)
	defer cancel()
	const ns = "bench"
	api := kubetest.Clients(b, c)
	api.Namespace(b, ctx, ns)
	dc := api.Dynamic
	spec := map[string]any{
		"ports":    []any{map[string]any{"name": "default", "containerPort": int64(7654)}},
		"template": map[string]any{"spec": map[string]any{"containers": []any{map[string]any{"name": "g", "image": "example/g"}}}},
	}
	fleet := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "agones.dev/v1", "kind": "Fleet",
		"metadata": map[string]any{"name": "warm", "namespace": ns},
		"spec":     map[string]any{"replicas": int64(n + 10), "template": map[string]any{"spec": spec}},
	}}
	_, err := api.Fleets(ns).Create(ctx, fleet, metav1.CreateOptions{})
	Expect(err).NotTo(HaveOccurred())
	agent, err := fleetagent.New(fleetagent.Config{Client: dc, Namespace: ns, Startup: startup, Interval: interval, Session: 0, Seed: 1})
	Expect(err).NotTo(HaveOccurred())
	agentCtx, stopAgent := context.WithCancel(ctx)
	agentDone := make(chan struct{})
	go func() { defer close(agentDone); _ = agent.Run(agentCtx) }()
	defer func() { stopAgent(); <-agentDone }()

	backend, err := kube.New(kube.Config{REST: c.RESTConfig(), Namespace: ns})
	Expect(err).NotTo(HaveOccurred())
	Expect(backend.Start(ctx)).To(Succeed())
	tc, err := allocator.ParseTemplates([]byte(fmt.Sprintf(`
apiVersion: quartermaster.dev/v1alpha1
kind: GameServerTemplates
templates:
- {name: bench, namespace: %s, fleet: warm}
`, ns)))
	Expect(err).NotTo(HaveOccurred())
	svc, err := allocator.NewService(allocator.Options{Backend: backend, Templates: tc})
	Expect(err).NotTo(HaveOccurred())

	// warmUp waits until the fleet has n Ready servers for the next phase.
	warmUp := func() {
		Eventually(func() int {
			return len(backend.Index().ListState("Ready"))
		}, 2*time.Minute, 50*time.Millisecond).Should(BeNumerically(">=", n))
	}
	alloc := &phase{name: "allocate from a warm fleet"}
	create := &phase{name: "create from a template"}
	req := &allocation.AllocationRequest{Namespace: ns, GameServerSelectors: []*allocation.GameServerSelector{{MatchLabels: map[string]string{"agones.dev/fleet": "warm"}}}}
	b.ResetTimer()
	for r := range rounds {
		warmUp()
		var held []string
		start := time.Now()
		for range n {
			t0 := time.Now()
			cctx, cc := context.WithTimeout(ctx, 30*time.Second)
			resp, err := svc.Allocate(cctx, "bench", req)
			cc()
			if err != nil {
				alloc.fail++
				continue
			}
			alloc.ok++
			alloc.latencies = append(alloc.latencies, time.Since(t0))
			held = append(held, resp.GameServerName)
		}
		alloc.elapsed += time.Since(start)
		for _, name := range held {
			_, _ = svc.Release(ctx, "bench", &qmv1.ReleaseRequest{Namespace: ns, GameServerName: name})
		}

		held = held[:0]
		start = time.Now()
		for i := range n {
			t0 := time.Now()
			cctx, cc := context.WithTimeout(ctx, 30*time.Second)
			resp, err := svc.Create(cctx, "bench", &qmv1.CreateRequest{Template: "bench", Name: fmt.Sprintf("made-%d-%d", r, i)})
			cc()
			if err != nil {
				b.Logf("create: %v", err)
				create.fail++
				continue
			}
			create.ok++
			create.latencies = append(create.latencies, time.Since(t0))
			held = append(held, resp.GetAllocation().GetGameServerName())
		}
		create.elapsed += time.Since(start)
		for _, name := range held {
			_, _ = svc.Destroy(ctx, "bench", &qmv1.DestroyRequest{Namespace: ns, GameServerName: name})
		}
		b.Logf("round %d done", r+1)
	}
	b.StopTimer()
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	b.Logf("agent interval %v, start-up %v, %d rounds of %d calls each, one after another", interval, startup, rounds, n)
	b.Logf("%s", alloc)
	b.Logf("%s", create)
	b.Logf("create/allocate: p50 %.1fx  p99 %.1fx", ms(create.pct(0.50))/ms(alloc.pct(0.50)), ms(create.pct(0.99))/ms(alloc.pct(0.99)))
	b.ReportMetric(ms(alloc.pct(0.50)), "alloc_p50_ms")
	b.ReportMetric(ms(alloc.pct(0.99)), "alloc_p99_ms")
	b.ReportMetric(ms(create.pct(0.50)), "create_p50_ms")
	b.ReportMetric(ms(create.pct(0.99)), "create_p99_ms")
	b.ReportMetric(float64(create.fail+alloc.fail), "failures")
	if create.fail+alloc.fail > 0 {
		b.Errorf("%d creates and %d allocations failed", create.fail, alloc.fail)
	}
}
