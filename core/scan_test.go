package core

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"
)

// TestScanMatchesWalk checks the chunked scan against the walk under the
// lock on the same index, seed and request, with packed spread and replica
// shards (which the reference allocator does not model).
func TestScanMatchesWalk(t *testing.T) {
	for f := range 300 {
		g := fleetGen{r: rand.New(rand.NewPCG(uint64(f), 13))}
		ix := NewIndex()
		ix.SetPackedSpread(1 + g.r.IntN(6))
		if g.r.IntN(2) == 0 {
			ix.SetReplicaShard(g.r.IntN(3), 3)
		}
		for i := range 1 + g.r.IntN(80) {
			ix.Upsert(g.server(genNamespaces[g.r.IntN(2)], i, 1+g.r.IntN(6)))
		}
		for step := range 20 {
			req := g.request(false)
			if g.r.IntN(2) == 0 {
				req.Priorities = nil
			}
			walk, werr := ix.Allocate(req, t0, uint64(step))
			if werr == nil {
				ix.Abort(walk)
			}
			fast, chunk := fastScanTests, scanChunk
			fastScanTests, scanChunk = 0, 2
			scan, serr := ix.Allocate(req, t0, uint64(step))
			fastScanTests, scanChunk = fast, chunk
			if serr == nil {
				ix.Abort(scan)
			}
			if (werr == nil) != (serr == nil) {
				t.Fatalf("fleet %d step %d: walk %v, scan %v", f, step, werr, serr)
			}
			if werr == nil && walk.Previous.Key() != scan.Previous.Key() {
				t.Fatalf("fleet %d step %d: walk chose %s, scan %s (request %+v)", f, step, walk.Previous.Name, scan.Previous.Name, req)
			}
		}
	}
}

// fleetOf builds n Ready servers of fleet "f" over 100 nodes, each with a
// counter "rooms" of capacity 4.
func fleetOf(n int) *Index {
	ix := NewIndex()
	for i := range n {
		ix.Upsert(&GameServer{
			Namespace: "default", Name: fmt.Sprintf("gs-%06d", i), NodeName: fmt.Sprintf("node-%03d", i%100),
			State: StateReady, Labels: map[string]string{FleetLabel: "f"},
			Counters: map[string]Counter{"rooms": {Capacity: 4}},
		})
	}
	return ix
}

// adversarial is a request of many selectors that each narrow to the whole
// fleet and match nothing: every one of them is a full pass.
func adversarial(t testing.TB, selectors int) *Request {
	r := &Request{}
	for range selectors {
		r.Selectors = append(r.Selectors, Selector{
			MatchLabels: map[string]string{FleetLabel: "f"},
			Counters:    map[string]CounterSelector{"rooms": {MinCount: 99}},
		})
	}
	return mustNormalize(t, r)
}

func wellFormed(t testing.TB) *Request {
	return mustNormalize(t, &Request{Selectors: []Selector{{MatchLabels: map[string]string{FleetLabel: "f"}}}})
}

func TestScanBudget(t *testing.T) {
	ix := fleetOf(2000)
	// Each selector costs the walk's first look and one full pass.
	ix.SetScanBudget(2*(fastScanTests+2000) + 10)
	// Two full passes fit in the budget: no match is the honest answer.
	if _, err := ix.Allocate(adversarial(t, 2), t0, 1); !errors.Is(err, ErrNoMatch) {
		t.Fatalf("2 selectors over 2,000 servers with a budget for two: got %v, want ErrNoMatch", err)
	}
	// Three do not: the request is refused as too costly.
	if _, err := ix.Allocate(adversarial(t, 3), t0, 1); !errors.Is(err, ErrScanBudget) {
		t.Fatalf("3 selectors over 2,000 servers with a budget for two: got %v, want ErrScanBudget", err)
	}
	// The index is unharmed: a plain request still allocates.
	if _, err := ix.AllocateAndCommit(wellFormed(t), t0, 1); err != nil {
		t.Fatal(err)
	}
	// A match deep in the order is found by the scan within the budget.
	ix.Upsert(&GameServer{Namespace: "default", Name: "zz-deep", NodeName: "node-x", State: StateReady,
		Labels: map[string]string{FleetLabel: "f"}, Counters: map[string]Counter{"rooms": {Count: 99, Capacity: 100}}})
	got, err := ix.Allocate(adversarial(t, 1), t0, 1)
	if err != nil || got.Previous.Name != "zz-deep" {
		t.Fatalf("want zz-deep, got %v, %v", got, err)
	}
}

