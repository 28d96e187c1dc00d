package core

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"
)

// modeFleet is n Ready servers on 50 nodes, all in fleet "f", each with a
// "mode" label of one of four values and a "zone" label of one of two.
func modeFleet(n int) *Index {
	ix := NewIndex()
	for i := range n {
		ix.Upsert(&GameServer{Namespace: "default", Name: fmt.Sprintf("gs-%06d", i), NodeName: fmt.Sprintf("node-%02d", i%50),
			State: StateReady, Labels: map[string]string{FleetLabel: "f", "mode": fmt.Sprintf("m%d", i%4), "zone": fmt.Sprintf("z%d", i%2)}})
	}
	return ix
}

// checkGroups checks the index's groups against its servers: no build is
// under way, every unheld Ready or Allocated server is in exactly the
// groups its namespace, state and tracked labels call for (the base group
// of its namespace and state when there is one), no other server is in any,
// every ordered group's member lists agree with its list of all members
// (an unordered group has none), and only
// Allocated label groups count members without filing them, only while
// the index does not file Allocated servers.
func checkGroups(t *testing.T, ix *Index) {
	t.Helper()
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if len(ix.keyBuilds) != 0 || len(ix.baseBuilds) != 0 || ix.allocBuild != nil {
		t.Fatalf("%d key and %d base builds still under way (Allocated servers' filing: %v)", len(ix.keyBuilds), len(ix.baseBuilds), ix.allocBuild != nil)
	}
	members, counted := map[*group]int{}, map[*group]int{}
	for k, e := range ix.entries {
		want := map[*group]bool{}
		if !e.held && allocatable(e.gs.State) {
			if g := ix.groups[groupKey{namespace: k.Namespace, state: e.gs.State}]; g != nil {
				want[g] = true
			}
			for _, lk := range ix.labelKeys {
				v, ok := e.gs.Labels[lk]
				if !ok {
					continue
				}
				g := ix.groups[groupKey{k.Namespace, e.gs.State, lk, v}]
				if g == nil {
					t.Errorf("%s: no group for tracked %s=%s", k.Name, lk, v)
					continue
				}
				want[g] = true
			}
		}
		if len(e.in) != len(want) {
			t.Errorf("%s (%s, held %v) is in %d groups, want %d", k.Name, e.gs.State, e.held, len(e.in), len(want))
		}
		for _, m := range e.in {
			if !want[m.g] {
				t.Errorf("%s is in group %+v, which it does not belong to", k.Name, m.g.key)
			}
			if m.pos < 0 {
				if ix.allocFiled || m.g.key.state != StateAllocated || m.g.key.label == "" || m.pos != -1 {
					t.Errorf("%s: counted in %+v, not filed (Allocated servers filed: %v)", k.Name, m.g.key, ix.allocFiled)
				}
				counted[m.g]++
				continue
			}
			if m.pos >= len(m.g.all) || m.g.all[m.pos] != e || (m.gn != nil) != m.g.ordered || m.gn != nil && m.gn.find(e) < 0 {
				t.Errorf("%s: membership of %+v is stale", k.Name, m.g.key)
			}
			members[m.g]++
		}
	}
	for key, g := range ix.groups {
		n := 0
		for _, gn := range g.nodes {
			n += len(gn.members)
			if !slices.IsSortedFunc(gn.members, func(a, b member) int { return compareStrings(a.name, b.name) }) {
				t.Errorf("group %+v: node %s's members are not in name order", key, gn.node.name)
			}
		}
		if (g.ordered && n != len(g.all)) || (!g.ordered && len(g.nodes) > 0) || members[g] != len(g.all) || counted[g] != g.counted {
			t.Errorf("group %+v: %d in node lists, %d in all, %d servers say they are in it; %d counted, %d servers say so",
				key, n, len(g.all), members[g], g.counted, counted[g])
		}
		checkGroupLinks(t, ix, g)
	}
	groups, kept := map[string]int{}, map[string]int{}
	for key, g := range ix.groups {
		if key.label != "" {
			groups[key.label]++
			if g.kept {
				kept[key.label]++
			}
		}
	}
	if !maps.Equal(groups, ix.keyGroups) || !maps.Equal(kept, ix.keptEmpty) {
		t.Errorf("groups per key %v, counted %v; kept %v, counted %v", groups, ix.keyGroups, kept, ix.keptEmpty)
	}
	// A node out of the index (no server left on it) is in no group that
	// is not ordered; an ordered group holds it only to drop it when it
	// re-sorts it.
	for key, g := range ix.groups {
		for _, gn := range g.nodes {
			if ix.nodes[gn.node.name] != gn.node && (!g.ordered || !gn.dirty || len(gn.members) > 0) {
				t.Errorf("group %+v keeps node %s, which has no server in the index", key, gn.node.name)
			}
		}
	}
}

