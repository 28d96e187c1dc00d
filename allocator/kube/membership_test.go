package kube_test

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	coordinationv1 "k8s.io/api/coordination/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/quartermaster-dev/quartermaster/allocator"
	"github.com/quartermaster-dev/quartermaster/allocator/kube"
	"github.com/quartermaster-dev/quartermaster/core"
	"github.com/quartermaster-dev/quartermaster/kindcluster/kubetest"
)

// replica is one allocator replica in a test: a backend with its informer
// and, unless left out, its membership, each stoppable on its own.
type replica struct {
	crashable  bool // takes part through RunWithoutRelease: see crash
	b          *kube.Backend
	m          *kube.Membership
	stopCache  context.CancelFunc
	stopMember context.CancelFunc
	memberDone chan struct{}
}

// startReplica starts a replica with default settings watching ns; with
// leaseNS it takes part in the membership there ("" : none). A crashable
// replica leaves its Lease behind however it stops.
func startReplica(ctx context.Context, ns, leaseNS, identity string, crashable bool) *replica {
	r := &replica{memberDone: make(chan struct{}), crashable: crashable}
	cctx, stopCache := context.WithCancel(ctx)
	r.stopCache = stopCache
	DeferCleanup(stopCache)
	b, err := kube.New(kube.Config{REST: cluster.RESTConfig(), Namespace: ns})
	Expect(err).NotTo(HaveOccurred())
	Expect(b.Start(cctx)).To(Succeed())
	r.b = b
	if leaseNS == "" {
		close(r.memberDone)
		return r
	}
	r.m, err = kube.NewMembership(kube.MembershipConfig{REST: cluster.RESTConfig(), Namespace: leaseNS, Identity: identity}, b)
	Expect(err).NotTo(HaveOccurred())
	mctx, stopMember := context.WithCancel(ctx)
	r.stopMember = stopMember
	go func() {
		defer close(r.memberDone)
		if crashable {
			r.m.RunWithoutRelease(mctx)
			return
		}
		r.m.Run(mctx)
	}()
	DeferCleanup(func() { stopMember(); <-r.memberDone })
	return r
}

// crash stops a crashable replica as a kill would: its Lease stays behind.
func (r *replica) crash() {
	Expect(r.crashable).To(BeTrue())
	r.stopMember()
	<-r.memberDone
	r.stopCache()
}

// loadResult is what callers got from a closed-loop load.
type loadResult struct {
	mu       sync.Mutex
	won      map[string]string // server -> last-allocated stamp the winner got
	dup      []string
	errs     map[string]int // error text -> count
	ok       int
	elapsed  time.Duration
	conflict int
}

func (l *loadResult) add(a *allocator.Allocation, err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if err != nil {
		l.errs[err.Error()]++
		return
	}
	l.ok++
	l.conflict += a.Retries
	if _, seen := l.won[a.GameServer.Name]; seen {
		l.dup = append(l.dup, a.GameServer.Name)
	}
	l.won[a.GameServer.Name] = a.GameServer.LastAllocated()
}

func newLoadResult() *loadResult {
	return &loadResult{won: map[string]string{}, errs: map[string]int{}}
}

// seq numbers the allocations of a spec's loads: seeds and stamps.
var seq atomic.Uint64

// closedLoad runs callers goroutines per replica, perReplica requests on
// each replica in all, every caller as fast as its answers come, adding
// to res.
func closedLoad(ctx context.Context, res *loadResult, rs []*replica, callers, perReplica int, ns, fleet string) {
	req := fleetRequest(ns, fleet)
	var wg sync.WaitGroup
	start := time.Now()
	for _, r := range rs {
		var left atomic.Int64
		left.Store(int64(perReplica))
		for range callers {
			wg.Go(func() {
				for left.Add(-1) >= 0 {
					n := seq.Add(1)
					a, err := r.b.Allocate(ctx, req, time.Unix(1e9, int64(n)), n)
					res.add(a, err)
				}
			})
		}
	}
	wg.Wait()
	res.elapsed += time.Since(start)
}

