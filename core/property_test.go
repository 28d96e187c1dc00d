package core

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
	"time"
)

// fleetGen builds random fleets and requests from a small vocabulary, so that
// selectors often match several servers and ties are common.
type fleetGen struct {
	r *rand.Rand
}

var (
	genNamespaces = []string{"default", "other"}
	genFleets     = []string{"red", "green", "blue"}
	genTiers      = []string{"gold", "silver"}
	genPlayers    = []string{"p1", "p2", "p3", "p4"}
	genOwner      = "example.com/owner"
)

func (g fleetGen) pick(xs []string) string { return xs[g.r.IntN(len(xs))] }

func (g fleetGen) server(ns string, i int, nodes int) *GameServer {
	r := g.r
	gs := &GameServer{
		Namespace: ns,
		Name:      fmt.Sprintf("gs-%03d", i),
		NodeName:  fmt.Sprintf("node-%02d", r.IntN(nodes)),
		Labels:    map[string]string{},
	}
	switch x := r.IntN(10); {
	case x < 6:
		gs.State = StateReady
	case x < 9:
		gs.State = StateAllocated
	default:
		gs.State = StateShutdown
	}
	if r.IntN(5) > 0 {
		gs.Labels[FleetLabel] = g.pick(genFleets)
	}
	if r.IntN(2) == 0 {
		gs.Annotations = map[string]string{genOwner: g.pick(genPlayers)}
	}
	if r.IntN(2) == 0 {
		gs.Labels["tier"] = g.pick(genTiers)
	}
	if r.IntN(4) > 0 {
		capacity := int64(r.IntN(6))
		gs.Counters = map[string]Counter{"rooms": {Count: int64(r.IntN(int(capacity) + 1)), Capacity: capacity}}
	}
	if r.IntN(3) > 0 {
		l := List{Capacity: int64(r.IntN(5))}
		for _, p := range genPlayers {
			if int64(len(l.Values)) < l.Capacity && r.IntN(2) == 0 {
				l.Values = append(l.Values, p)
			}
		}
		gs.Lists = map[string]List{"players": l}
	}
	return gs
}

func (g fleetGen) selector() Selector {
	r := g.r
	s := Selector{State: StateReady}
	if r.IntN(5) == 0 {
		s.State = StateAllocated
	}
	if r.IntN(3) > 0 {
		s.MatchLabels = map[string]string{FleetLabel: g.pick(genFleets)}
	}
	if r.IntN(4) == 0 {
		if s.MatchLabels == nil {
			s.MatchLabels = map[string]string{}
		}
		s.MatchLabels["tier"] = g.pick(genTiers)
	}
	switch r.IntN(6) {
	case 0:
		s.MatchExpressions = []LabelExpression{{Key: "tier", Operator: OpExists}}
	case 1:
		s.MatchExpressions = []LabelExpression{{Key: "tier", Operator: OpNotIn, Values: []string{g.pick(genTiers)}}}
	case 2:
		s.MatchExpressions = []LabelExpression{{Key: FleetLabel, Operator: OpIn, Values: []string{g.pick(genFleets), g.pick(genFleets)}}}
	}
	if r.IntN(3) == 0 {
		s.Counters = map[string]CounterSelector{"rooms": {MinAvailable: int64(r.IntN(3)), MaxCount: int64(r.IntN(4))}}
	}
	if r.IntN(4) == 0 {
		s.Lists = map[string]ListSelector{"players": {MinAvailable: int64(r.IntN(2))}}
		if r.IntN(2) == 0 {
			s.Lists["players"] = ListSelector{ContainsValue: g.pick(genPlayers)}
		}
	}
	return s
}

func (g fleetGen) request(distributed bool) *Request {
	r := g.r
	req := &Request{Namespace: g.pick(genNamespaces)}
	for range 1 + r.IntN(3) {
		req.Selectors = append(req.Selectors, g.selector())
	}
	if distributed {
		req.Scheduling = Distributed
	}
	for range r.IntN(3) {
		p := Priority{Type: PriorityCounter, Key: "rooms", Order: Order(r.IntN(2))}
		if r.IntN(2) == 0 {
			p = Priority{Type: PriorityList, Key: "players", Order: Order(r.IntN(2))}
		}
		req.Priorities = append(req.Priorities, p)
	}
	if distributed && len(req.Priorities) == 0 {
		req.Priorities = []Priority{{Type: PriorityCounter, Key: "rooms"}}
	}
	if r.IntN(3) == 0 {
		one := int64(1)
		req.Counters = map[string]CounterAction{"rooms": {Action: ActionIncrement, Amount: &one}}
	}
	if r.IntN(4) == 0 {
		req.Lists = map[string]ListAction{"players": {AddValues: []string{g.pick(genPlayers)}}}
	}
	if r.IntN(4) == 0 {
		req.Metadata.Labels = map[string]string{"tier": g.pick(genTiers)}
	}
	if r.IntN(2) == 0 {
		req.Metadata.Annotations = map[string]string{genOwner: g.pick(genPlayers)}
	}
	n, err := Normalize(req)
	if err != nil {
		panic(err)
	}
	return n
}