// checkGroupLinks checks g's own links: its nodes know their places in it
// and in their nodes' lists, and its other-state group (when it has one)
// is the live group of its label and value in the other state, paired
// back.
func checkGroupLinks(t *testing.T, ix *Index, g *group) {
	t.Helper()
	if g.dropped {
		t.Errorf("group %+v is in the index but dropped", g.key)
	}
	// An empty label group is kept only for its other-state group's
	// servers.
	if empty := g.size() == 0 && g.key.label != ""; empty != g.kept || g.kept && (g.other == nil || g.other.size() == 0) {
		t.Errorf("group %+v: %d members, kept %v, other-state group %v", g.key, g.size(), g.kept, g.other != nil)
	}
	for i, gn := range g.nodes {
		if gn.g != g || gn.groupPos != i {
			t.Errorf("group %+v: node %s at %d says it is at %d of %+v", g.key, gn.node.name, i, gn.groupPos, gn.g.key)
		}
		if gn.nodePos >= len(gn.node.gns) || gn.node.gns[gn.nodePos] != (nodeGroup{g, gn}) {
			t.Errorf("group %+v: node %s does not list the group at %d", g.key, gn.node.name, gn.nodePos)
		}
	}
	if o := g.other; o != nil {
		want := g.key
		want.state = StateReady
		if g.key.state == StateReady {
			want.state = StateAllocated
		}
		if o.key != want || ix.groups[want] != o || o.other != g {
			t.Errorf("group %+v: other-state group %+v (in the index: %v, paired back: %v)", g.key, o.key, ix.groups[want] == o, o.other == g)
		}
	}
}