// checkObjects asserts, on the API server's objects, that exactly the
// allocations callers were told of are Allocated, each by its own winner.
func checkObjects(ctx context.Context, ns string, res *loadResult) {
	list, err := api.GameServers(ns).List(ctx, metav1.ListOptions{})
	Expect(err).NotTo(HaveOccurred())
	allocated := 0
	for _, u := range list.Items {
		if nestedString(u.Object, "status", "state") != "Allocated" {
			continue
		}
		allocated++
		Expect(u.GetAnnotations()[core.LastAllocatedAnnotation]).To(Equal(res.won[u.GetName()]), "%s is Allocated by an allocation nobody was told of", u.GetName())
	}
	Expect(res.dup).To(BeEmpty(), "servers handed out twice")
	Expect(allocated).To(Equal(res.ok), "Allocated on the API server vs OK answers")
}

// packing is how well the Allocated servers in ns are packed: the fewest
// nodes that could hold them (nodes hold perNode servers each) over the
// nodes they are on (1: perfectly packed).
func packing(ctx context.Context, ns string, perNode int) (efficiency float64, nodes int) {
	list, err := api.GameServers(ns).List(ctx, metav1.ListOptions{})
	Expect(err).NotTo(HaveOccurred())
	used := map[string]bool{}
	n := 0
	for _, u := range list.Items {
		if nestedString(u.Object, "status", "state") == "Allocated" {
			used[nestedString(u.Object, "status", "nodeName")] = true
			n++
		}
	}
	if n == 0 {
		return 1, 0
	}
	return math.Ceil(float64(n)/float64(perNode)) / float64(len(used)), len(used)
}

func views(rs []*replica) []kube.View {
	out := make([]kube.View, len(rs))
	for i, r := range rs {
		out[i] = r.m.View()
	}
	return out
}

// agreeOn says whether every replica sees n replicas, the same members, and
// a shard of its own.
func agreeOn(rs []*replica, n int) bool {
	vs := views(rs)
	shards := map[int]bool{}
	for _, v := range vs {
		if v.Replicas != n || fmt.Sprint(v.Members) != fmt.Sprint(vs[0].Members) || shards[v.Shard] {
			return false
		}
		shards[v.Shard] = true
	}
	return true
}