// TestIndexMatchesReference checks the indexed allocator against the naive
// one on thousands of random fleets and requests, Packed and Distributed with
// priorities, interleaved with random updates, removals and aborted holds.
func TestIndexMatchesReference(t *testing.T) {
	t.Run("default", func(t *testing.T) { checkAgainstReference(t, 3000) })
	// Force Packed-with-priorities through the priority index even for the
	// small tiers of these fleets.
	t.Run("priority-index", func(t *testing.T) {
		defer func(v int) { prioIndexMinTier = v }(prioIndexMinTier)
		prioIndexMinTier = 0
		checkAgainstReference(t, 1500)
	})
	// Every selector through the chunked scan (scanPick), with chunks
	// small enough that these fleets span several.
	t.Run("scan", func(t *testing.T) {
		forceScan(t)
		checkAgainstReference(t, 1500)
	})
}

// checkOwners compares the index's per-owner lists of Allocated servers
// with the reference's servers.
func checkOwners(t *testing.T, fleet int, ix *Index, ref *naive) {
	t.Helper()
	want := map[string][]string{}
	for _, gs := range ref.servers {
		if v, ok := gs.Annotations[genOwner]; ok && gs.State == StateAllocated {
			want[v] = append(want[v], gs.Namespace+"/"+gs.Name)
		}
	}
	for _, p := range genPlayers {
		var got []string
		for _, gs := range ix.ListAllocated(p) {
			got = append(got, gs.Namespace+"/"+gs.Name)
		}
		slices.Sort(want[p])
		slices.Sort(got)
		if !slices.Equal(got, want[p]) || ix.CountAllocated(p) != len(want[p]) {
			t.Fatalf("fleet %d: %s holds %v (count %d), reference %v", fleet, p, got, ix.CountAllocated(p), want[p])
		}
	}
}

// forceScan makes every decision leave the walk under the lock at once and
// scan in chunks of 3 servers, until the test ends.
func forceScan(t *testing.T) {
	fast, chunk := fastScanTests, scanChunk
	t.Cleanup(func() { fastScanTests, scanChunk = fast, chunk })
	fastScanTests, scanChunk = 0, 3
}