func compareStrings(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// TestBuildLetsOthersIn proves that building a label key's groups does not
// hold the lock for the whole build: in the middle of it (in every pause,
// for the first few), allocations on other labels complete and servers are
// added, changed, held and removed; a request for the key being built waits
// for it. At the end the groups hold exactly what they should.
func TestBuildLetsOthersIn(t *testing.T) {
	defer func(c int) { buildChunk = c }(buildChunk)
	buildChunk = 64
	ix := modeFleet(4000)
	fleet := mustNormalize(t, &Request{Selectors: []Selector{{MatchLabels: map[string]string{FleetLabel: "f"}}}})
	zone := mustNormalize(t, &Request{Selectors: []Selector{{MatchLabels: map[string]string{"zone": "z1"}}}})
	mode := mustNormalize(t, &Request{Selectors: []Selector{{MatchLabels: map[string]string{"mode": "m9"}}}})

	var mu sync.Mutex
	pauses, done := 0, false
	waiting := make(chan *Result, 1)
	pause := func() {
		mu.Lock()
		pauses++
		n, finished := pauses, done
		mu.Unlock()
		if n > 8 || finished {
			return
		}
		// The build is between chunks and does not hold the lock: all
		// of this must complete now, from another goroutine.
		errc := make(chan error, 1)
		go func() {
			errc <- func() error {
				if _, err := ix.AllocateAndCommit(fleet, t0, uint64(n)); err != nil {
					return err
				}
				held, err := ix.Allocate(fleet, t0, uint64(100+n))
				if err != nil {
					return err
				}
				if n%2 == 0 {
					ix.Abort(held) // back, and filed again
				}
				ix.Upsert(&GameServer{Namespace: "default", Name: fmt.Sprintf("new-%d", n), NodeName: "node-new",
					State: StateReady, Labels: map[string]string{FleetLabel: "f", "zone": "z1", "mode": "m2"}})
				gs, _ := ix.Get(Key{"default", fmt.Sprintf("gs-%06d", 10*n)})
				if gs.State == StateReady {
					c := gs.Clone()
					c.Labels["zone"] = "z9"
					ix.Upsert(c)
				}
				ix.Remove(Key{"default", fmt.Sprintf("gs-%06d", 10*n+1)})
				if n == 1 {
					// A request for the key being built waits for it.
					go func() {
						res, err := ix.AllocateAndCommit(zone, t0, 9)
						if err != nil {
							t.Error(err)
						}
						waiting <- res
					}()
				}
				return nil
			}()
		}()
		select {
		case err := <-errc:
			if err != nil {
				t.Error(err)
			}
		case <-time.After(10 * time.Second):
			t.Error("other callers waited 10 s for the lock while a label key's groups were built")
		}
	}
	buildPaused.Store(&pause)
	defer buildPaused.Store(nil)

	res, err := ix.AllocateAndCommit(zone, t0, 1)
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	done = true
	n := pauses
	mu.Unlock()
	if n < 8 {
		t.Fatalf("the build paused %d times, want at least 8 at chunks of %d over 4,000 servers", n, buildChunk)
	}
	if got := res.Previous.Labels["zone"]; got != "z1" {
		t.Fatalf("zone=z1 got a server with zone %q", got)
	}
	if w := <-waiting; w == nil || w.Previous.Labels["zone"] != "z1" {
		t.Fatalf("the request that waited for the build got %v", w)
	}
	checkGroups(t, ix)
	// A second key, built with no one else about: its groups list their
	// servers in name order, as the one-pass build under the lock did (the
	// order seeded random picks index into).
	buildPaused.Store(nil)
	if _, err := ix.Allocate(mode, t0, 1); !errors.Is(err, ErrNoMatch) {
		t.Fatalf("mode=m9: %v, want ErrNoMatch (and the key's groups built, untouched)", err)
	}
	checkGroups(t, ix)
	ix.mu.Lock()
	for key, g := range ix.groups {
		if key.label == "mode" && !slices.IsSortedFunc(g.all, func(a, b *entry) int { return compareStrings(a.gs.Name, b.gs.Name) }) {
			t.Errorf("group %+v is not in name order", key)
		}
	}
	ix.mu.Unlock()
}

// TestBuildWaitEndsWithContext: a request waiting for a build gives up when
// its context ends; the build goes on and serves the next request.
func TestBuildWaitEndsWithContext(t *testing.T) {
	ix := modeFleet(1000)
	release := make(chan struct{})
	var once sync.Once
	pause := func() { once.Do(func() { <-release }) }
	buildPaused.Store(&pause)
	defer buildPaused.Store(nil)
	mode := mustNormalize(t, &Request{Selectors: []Selector{{MatchLabels: map[string]string{"mode": "m1"}}}})
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := ix.AllocateContext(ctx, mode, t0, 1); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v, want the context's deadline", err)
	}
	close(release)
	res, err := ix.Allocate(mode, t0, 1)
	if err != nil || res.Previous.Labels["mode"] != "m1" {
		t.Fatalf("after the build: %v, %v", res, err)
	}
	checkGroups(t, ix)
}