// stepCtx is a context whose Err runs a function the first time the scan
// asks, which is while the scan has released the lock.
type stepCtx struct {
	context.Context
	once sync.Once
	step func()
}

func (c *stepCtx) Err() error {
	c.once.Do(c.step)
	return c.Context.Err()
}

// TestScanLetsOthersIn proves that a long scan does not hold the lock: in
// the middle of one, another allocation and an update complete.
func TestScanLetsOthersIn(t *testing.T) {
	ix := fleetOf(20_000)
	done := make(chan error, 1)
	ctx := &stepCtx{Context: context.Background(), step: func() {
		go func() {
			_, err := ix.AllocateAndCommit(wellFormed(t), t0, 7)
			if err == nil {
				ix.Upsert(&GameServer{Namespace: "default", Name: "new", NodeName: "node-000", State: StateReady})
			}
			done <- err
		}()
		select {
		case err := <-done:
			done <- err
		case <-time.After(10 * time.Second):
			done <- errors.New("a plain allocation waited 10 s for the lock while a scan was under way")
		}
	}}
	if _, err := ix.AllocateAndCommitContext(ctx, adversarial(t, 4), t0, 1); !errors.Is(err, ErrNoMatch) {
		t.Fatalf("adversarial request: got %v, want ErrNoMatch", err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}

func TestScanStopsWhenContextEnds(t *testing.T) {
	ix := fleetOf(5000)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := ix.AllocateContext(ctx, adversarial(t, 1), t0, 1); !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want context.Canceled", err)
	}
	if _, err := ix.AllocateContext(ctx, wellFormed(t), t0, 1); err != nil {
		t.Fatalf("a request settled by the first look needs no time: %v", err)
	}
}

// TestScanUnderConcurrency runs scans, plain allocations, releases and
// updates at once (meant for -race): no server is ever held twice, and every
// answer is a server that matched.
func TestScanUnderConcurrency(t *testing.T) {
	defer func(c int) { scanChunk = c }(scanChunk)
	scanChunk = 16
	ix := fleetOf(3000)
	rare := mustNormalize(t, &Request{Selectors: []Selector{{
		MatchLabels: map[string]string{FleetLabel: "f"},
		Counters:    map[string]CounterSelector{"rooms": {MinCount: 2}},
	}}})
	var mu sync.Mutex
	held := map[string]bool{}
	take := func(r *Result) {
		mu.Lock()
		defer mu.Unlock()
		if held[r.Previous.Name] {
			t.Errorf("%s allocated twice", r.Previous.Name)
		}
		held[r.Previous.Name] = true
	}
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), 1))
			for i := range 300 {
				switch r.IntN(4) {
				case 0: // a server gains two rooms in use: the rare request matches it
					name := fmt.Sprintf("gs-%06d", r.IntN(3000))
					if gs, ok := ix.Get(Key{"default", name}); ok && gs.State == StateReady {
						c := gs.Clone()
						c.Counters = map[string]Counter{"rooms": {Count: 2, Capacity: 4}}
						ix.Upsert(c)
					}
				case 1:
					if got, err := ix.AllocateAndCommit(rare, t0, uint64(i)); err == nil {
						if got.Previous.Counters["rooms"].Count != 2 {
							t.Errorf("rare request got %s with %v", got.Previous.Name, got.Previous.Counters)
						}
						take(got)
					} else if !errors.Is(err, ErrNoMatch) {
						t.Error(err)
					}
				default:
					if got, err := ix.AllocateAndCommit(wellFormed(t), t0, uint64(i)); err == nil {
						take(got)
					} else if !errors.Is(err, ErrNoMatch) {
						t.Error(err)
					}
				}
			}
		}()
	}
	wg.Wait()
	if n := len(ix.ListState(StateAllocated)); n != len(held) {
		t.Fatalf("%d servers Allocated, %d allocations answered", n, len(held))
	}
}

