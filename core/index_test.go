package core

import (
	"errors"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"
)

var t0 = time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)

func mustNormalize(t testing.TB, r *Request) *Request {
	t.Helper()
	n, err := Normalize(r)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func ready(name, node string, labels ...string) *GameServer {
	gs := &GameServer{Namespace: "default", Name: name, NodeName: node, State: StateReady, Labels: map[string]string{}}
	for i := 0; i+1 < len(labels); i += 2 {
		gs.Labels[labels[i]] = labels[i+1]
	}
	return gs
}

func withState(gs *GameServer, st State) *GameServer {
	c := *gs
	c.State = st
	return &c
}

func TestPackedPrefersBusyNodes(t *testing.T) {
	ix := NewIndex()
	// node-a: 1 Ready; node-b: 1 Allocated + 1 Ready; node-c: 3 Ready.
	ix.Upsert(ready("a1", "node-a"))
	ix.Upsert(withState(ready("b0", "node-b"), StateAllocated))
	ix.Upsert(ready("b1", "node-b"))
	for _, n := range []string{"c1", "c2", "c3"} {
		ix.Upsert(ready(n, "node-c"))
	}
	req := mustNormalize(t, &Request{})
	var got []string
	for range 5 {
		res, err := ix.AllocateAndCommit(req, t0, 0)
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, res.GameServer.Name)
	}
	// b1 first (node-b has an Allocated server); then node-c (most Ready,
	// and after c1 it has the most Allocated); a1 last.
	if fmt.Sprint(got) != "[b1 c1 c2 c3 a1]" {
		t.Fatalf("Packed order = %v", got)
	}
	if _, err := ix.AllocateAndCommit(req, t0, 0); !errors.Is(err, ErrNoMatch) {
		t.Fatalf("empty fleet: err = %v, want ErrNoMatch", err)
	}
}

func TestFirstMatchingSelectorWins(t *testing.T) {
	ix := NewIndex()
	ix.Upsert(ready("blue-1", "n1", FleetLabel, "blue"))
	ix.Upsert(withState(ready("green-1", "n1", FleetLabel, "green"), StateAllocated))
	ix.Upsert(ready("green-2", "n2", FleetLabel, "green"))
	req := mustNormalize(t, &Request{Selectors: []Selector{
		{MatchLabels: map[string]string{FleetLabel: "red"}},
		{MatchLabels: map[string]string{FleetLabel: "green"}},
		{MatchLabels: map[string]string{FleetLabel: "blue"}},
	}})
	res, err := ix.AllocateAndCommit(req, t0, 0)
	if err != nil || res.GameServer.Name != "green-2" || res.Selector != 1 {
		t.Fatalf("got %+v, %v; want green-2 via selector 1", res, err)
	}
	// Re-allocation of an Allocated server.
	realloc := mustNormalize(t, &Request{Selectors: []Selector{{State: StateAllocated, MatchLabels: map[string]string{FleetLabel: "green"}}}})
	res, err = ix.AllocateAndCommit(realloc, t0, 0)
	if err != nil || res.Previous.State != StateAllocated {
		t.Fatalf("re-allocation: %+v, %v", res, err)
	}
}