// TestBuildsUnderConcurrency builds label keys' groups and namespaces' base
// groups while servers are allocated, released, relabelled, added and
// removed, and keys lose their last server (which ends their builds), all at
// once (meant for -race): every answer is a Ready server that matched, and
// afterwards the groups hold exactly what they should.
func TestBuildsUnderConcurrency(t *testing.T) {
	defer func(c int) { buildChunk = c }(buildChunk)
	buildChunk = 16
	const n = 3000
	ix := NewIndex()
	ns := func(i int) string { return fmt.Sprintf("ns-%d", i%3) }
	for i := range n {
		ix.Upsert(&GameServer{Namespace: ns(i), Name: fmt.Sprintf("gs-%05d", i), NodeName: fmt.Sprintf("node-%02d", i%40),
			State: StateReady, Labels: map[string]string{FleetLabel: "f", fmt.Sprintf("k%d", i%5): fmt.Sprintf("v%d", i%3)}})
	}
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), 7))
			for i := range 400 {
				name := fmt.Sprintf("gs-%05d", r.IntN(n))
				k := Key{ns(r.IntN(3)), name}
				switch r.IntN(6) {
				case 0: // relabel, or move a server between keys
					if gs, ok := ix.Get(k); ok && gs.State == StateReady {
						c := gs.Clone()
						c.Labels = map[string]string{FleetLabel: "f", fmt.Sprintf("k%d", r.IntN(6)): fmt.Sprintf("v%d", r.IntN(3))}
						ix.Upsert(c)
					}
				case 1:
					ix.Remove(k)
				case 2:
					ix.Upsert(&GameServer{Namespace: k.Namespace, Name: name, NodeName: fmt.Sprintf("node-%02d", r.IntN(40)),
						State: StateReady, Labels: map[string]string{fmt.Sprintf("k%d", r.IntN(6)): "v1"}})
				default:
					sel := Selector{}
					if r.IntN(4) > 0 {
						key, val := fmt.Sprintf("k%d", r.IntN(6)), fmt.Sprintf("v%d", r.IntN(3))
						sel.MatchLabels = map[string]string{key: val}
					}
					req := mustNormalize(t, &Request{Namespace: ns(r.IntN(3)), Scheduling: Strategy(r.IntN(2)), Selectors: []Selector{sel}})
					res, err := ix.AllocateAndCommit(req, t0, uint64(i))
					if errors.Is(err, ErrNoMatch) {
						continue
					}
					if err != nil {
						t.Error(err)
						return
					}
					for lk, v := range sel.MatchLabels {
						if res.Previous.Labels[lk] != v {
							t.Errorf("%s=%s got %s with %v", lk, v, res.Previous.Name, res.Previous.Labels)
						}
					}
					if res.Previous.State != StateReady || res.Previous.Namespace != req.Namespace {
						t.Errorf("%s allocated in state %s, namespace %s", res.Previous.Name, res.Previous.State, res.Previous.Namespace)
					}
				}
			}
		}()
	}
	wg.Wait()
	// Builds the workers started may still be finishing: wait for them
	// with one request per namespace and tracked key.
	for i := range 3 {
		for k := range 6 {
			req := mustNormalize(t, &Request{Namespace: ns(i), Selectors: []Selector{{MatchLabels: map[string]string{fmt.Sprintf("k%d", k): "v0"}}}})
			if res, err := ix.Allocate(req, t0, 1); err == nil {
				ix.Abort(res)
			}
		}
		if res, err := ix.Allocate(mustNormalize(t, &Request{Namespace: ns(i)}), t0, 1); err == nil {
			ix.Abort(res)
		}
	}
	checkGroups(t, ix)
}

// TestAllocatedFiledOnFirstUse: Allocated servers' label groups count
// them without filing them until a request selects Allocated servers by a
// label; that request is answered from the whole of them, and every later
// change files them at once.
func TestAllocatedFiledOnFirstUse(t *testing.T) {
	ix := modeFleet(400)
	packed := mustNormalize(t, &Request{Selectors: []Selector{{MatchLabels: map[string]string{"mode": "m1"}}}})
	allocated := map[string]bool{}
	for i := range 60 {
		res, err := ix.AllocateAndCommit(packed, t0, uint64(i))
		if err != nil {
			t.Fatal(err)
		}
		allocated[res.GameServer.Name] = true
	}
	checkGroups(t, ix)
	modeGroup := groupKey{"default", StateAllocated, "mode", "m1"}
	ix.mu.Lock()
	if g := ix.groups[modeGroup]; ix.allocFiled || g == nil || g.counted != 60 || len(g.all) != 0 || len(g.nodes) != 0 {
		t.Errorf("before any request for Allocated servers: filed %v, group %+v", ix.allocFiled, g)
	}
	ix.mu.Unlock()

	// Every Allocated m1 server is a candidate: Distributed, seeded,
	// over many seeds, reaches many of them and nothing else.
	realloc := mustNormalize(t, &Request{Scheduling: Distributed, Selectors: []Selector{{State: StateAllocated, MatchLabels: map[string]string{"mode": "m1"}}}})
	reached := map[string]bool{}
	for seed := range uint64(200) {
		res, err := ix.Allocate(realloc, t0, seed)
		if err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
		if !allocated[res.Previous.Name] {
			t.Fatalf("seed %d: re-allocated %s, which was not allocated", seed, res.Previous.Name)
		}
		reached[res.Previous.Name] = true
		ix.Abort(res)
	}
	if len(reached) < 40 {
		t.Errorf("200 seeded picks reached %d of the 60 Allocated servers", len(reached))
	}
	checkGroups(t, ix)
	ix.mu.Lock()
	g := ix.groups[modeGroup]
	if !ix.allocFiled || g.counted != 0 || len(g.all) != 60 {
		t.Errorf("after: filed %v, %d counted, %d filed", ix.allocFiled, g.counted, len(g.all))
	}
	ix.mu.Unlock()
	// Later allocations are filed as they happen.
	if _, err := ix.AllocateAndCommit(packed, t0, 99); err != nil {
		t.Fatal(err)
	}
	checkGroups(t, ix)
}
