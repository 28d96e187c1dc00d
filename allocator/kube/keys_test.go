package kube_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/quartermaster-dev/quartermaster/allocator"
	"github.com/quartermaster-dev/quartermaster/allocator/kube"
	"github.com/quartermaster-dev/quartermaster/core"
	"github.com/quartermaster-dev/quartermaster/kindcluster/kubetest"
)

// Idempotency keys on the kubernetes backend with several replicas (keys.go),
// each replica a Backend of its own on the one real API server; the
// records live in the spec's namespace.
var _ = Describe("idempotency keys across replicas", func() {
	var ctx context.Context
	BeforeEach(func() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(context.Background(), 2*time.Minute)
		DeferCleanup(cancel)
	})

	replica := func(ns string, edit ...func(*kube.Config)) *kube.Backend {
		cfg := kube.Config{REST: cluster.RESTConfig(), Namespace: ns, KeyNamespace: ns}
		for _, e := range edit {
			e(&cfg)
		}
		b, err := kube.New(cfg)
		Expect(err).NotTo(HaveOccurred())
		Expect(b.Start(ctx)).To(Succeed())
		return b
	}
	// keyedRequest asks for a green server for identity with key.
	keyedRequest := func(ns, identity, key string, extra map[string]string) *core.Request {
		ann := map[string]string{allocator.OwnerAnnotation: identity, allocator.AllocationKeyAnnotation: key}
		for k, v := range extra {
			ann[k] = v
		}
		return request(&core.Request{Namespace: ns, Selectors: []core.Selector{{MatchLabels: map[string]string{core.FleetLabel: "green"}}},
			Metadata: core.MetaPatch{Annotations: ann}})
	}
	// allocatedServers lists the Allocated GameServers in ns by name.
	allocatedServers := func(ns string) map[string]*unstructured.Unstructured {
		l, err := api.GameServers(ns).List(ctx, metav1.ListOptions{})
		Expect(err).NotTo(HaveOccurred())
		out := map[string]*unstructured.Unstructured{}
		for i, u := range l.Items {
			if st, _, _ := unstructured.NestedString(u.Object, "status", "state"); st == "Allocated" {
				out[u.GetName()] = &l.Items[i]
			}
		}
		return out
	}
	keyRecords := func(ns string) int {
		cs := api.Core
		l, err := cs.CoordinationV1().Leases(ns).List(ctx, metav1.ListOptions{LabelSelector: kube.KeyRecordLabel})
		Expect(err).NotTo(HaveOccurred())
		return len(l.Items)
	}
	// keyEvents reads b's qm_allocator_key_records_total for event.
	keyEvents := func(b *kube.Backend, event string) float64 {
		reg := prometheus.NewRegistry()
		Expect(b.Register(reg)).To(Succeed())
		mfs, err := reg.Gather()
		Expect(err).NotTo(HaveOccurred())
		for _, mf := range mfs {
			if mf.GetName() != "qm_allocator_key_records_total" {
				continue
			}
			for _, m := range mf.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "event" && l.GetValue() == event {
						return m.GetCounter().GetValue()
					}
				}
			}
		}
		return 0
	}
	fleet := func(ns string, n int) {
		for i := range n {
			create(ctx, kubetest.GameServer(ns, fmt.Sprintf("gs-%02d", i), "green", fmt.Sprintf("node-%d", i%3)))
		}
	}

	It("allocates one server for a key sent to three replicas at the same moment, and all three answer it", func() {
		const keys = 12
		ns := newNamespace(ctx)
		fleet(ns, 2*keys)
		reps := []*kube.Backend{replica(ns), replica(ns), replica(ns)}
		for k := range keys {
			key := fmt.Sprintf("match-%d", k)
			var start sync.WaitGroup
			start.Add(1)
			answers := make([]*allocator.Allocation, len(reps))
			errs := make([]error, len(reps))
			var wg sync.WaitGroup
			for i, r := range reps {
				wg.Go(func() {
					start.Wait()
					answers[i], errs[i] = r.Allocate(ctx, keyedRequest(ns, "mm", key, nil), time.Now(), uint64(k*3+i))
				})
			}
			start.Done()
			wg.Wait()
			fresh := 0
			for i := range reps {
				Expect(errs[i]).NotTo(HaveOccurred(), "replica %d, key %s", i, key)
				Expect(answers[i].GameServer.Name).To(Equal(answers[0].GameServer.Name), "key %s: replica %d answered another server", key, i)
				if !answers[i].Replayed {
					fresh++
				}
			}
			Expect(fresh).To(Equal(1), "key %s: exactly one replica allocates, the others replay", key)
		}
		// The API server's objects: one Allocated server per key, each
		// carrying its key.
		servers := allocatedServers(ns)
		Expect(servers).To(HaveLen(keys))
		seen := map[string]bool{}
		for _, u := range servers {
			k := u.GetAnnotations()[allocator.AllocationKeyAnnotation]
			Expect(seen).NotTo(HaveKey(k))
			seen[k] = true
		}
		Expect(keyRecords(ns)).To(Equal(keys))
	})

	It("replays a key sent again later to another replica, writing nothing", func() {
		ns := newNamespace(ctx)
		fleet(ns, 3)
		a, b := replica(ns), replica(ns)
		first, err := a.Allocate(ctx, keyedRequest(ns, "mm", "m-1", nil), time.Now(), 1)
		Expect(err).NotTo(HaveOccurred())
		Expect(first.Replayed).To(BeFalse())
		before, err := api.GameServers(ns).Get(ctx, first.GameServer.Name, metav1.GetOptions{})
		Expect(err).NotTo(HaveOccurred())

		again, err := b.Allocate(ctx, keyedRequest(ns, "mm", "m-1", nil), time.Now().Add(time.Second), 2)
		Expect(err).NotTo(HaveOccurred())
		Expect(again.Replayed).To(BeTrue())
		Expect(again.GameServer.Name).To(Equal(first.GameServer.Name))
		Expect(again.GameServer.LastAllocated()).To(Equal(first.GameServer.LastAllocated()))
		after, err := api.GameServers(ns).Get(ctx, first.GameServer.Name, metav1.GetOptions{})
		Expect(err).NotTo(HaveOccurred())
		Expect(after.GetResourceVersion()).To(Equal(before.GetResourceVersion()), "a replay writes nothing")
		Expect(keyEvents(a, "claimed")).To(Equal(1.0))
		Expect(keyEvents(b, "replayed")).To(Equal(1.0))
		Expect(keyEvents(b, "claimed")).To(BeZero())
		Expect(allocatedServers(ns)).To(HaveLen(1))

		// The same key from another identity is another key.
		other, err := b.Allocate(ctx, keyedRequest(ns, "someone-else", "m-1", nil), time.Now(), 3)
		Expect(err).NotTo(HaveOccurred())
		Expect(other.Replayed).To(BeFalse())
		Expect(other.GameServer.Name).NotTo(Equal(first.GameServer.Name))
	})

	It("answers a conflict for the same key with another request, on any replica", func() {
		ns := newNamespace(ctx)
		fleet(ns, 3)
		a, b := replica(ns), replica(ns)
		_, err := a.Allocate(ctx, keyedRequest(ns, "mm", "m-1", map[string]string{"map": "dust"}), time.Now(), 1)
		Expect(err).NotTo(HaveOccurred())
		for _, r := range []*kube.Backend{a, b} {
			_, err = r.Allocate(ctx, keyedRequest(ns, "mm", "m-1", map[string]string{"map": "inferno"}), time.Now(), 2)
			var conflict *allocator.KeyConflictError
			Expect(errors.As(err, &conflict)).To(BeTrue(), "%v", err)
			Expect(conflict.Key).To(Equal("m-1"))
			Expect(keyEvents(r, "conflict")).To(Equal(1.0))
		}
		Expect(allocatedServers(ns)).To(HaveLen(1))
	})

	It("answers ErrKeyReleased once the key's server is released or gone, and allocates nothing new", func() {
		ns := newNamespace(ctx)
		fleet(ns, 4)
		a, b := replica(ns), replica(ns)
		first, err := a.Allocate(ctx, keyedRequest(ns, "mm", "m-1", nil), time.Now(), 1)
		Expect(err).NotTo(HaveOccurred())
		_, err = a.Release(ctx, first.GameServer.Key(), first.GameServer.LastAllocated())
		Expect(err).NotTo(HaveOccurred())
		_, err = b.Allocate(ctx, keyedRequest(ns, "mm", "m-1", nil), time.Now(), 2)
		Expect(err).To(MatchError(allocator.ErrKeyReleased))

		second, err := b.Allocate(ctx, keyedRequest(ns, "mm", "m-2", nil), time.Now(), 3)
		Expect(err).NotTo(HaveOccurred())
		Expect(api.GameServers(ns).Delete(ctx, second.GameServer.Name, metav1.DeleteOptions{})).To(Succeed())
		_, err = a.Allocate(ctx, keyedRequest(ns, "mm", "m-2", nil), time.Now(), 4)
		Expect(err).To(MatchError(allocator.ErrKeyReleased))
		Expect(allocatedServers(ns)).To(BeEmpty())
	})

	It("takes over the key of a replica killed between allocating and recording, and finds its server", func() {
		ns := newNamespace(ctx)
		fleet(ns, 4)
		short := func(c *kube.Config) { c.KeyClaimTimeout = time.Second }
		dying, survivor := replica(ns, short), replica(ns, short)
		dying.StopAfterKeyedCommit(func() bool { return true })
		_, err := dying.Allocate(ctx, keyedRequest(ns, "mm", "m-1", nil), time.Now(), 1)
		Expect(err).To(HaveOccurred())
		servers := allocatedServers(ns)
		Expect(servers).To(HaveLen(1), "the dying replica's allocation landed")
		var name string
		for n := range servers {
			name = n
		}

		// The survivor waits out the claim, takes it over, and answers the
		// server the dead claimant allocated instead of a second one.
		a, err := survivor.Allocate(ctx, keyedRequest(ns, "mm", "m-1", nil), time.Now(), 2)
		Expect(err).NotTo(HaveOccurred())
		Expect(a.GameServer.Name).To(Equal(name))
		Expect(a.Replayed).To(BeTrue())
		Expect(allocatedServers(ns)).To(HaveLen(1))
		Expect(keyEvents(survivor, "taken_over")).To(Equal(1.0))
		// From now on the record names it: a third replica replays at once.
		again, err := replica(ns).Allocate(ctx, keyedRequest(ns, "mm", "m-1", nil), time.Now(), 3)
		Expect(err).NotTo(HaveOccurred())
		Expect(again.GameServer.Name).To(Equal(name))
		Expect(again.Replayed).To(BeTrue())
	})

	It("finds the first claimant's server after a chain of takeovers", func() {
		ns := newNamespace(ctx)
		fleet(ns, 4)
		short := func(c *kube.Config) { c.KeyClaimTimeout = time.Second }
		first, last := replica(ns, short), replica(ns, short)
		first.StopAfterKeyedCommit(func() bool { return true })
		_, err := first.Allocate(ctx, keyedRequest(ns, "mm", "m-1", nil), time.Now(), 1)
		Expect(err).To(HaveOccurred())
		// A second replica takes the dead claim over and dies at once,
		// before its search: its record, written here as it would write
		// it (its own stamp after the first's, its name, renewed now).
		cs := api.Core
		recs, err := cs.CoordinationV1().Leases(ns).List(ctx, metav1.ListOptions{LabelSelector: kube.KeyRecordLabel})
		Expect(err).NotTo(HaveOccurred())
		Expect(recs.Items).To(HaveLen(1))
		rec := recs.Items[0]
		rec.Annotations["quartermaster.dev/key-allocation-stamp"] += ",2026-11-26T00:00:00.5Z"
		holder, now := "second-replica", metav1.NewMicroTime(time.Now())
		rec.Spec.HolderIdentity, rec.Spec.RenewTime = &holder, &now
		_, err = cs.CoordinationV1().Leases(ns).Update(ctx, &rec, metav1.UpdateOptions{})
		Expect(err).NotTo(HaveOccurred())

		a, err := last.Allocate(ctx, keyedRequest(ns, "mm", "m-1", nil), time.Now(), 2)
		Expect(err).NotTo(HaveOccurred())
		Expect(a.Replayed).To(BeTrue(), "the first claimant's server, found by its stamp")
		Expect(allocatedServers(ns)).To(HaveLen(1))
	})

	It("lets a claimant that overran its bound keep the server the takeover found, and answer it", func() {
		ns := newNamespace(ctx)
		fleet(ns, 4)
		short := func(c *kube.Config) { c.KeyClaimTimeout = time.Second }
		slow, survivor := replica(ns, short), replica(ns, short)
		// The slow replica stalls between its commit and its record until
		// the survivor has taken the key over and answered.
		stalled, resume := make(chan struct{}), make(chan struct{})
		slow.StopAfterKeyedCommit(func() bool { close(stalled); <-resume; return false })
		type result struct {
			a   *allocator.Allocation
			err error
		}
		slowDone := make(chan result, 1)
		go func() {
			a, err := slow.Allocate(ctx, keyedRequest(ns, "mm", "m-1", nil), time.Now(), 1)
			slowDone <- result{a, err}
		}()
		Eventually(stalled, 30*time.Second).Should(BeClosed())
		a, err := survivor.Allocate(ctx, keyedRequest(ns, "mm", "m-1", nil), time.Now(), 2)
		Expect(err).NotTo(HaveOccurred())
		Expect(a.Replayed).To(BeTrue(), "the takeover found the slow replica's server")
		close(resume)
		var r result
		Eventually(slowDone, 30*time.Second).Should(Receive(&r))
		Expect(r.err).NotTo(HaveOccurred())
		Expect(r.a.GameServer.Name).To(Equal(a.GameServer.Name))
		Expect(keyEvents(slow, "overran")).To(Equal(1.0))
		servers := allocatedServers(ns)
		Expect(servers).To(HaveLen(1), "the server both answered stays Allocated")
		Expect(servers).To(HaveKey(a.GameServer.Name))
	})

	It("takes over a dead claim that allocated nothing, and allocates", func() {
		ns := newNamespace(ctx)
		fleet(ns, 2)
		short := func(c *kube.Config) { c.KeyClaimTimeout = time.Second }
		dying, survivor := replica(ns, short), replica(ns, short)
		// The claimant dies after its commit, and its server is made Ready
		// again by hand: the takeover finds nothing carrying the key with
		// the claimant's stamp, and allocates anew.
		dying.StopAfterKeyedCommit(func() bool { return true })
		_, err := dying.Allocate(ctx, keyedRequest(ns, "mm", "m-1", nil), time.Now(), 1)
		Expect(err).To(HaveOccurred())
		for n, u := range allocatedServers(ns) {
			Expect(unstructured.SetNestedField(u.Object, "Ready", "status", "state")).To(Succeed())
			_, err := api.GameServers(ns).Update(ctx, u, metav1.UpdateOptions{})
			Expect(err).NotTo(HaveOccurred(), n)
		}
		a, err := survivor.Allocate(ctx, keyedRequest(ns, "mm", "m-1", nil), time.Now(), 2)
		Expect(err).NotTo(HaveOccurred())
		Expect(a.Replayed).To(BeFalse())
		Expect(allocatedServers(ns)).To(HaveLen(1))
	})

	It("frees a key whose allocation found nothing, so a retry allocates", func() {
		ns := newNamespace(ctx)
		a, b := replica(ns), replica(ns)
		_, err := a.Allocate(ctx, keyedRequest(ns, "mm", "m-1", nil), time.Now(), 1)
		Expect(err).To(MatchError(core.ErrNoMatch))
		Expect(keyRecords(ns)).To(BeZero(), "the record of an allocation that wrote nothing is deleted")
		fleet(ns, 1)
		Eventually(func() error {
			_, err := b.Allocate(ctx, keyedRequest(ns, "mm", "m-1", nil), time.Now(), 2)
			return err
		}, 10*time.Second, 50*time.Millisecond).Should(Succeed())
		Expect(allocatedServers(ns)).To(HaveLen(1))
	})

	It("writes no record for a request without a key", func() {
		ns := newNamespace(ctx)
		fleet(ns, 2)
		a := replica(ns)
		_, err := a.Allocate(ctx, fleetRequest(ns, "green"), time.Now(), 1)
		Expect(err).NotTo(HaveOccurred())
		Expect(keyRecords(ns)).To(BeZero())
	})

	It("forgets a key after its window, and collects its record", func() {
		ns := newNamespace(ctx)
		fleet(ns, 3)
		window := func(c *kube.Config) { c.KeyWindow = time.Second }
		a, b := replica(ns, window), replica(ns, window)
		first, err := a.Allocate(ctx, keyedRequest(ns, "mm", "m-1", nil), time.Now(), 1)
		Expect(err).NotTo(HaveOccurred())
		_, err = a.Allocate(ctx, keyedRequest(ns, "mm", "m-2", nil), time.Now(), 2)
		Expect(err).NotTo(HaveOccurred())
		Expect(a.CollectKeys(ctx)).To(BeZero(), "within the window")
		time.Sleep(2100 * time.Millisecond)
		// m-1 again after the window is a new allocation.
		again, err := b.Allocate(ctx, keyedRequest(ns, "mm", "m-1", nil), time.Now(), 3)
		Expect(err).NotTo(HaveOccurred())
		Expect(again.Replayed).To(BeFalse())
		Expect(again.GameServer.Name).NotTo(Equal(first.GameServer.Name))
		// m-2's record is past its window and collected (by whichever
		// replica gets there first: the collection runs every window
		// here); m-1's is fresh and stays.
		b.CollectKeys(ctx)
		Eventually(func() int { return keyRecords(ns) }, 5*time.Second, 100*time.Millisecond).Should(Equal(1))
	})

	It("holds one allocation per key under concurrent duplicates from many callers", func() {
		const keys, servers = 30, 45
		ns := newNamespace(ctx)
		fleet(ns, servers)
		// A bound no allocation reaches even on a loaded machine under
		// the race detector: this spec is about duplicates, not takeovers.
		patient := func(c *kube.Config) { c.KeyClaimTimeout = time.Minute }
		reps := []*kube.Backend{replica(ns, patient), replica(ns, patient), replica(ns, patient)}
		type answer struct {
			name string
			err  error
		}
		var mu sync.Mutex
		answers := map[string][]answer{}
		var wg sync.WaitGroup
		var seq atomic.Uint64
		for k := range keys {
			for copy := range 3 {
				wg.Go(func() {
					key := fmt.Sprintf("m-%d", k)
					r := reps[(k+copy)%len(reps)]
					if copy == 2 {
						time.Sleep(time.Duration(k%5) * 10 * time.Millisecond)
					}
					a, err := r.Allocate(ctx, keyedRequest(ns, "mm", key, nil), time.Now(), seq.Add(1))
					ans := answer{err: err}
					if err == nil {
						ans.name = a.GameServer.Name
					}
					mu.Lock()
					answers[key] = append(answers[key], ans)
					mu.Unlock()
				})
			}
		}
		wg.Wait()
		byServer := map[string]string{}
		for key, as := range answers {
			for _, a := range as {
				Expect(a.err).NotTo(HaveOccurred(), key)
				Expect(a.name).To(Equal(as[0].name), "key %s answered two servers", key)
			}
			Expect(byServer).NotTo(HaveKey(as[0].name), "two keys got one server")
			byServer[as[0].name] = key
		}
		servers0 := allocatedServers(ns)
		Expect(servers0).To(HaveLen(keys))
		for name, u := range servers0 {
			Expect(u.GetAnnotations()[allocator.AllocationKeyAnnotation]).To(Equal(byServer[name]))
		}
	})
})
