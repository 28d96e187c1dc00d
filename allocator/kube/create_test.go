package kube_test

import (
	"context"
	"fmt"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/quartermaster-dev/quartermaster/allocator"
	"github.com/quartermaster-dev/quartermaster/allocator/kube"
	"github.com/quartermaster-dev/quartermaster/allocator/pb/allocation"
	qmv1 "github.com/quartermaster-dev/quartermaster/allocator/pb/quartermaster/v1"
	"github.com/quartermaster-dev/quartermaster/core"
	"github.com/quartermaster-dev/quartermaster/kindcluster/kubetest"
)

// On-demand servers against the real API server, with the test playing
// Agones' controller by hand so that every step is seen.
var _ = Describe("on-demand servers on the kubernetes backend", func() {
	var ctx context.Context
	var ns string
	var b *kube.Backend
	var svc *allocator.Service
	BeforeEach(func() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(context.Background(), time.Minute)
		DeferCleanup(cancel)
		ns = newNamespace(ctx)
		b = startBackend(ctx, ns)
		tc, err := allocator.ParseTemplates([]byte(fmt.Sprintf(`
apiVersion: quartermaster.dev/v1alpha1
kind: GameServerTemplates
templates:
- name: match
  namespace: %s
  template: {spec: {ports: [{name: default, containerPort: 7654}], template: {spec: {containers: [{name: g, image: example/g}]}}}}
`, ns)))
		Expect(err).NotTo(HaveOccurred())
		svc, err = allocator.NewService(allocator.Options{Backend: b, Templates: tc})
		Expect(err).NotTo(HaveOccurred())
	})

	// setState writes status as the controller would for a server in state.
	setState := func(name, state string) {
		Eventually(func() error {
			u, err := api.GameServers(ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return err
			}
			Expect(unstructured.SetNestedMap(u.Object, map[string]any{
				"state": state, "address": "10.0.0.9", "nodeName": "node-9",
				"ports": []any{map[string]any{"name": "default", "port": int64(7009)}},
			}, "status")).To(Succeed())
			_, err = api.GameServers(ns).Update(ctx, u, metav1.UpdateOptions{})
			return err
		}, 10*time.Second, 20*time.Millisecond).Should(Succeed())
	}
	type result struct {
		resp *qmv1.CreateResponse
		err  error
	}
	startCreate := func(name string, d time.Duration) chan result {
		done := make(chan result, 1)
		go func() {
			defer GinkgoRecover()
			cctx, cancel := context.WithTimeout(ctx, d)
			defer cancel()
			r, err := svc.Create(cctx, "alice", &qmv1.CreateRequest{Template: "match", Name: name})
			done <- result{r, err}
		}()
		return done
	}
	exists := func(name string) func() error {
		return func() error { _, err := api.GameServers(ns).Get(ctx, name, metav1.GetOptions{}); return err }
	}

	It("waits for Ready, then allocates the server to its creator", func() {
		done := startCreate("mine", 30*time.Second)
		Eventually(exists("mine"), 10*time.Second, 20*time.Millisecond).Should(Succeed())
		Consistently(done, 300*time.Millisecond).ShouldNot(Receive())
		setState("mine", "Scheduled")
		Consistently(done, 200*time.Millisecond).ShouldNot(Receive())
		setState("mine", "Ready")
		var r result
		Eventually(done, 10*time.Second).Should(Receive(&r))
		Expect(r.err).NotTo(HaveOccurred())
		Expect(r.resp.GetAllocation().GetGameServerName()).To(Equal("mine"))
		Expect(r.resp.GetAllocation().GetAddress()).To(Equal("10.0.0.9"))
		Expect(r.resp.GetAllocation().GetPorts()[0].GetPort()).To(BeEquivalentTo(7009))
		u, err := api.GameServers(ns).Get(ctx, "mine", metav1.GetOptions{})
		Expect(err).NotTo(HaveOccurred())
		Expect(nestedString(u.Object, "status", "state")).To(Equal("Allocated"))
		Expect(u.GetAnnotations()).To(HaveKeyWithValue(allocator.OwnerAnnotation, "alice"))
		Expect(u.GetAnnotations()).To(HaveKey(core.LastAllocatedAnnotation))
		Expect(u.GetAnnotations()).NotTo(HaveKey(allocator.CreatingAnnotation))
		// The pod template went through untouched.
		cs, _, _ := unstructured.NestedSlice(u.Object, "spec", "template", "spec", "containers")
		Expect(cs).To(HaveLen(1))
		Expect(b.AllocatedTo("alice")).To(HaveLen(1))
	})

	It("lets nobody else allocate a Ready server that is still being created", func() {
		// A server left Ready with the creating annotation (as between the
		// controller's write and the creator's) is Reserved to everyone.
		u := kubetest.GameServer(ns, "spoken-for", "", "node-1")
		unstructured.RemoveNestedField(u.Object, "metadata", "labels")
		u.SetAnnotations(map[string]string{allocator.CreatingAnnotation: "true", allocator.OwnerAnnotation: "alice"})
		create(ctx, u)
		Eventually(func() core.State {
			gs, _ := b.Get(core.Key{Namespace: ns, Name: "spoken-for"})
			if gs == nil {
				return ""
			}
			return gs.State
		}, 10*time.Second, 20*time.Millisecond).Should(Equal(core.StateReserved))
		_, err := svc.Allocate(ctx, "mallory", &allocation.AllocationRequest{Namespace: ns})
		Expect(status.Code(err)).To(Equal(codes.ResourceExhausted), "%v", err)
	})

	It("deletes a server that fails while starting, and says so", func() {
		done := startCreate("doomed", 30*time.Second)
		Eventually(exists("doomed"), 10*time.Second, 20*time.Millisecond).Should(Succeed())
		setState("doomed", "Unhealthy")
		var r result
		Eventually(done, 10*time.Second).Should(Receive(&r))
		Expect(status.Code(r.err)).To(Equal(codes.Unavailable), "%v", r.err)
		Expect(r.err.Error()).To(ContainSubstring("it went to Unhealthy; it was deleted, nothing is left behind"))
		Eventually(func() bool { return apierrors.IsNotFound(exists("doomed")()) }, 10*time.Second, 20*time.Millisecond).Should(BeTrue())
	})

	It("deletes a server that is not Ready by the deadline", func() {
		done := startCreate("late", 1500*time.Millisecond)
		var r result
		Eventually(done, 10*time.Second).Should(Receive(&r))
		Expect(status.Code(r.err)).To(Equal(codes.DeadlineExceeded), "%v", r.err)
		Expect(r.err.Error()).To(ContainSubstring("did not become Ready within the caller's deadline; it was deleted"))
		Expect(apierrors.IsNotFound(exists("late")())).To(BeTrue())
	})

	It("answers AlreadyExists for a name in use and leaves that server alone", func() {
		create(ctx, kubetest.GameServer(ns, "taken", "green", "node-1"))
		r := <-startCreate("taken", 10*time.Second)
		Expect(status.Code(r.err)).To(Equal(codes.AlreadyExists), "%v", r.err)
		Expect(exists("taken")()).To(Succeed())
	})

	It("destroys only for the owner", func() {
		u := kubetest.GameServer(ns, "owned", "green", "node-1")
		u.SetAnnotations(map[string]string{allocator.OwnerAnnotation: "alice"})
		create(ctx, u)
		_, err := b.Destroy(ctx, core.Key{Namespace: ns, Name: "owned"}, "bob")
		Expect(err).To(MatchError(allocator.ErrNotFound))
		Expect(exists("owned")()).To(Succeed())
		gs, err := b.Destroy(ctx, core.Key{Namespace: ns, Name: "owned"}, "alice")
		Expect(err).NotTo(HaveOccurred())
		Expect(gs.Name).To(Equal("owned"))
		Expect(apierrors.IsNotFound(exists("owned")())).To(BeTrue())
	})
})