func TestHoldCommitAbort(t *testing.T) {
	ix := NewIndex()
	ix.Upsert(ready("a", "n1"))
	ix.Upsert(ready("b", "n1"))
	req := mustNormalize(t, &Request{})

	h1, err := ix.Allocate(req, t0, 0)
	if err != nil {
		t.Fatal(err)
	}
	h2, err := ix.Allocate(req, t0, 0)
	if err != nil || h2.Previous.Name == h1.Previous.Name {
		t.Fatalf("second hold got %v, %v; want the other server", h2, err)
	}
	if _, err := ix.Allocate(req, t0, 0); !errors.Is(err, ErrNoMatch) {
		t.Fatalf("both held: want ErrNoMatch, got %v", err)
	}

	// Abort makes the server a candidate again, unchanged.
	ix.Abort(h1)
	if gs, _ := ix.Get(h1.Previous.Key()); gs.State != StateReady {
		t.Fatalf("after abort state = %s", gs.State)
	}
	ix.Abort(h1) // a second abort is a no-op
	h3, err := ix.Allocate(req, t0, 0)
	if err != nil || h3.Previous.Name != h1.Previous.Name {
		t.Fatalf("after abort: %v, %v", h3, err)
	}

	// Commit stores what the backend confirmed.
	committed := h3.GameServer.Clone()
	committed.Version = "42"
	ix.Commit(h3, committed)
	if gs, _ := ix.Get(h3.Previous.Key()); gs.State != StateAllocated || gs.Version != "42" {
		t.Fatalf("after commit: %+v", gs)
	}
	ix.Commit(h1, nil) // stale hold: ignored
	if gs, _ := ix.Get(h3.Previous.Key()); gs.Version != "42" {
		t.Fatal("a stale hold must not overwrite the committed server")
	}

	// A held server updated by the informer stays held; removal ends it.
	ix.Upsert(withState(h2.Previous, StateShutdown))
	if _, err := ix.Allocate(req, t0, 0); !errors.Is(err, ErrNoMatch) {
		t.Fatalf("held server must stay invisible: %v", err)
	}
	ix.Remove(h2.Previous.Key())
	ix.Commit(h2, nil)
	if _, ok := ix.Get(h2.Previous.Key()); ok {
		t.Fatal("commit must not resurrect a removed server")
	}
}

func TestNamespacesAreSeparate(t *testing.T) {
	ix := NewIndex()
	gs := ready("x", "n1")
	gs.Namespace = "other"
	ix.Upsert(gs)
	if _, err := ix.AllocateAndCommit(mustNormalize(t, &Request{}), t0, 0); !errors.Is(err, ErrNoMatch) {
		t.Fatalf("default namespace must not see 'other': %v", err)
	}
	if res, err := ix.AllocateAndCommit(mustNormalize(t, &Request{Namespace: "other"}), t0, 0); err != nil || res.GameServer.Name != "x" {
		t.Fatalf("%v %v", res, err)
	}
}

func TestSameSeedSameAnswer(t *testing.T) {
	build := func() *Index {
		ix := NewIndex()
		for _, gs := range benchFleet(500) {
			ix.Upsert(gs)
		}
		return ix
	}
	req := benchRequest(Distributed)
	a, b := build(), build()
	for i := range 50 {
		ra, _ := a.AllocateAndCommit(req, t0, uint64(i))
		rb, _ := b.AllocateAndCommit(req, t0, uint64(i))
		if ra.GameServer.Name != rb.GameServer.Name {
			t.Fatalf("draw %d: %s vs %s", i, ra.GameServer.Name, rb.GameServer.Name)
		}
	}
}

// TestDistributedIsUniform checks with a chi-square test that Distributed
// picks every matching server equally often, both when matches are common
// (accepted random draws) and when they are rare (the counting fallback).
func TestDistributedIsUniform(t *testing.T) {
	for _, tc := range []struct {
		name    string
		matchOf int // one server in matchOf matches
	}{{"common", 1}, {"rare", 40}} {
		t.Run(tc.name, func(t *testing.T) {
			ix := NewIndex()
			const total = 400
			for i := range total {
				gs := ready(fmt.Sprintf("gs-%03d", i), fmt.Sprintf("n%d", i%7))
				gs.Counters = map[string]Counter{"rooms": {Capacity: 1}}
				if i%tc.matchOf != 0 {
					gs.Counters["rooms"] = Counter{Count: 1, Capacity: 1}
				}
				ix.Upsert(gs)
			}
			req := mustNormalize(t, &Request{Scheduling: Distributed, Selectors: []Selector{{Counters: map[string]CounterSelector{"rooms": {MinAvailable: 1}}}}})
			k := total / tc.matchOf
			draws := 200 * k
			seen := map[string]int{}
			for i := range draws {
				res, err := ix.Allocate(req, t0, uint64(i))
				if err != nil {
					t.Fatal(err)
				}
				seen[res.Previous.Name]++
				ix.Abort(res)
			}
			if len(seen) != k {
				t.Fatalf("picked %d distinct servers, want all %d matches", len(seen), k)
			}
			exp := float64(draws) / float64(k)
			chi := 0.0
			for _, n := range seen {
				chi += (float64(n) - exp) * (float64(n) - exp) / exp
			}
			// Degrees of freedom k-1; mean k-1, sd sqrt(2(k-1)). Six sd is
			// far beyond chance but catches a biased picker.
			df := float64(k - 1)
			if chi > df+6*math.Sqrt(2*df) {
				t.Fatalf("chi-square %.1f with %d dof: not uniform", chi, k-1)
			}
		})
	}
}