func checkAgainstReference(t *testing.T, fleets int) {
	if testing.Short() {
		fleets /= 10
	}
	now := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	for f := range fleets {
		g := fleetGen{r: rand.New(rand.NewPCG(uint64(f), 7))}
		ix, ref := NewIndex(), newNaive()
		if f%2 == 0 {
			// Half the fleets turn the owner lists on before the servers
			// arrive, half after: both ways must file the same servers.
			ix.SetCountedAnnotation(genOwner)
		}
		size := 1 + g.r.IntN(60)
		nodes := 1 + g.r.IntN(8)
		for i := range size {
			ns := genNamespaces[g.r.IntN(3)%2]
			gs := g.server(ns, i, nodes)
			ix.Upsert(gs)
			ref.upsert(gs)
		}
		// Holds kept across steps, as a backend's writes in flight: the
		// reference counts them Allocated on their nodes too.
		type kept struct {
			res  *Result
			hold int
		}
		var holds []kept
		// same fails unless the index chose what the reference did.
		same := func(step int, req *Request, want *GameServer, res *Result, err error) bool {
			t.Helper()
			if want == nil {
				if err != ErrNoMatch {
					t.Fatalf("fleet %d step %d: reference found nothing, index gave %v, %v", f, step, res, err)
				}
				return false
			}
			if err != nil {
				t.Fatalf("fleet %d step %d: reference chose %s, index failed: %v\nrequest: %+v", f, step, want.Name, err, req)
			}
			if res.GameServer.Key() != want.Key() {
				t.Fatalf("fleet %d step %d: reference chose %s/%s, index chose %s/%s\nrequest: %+v",
					f, step, want.Namespace, want.Name, res.GameServer.Namespace, res.GameServer.Name, req)
			}
			return true
		}
		for step := range 40 {
			switch op := g.r.IntN(13); {
			case op < 6:
				req := g.request(g.r.IntN(3) == 0)
				want := ref.allocate(req, now)
				res, err := ix.AllocateAndCommit(req, now, uint64(step))
				same(step, req, want, res, err)
			case op < 8 && len(holds) > 0 && g.r.IntN(4) == 0:
				// An update of a held server: it stays held.
				h := holds[g.r.IntN(len(holds))]
				gs := g.server(h.res.Previous.Namespace, 0, nodes)
				gs.Name = h.res.Previous.Name
				ix.Upsert(gs)
				ref.upsert(gs)
			case op < 8:
				gs := g.server(genNamespaces[g.r.IntN(2)], g.r.IntN(size+5), nodes)
				ix.Upsert(gs)
				ref.upsert(gs)
			case op < 9:
				k := Key{genNamespaces[g.r.IntN(2)], fmt.Sprintf("gs-%03d", g.r.IntN(size+5))}
				if got, want := ix.Remove(k), ref.servers[k] != nil; got != want {
					t.Fatalf("Remove(%v) = %v, want %v", k, got, want)
				}
				ref.remove(k)
			case op < 10:
				// A hold that is aborted leaves no trace.
				req := g.request(false)
				if res, err := ix.Allocate(req, now, 1); err == nil {
					ix.Abort(res)
				}
			case op < 12:
				req := g.request(g.r.IntN(3) == 0)
				var want *GameServer
				if cands, _ := ref.candidates(req); len(cands) > 0 {
					want = Apply(cands[0], req, now)
				}
				res, err := ix.Allocate(req, now, uint64(step))
				if same(step, req, want, res, err) {
					holds = append(holds, kept{res, ref.hold(want.Key())})
				}
			default:
				// A write in flight ends: confirmed or refused.
				if len(holds) == 0 {
					continue
				}
				i := g.r.IntN(len(holds))
				h := holds[i]
				holds = slices.Delete(holds, i, i+1)
				if g.r.IntN(3) == 0 {
					ix.Abort(h.res)
					ref.abort(h.res.GameServer.Key(), h.hold)
				} else {
					ix.Commit(h.res, nil)
					ref.commit(h.res.GameServer.Key(), h.hold, h.res.GameServer)
				}
			}
			if step%8 == 7 {
				checkGroups(t, ix)
			}
		}
		for _, h := range holds {
			ix.Abort(h.res)
			ref.abort(h.res.GameServer.Key(), h.hold)
		}
		checkGroups(t, ix)
		if ix.Len() != len(ref.servers) {
			t.Fatalf("fleet %d: index has %d servers, reference %d", f, ix.Len(), len(ref.servers))
		}
		if f%2 == 1 {
			ix.SetCountedAnnotation(genOwner)
		}
		checkOwners(t, f, ix, ref)
	}
}

// TestDistributedPicksAValidMatch checks random Distributed picks against the
// reference's candidate set: the same selector wins and the pick is among its
// matches.
func TestDistributedPicksAValidMatch(t *testing.T) {
	t.Run("walk", checkDistributedPicks)
	t.Run("scan", func(t *testing.T) {
		forceScan(t)
		checkDistributedPicks(t)
	})
}

func checkDistributedPicks(t *testing.T) {
	now := time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)
	for f := range 500 {
		g := fleetGen{r: rand.New(rand.NewPCG(uint64(f), 11))}
		ix, ref := NewIndex(), newNaive()
		for i := range 1 + g.r.IntN(80) {
			gs := g.server(genNamespaces[g.r.IntN(2)], i, 1+g.r.IntN(6))
			ix.Upsert(gs)
			ref.upsert(gs)
		}
		for step := range 20 {
			req := g.request(true)
			req.Priorities = nil
			cands, sel := ref.candidates(req)
			res, err := ix.AllocateAndCommit(req, now, uint64(step))
			if cands == nil {
				if err != ErrNoMatch {
					t.Fatalf("fleet %d: reference found nothing, index: %v", f, err)
				}
				continue
			}
			if err != nil || res.Selector != sel {
				t.Fatalf("fleet %d: want selector %d, got %v, %v", f, sel, res, err)
			}
			found := false
			for _, c := range cands {
				if c.Key() == res.Previous.Key() {
					found = true
				}
			}
			if !found {
				t.Fatalf("fleet %d: index chose %s, not a match of selector %d", f, res.Previous.Name, sel)
			}
			ref.upsert(res.GameServer)
		}
	}
}
