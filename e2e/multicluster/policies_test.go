package multicluster_test

import (
	"context"
	"slices"
	"sort"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/quartermaster-dev/quartermaster/allocator/pb/allocation"
	"github.com/quartermaster-dev/quartermaster/kindcluster/rig"
)

var policyResource = schema.GroupVersionResource{Group: "multicluster.agones.dev", Version: "v1", Resource: "gameserverallocationpolicies"}

// The specs share one rig and run in order; each gives back what it
// allocated, so the next starts from whole fleets.
var _ = Describe("seed 003's policies on a live rig", Ordered, func() {
	AfterEach(func(ctx SpecContext) { releaseAll(ctx) }, NodeTimeout(4*time.Minute))

	It("burst-to-cloud: on-prem serves until it has no Ready server, then the cloud", Label("burst"), func(ctx SpecContext) {
		var served []string
		var names []string
		start := time.Now()
		defer func() { measured.spent(time.Since(start), "burst-to-cloud") }()
		for i := range fleetSize + 5 {
			resp, took, err := allocate(ctx, conns["on-prem"][0], multi("burst"), 10*time.Second)
			measured.add("burst-to-cloud", took, err)
			Expect(err).NotTo(HaveOccurred(), "request %d", i)
			served = append(served, clusterOf("on-prem", resp))
			names = append(names, resp.GetGameServerName())
		}
		// No cloud allocation while on-prem still had a Ready server: the
		// first 30 are on-prem's, the rest the cloud's.
		want := append(slices.Repeat([]string{"on-prem"}, fleetSize), slices.Repeat([]string{"cloud"}, 5)...)
		Expect(served).To(Equal(want))
		onPrem, cloud := allocatedOn(ctx, "on-prem"), allocatedOn(ctx, "cloud")
		Expect(onPrem).To(HaveLen(fleetSize))
		Expect(cloud).To(HaveLen(5))
		// What callers were told is what the API servers hold.
		got := append(append([]string{}, onPrem...), cloud...)
		sort.Strings(got)
		sort.Strings(names)
		Expect(got).To(Equal(names))
	}, SpecTimeout(2*time.Minute))

	It("provider-preference: the preferred cluster's link going down costs no request, and traffic returns", Label("preference"), func(ctx SpecContext) {
		entry := conns["on-prem"][0]
		for i := range 5 {
			resp, _, err := allocate(ctx, entry, multi("prefer-cloud"), 10*time.Second)
			Expect(err).NotTo(HaveOccurred(), "request %d", i)
			Expect(clusterOf("on-prem", resp)).To(Equal("cloud"))
		}
		links := theRig.Links().Find("on-prem", "cloud")
		Expect(links).NotTo(BeEmpty())
		for _, l := range links {
			Expect(l.Set(rig.FaultDown, true)).To(Succeed())
		}
		skippedBefore := metric(ctx, "on-prem", "qm_forward_tries_total", `cluster="cloud"`, `outcome="breaker_open"`)
		start := time.Now()
		for i := range 12 {
			resp, took, err := allocate(ctx, entry, multi("prefer-cloud"), 5*time.Second)
			measured.add("preference-link-down", took, err)
			Expect(err).NotTo(HaveOccurred(), "request %d with the cloud's link down", i)
			Expect(clusterOf("on-prem", resp)).To(Equal("on-prem"))
			Expect(took).To(BeNumerically("<", 2*time.Second), "request %d waited on the dead link", i)
		}
		measured.spent(time.Since(start), "preference-link-down")
		// The breaker, not luck, kept later requests off the dead link.
		Expect(metric(ctx, "on-prem", "qm_forward_tries_total", `cluster="cloud"`, `outcome="breaker_open"`)).
			To(BeNumerically(">", skippedBefore))
		for _, l := range links {
			Expect(l.Set(rig.FaultDown, false)).To(Succeed())
		}
		// Once a probe finds the link back, the cloud serves again.
		Eventually(func(ctx context.Context) string {
			resp, _, err := allocate(ctx, entry, multi("prefer-cloud"), 5*time.Second)
			if err != nil {
				return err.Error()
			}
			return clusterOf("on-prem", resp)
		}).WithContext(ctx).WithTimeout(45 * time.Second).WithPolling(500 * time.Millisecond).Should(Equal("cloud"))
	}, SpecTimeout(2*time.Minute))

	It("load-spreading: weights 300:100 in one priority give 75%/25% within 3 points over 2,000 allocations", Label("spread"), func(ctx SpecContext) {
		const total, workers = 2000, 8
		// Big enough fleets that neither runs dry: a fallback would bend
		// the shares.
		scaleFleet(ctx, "on-prem", 1700)
		scaleFleet(ctx, "cloud", 700)
		DeferCleanup(func(ctx SpecContext) {
			releaseAll(ctx)
			scaleFleet(ctx, "on-prem", fleetSize)
			scaleFleet(ctx, "cloud", fleetSize)
		}, NodeTimeout(5*time.Minute))
		var mu sync.Mutex
		count := map[string]int{}
		var failed []error
		var wg sync.WaitGroup
		next := make(chan int, total)
		for i := range total {
			next <- i
		}
		close(next)
		spreadStart := time.Now()
		for range workers {
			wg.Add(1)
			go func() {
				defer GinkgoRecover()
				defer wg.Done()
				for range next {
					resp, took, err := allocate(ctx, conns["on-prem"][0], multi("spread"), 10*time.Second)
					target := "spread"
					mu.Lock()
					if err != nil {
						failed = append(failed, err)
					} else {
						count[clusterOf("on-prem", resp)]++
						target = "spread->" + clusterOf("on-prem", resp)
					}
					mu.Unlock()
					measured.add(target, took, err)
				}
			}()
		}
		wg.Wait()
		measured.spent(time.Since(spreadStart), "spread->on-prem", "spread->cloud")
		Expect(failed).To(BeEmpty())
		share := float64(count["on-prem"]) / total
		GinkgoWriter.Printf("on-prem %d, cloud %d: on-prem share %.3f\n", count["on-prem"], count["cloud"], share)
		Expect(share).To(BeNumerically("~", 0.75, 0.03))
		Expect(allocatedOn(ctx, "on-prem")).To(HaveLen(count["on-prem"]))
		Expect(allocatedOn(ctx, "cloud")).To(HaveLen(count["cloud"]))
	}, SpecTimeout(8*time.Minute))

	It("cache-staleness: two replicas under concurrent load never allocate a server twice", Label("staleness"), func(ctx SpecContext) {
		cloud := conns["cloud"]
		Expect(cloud).To(HaveLen(2))
		var mu sync.Mutex
		var names []string
		var unexpected []error
		var wg sync.WaitGroup
		for w := range 16 {
			wg.Add(1)
			go func() {
				defer GinkgoRecover()
				defer wg.Done()
				conn := cloud[w%2]
				for range 6 {
					resp, _, err := allocate(ctx, conn, &allocation.AllocationRequest{
						GameServerSelectors: []*allocation.GameServerSelector{{MatchLabels: map[string]string{"game": "shooter"}}},
					}, 10*time.Second)
					mu.Lock()
					switch {
					case err == nil:
						names = append(names, resp.GetGameServerName())
					case status.Code(err) != codes.ResourceExhausted: // UnAllocated once the fleet is dry
						unexpected = append(unexpected, err)
					}
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		Expect(unexpected).To(BeEmpty())
		// Every server allocated once, and all of them: 96 tries for 30.
		Expect(names).To(HaveLen(fleetSize))
		Expect(slices.Compact(slices.Sorted(slices.Values(names)))).To(HaveLen(fleetSize))
		onAPI := allocatedOn(ctx, "cloud")
		sort.Strings(onAPI)
		sort.Strings(names)
		Expect(onAPI).To(Equal(names))
	}, SpecTimeout(2*time.Minute))

	It("fails no request while a cross-cluster Secret is rotated under load", Label("rotation"), func(ctx SpecContext) {
		// The Secret the on-prem allocators present to the cloud, as its
		// API server holds it: the allocators watch it there.
		secretCert := func() []byte {
			sec, err := clientsets["on-prem"].CoreV1().Secrets("default").Get(ctx, rig.SecretName("cloud"), metav1.GetOptions{})
			Expect(err).NotTo(HaveOccurred())
			return sec.Data["tls.crt"]
		}
		before := secretCert()
		for i := range 24 {
			if i == 8 {
				Expect(theRig.RotateSecrets(ctx, "on-prem")).To(Succeed())
			}
			resp, _, err := allocate(ctx, conns["on-prem"][0], multi("prefer-cloud"), 10*time.Second)
			Expect(err).NotTo(HaveOccurred(), "request %d", i)
			Expect(clusterOf("on-prem", resp)).To(Equal("cloud"), "request %d", i)
			time.Sleep(250 * time.Millisecond) // requests on both sides of the informer's update
		}
		Expect(secretCert()).NotTo(Equal(before), "the Secret was not rotated")
	}, SpecTimeout(time.Minute))

	It("loses and duplicates nothing when a cluster's API server restarts mid-load", Label("restart"), func(ctx SpecContext) {
		restarted := make(chan error, 1)
		var names []string
		var failures []string
		for i := range 25 {
			if i == 8 {
				go func() { restarted <- theRig.RestartAPIServer(context.WithoutCancel(ctx), "on-prem") }()
			}
			// On on-prem alone: a multi-cluster request would (rightly)
			// go to the cloud while on-prem cannot write.
			resp, _, err := allocate(ctx, conns["on-prem"][0], &allocation.AllocationRequest{
				GameServerSelectors: []*allocation.GameServerSelector{{MatchLabels: map[string]string{"game": "shooter"}}},
			}, 10*time.Second)
			if err != nil {
				// An allocation may fail while the API server is away;
				// it must say so, and nothing may be half done.
				failures = append(failures, status.Code(err).String())
				continue
			}
			names = append(names, resp.GetGameServerName())
			time.Sleep(100 * time.Millisecond)
		}
		Expect(<-restarted).To(Succeed())
		// A failure while the API server was away says so, and may be
		// retried: never Internal.
		for _, code := range failures {
			Expect(code).To(BeElementOf(codes.Unavailable.String(), codes.DeadlineExceeded.String()))
		}
		GinkgoWriter.Printf("%d allocated, failures while the API server was away: %v\n", len(names), failures)
		Expect(names).NotTo(BeEmpty())
		Expect(slices.Compact(slices.Sorted(slices.Values(names)))).To(HaveLen(len(names)), "a server was given twice")
		// Every answered allocation is on the API server, and nothing
		// else is.
		Eventually(func(ctx context.Context) []string {
			got := allocatedOn(ctx, "on-prem")
			sort.Strings(got)
			return got
		}).WithContext(ctx).WithTimeout(30 * time.Second).Should(Equal(slices.Sorted(slices.Values(names))))
	}, SpecTimeout(3*time.Minute))

	It("refuses a policy that points back at its own cluster instead of looping", Label("loop"), func(ctx SpecContext) {
		// A route whose only policy sends on-prem's requests to on-prem's
		// own address, as a remote: the forwarded call arrives where it
		// started and is refused.
		// Written to on-prem's API server, where its allocators watch the
		// policies.
		policies := dynamics["on-prem"].Resource(policyResource).Namespace("default")
		loop := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "multicluster.agones.dev/v1", "kind": "GameServerAllocationPolicy",
			"metadata": map[string]any{"name": "loop", "namespace": "default", "labels": map[string]any{"route": "loop"}},
			"spec": map[string]any{"priority": int64(1), "weight": int64(1), "connectionInfo": map[string]any{
				"clusterName": "on-prem-again", "namespace": "default", "secretName": rig.SecretName("cloud"),
				"allocationEndpoints": []any{theRig.SelfEndpoint("on-prem")},
			}},
		}}
		_, err := policies.Create(ctx, loop, metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(func(ctx SpecContext) {
			Expect(policies.Delete(ctx, "loop", metav1.DeleteOptions{})).To(Succeed())
		})
		Eventually(func(ctx context.Context) string {
			_, _, err := allocate(ctx, conns["on-prem"][0], multi("loop"), 10*time.Second)
			return status.Convert(err).Message()
		}).WithContext(ctx).WithTimeout(30 * time.Second).WithPolling(500 * time.Millisecond).Should(ContainSubstring("loop"))
		Expect(allocatedOn(ctx, "on-prem")).To(BeEmpty())
	}, SpecTimeout(time.Minute))
})