// TestConcurrentAllocationsNeverShareAServer runs 64 goroutines doing 1,000
// allocations each over 64k servers: every server is handed out at most once.
func TestConcurrentAllocationsNeverShareAServer(t *testing.T) {
	const workers, each = 64, 1000
	ix := NewIndex()
	for _, gs := range benchFleet(workers * each) {
		gs.Labels[FleetLabel] = "one"
		ix.Upsert(gs)
	}
	packed := mustNormalize(t, &Request{Selectors: []Selector{{MatchLabels: map[string]string{FleetLabel: "one"}}}})
	distributed := mustNormalize(t, &Request{Scheduling: Distributed})
	got := make([][]Key, workers)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			req := packed
			if w%2 == 1 {
				req = distributed
			}
			for i := range each {
				seed := uint64(w*each + i)
				var res *Result
				var err error
				if i%3 == 0 {
					// Backend-style: hold, then commit (or abort and retry).
					res, err = ix.Allocate(req, t0, seed)
					if err == nil && i%9 == 0 {
						ix.Abort(res)
						res, err = ix.Allocate(req, t0, seed+1)
					}
					if err == nil {
						ix.Commit(res, nil)
					}
				} else {
					res, err = ix.AllocateAndCommit(req, t0, seed)
				}
				if err != nil {
					t.Errorf("worker %d alloc %d: %v", w, i, err)
					return
				}
				got[w] = append(got[w], res.GameServer.Key())
			}
		}()
	}
	wg.Wait()
	seen := map[Key]bool{}
	for _, keys := range got {
		for _, k := range keys {
			if seen[k] {
				t.Fatalf("%v allocated twice", k)
			}
			seen[k] = true
		}
	}
	if len(seen) != workers*each {
		t.Fatalf("%d allocations, want %d", len(seen), workers*each)
	}
	if _, err := ix.Allocate(packed, t0, 0); !errors.Is(err, ErrNoMatch) {
		t.Fatalf("every server is allocated: want ErrNoMatch, got %v", err)
	}
}

// TestPackedSpread checks that with a spread of n, Packed picks come from the
// reference's first n candidates, all of them get picked, and a spread of 1
// is exact Packed.
func TestPackedSpread(t *testing.T) {
	build := func() (*Index, *naive) {
		ix, ref := NewIndex(), newNaive()
		for i := range 60 {
			gs := ready(fmt.Sprintf("gs-%02d", i), fmt.Sprintf("n%d", i%6), FleetLabel, "f")
			if i%5 == 0 {
				gs.State = StateAllocated
			}
			ix.Upsert(gs)
			ref.upsert(gs)
		}
		return ix, ref
	}
	req := mustNormalize(t, &Request{Selectors: []Selector{{MatchLabels: map[string]string{FleetLabel: "f"}}}})
	ix, ref := build()
	ix.SetPackedSpread(4)
	cands, _ := ref.candidates(req)
	top := map[string]bool{}
	for _, c := range cands[:4] {
		top[c.Name] = true
	}
	seen := map[string]bool{}
	for s := range uint64(400) {
		res, err := ix.Allocate(req, t0, s)
		if err != nil {
			t.Fatal(err)
		}
		if !top[res.Previous.Name] {
			t.Fatalf("seed %d picked %s, not among the first 4 %v", s, res.Previous.Name, top)
		}
		seen[res.Previous.Name] = true
		ix.Abort(res)
	}
	if len(seen) != 4 {
		t.Fatalf("picked %v, want all of the first 4", seen)
	}
	ix.SetPackedSpread(1)
	res, _ := ix.Allocate(req, t0, 99)
	if res.Previous.Name != cands[0].Name {
		t.Fatalf("spread 1 picked %s, want %s", res.Previous.Name, cands[0].Name)
	}
}

