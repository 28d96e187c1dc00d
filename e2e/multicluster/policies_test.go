package multicluster_test

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"net/http"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"

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
		// The servers each cluster allocated, as the callers were told:
		// at the end, exactly what each API server holds.
		told := map[string][]string{}
		for i := range 5 {
			resp, _, err := allocate(ctx, entry, multi("prefer-cloud"), 10*time.Second)
			Expect(err).NotTo(HaveOccurred(), "request %d", i)
			Expect(clusterOf("on-prem", resp)).To(Equal("cloud"))
			told["cloud"] = append(told["cloud"], resp.GetGameServerName())
		}
		Expect(allocatedOn(ctx, "cloud")).To(ConsistOf(told["cloud"]), "the preferred cluster's API server holds its allocations")
		Expect(allocatedOn(ctx, "on-prem")).To(BeEmpty(), "nothing on the fallback while the preferred cluster serves")
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
			told["on-prem"] = append(told["on-prem"], resp.GetGameServerName())
		}
		measured.spent(time.Since(start), "preference-link-down")
		Expect(allocatedOn(ctx, "on-prem")).To(ConsistOf(told["on-prem"]), "the fallback's API server holds what it was told")
		Expect(allocatedOn(ctx, "cloud")).To(ConsistOf(told["cloud"]), "nothing reached the cloud while its link was down")
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
			c := clusterOf("on-prem", resp)
			told[c] = append(told[c], resp.GetGameServerName())
			return c
		}).WithContext(ctx).WithTimeout(45 * time.Second).WithPolling(500 * time.Millisecond).Should(Equal("cloud"))
		Expect(told["cloud"]).To(HaveLen(6))
		for _, c := range []string{"on-prem", "cloud"} {
			Expect(allocatedOn(ctx, c)).To(ConsistOf(told[c]), "cluster %s: its API server holds exactly the allocations it answered", c)
		}
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
		// Each replica's answered allocations: both must serve, or the
		// spec says nothing of two replicas sharing one fleet.
		servedBefore := replicaMetric(ctx, "cloud", "qm_allocator_allocations_total", `code="OK"`)
		Expect(servedBefore).To(HaveLen(2), "the cloud's metrics are not those of two replicas")
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
		servedAfter := replicaMetric(ctx, "cloud", "qm_allocator_allocations_total", `code="OK"`)
		Expect(servedAfter).To(HaveLen(2))
		for n := range servedAfter {
			GinkgoWriter.Printf("cloud replica %d allocated %v\n", n, servedAfter[n]-servedBefore[n])
			Expect(servedAfter[n]-servedBefore[n]).To(BeNumerically(">", 0), "cloud replica %d allocated nothing: one replica did all the work", n)
		}
	}, SpecTimeout(2*time.Minute))

	It("fails no request while a cross-cluster Secret is rotated under load, and the remote sees the new certificate", Label("rotation"), func(ctx SpecContext) {
		// The Secret the on-prem allocators present to the cloud, as its
		// API server holds it: the allocators watch it there.
		secretSerial := func() string {
			sec, err := clientsets["on-prem"].CoreV1().Secrets("default").Get(ctx, rig.SecretName("cloud"), metav1.GetOptions{})
			Expect(err).NotTo(HaveOccurred())
			block, _ := pem.Decode(sec.Data["tls.crt"])
			Expect(block).NotTo(BeNil(), "the Secret's tls.crt is not PEM")
			cert, err := x509.ParseCertificate(block.Bytes)
			Expect(err).NotTo(HaveOccurred())
			return cert.SerialNumber.Text(16)
		}
		// The cloud's open connections from on-prem's forwarders with the
		// certificate of serial (qm_mtls_client_connections, over both
		// cloud replicas).
		seenByCloud := func(ctx context.Context, serial string) float64 {
			return metric(ctx, "cloud", "qm_mtls_client_connections", `identity="forwarder-on-prem"`, `serial="`+serial+`"`)
		}
		request := func(i int) {
			resp, _, err := allocate(ctx, conns["on-prem"][0], multi("prefer-cloud"), 10*time.Second)
			Expect(err).NotTo(HaveOccurred(), "request %d", i)
			Expect(clusterOf("on-prem", resp)).To(Equal("cloud"), "request %d", i)
		}
		old := secretSerial()
		for i := range 8 {
			request(i)
		}
		oldBefore := seenByCloud(ctx, old)
		Expect(oldBefore).To(BeNumerically(">", 0), "before the rotation the cloud saw no connection with the Secret's certificate (serial %s)", old)

		Expect(theRig.RotateSecrets(ctx, "on-prem")).To(Succeed())
		renewed := secretSerial()
		Expect(renewed).NotTo(Equal(old), "the Secret was not rotated")
		Expect(seenByCloud(ctx, renewed)).To(BeZero(), "a certificate nobody had yet")
		for i := 8; i < 24; i++ {
			request(i)
			time.Sleep(250 * time.Millisecond) // requests on both sides of the informer's update
		}
		// The forwarder moved to the new certificate, and closed the
		// connection it had used with the old one, while the requests went
		// on (the wait is for the cloud to see the close). A connection to
		// an endpoint no request has used since the rotation, such as the
		// cloud's second replica's, may keep the old certificate until it
		// is next used.
		Eventually(func(ctx context.Context) [2]float64 {
			return [2]float64{seenByCloud(ctx, renewed), seenByCloud(ctx, old)}
		}).WithContext(ctx).WithTimeout(10*time.Second).WithPolling(250*time.Millisecond).Should(
			WithTransform(func(n [2]float64) bool { return n[0] > 0 && n[1] < oldBefore }, BeTrue()),
			"connections to the cloud with the new certificate (serial %s) and the old (serial %s, %v before the rotation)", renewed, old, oldBefore)
	}, SpecTimeout(2*time.Minute))

	It("loses and duplicates nothing when a cluster's API server restarts mid-load", Label("restart"), func(ctx SpecContext) {
		// The API server as a client sees it, probed often from before the
		// restart to after: when it was seen down.
		cfg, err := theRig.RESTConfig("on-prem")
		Expect(err).NotTo(HaveOccurred())
		hc, err := rest.HTTPClientFor(cfg)
		Expect(err).NotTo(HaveOccurred())
		var mu sync.Mutex
		var down []time.Time
		probeCtx, stopProbe := context.WithCancel(ctx)
		probed := make(chan struct{})
		go func() {
			defer close(probed)
			for probeCtx.Err() == nil {
				pctx, cancel := context.WithTimeout(probeCtx, time.Second)
				req, _ := http.NewRequestWithContext(pctx, http.MethodGet, strings.TrimSuffix(cfg.Host, "/")+"/readyz", nil)
				resp, err := hc.Do(req)
				if err == nil {
					resp.Body.Close()
				}
				if (err != nil || resp.StatusCode != http.StatusOK) && probeCtx.Err() == nil {
					mu.Lock()
					down = append(down, time.Now())
					mu.Unlock()
				}
				cancel()
				select {
				case <-probeCtx.Done():
				case <-time.After(50 * time.Millisecond):
				}
			}
		}()

		type request struct {
			start, end time.Time
			code       codes.Code
		}
		var requests []request
		var names []string
		restarted := make(chan error, 1)
		restarting, done, afterRestart := false, false, 0
		// Allocations before the restart, through it, and after it: the
		// load goes on until the restart is over and five more have been
		// answered (25 at most, of the fleet's 30).
		for len(names) < 25 && (!done || afterRestart < 5) {
			if !restarting && len(names) == 8 {
				restarting = true
				go func() { restarted <- theRig.RestartAPIServer(context.WithoutCancel(ctx), "on-prem") }()
			}
			if restarting && !done {
				select {
				case err := <-restarted:
					Expect(err).NotTo(HaveOccurred(), "restarting on-prem's API server")
					done = true
				default:
				}
			}
			// On on-prem alone: a multi-cluster request would (rightly)
			// go to the cloud while on-prem cannot write.
			start := time.Now()
			resp, _, err := allocate(ctx, conns["on-prem"][0], &allocation.AllocationRequest{
				GameServerSelectors: []*allocation.GameServerSelector{{MatchLabels: map[string]string{"game": "shooter"}}},
			}, 10*time.Second)
			requests = append(requests, request{start: start, end: time.Now(), code: status.Code(err)})
			if err == nil {
				names = append(names, resp.GetGameServerName())
				if done {
					afterRestart++
				}
			}
			time.Sleep(100 * time.Millisecond)
		}
		stopProbe()
		<-probed
		Expect(done).To(BeTrue(), "the restart did not end while the load ran")

		// The restart happened, and under the load: the API server was
		// seen down, and requests were in flight while it was.
		mu.Lock()
		Expect(down).NotTo(BeEmpty(), "on-prem's API server was never seen down: it did not restart")
		firstDown, lastDown := down[0], down[len(down)-1]
		mu.Unlock()
		var during []codes.Code
		for _, r := range requests {
			if !r.start.After(lastDown) && !r.end.Before(firstDown) {
				during = append(during, r.code)
			}
		}
		GinkgoWriter.Printf("API server seen down for %v; %d requests, %d in flight while it was (codes %v); %d allocated\n",
			lastDown.Sub(firstDown).Round(time.Millisecond), len(requests), len(during), during, len(names))
		Expect(during).NotTo(BeEmpty(), "no request was in flight while the API server was down")
		// A failure while the API server was away says so, and may be
		// retried: never Internal.
		for _, r := range requests {
			if r.code != codes.OK {
				Expect(r.code).To(BeElementOf(codes.Unavailable, codes.DeadlineExceeded))
			}
		}
		Expect(slices.Compact(slices.Sorted(slices.Values(names)))).To(HaveLen(len(names)), "a server was given twice")
		// Every answered allocation is on the API server, and nothing
		// else is.
		Eventually(func(ctx context.Context) []string {
			got := allocatedOn(ctx, "on-prem")
			sort.Strings(got)
			return got
		}).WithContext(ctx).WithTimeout(30 * time.Second).Should(Equal(slices.Sorted(slices.Values(names))))
	}, SpecTimeout(3*time.Minute))

	It("stops a forwarding loop through a relay that turns multi-cluster back on, at the allocator it started from", Label("loop"), func(ctx SpecContext) {
		// An allocator forwards with multi-cluster off, so a loop needs
		// something on the path that turns it back on: here a relay (a
		// gateway that enables multi-cluster on what it passes on, and
		// passes headers through) between on-prem and on-prem itself. A
		// route whose only policy sends on-prem's requests to the relay
		// sends each one round: on-prem, relay, on-prem, ... unless
		// on-prem sees itself in the request's hops and refuses it.
		r := startRelay("on-prem", conns["on-prem"][0])
		// Written to on-prem's API server, where its allocators watch the
		// policies.
		policies := dynamics["on-prem"].Resource(policyResource).Namespace("default")
		loop := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "multicluster.agones.dev/v1", "kind": "GameServerAllocationPolicy",
			"metadata": map[string]any{"name": "loop", "namespace": "default", "labels": map[string]any{"route": "loop"}},
			"spec": map[string]any{"priority": int64(1), "weight": int64(1), "connectionInfo": map[string]any{
				"clusterName": "relay", "namespace": "default", "secretName": rig.SecretName("cloud"),
				"allocationEndpoints": []any{r.endpoint},
			}},
		}}
		_, err := policies.Create(ctx, loop, metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(func(ctx SpecContext) {
			Expect(policies.Delete(ctx, "loop", metav1.DeleteOptions{})).To(Succeed())
		})
		// Until on-prem has the policy, it answers that none matches; once
		// it has, its requests reach the relay.
		Eventually(func(ctx context.Context) int64 {
			_, _, _ = allocate(ctx, conns["on-prem"][0], multi("loop"), 10*time.Second)
			return r.calls.Load()
		}).WithContext(ctx).WithTimeout(30 * time.Second).WithPolling(500 * time.Millisecond).Should(BeNumerically(">", 0))

		before := r.calls.Load()
		_, _, err = allocate(ctx, conns["on-prem"][0], multi("loop"), 10*time.Second)
		Expect(err).To(HaveOccurred(), "a request sent round a loop was served")
		st := status.Convert(err)
		GinkgoWriter.Printf("the loop's answer: %s: %s\n", st.Code(), st.Message())
		// The refusal of the allocator that saw itself among the hops,
		// passed back by the relay: the hop check's code and words, and
		// the path it saw.
		Expect(st.Code()).To(Equal(codes.FailedPrecondition))
		Expect(st.Message()).To(ContainSubstring(`forwarding loop: the request already passed through this allocator ("on-prem"; path on-prem -> here)`))
		// Once round, not more: on-prem refused the request the first
		// time it came back.
		Expect(r.calls.Load()-before).To(Equal(int64(1)), "the relay passed the request on more than once")
		Expect(allocatedOn(ctx, "on-prem")).To(BeEmpty())
		Expect(allocatedOn(ctx, "cloud")).To(BeEmpty())
	}, SpecTimeout(time.Minute))
})
