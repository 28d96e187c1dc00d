package multicluster_test

import (
	"context"
	"fmt"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/quartermaster-dev/quartermaster/allocator"
	"github.com/quartermaster-dev/quartermaster/allocator/pb/allocation"
	"github.com/quartermaster-dev/quartermaster/kindcluster/rig"
)

// Issue 30's multi-cluster rule: a remote that allocates and then loses
// its answer (rig.FaultAnswerLost on the entry's links to it) leaves one
// allocation for the request, the one its caller is finally answered with.
// A request with the caller's key is not served by another cluster while
// the cloud may hold its allocation: it is answered Unavailable, and the
// caller's retry with the key, once the link is back, gets the cloud's
// server. Nothing is left for the entry to give back.
var _ = Describe("lost answers between clusters", Ordered, func() {
	AfterEach(func(ctx SpecContext) { releaseAll(ctx) }, NodeTimeout(4*time.Minute))

	It("answer-lost: the cloud allocates and its answer is lost; the caller's retry with its key gets that server, and on-prem allocates nothing for it", Label("answer-lost"), func(ctx SpecContext) {
		entry := conns["on-prem"][0]
		links := theRig.Links().Find("on-prem", "cloud")
		Expect(links).NotTo(BeEmpty())
		n := 0
		keyed := func() *allocation.AllocationRequest {
			n++
			r := multi("prefer-cloud")
			r.Metadata = &allocation.MetaPatch{Annotations: map[string]string{allocator.AllocationKeyAnnotation: fmt.Sprintf("e2e-answer-lost-%d", n)}}
			return r
		}
		// What each cluster answered, as the callers were told.
		told := map[string][]string{}
		// servedByCloud sends next() until it is answered, and wants the
		// cloud to answer it.
		servedByCloud := func(next func() *allocation.AllocationRequest, what string) {
			var last error
			Eventually(func(ctx context.Context) string {
				resp, _, err := allocate(ctx, entry, next(), 5*time.Second)
				if last = err; err != nil {
					return err.Error()
				}
				c := clusterOf("on-prem", resp)
				told[c] = append(told[c], resp.GetGameServerName())
				return c
			}).WithContext(ctx).WithTimeout(45*time.Second).WithPolling(500*time.Millisecond).Should(Equal("cloud"), "%s (last error: %v)", what, last)
		}
		counter := func(name string, want ...string) float64 { return metric(ctx, "on-prem", name, want...) }
		lostBefore := counter("qm_forward_answers_lost_total", `cluster="cloud"`)
		queuedBefore := counter("qm_forward_reconciliations_total", `outcome="queued"`)
		// The cloud serves over an open connection, so that the fault
		// meets a request that reaches it.
		servedByCloud(keyed, "warming the link (a new key each time)")
		const episodes = 3
		for i := range episodes {
			for _, l := range links {
				Expect(l.Set(rig.FaultAnswerLost, true)).To(Succeed())
			}
			req := keyed()
			_, _, err := allocate(ctx, entry, req, 10*time.Second)
			for _, l := range links {
				Expect(l.Set(rig.FaultAnswerLost, false)).To(Succeed())
			}
			Expect(status.Code(err)).To(Equal(codes.Unavailable), "episode %d: %v", i, err)
			Expect(status.Convert(err).Message()).To(ContainSubstring("send it again with the same key"), "episode %d", i)
			servedByCloud(func() *allocation.AllocationRequest { return req }, fmt.Sprintf("episode %d: the caller's retry with its key", i))
		}
		Expect(counter("qm_forward_answers_lost_total", `cluster="cloud"`) - lostBefore).To(BeNumerically(">=", episodes))
		Expect(counter("qm_forward_reconciliations_total", `outcome="queued"`)-queuedBefore).To(BeZero(),
			"releases queued for requests with the caller's keys")
		for _, c := range []string{"on-prem", "cloud"} {
			Expect(allocatedOn(ctx, c)).To(ConsistOf(told[c]), "cluster %s: its API server holds exactly the allocations it answered", c)
		}
	}, SpecTimeout(4*time.Minute))
})