// TestReplicaShards checks that replicas with different shards choose
// different servers from the same fleet while picking within the spread,
// and fall back to any of the spread when their shard has none there.
func TestReplicaShards(t *testing.T) {
	req := mustNormalize(t, &Request{Selectors: []Selector{{MatchLabels: map[string]string{FleetLabel: "f"}}}})
	var replicas []*Index
	ref := newNaive()
	for r := range 3 {
		ix := NewIndex()
		ix.SetPackedSpread(12)
		ix.SetReplicaShard(r, 3)
		replicas = append(replicas, ix)
	}
	for i := range 60 {
		gs := ready(fmt.Sprintf("gs-%02d", i), fmt.Sprintf("n%d", i%6), FleetLabel, "f")
		ref.upsert(gs)
		for _, ix := range replicas {
			ix.Upsert(gs)
		}
	}
	cands, _ := ref.candidates(req)
	top := map[string]bool{}
	for _, c := range cands[:12] {
		top[c.Name] = true
	}
	picked := map[string]int{}
	for r, ix := range replicas {
		res, err := ix.Allocate(req, t0, uint64(r))
		if err != nil {
			t.Fatal(err)
		}
		if !top[res.Previous.Name] {
			t.Fatalf("replica %d picked %s outside the spread", r, res.Previous.Name)
		}
		if int(nameHash(res.Previous.Name)%3) != r {
			t.Fatalf("replica %d picked %s from another shard although its own had one", r, res.Previous.Name)
		}
		picked[res.Previous.Name]++
	}
	if len(picked) != 3 {
		t.Fatalf("replicas wanted the same server: %v", picked)
	}
	// A shard with nothing in the spread takes one of its own from further
	// down rather than race another replica for one of the spread; beyond
	// shardReach times the spread, it takes one of the last spread within
	// that reach, which their own replicas come to last.
	var own string
	for i := 0; own == ""; i++ {
		if name := fmt.Sprintf("z-%03d", i); nameHash(name)%3 == 1 {
			own = name // sorts after every "a-" name: last in Packed order
		}
	}
	var others []string
	for i := 0; len(others) < 2*shardReach+2; i++ {
		if name := fmt.Sprintf("a-%03d", i); nameHash(name)%3 != 1 {
			others = append(others, name)
		}
	}
	for _, c := range []struct {
		others int
		want   func(string) bool
	}{
		{2*shardReach - 1, func(n string) bool { return n == own }},
		{2*shardReach + 2, func(n string) bool { return n == others[2*shardReach-2] || n == others[2*shardReach-1] }},
	} {
		ix := NewIndex()
		ix.SetPackedSpread(2)
		ix.SetReplicaShard(1, 3)
		for _, n := range append([]string{own}, others[:c.others]...) {
			ix.Upsert(ready(n, "n1", FleetLabel, "f"))
		}
		res, err := ix.Allocate(req, t0, 0)
		if err != nil || !c.want(res.Previous.Name) {
			t.Fatalf("%d others before its own: picked %v (%v)", c.others, res, err)
		}
	}
	// A shard with nothing in the spread still gets a server.
	one := NewIndex()
	one.SetPackedSpread(2)
	one.SetReplicaShard(0, 1000)
	one.Upsert(ready("only", "n1", FleetLabel, "f"))
	if _, err := one.Allocate(req, t0, 0); err != nil {
		t.Fatalf("fallback: %v", err)
	}
}