var _ = Describe("replicas without configuration", func() {
	var ctx context.Context
	BeforeEach(func() {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(context.Background(), 2*time.Minute)
		DeferCleanup(cancel)
	})

	It("find each other through Leases, shard by them, and re-shard when one leaves", func() {
		ns := newNamespace(ctx)
		var rs []*replica
		for i := range 3 {
			rs = append(rs, startReplica(ctx, ns, ns, fmt.Sprintf("allocator-%d", i), false))
		}
		Eventually(func() bool { return agreeOn(rs, 3) }, 10*time.Second, 50*time.Millisecond).Should(BeTrue(), "%+v", views(rs))
		for _, r := range rs {
			v := r.m.View()
			Expect(v.Members[v.Shard]).To(Equal(r.m.Name()))
			reg := prometheus.NewRegistry()
			Expect(r.b.Register(reg)).To(Succeed())
			Expect(testutil.GatherAndCount(reg, "qm_allocator_replicas", "qm_allocator_replica_shard", "qm_allocator_packed_spread", "qm_allocator_conflicts_per_allocation")).To(Equal(4))
			n, err := testutil.GatherAndCount(reg)
			Expect(err).NotTo(HaveOccurred())
			Expect(n).To(Equal(4))
			Expect(gaugeValue(reg, "qm_allocator_replicas")).To(Equal(3.0))
			Expect(gaugeValue(reg, "qm_allocator_replica_shard")).To(Equal(float64(v.Shard)))
			Expect(r.b.PackedSpread()).To(Equal(64), "three replicas choose among the best 64")
		}
		// The Leases are on the API server, one per replica, labelled.
		cs := api.Core
		leases, err := cs.CoordinationV1().Leases(ns).List(ctx, metav1.ListOptions{LabelSelector: kube.GroupLabel + "=" + kube.DefaultMembershipGroup})
		Expect(err).NotTo(HaveOccurred())
		Expect(leases.Items).To(HaveLen(3))

		// A graceful stop deletes the Lease: the others re-shard at once.
		start := time.Now()
		rs[1].stopMember()
		<-rs[1].memberDone
		left := []*replica{rs[0], rs[2]}
		Eventually(func() bool { return agreeOn(left, 2) }, 5*time.Second, 20*time.Millisecond).Should(BeTrue(), "%+v", views(left))
		AddReportEntry("re-shard after a graceful stop", time.Since(start).Round(time.Millisecond).String())
		Expect(time.Since(start)).To(BeNumerically("<", 3*time.Second))
		Eventually(func() int {
			l, err := cs.CoordinationV1().Leases(ns).List(ctx, metav1.ListOptions{})
			Expect(err).NotTo(HaveOccurred())
			return len(l.Items)
		}, 5*time.Second).Should(Equal(2))

		// A newcomer is counted within seconds, alone at first and then
		// by everyone.
		rs = append(left, startReplica(ctx, ns, ns, "allocator-new", false))
		Eventually(func() bool { return agreeOn(rs, 3) }, 10*time.Second, 50*time.Millisecond).Should(BeTrue(), "%+v", views(rs))
	})

	// The shape is 2,000 servers and 600 requests per replica
	// (QM_REPLICA_SERVERS=2000 QM_REPLICA_REQUESTS=600, and
	// BenchmarkReplicasNoConfig); the default is smaller so that `make
	// test` stays quick on a loaded machine, with the same 16 callers per
	// replica and the fleet 80% used up.
	DescribeTable("answer every request of three replicas x 16 callers while Ready servers remain, none twice", func(membership bool) {
		servers, perReplica := envInt("QM_REPLICA_SERVERS", 450), envInt("QM_REPLICA_REQUESTS", 120)
		const callers, nodes = 16, 75
		ns := newNamespace(ctx)
		api.CreateFleet(GinkgoTB(), ctx, ns, "green", 0, servers)
		leaseNS := ""
		if membership {
			leaseNS = ns
		}
		var rs []*replica
		for i := range 3 {
			rs = append(rs, startReplica(ctx, ns, leaseNS, fmt.Sprintf("allocator-%d", i), false))
		}
		for _, r := range rs {
			Eventually(r.b.Index().Len, 20*time.Second).Should(Equal(servers))
		}
		if membership {
			Eventually(func() bool { return agreeOn(rs, 3) }, 10*time.Second, 50*time.Millisecond).Should(BeTrue())
		}
		for _, r := range rs {
			Expect(r.b.PackedSpread()).To(Equal(map[bool]int{true: 64, false: 1}[membership]))
		}

		// A fifth of the fleet first, to see how well it is packed while
		// the choice matters (every node holds some of the rest), then the
		// rest of the load.
		res := newLoadResult()
		fifth := servers / 5 / 3
		closedLoad(ctx, res, rs, callers, fifth, ns, "green")
		eff, used := packing(ctx, ns, servers/nodes)
		closedLoad(ctx, res, rs, callers, perReplica-fifth, ns, "green")
		Expect(res.errs).To(BeEmpty(), "every request answered OK: %d servers, %d requests", servers, 3*perReplica)
		Expect(res.ok).To(Equal(3 * perReplica))
		checkObjects(ctx, ns, res)
		var conflicts int64
		spreads := []int{}
		for _, r := range rs {
			conflicts += r.b.Conflicts()
			spreads = append(spreads, r.b.PackedSpread())
		}
		if !membership {
			Expect(conflicts).To(BeNumerically(">", 0), "three replicas on exact Packed must have raced")
			Expect(slices.Max(spreads)).To(BeNumerically(">", 1), "conflicts widened the spread")
		}
		AddReportEntry(fmt.Sprintf("3 replicas x %d callers, %d servers, membership %v", callers, servers, membership),
			fmt.Sprintf("%d OK in %s (%.0f/s), %d write conflicts (%.3f per allocation), spreads at the end %v; after the first %d: packing %.2f (%d of %d nodes)",
				res.ok, res.elapsed.Round(time.Millisecond), float64(res.ok)/res.elapsed.Seconds(), conflicts,
				float64(res.conflict)/float64(res.ok), spreads, 3*fifth, eff, used, nodes))
	},
		Entry("with Leases (the default)", true),
		Entry("without membership: conflicts widen the spread instead of failing requests", false),
	)

	It("ignore and clean up a Lease long dead, and keep one whose clock is behind while it renews", func() {
		ns := newNamespace(ctx)
		cs := api.Core
		// Leases of 3 s, renewed every second: the rules are the same as
		// for the default 10 s, the spec is quicker.
		const dur = 3 * time.Second
		lease := func(name string, renewed time.Time) *coordinationv1.Lease {
			secs := int32(dur / time.Second)
			at := metav1.NewMicroTime(renewed)
			return &coordinationv1.Lease{
				ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{kube.GroupLabel: kube.DefaultMembershipGroup}},
				Spec:       coordinationv1.LeaseSpec{HolderIdentity: &name, LeaseDurationSeconds: &secs, RenewTime: &at},
			}
		}
		leases := cs.CoordinationV1().Leases(ns)
		// A replica that died an hour ago, and one alive on a node whose
		// clock is an hour behind ours.
		_, err := leases.Create(ctx, lease("a-dead", time.Now().Add(-time.Hour)), metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())
		skewed, err := leases.Create(ctx, lease("b-skewed", time.Now().Add(-time.Hour)), metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())
		rctx, stopRenewing := context.WithCancel(ctx)
		renewed := make(chan struct{})
		go func() {
			defer close(renewed)
			for rctx.Err() == nil {
				time.Sleep(dur / 3)
				l := skewed.DeepCopy()
				at := metav1.NewMicroTime(time.Now().Add(-time.Hour))
				l.Spec.RenewTime = &at
				if u, err := leases.Update(rctx, l, metav1.UpdateOptions{}); err == nil {
					skewed = u
				}
			}
		}()
		DeferCleanup(func() { stopRenewing(); <-renewed })

		r := startReplica(ctx, ns, ns, "c-new", false)
		// The skewed one counts from its first renewal seen; the dead one
		// never, and it is deleted once seen unrenewed for two durations.
		Eventually(func() []string { return r.m.View().Members }, 10*time.Second, 50*time.Millisecond).Should(Equal([]string{"b-skewed", r.m.Name()}))
		Consistently(func() []string { return r.m.View().Members }, 3*dur, 100*time.Millisecond).Should(Equal([]string{"b-skewed", r.m.Name()}),
			"a replica renewing its Lease stays, whatever its clock says; a dead one is not counted")
		Eventually(func() error {
			_, err := leases.Get(ctx, "a-dead", metav1.GetOptions{})
			return err
		}, 3*dur).Should(MatchError(ContainSubstring("not found")))
		_, err = leases.Get(ctx, "b-skewed", metav1.GetOptions{})
		Expect(err).NotTo(HaveOccurred(), "a renewing Lease is never cleaned up")
		// Once it stops renewing, it goes.
		stopRenewing()
		<-renewed
		Eventually(func() int { return r.m.View().Replicas }, 2*dur, 100*time.Millisecond).Should(Equal(1))
	})

	It("without Lease RBAC: say why, go on alone, and join once it is granted", func() {
		ns := newNamespace(ctx)
		create(ctx, kubetest.GameServer(ns, "gs-a", "green", "node-1"))
		create(ctx, kubetest.GameServer(ns, "gs-b", "green", "node-1"))
		cs := api.Core
		// A ServiceAccount that may use GameServers but not Leases.
		cfg := serviceAccountConfig(ctx, ns, "allocator")
		subject := []rbacv1.Subject{{Kind: "ServiceAccount", Name: "allocator", Namespace: ns}}
		_, err := cs.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "gameservers"}, Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{"agones.dev"}, Resources: []string{"gameservers"}, Verbs: []string{"get", "list", "watch", "update"}},
		}}, metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())
		_, err = cs.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "gameservers"}, Subjects: subject,
			RoleRef: rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "gameservers"}}, metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())

		other := startReplica(ctx, ns, ns, "allowed", false)
		logs := &lockedBuffer{}
		b, err := kube.New(kube.Config{REST: cfg, Namespace: ns})
		Expect(err).NotTo(HaveOccurred())
		Eventually(func() error { return b.Start(ctx) }, 10*time.Second).Should(Succeed())
		m, err := kube.NewMembership(kube.MembershipConfig{REST: cfg, Namespace: ns, Identity: "forbidden",
			Logger: slog.New(slog.NewTextHandler(logs, nil))}, b)
		Expect(err).NotTo(HaveOccurred())
		mctx, stop := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { defer close(done); m.Run(mctx) }()
		DeferCleanup(func() { stop(); <-done })

		Eventually(logs.String, 5*time.Second).Should(ContainSubstring("cannot hold the replica Lease"))
		Expect(logs.String()).To(ContainSubstring("reason=forbidden"))
		Expect(logs.String()).To(ContainSubstring("leases.coordination.k8s.io"))
		Expect(strings.Count(logs.String(), "cannot hold the replica Lease")).To(Equal(1), "logged once, not every interval")
		Expect(m.View().Replicas).To(Equal(1))
		_, err = b.Allocate(ctx, fleetRequest(ns, "green"), time.Now(), 1)
		Expect(err).NotTo(HaveOccurred(), "a replica without a Lease still allocates")

		// Granted: within a renewal or two it holds its Lease, and both
		// replicas count two.
		_, err = cs.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "leases"}, Rules: []rbacv1.PolicyRule{
			{APIGroups: []string{"coordination.k8s.io"}, Resources: []string{"leases"}, Verbs: []string{"get", "list", "watch", "create", "update", "delete"}},
		}}, metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())
		_, err = cs.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "leases"}, Subjects: subject,
			RoleRef: rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "leases"}}, metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())
		Eventually(func() []int { return []int{m.View().Replicas, other.m.View().Replicas} }, 20*time.Second, 100*time.Millisecond).Should(Equal([]int{2, 2}))
		Expect(logs.String()).To(ContainSubstring("holding the replica Lease again"))
	})

	It("start a request over when it used up its conflict retries, rather than answer Contention", func() {
		const servers, callers, perReplica = 150, 8, 40
		ns := newNamespace(ctx)
		api.CreateFleet(GinkgoTB(), ctx, ns, "green", 0, servers)
		var rs []*kube.Backend
		for range 3 {
			// One retry per round: three replicas on exact Packed use it
			// up all the time.
			b, err := kube.New(kube.Config{REST: cluster.RESTConfig(), Namespace: ns, MaxConflictRetries: 1})
			Expect(err).NotTo(HaveOccurred())
			Expect(b.Start(ctx)).To(Succeed())
			Eventually(b.Index().Len, 10*time.Second).Should(Equal(servers))
			rs = append(rs, b)
		}
		res := newLoadResult()
		most := 0
		var mu sync.Mutex
		var wg sync.WaitGroup
		req := fleetRequest(ns, "green")
		for _, b := range rs {
			var left atomic.Int64
			left.Store(perReplica)
			for range callers {
				wg.Go(func() {
					for left.Add(-1) >= 0 {
						n := seq.Add(1)
						a, err := b.Allocate(ctx, req, time.Unix(1e9, int64(n)), n)
						res.add(a, err)
						if err == nil {
							mu.Lock()
							most = max(most, a.Retries)
							mu.Unlock()
						}
					}
				})
			}
		}
		wg.Wait()
		Expect(res.errs).To(BeEmpty())
		checkObjects(ctx, ns, res)
		Expect(most).To(BeNumerically(">=", 2), "some allocation went past its first round of retries")
		AddReportEntry("MaxConflictRetries 1, 3 replicas", fmt.Sprintf("%d OK, most retries in one allocation %d, %d conflicts in all", res.ok, most, res.conflict))
	})

	It("packs exactly on one replica: the reference for the spread's packing", func() {
		servers := envInt("QM_REPLICA_SERVERS", 450)
		const callers, nodes = 16, 75
		ns := newNamespace(ctx)
		api.CreateFleet(GinkgoTB(), ctx, ns, "green", 0, servers)
		one := startReplica(ctx, ns, ns, "alone", false)
		Eventually(one.b.Index().Len, 20*time.Second).Should(Equal(servers))
		res := newLoadResult()
		fifth := servers / 5
		closedLoad(ctx, res, []*replica{one}, callers, fifth, ns, "green")
		Expect(res.errs).To(BeEmpty())
		checkObjects(ctx, ns, res)
		eff, used := packing(ctx, ns, servers/nodes)
		Expect(one.b.PackedSpread()).To(Equal(1), "a lone replica has nobody to conflict with")
		// A server held for a write in flight counts as Allocated on its
		// node, so the callers in flight fill the fullest node together
		// and nodes fill one after another: the fewest that hold them. (It
		// once counted as Ready; then the first callers each took another
		// node's first server, and on a loaded machine a caller could fill
		// a node alone while the others' first writes were still out,
		// opening a new node each time: 20-24 nodes.) One more for a
		// choice made again after a conflict, which a lone replica should
		// not see.
		fewest := (fifth + servers/nodes - 1) / (servers / nodes)
		Expect(used).To(BeNumerically("<=", fewest+1), "exact Packed fills whole nodes: %d nodes for %d servers (%d conflicts, %d scans)", used, fifth, res.conflict, one.b.Index().Scans())
		AddReportEntry(fmt.Sprintf("1 replica x %d callers, %d servers, exact Packed", callers, servers),
			fmt.Sprintf("%d OK in %s (%.0f/s); packing %.2f (%d of %d nodes)", res.ok,
				res.elapsed.Round(time.Millisecond), float64(res.ok)/res.elapsed.Seconds(), eff, used, nodes))
	})

	It("notice a killed replica and take over its shard within 15 s, failing no request of the others", func() {
		const servers = 450
		ns := newNamespace(ctx)
		api.CreateFleet(GinkgoTB(), ctx, ns, "green", 0, servers)
		var rs []*replica
		for i := range 3 {
			rs = append(rs, startReplica(ctx, ns, ns, fmt.Sprintf("allocator-%d", i), i == 0))
		}
		for _, r := range rs {
			Eventually(r.b.Index().Len, 20*time.Second).Should(Equal(servers))
		}
		Eventually(func() bool { return agreeOn(rs, 3) }, 10*time.Second, 50*time.Millisecond).Should(BeTrue())

		// Paced load on every replica, enough to go on for the Lease's
		// whole duration without running the fleet dry.
		lctx, stopLoad := context.WithCancel(ctx)
		defer stopLoad()
		// The killed replica's callers stop with it; what it answered
		// before counts, what was in flight is lost (as with a kill).
		kctx, stopKilled := context.WithCancel(lctx)
		defer stopKilled()
		res := newLoadResult()
		req := fleetRequest(ns, "green")
		var wg sync.WaitGroup
		for i, r := range rs {
			for range 2 {
				wg.Go(func() {
					cctx := lctx
					if i == 0 {
						cctx = kctx
					}
					for cctx.Err() == nil {
						n := seq.Add(1)
						a, err := r.b.Allocate(cctx, req, time.Unix(1e9, int64(n)), n)
						if cctx.Err() != nil {
							return // stopped, not failed: the answer is lost
						}
						res.add(a, err)
						time.Sleep(200 * time.Millisecond)
					}
				})
			}
		}
		time.Sleep(time.Second)
		survivors := []*replica{rs[1], rs[2]}
		killed := time.Now()
		stopKilled()
		rs[0].crash()
		Eventually(func() bool { return agreeOn(survivors, 2) }, 15*time.Second, 50*time.Millisecond).Should(BeTrue(), "%+v", views(survivors))
		took := time.Since(killed)
		time.Sleep(time.Second) // load on the new shards
		stopLoad()
		wg.Wait()
		Expect(res.errs).To(BeEmpty(), "requests to the surviving replicas failed")
		checkObjectsAllowingLost(ctx, ns, res)
		AddReportEntry("killed replica's shard taken over after", took.Round(time.Millisecond).String())
		Expect(took).To(BeNumerically("<", 15*time.Second))
	})
})

// checkObjectsAllowingLost is checkObjects for a load whose killed
// replica's answers were never all received: every OK answer is Allocated
// on the API server by its winner, and no server was handed out twice.
func checkObjectsAllowingLost(ctx context.Context, ns string, res *loadResult) {
	Expect(res.dup).To(BeEmpty(), "servers handed out twice")
	list, err := api.GameServers(ns).List(ctx, metav1.ListOptions{})
	Expect(err).NotTo(HaveOccurred())
	state := map[string]string{}
	stamp := map[string]string{}
	for _, u := range list.Items {
		state[u.GetName()] = nestedString(u.Object, "status", "state")
		stamp[u.GetName()] = u.GetAnnotations()[core.LastAllocatedAnnotation]
	}
	names := make([]string, 0, len(res.won))
	for name := range res.won {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		Expect(state[name]).To(Equal("Allocated"), name)
		Expect(stamp[name]).To(Equal(res.won[name]), name)
	}
}

func gaugeValue(reg *prometheus.Registry, name string) float64 {
	mfs, err := reg.Gather()
	Expect(err).NotTo(HaveOccurred())
	for _, mf := range mfs {
		if mf.GetName() == name {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	Fail("no metric " + name)
	return 0
}
