package multicluster_test

import (
	"context"
	"fmt"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/quartermaster-dev/quartermaster/allocator"
	"github.com/quartermaster-dev/quartermaster/allocator/pb/allocation"
	"github.com/quartermaster-dev/quartermaster/kindcluster/rig"
)

// Issue 30's multi-cluster rule: a remote that allocates and then loses
// its answer (rig.FaultAnswerLost on the entry's links to it) keeps no
// server Allocated for a request another cluster served.
var _ = Describe("lost answers between clusters", Ordered, func() {
	AfterEach(func(ctx SpecContext) { releaseAll(ctx) }, NodeTimeout(4*time.Minute))

	It("answer-lost: the cloud allocates and its answer is lost; on-prem serves, and the cloud's allocation is given back", Label("answer-lost"), func(ctx SpecContext) {
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
		backOnCloud := func() {
			// The cloud serves over an open connection, so that the next
			// fault meets a request that reaches it.
			Eventually(func(ctx context.Context) string {
				resp, _, err := allocate(ctx, entry, keyed(), 5*time.Second)
				if err != nil {
					return err.Error()
				}
				c := clusterOf("on-prem", resp)
				told[c] = append(told[c], resp.GetGameServerName())
				return c
			}).WithContext(ctx).WithTimeout(45 * time.Second).WithPolling(500 * time.Millisecond).Should(Equal("cloud"))
		}
		counter := func(name string, want ...string) float64 { return metric(ctx, "on-prem", name, want...) }
		lostBefore := counter("qm_forward_answers_lost_total", `cluster="cloud"`)
		queuedBefore := counter("qm_forward_reconciliations_total", `outcome="queued"`)
		backOnCloud()
		const episodes = 3
		for i := range episodes {
			for _, l := range links {
				Expect(l.Set(rig.FaultAnswerLost, true)).To(Succeed())
			}
			resp, _, err := allocate(ctx, entry, keyed(), 10*time.Second)
			for _, l := range links {
				Expect(l.Set(rig.FaultAnswerLost, false)).To(Succeed())
			}
			Expect(err).NotTo(HaveOccurred(), "episode %d", i)
			Expect(clusterOf("on-prem", resp)).To(Equal("on-prem"), "episode %d: served past the lost answer", i)
			told["on-prem"] = append(told["on-prem"], resp.GetGameServerName())
			backOnCloud()
		}
		Expect(counter("qm_forward_answers_lost_total", `cluster="cloud"`) - lostBefore).To(BeNumerically(">=", episodes))
		queued := counter("qm_forward_reconciliations_total", `outcome="queued"`) - queuedBefore
		Expect(queued).To(BeNumerically(">=", episodes))
		// Every queued release ends, and none is given up.
		Eventually(func() float64 {
			done := 0.0
			for _, o := range []string{"released", "nothing_there", "given_up"} {
				done += counter("qm_forward_reconciliations_total", `outcome="`+o+`"`)
			}
			return counter("qm_forward_reconciliations_total", `outcome="queued"`) - done
		}).WithTimeout(time.Minute).WithPolling(500 * time.Millisecond).Should(BeZero())
		Expect(counter("qm_forward_reconciliations_total", `outcome="given_up"`)).To(BeZero())
		for _, c := range []string{"on-prem", "cloud"} {
			Expect(allocatedOn(ctx, c)).To(ConsistOf(told[c]), "cluster %s: its API server holds exactly the allocations it answered", c)
		}
	}, SpecTimeout(4*time.Minute))
})