func TestCountAllocated(t *testing.T) {
	const owner = "example.com/owner"
	owned := func(gs *GameServer, who string) *GameServer {
		c := withState(gs, StateAllocated)
		c.Annotations = map[string]string{owner: who}
		return c
	}
	ix := NewIndex()
	ix.Upsert(owned(ready("pre", "n1"), "alice")) // counted once counting starts
	ix.SetCountedAnnotation(owner)
	ix.Upsert(ready("a", "n1"))
	ix.Upsert(ready("b", "n1"))
	ix.Upsert(owned(ready("c", "n2"), "bob"))
	if a, b := ix.CountAllocated("alice"), ix.CountAllocated("bob"); a != 1 || b != 1 {
		t.Fatalf("alice %d, bob %d; want 1 and 1", a, b)
	}
	req := mustNormalize(t, &Request{Metadata: MetaPatch{Annotations: map[string]string{owner: "alice"}}})
	res, err := ix.Allocate(req, t0, 1)
	if err != nil {
		t.Fatal(err)
	}
	if n := ix.CountAllocated("alice"); n != 1 {
		t.Fatalf("a held allocation counted before its commit: %d", n)
	}
	ix.Commit(res, nil)
	if n := ix.CountAllocated("alice"); n != 2 {
		t.Fatalf("after the commit: alice %d, want 2", n)
	}
	if l := ix.ListAllocated("alice"); len(l) != 2 || l[0].Name != res.GameServer.Name || l[1].Name != "pre" {
		t.Fatalf("alice's servers: %v, want %s and pre in name order", l, res.GameServer.Name)
	}
	ix.Upsert(withState(ix.mustGet(t, "c"), StateShutdown)) // bob's session ends
	ix.Remove(Key{Namespace: "default", Name: "pre"})
	if a, b := ix.CountAllocated("alice"), ix.CountAllocated("bob"); a != 1 || b != 0 {
		t.Fatalf("after shutdown and removal: alice %d, bob %d; want 1 and 0", a, b)
	}
	ix.Upsert(owned(ix.mustGet(t, res.GameServer.Name), "bob")) // re-allocated to bob
	if a, b := ix.CountAllocated("alice"), ix.CountAllocated("bob"); a != 0 || b != 1 {
		t.Fatalf("after re-allocation: alice %d, bob %d; want 0 and 1", a, b)
	}
	if l := ix.ListAllocated("bob"); len(l) != 1 || l[0].Name != res.GameServer.Name || len(ix.ListAllocated("alice")) != 0 {
		t.Fatalf("bob's servers: %v", l)
	}
}

func (ix *Index) mustGet(t *testing.T, name string) *GameServer {
	t.Helper()
	gs, ok := ix.Get(Key{Namespace: "default", Name: name})
	if !ok {
		t.Fatalf("no server %s", name)
	}
	return gs
}

func TestListState(t *testing.T) {
	ix := NewIndex()
	ix.Upsert(withState(ready("b", "n1"), StateAllocated))
	ix.Upsert(ready("c", "n1"))
	ix.Upsert(withState(ready("a", "n2"), StateAllocated))
	got := ix.ListState(StateAllocated)
	if len(got) != 2 || got[0].Name != "a" || got[1].Name != "b" {
		t.Fatalf("ListState(Allocated) = %v", got)
	}
	if n := len(ix.List()); n != 3 {
		t.Fatalf("List has %d servers", n)
	}
}