// TestInventedNamesDoNotGrowTheIndex floods the index with requests for
// namespaces, label keys, label values and priority keys that no server has,
// then checks that nothing was kept for them and that real keys still get
// groups of their own.
func TestInventedNamesDoNotGrowTheIndex(t *testing.T) {
	ix := fleetOf(2000)
	for i := range 2000 {
		ix.Upsert(&GameServer{Namespace: "default", Name: fmt.Sprintf("m-%04d", i), NodeName: "node-m", State: StateReady,
			Labels: map[string]string{FleetLabel: "g", "mode": fmt.Sprintf("mode-%d", i%4), "region": "eu"}})
	}
	groups := func() int {
		ix.mu.Lock()
		defer ix.mu.Unlock()
		return len(ix.groups)
	}
	warm := mustNormalize(t, &Request{Selectors: []Selector{{MatchLabels: map[string]string{FleetLabel: "f"}}}})
	if _, err := ix.Allocate(warm, t0, 1); err != nil {
		t.Fatal(err)
	}
	before := groups()
	var ms0, ms1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms0)
	for i := range 20_000 {
		reqs := []*Request{
			{Namespace: fmt.Sprintf("ns-%d", i)},
			{Selectors: []Selector{{MatchLabels: map[string]string{fmt.Sprintf("key-%d", i): "x"}}}},
			{Selectors: []Selector{{MatchLabels: map[string]string{"mode": fmt.Sprintf("nope-%d", i)}}}},
			{Selectors: []Selector{{MatchLabels: map[string]string{FleetLabel: fmt.Sprintf("fleet-%d", i)}}}},
			{Scheduling: Distributed, Selectors: []Selector{{MatchLabels: map[string]string{FleetLabel: "f"}}},
				Priorities: []Priority{{Type: PriorityCounter, Key: fmt.Sprintf("ctr-%d", i)}}},
		}
		for _, r := range reqs {
			res, err := ix.Allocate(mustNormalize(t, r), t0, uint64(i))
			if err == nil {
				ix.Abort(res)
			}
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&ms1)
	// mode got groups (4 values) when first asked for: real, and bounded.
	if got := groups(); got > before+4 {
		t.Fatalf("%d groups after the flood, %d before: invented names were kept", got, before)
	}
	if grew := int64(ms1.HeapAlloc) - int64(ms0.HeapAlloc); grew > 4<<20 {
		t.Fatalf("heap grew by %d bytes over 100,000 requests for invented names", grew)
	}
	ix.mu.Lock()
	keys := strings.Join(ix.labelKeys, ",")
	prios := 0
	for _, g := range ix.groups {
		prios += len(g.prios)
	}
	ix.mu.Unlock()
	if keys != FleetLabel+",mode" {
		t.Fatalf("tracked label keys %q, want only the real ones asked for", keys)
	}
	if prios != 0 {
		t.Fatalf("%d priority indexes built for counters no server has", prios)
	}
	// A real key asked for now still gets its groups: the slots are free.
	region := mustNormalize(t, &Request{Selectors: []Selector{{MatchLabels: map[string]string{"region": "eu"}}}})
	if _, err := ix.Allocate(region, t0, 1); err != nil {
		t.Fatal(err)
	}
	ix.mu.Lock()
	_, ok := ix.groups[groupKey{"default", StateReady, "region", "eu"}]
	ix.mu.Unlock()
	if !ok {
		t.Fatal("a real label key asked for after the flood got no group")
	}
}

// TestLabelGroupsFollowTheirServers checks that groups of a tracked key come
// and go with the servers carrying its values, and that a key with too many
// values is served by filtering instead of growing without bound.
func TestLabelGroupsFollowTheirServers(t *testing.T) {
	ix := NewIndex()
	for i := range 10 {
		ix.Upsert(ready(fmt.Sprintf("gs-%d", i), "n", FleetLabel, "f", "mode", "a"))
	}
	req := mustNormalize(t, &Request{Selectors: []Selector{{MatchLabels: map[string]string{"mode": "a"}}}})
	if _, err := ix.AllocateAndCommit(req, t0, 1); err != nil {
		t.Fatal(err)
	}
	for i := range 10 {
		ix.Remove(Key{"default", fmt.Sprintf("gs-%d", i)})
	}
	ix.mu.Lock()
	left, keys, ns := len(ix.groups), len(ix.labelKeys), len(ix.nsCount)
	ix.mu.Unlock()
	if left != 0 || keys != 1 || ns != 0 {
		t.Fatalf("after removing every server: %d groups, %d tracked keys, %d namespaces; want 0, 1 (fleet), 0", left, keys, ns)
	}

	big := NewIndex()
	for i := range maxGroupsPerKey + 10 {
		big.Upsert(ready(fmt.Sprintf("gs-%05d", i), "n", "session", fmt.Sprintf("s-%d", i)))
	}
	one := mustNormalize(t, &Request{Selectors: []Selector{{MatchLabels: map[string]string{"session": "s-77"}}}})
	got, err := big.Allocate(one, t0, 1)
	if err != nil || got.Previous.Name != "gs-00077" {
		t.Fatalf("want gs-00077, got %v, %v", got, err)
	}
	big.mu.Lock()
	n, unindexed := len(big.groups), big.unindexed["session"]
	big.mu.Unlock()
	if !unindexed || n > 2 {
		t.Fatalf("a key with %d values: unindexed %v, %d groups kept", maxGroupsPerKey+10, unindexed, n)
	}
}

