package kube_test

import (
	"context"
	"fmt"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/wrapperspb"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/quartermaster-dev/quartermaster/allocator"
	"github.com/quartermaster-dev/quartermaster/allocator/kube"
	"github.com/quartermaster-dev/quartermaster/allocator/pb/allocation"
	"github.com/quartermaster-dev/quartermaster/core"
	"github.com/quartermaster-dev/quartermaster/kindcluster/kubetest"
)

// The allocator service (the request path the gRPC and REST front ends
// share) on the Kubernetes backend, against the real API server.
var _ = Describe("the allocator service on the kubernetes backend", func() {
	var ctx context.Context
	BeforeEach(func() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(context.Background(), 2*time.Minute)
		DeferCleanup(cancel)
	})

	// versions maps every GameServer in ns to its resourceVersion.
	versions := func(ns string) map[string]string {
		l, err := api.GameServers(ns).List(ctx, metav1.ListOptions{})
		Expect(err).NotTo(HaveOccurred())
		out := map[string]string{}
		for _, u := range l.Items {
			out[u.GetName()] = u.GetResourceVersion()
		}
		return out
	}

	newService := func(b allocator.Backend) *allocator.Service {
		svc, err := allocator.NewService(allocator.Options{Backend: b})
		Expect(err).NotTo(HaveOccurred())
		return svc
	}

	It("refuses invalid requests with InvalidArgument before writing anything", func() {
		ns := newNamespace(ctx)
		for i := range 3 {
			create(ctx, kubetest.GameServer(ns, fmt.Sprintf("gs-%d", i), "green", "node-1"))
		}
		svc := newService(startBackend(ctx, ns))
		before := versions(ns)
		bad := []*allocation.AllocationRequest{
			{Namespace: ns, GameServerSelectors: []*allocation.GameServerSelector{{MatchLabels: map[string]string{"a b": "x"}}}},
			{Namespace: ns, Counters: map[string]*allocation.CounterAction{"rooms": {Action: wrapperspb.String("Multiply"), Amount: wrapperspb.Int64(1)}}},
			{Namespace: ns, Counters: map[string]*allocation.CounterAction{"rooms": {Action: wrapperspb.String("Increment"), Amount: wrapperspb.Int64(-1)}}},
			{Namespace: ns, GameServerSelectors: []*allocation.GameServerSelector{{Counters: map[string]*allocation.CounterSelector{"rooms": {MinCount: 5, MaxCount: 2}}}}},
			{Namespace: ns, Lists: map[string]*allocation.ListAction{"players": {Capacity: wrapperspb.Int64(5000)}}},
		}
		for _, in := range bad {
			_, err := svc.Allocate(ctx, "tester", in)
			Expect(status.Code(err)).To(Equal(codes.InvalidArgument), "%v", err)
		}
		Consistently(func() map[string]string { return versions(ns) }, 500*time.Millisecond, 100*time.Millisecond).Should(Equal(before))

		// A valid request then goes through and writes exactly one server.
		resp, err := svc.Allocate(ctx, "tester", &allocation.AllocationRequest{Namespace: ns})
		Expect(err).NotTo(HaveOccurred())
		after := versions(ns)
		changed := 0
		for name, rv := range after {
			if rv != before[name] {
				changed++
				Expect(name).To(Equal(resp.GameServerName))
			}
		}
		Expect(changed).To(Equal(1))
	})

	It("holds an identity to maxAllocations across replicas and restarts", func() {
		ns := newNamespace(ctx)
		for i := range 6 {
			create(ctx, kubetest.GameServer(ns, fmt.Sprintf("gs-%d", i), "green", "node-1"))
		}
		limits, err := allocator.ParseLimits([]byte("apiVersion: quartermaster.dev/v1alpha1\nkind: AllocatorLimits\n" +
			"identities:\n  player-7: {maxAllocations: 2}\n"))
		Expect(err).NotTo(HaveOccurred())
		var backends []*kube.Backend
		replica := func() *allocator.Service {
			b := startBackend(ctx, ns)
			backends = append(backends, b)
			svc, err := allocator.NewService(allocator.Options{Backend: b, Limits: limits})
			Expect(err).NotTo(HaveOccurred())
			return svc
		}
		a, b := replica(), replica()
		req := &allocation.AllocationRequest{Namespace: ns}
		_, err = a.Allocate(ctx, "player-7", req)
		Expect(err).NotTo(HaveOccurred())
		_, err = b.Allocate(ctx, "player-7", req)
		Expect(err).NotTo(HaveOccurred())
		// Each replica made one; the identity holds two. Once each has seen
		// the other's write (through its informer: until then a third could
		// slip through, the documented race), neither lets it take a third.
		for _, be := range backends {
			Eventually(func() []*core.GameServer { return be.AllocatedTo("player-7") }, 10*time.Second, 20*time.Millisecond).Should(HaveLen(2))
		}
		for _, svc := range []*allocator.Service{a, b} {
			_, err := svc.Allocate(ctx, "player-7", req)
			Expect(status.Code(err)).To(Equal(codes.ResourceExhausted), "%v", err)
		}
		// A replica started later (a restart) knows too.
		_, err = replica().Allocate(ctx, "player-7", req)
		Expect(status.Code(err)).To(Equal(codes.ResourceExhausted))
		allocated := countAllocated(ctx, ns)
		Expect(allocated).To(Equal(2), "the API server's objects, not the allocator's word")
	})

	It("counts conflict retries in its metrics when replicas race", func() {
		const servers, workers = 200, 6
		ns := newNamespace(ctx)
		for i := range servers {
			create(ctx, kubetest.GameServer(ns, fmt.Sprintf("gs-%03d", i), "green", fmt.Sprintf("node-%d", i%5)))
		}
		// Three replicas with exact Packed race for the same servers.
		var services []*allocator.Service
		for range 3 {
			b, err := kube.New(kube.Config{REST: cluster.RESTConfig(), Namespace: ns})
			Expect(err).NotTo(HaveOccurred())
			Expect(b.Start(ctx)).To(Succeed())
			services = append(services, newService(b))
		}
		var wg sync.WaitGroup
		for _, svc := range services {
			for range workers {
				wg.Go(func() {
					defer GinkgoRecover()
					for range servers / (3 * workers) {
						_, err := svc.Allocate(ctx, "tester", &allocation.AllocationRequest{Namespace: ns})
						if err != nil {
							Expect(status.Code(err)).To(BeElementOf(codes.Aborted, codes.ResourceExhausted), "%v", err)
						}
					}
				})
			}
		}
		wg.Wait()
		var retries float64
		for _, svc := range services {
			retries += sumCounters(svc.Metrics().Retries, "")
		}
		Expect(retries).To(BeNumerically(">", 0), "replicas racing for the same Packed servers must have retried")
		// And the API server agrees that no server was taken twice: every
		// Allocated one carries one allocation stamp.
		allocated := countAllocated(ctx, ns)
		var ok float64
		for _, svc := range services {
			ok += sumCounters(svc.Metrics().Outcomes, "OK")
		}
		Expect(float64(allocated)).To(Equal(ok))
		AddReportEntry("service metrics", fmt.Sprintf("%v retries, %v allocations, %d Allocated on the API server", retries, ok, allocated))
	})
})

// sumCounters adds up every series of a counter vector, or only those with
// label code=code when code is not empty. The service bounds its label
// values (rare namespaces are folded together), so tests sum rather than
// guess the label.
func sumCounters(c prometheus.Collector, code string) float64 {
	ch := make(chan prometheus.Metric, 64)
	go func() { c.Collect(ch); close(ch) }()
	var sum float64
	for m := range ch {
		var d dto.Metric
		Expect(m.Write(&d)).To(Succeed())
		if code != "" {
			match := false
			for _, l := range d.GetLabel() {
				if l.GetName() == "code" && l.GetValue() == code {
					match = true
				}
			}
			if !match {
				continue
			}
		}
		sum += d.GetCounter().GetValue()
	}
	return sum
}

// countAllocated counts the Allocated GameServers in ns on the API server.
func countAllocated(ctx context.Context, ns string) int {
	l, err := api.GameServers(ns).List(ctx, metav1.ListOptions{})
	Expect(err).NotTo(HaveOccurred())
	n := 0
	for _, u := range l.Items {
		if st, _, _ := unstructured.NestedString(u.Object, "status", "state"); st == "Allocated" {
			n++
		}
	}
	return n
}