// TestOrderedGroupKeepsEmptiedNode: in a group kept in Packed order, a node
// whose last Ready server is allocated stays in the group, out of the
// order, and its server's return finds it there instead of a new one; the
// node leaves the group with its last server.
func TestOrderedGroupKeepsEmptiedNode(t *testing.T) {
	ix := NewIndex()
	ix.Upsert(ready("a1", "node-a", FleetLabel, "f"))
	ix.Upsert(ready("b1", "node-b", FleetLabel, "f"))
	req := mustNormalize(t, &Request{Selectors: []Selector{{MatchLabels: map[string]string{FleetLabel: "f"}}}})
	res, err := ix.AllocateAndCommit(req, t0, 0)
	if err != nil {
		t.Fatal(err)
	}
	g := ix.groups[groupKey{"default", StateReady, FleetLabel, "f"}]
	if g == nil || !g.ordered {
		t.Fatal("the fleet's Ready group is missing or not in Packed order")
	}
	node := ix.nodes[res.GameServer.NodeName]
	inGroup := func() *groupNode {
		for _, ng := range node.gns {
			if ng.g == g {
				return ng.gn
			}
		}
		return nil
	}
	g.refresh(-1)
	kept := inGroup()
	if kept == nil || kept.inOrder || len(kept.members) != 0 {
		t.Fatalf("node %s after its last Ready server was allocated: %+v, want kept empty, out of the order", node.name, kept)
	}
	checkGroups(t, ix)

	back := withState(res.GameServer, StateReady)
	ix.Upsert(back)
	g.refresh(-1)
	if gn := inGroup(); gn != kept || !gn.inOrder || len(gn.members) != 1 {
		t.Fatalf("the server's return: node %s in the group as %p (kept %p), in order %v", node.name, gn, kept, gn != nil && gn.inOrder)
	}
	// Its node is Packed's first choice again.
	if res2, err := ix.AllocateAndCommit(req, t0, 0); err != nil || res2.GameServer.Name != back.Name {
		t.Fatalf("allocation after the return: %v, %v; want %s", res2, err, back.Name)
	}
	g.refresh(-1) // out of the order again, and no longer dirty
	checkGroups(t, ix)

	ix.Remove(back.Key())
	g.refresh(-1)
	for _, gn := range g.nodes {
		if gn.node == node {
			t.Fatalf("node %s left the index but is still in the Ready group", node.name)
		}
	}
	checkGroups(t, ix)
}

// TestUpsertSlotIsUpsert: UpsertSlot with whatever Slot it is handed (the
// server's own, none, another server's, a removed server's, another
// index's) leaves the index as Upsert does, and Packed allocations from
// both agree at every step.
func TestUpsertSlotIsUpsert(t *testing.T) {
	plain, slotted, other := NewIndex(), NewIndex(), NewIndex()
	req := mustNormalize(t, &Request{Selectors: []Selector{{MatchLabels: map[string]string{FleetLabel: "f"}}}})
	r := newRNG(7)
	slots := map[string]Slot{}
	name := func(i uint64) string { return fmt.Sprintf("gs-%d", i) }
	for step := range 3000 {
		n := name(r.uint64() % 40)
		gs := ready(n, fmt.Sprintf("node-%d", r.uint64()%6), FleetLabel, "f")
		switch op := r.uint64() % 10; {
		case op < 6:
			if r.uint64()%3 == 0 {
				gs.State = StateAllocated
			}
			s := slots[n]
			switch r.uint64() % 4 {
			case 0:
				s = Slot{}
			case 1:
				s = slots[name(r.uint64()%40)] // another server's, maybe
			case 2:
				s = other.UpsertSlot(Slot{}, gs) // another index's
			}
			plain.Upsert(gs)
			slots[n] = slotted.UpsertSlot(s, gs)
		case op < 8:
			// The removed server's Slot stays in slots, to be handed back.
			a, b := plain.Remove(gs.Key()), slotted.Remove(gs.Key())
			if a != b {
				t.Fatalf("step %d: Remove(%s) = %v and %v", step, n, a, b)
			}
		default:
			a, errA := plain.AllocateAndCommit(req, t0, uint64(step))
			b, errB := slotted.AllocateAndCommit(req, t0, uint64(step))
			if (errA == nil) != (errB == nil) || errA == nil && a.GameServer.Name != b.GameServer.Name {
				t.Fatalf("step %d: allocations differ: %v %v / %v %v", step, a, errA, b, errB)
			}
			if errA == nil {
				// Later upserts of the allocated server go through its Slot.
				slots[a.GameServer.Name] = slotted.UpsertSlot(slots[a.GameServer.Name], b.GameServer)
				plain.Upsert(a.GameServer)
			}
		}
		if a, b := describe(plain.List()), describe(slotted.List()); a != b {
			t.Fatalf("step %d: the indexes differ:\n%s\n%s", step, a, b)
		}
	}
	checkGroups(t, slotted)
}

func describe(list []*GameServer) string {
	var b strings.Builder
	for _, gs := range list {
		fmt.Fprintf(&b, "%s/%s %s on %s %v; ", gs.Namespace, gs.Name, gs.State, gs.NodeName, gs.Labels)
	}
	return b.String()
}