func TestNormalizeBounds(t *testing.T) {
	many := func(n int) map[string]string {
		m := map[string]string{}
		for i := range n {
			m[fmt.Sprintf("k%d", i)] = "v"
		}
		return m
	}
	values := make([]string, MaxExpressionValues+1)
	for i := range values {
		values[i] = fmt.Sprintf("v%d", i)
	}
	cases := []struct {
		name, field string
		req         Request
	}{
		{"selectors", "gameServerSelectors", Request{Selectors: make([]Selector, MaxSelectors+1)}},
		{"preferred", "preferredGameServerSelectors", Request{Preferred: make([]Selector, MaxSelectors)}},
		{"priorities", "priorities", Request{Priorities: make([]Priority, MaxPriorities+1)}},
		{"matchLabels", "gameServerSelectors[0].matchLabels", Request{Selectors: []Selector{{MatchLabels: many(MaxSelectorTerms + 1)}}}},
		{"matchExpressions", "gameServerSelectors[0].matchExpressions", Request{Selectors: []Selector{{MatchExpressions: make([]LabelExpression, MaxSelectorTerms+1)}}}},
		{"values", "gameServerSelectors[0].matchExpressions[0].values", Request{Selectors: []Selector{{MatchExpressions: []LabelExpression{{Key: "k", Operator: OpIn, Values: values}}}}}},
		{"metadata labels", "metadata.labels", Request{Metadata: MetaPatch{Labels: many(MaxMetadataEntries + 1)}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := Normalize(&c.req)
			var inv *InvalidRequestError
			if !errors.As(err, &inv) || inv.Errors[0].Field != c.field || !strings.Contains(inv.Errors[0].Reason, "at most") {
				t.Fatalf("got %v, want a refusal naming %s", err, c.field)
			}
		})
	}
	// At the bounds, requests are fine.
	ok := Request{Selectors: make([]Selector, MaxSelectors)}
	ok.Selectors[0].MatchExpressions = []LabelExpression{{Key: "k", Operator: OpIn, Values: values[:MaxExpressionValues]}}
	if _, err := Normalize(&ok); err != nil {
		t.Fatal(err)
	}
}

// TestCommonRequestsNeedNoScan guards the fast path: on a fresh, uniform
// fleet (every node alike, the hardest case for Packed's tiers) the
// requests of the benchmarks, with and without priorities, spread and
// shards, are settled by the walk under the lock, never by a scan.
func TestCommonRequestsNeedNoScan(t *testing.T) {
	for _, spread := range []int{1, 64} {
		ix := NewIndex()
		ix.SetPackedSpread(spread)
		if spread > 1 {
			ix.SetReplicaShard(1, 3)
		}
		for i := range 20_000 {
			ix.Upsert(&GameServer{Namespace: "default", Name: fmt.Sprintf("gs-%06d", i), NodeName: fmt.Sprintf("node-%04d", i%2000),
				State: StateReady, Labels: map[string]string{FleetLabel: fmt.Sprintf("f%d", i%10)},
				Counters: map[string]Counter{"rooms": {Capacity: 10}}})
		}
		for _, s := range []Strategy{Packed, Distributed} {
			for _, prio := range []bool{false, true} {
				r := &Request{Scheduling: s, Selectors: []Selector{{
					MatchLabels: map[string]string{FleetLabel: "f3"},
					Counters:    map[string]CounterSelector{"rooms": {MinAvailable: 1}},
				}}}
				if prio {
					r.Priorities = []Priority{{Type: PriorityCounter, Key: "rooms", Order: Descending}}
				}
				req := mustNormalize(t, r)
				for i := range 200 {
					res, err := ix.AllocateAndCommit(req, t0, uint64(i))
					if err != nil {
						t.Fatal(err)
					}
					ix.Upsert(res.Previous)
				}
				if ix.scans != 0 {
					t.Fatalf("spread %d, %v, priorities %v: %d selectors needed a scan", spread, s, prio, ix.scans)
				}
			}
		}
	}
}
