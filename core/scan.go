package core

import (
	"context"
	"errors"
	"runtime"
	"sort"
	"strconv"
)

// How the index bounds the work of one decision.
//
// A selector whose matches are plentiful is settled by a short walk in the
// request's order (usually the first server looked at). One whose matches
// are rare or absent (a fleet label and a counter nobody has, say) would
// make that walk visit the whole group; at 100k servers that is
// milliseconds, and with hundreds of selectors seconds, during which no other
// allocation could take the lock. So the walk under the lock stops after
// fastScanTests servers, and the rest is done by scanPick: a plain pass over
// the group in chunks of scanChunk servers, letting other callers in
// between, keeping the best few matches in the request's order, and
// checking them again under the lock at the end. Across all selectors a
// decision examines at most the index's scan budget, and it stops as soon as
// the caller's context ends.

// DefaultScanBudget is how many servers one decision may examine before it
// gives up with ErrScanBudget: ten passes over a fleet of 100,000.
const DefaultScanBudget = 1_000_000

// ErrScanBudget means a request's selectors would have the index examine more
// servers than its scan budget allows; nothing was allocated. The allocator
// answers ResourceExhausted: the request is valid but too costly as written.
var ErrScanBudget = errors.New("allocation gave up: the request's selectors examined more game servers than the scan budget allows")

// Variables, not constants, so tests can force the scan and its chunking.
var (
	// fastScanTests is how many servers the walk under the lock may look at.
	fastScanTests = 64
	// scanChunk is how many servers a scan examines per hold of the lock:
	// a few microseconds of other callers' waiting.
	scanChunk = 64
)

// SetScanBudget sets how many servers one decision may examine (n < 1 means
// DefaultScanBudget).
func (ix *Index) SetScanBudget(n int) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if n < 1 {
		n = DefaultScanBudget
	}
	ix.budget = n
}

// budget counts down the servers a walk may still examine.
type budget struct{ left int }

// take spends n and reports whether the budget covered it.
func (b *budget) take(n int) bool {
	b.left -= n
	return b.left >= 0
}

// scanPick chooses for sel by a pass over g in chunks, releasing ix.mu
// between chunks. It is called with ix.mu held and returns with it held.
// Between chunks the group may change; the pass then misses or repeats a
// few servers, as a decision made a moment earlier or later would, and what
// it keeps is checked again before it is returned. Without concurrent
// changes it chooses exactly what the walk in order would.
func (ix *Index) scanPick(ctx context.Context, req *Request, sel *Selector, g *group, r *rng, spent *int) (*entry, error) {
	ix.scans++
	st := sel.State
	if st == "" {
		st = StateReady
	}
	random := req.Scheduling == Distributed && len(req.Priorities) == 0
	keep := 1
	if req.Scheduling == Packed && len(req.Priorities) == 0 && ix.spread > 1 {
		keep = ix.spread
		if ix.shards > 1 {
			keep *= shardReach
		}
	}
	before := func(a, b *entry) bool { return ix.before(req, a, b) }
	known := g.key.label
	var top []*entry
	var chosen *entry // random: the reservoir's current choice
	seen := 0
	for i := 0; i < len(g.all); {
		n := min(scanChunk, len(g.all)-i)
		if *spent+n > ix.budget {
			return nil, ErrScanBudget
		}
		*spent += n
		for _, e := range g.all[i : i+n] {
			if !sel.matchesWithin(e.gs, known) {
				continue
			}
			if random {
				// Reservoir sampling: each match seen so far has been
				// kept with probability 1/seen.
				seen++
				if r.intN(uint64(seen)) == 0 {
					chosen = e
				}
				continue
			}
			top = keepBest(top, e, keep, before)
		}
		if i += n; i >= len(g.all) {
			break
		}
		if err := ix.yield(ctx); err != nil {
			return nil, err
		}
	}
	valid := func(e *entry) bool {
		return e != nil && !e.removed && !e.held && e.gs.Namespace == req.Namespace &&
			e.gs.State == st && sel.matchesWithin(e.gs, "")
	}
	if random {
		if !valid(chosen) {
			return nil, nil
		}
		return chosen, nil
	}
	// What was kept may have changed while others held the lock: drop what
	// no longer qualifies and order the rest by the counts of now.
	live := top[:0]
	for _, e := range top {
		if valid(e) {
			live = append(live, e)
		}
	}
	sort.SliceStable(live, func(i, j int) bool { return before(live[i], live[j]) })
	if len(live) == 0 {
		return nil, nil
	}
	if keep == 1 {
		return live[0], nil
	}
	ix.scan = budget{left: 1} // spreadChoice only reads it
	return ix.spreadChoice(func(n int) []*entry { return live[:min(n, len(live))] }, r), nil
}

// yield lets whoever waits for ix.mu have it, then takes it back; it
// returns ctx's error if ctx has ended meanwhile. It is called, and returns,
// with ix.mu held.
func (ix *Index) yield(ctx context.Context) error {
	ix.mu.Unlock()
	// Hand the processor to a waiter (Unlock made it runnable here)
	// rather than taking the lock straight back.
	runtime.Gosched()
	err := ctx.Err()
	ix.mu.Lock()
	return err
}

// keepBest inserts e into top (sorted by before, at most n long, no
// duplicates) when it belongs there.
func keepBest(top []*entry, e *entry, n int, before func(a, b *entry) bool) []*entry {
	if len(top) == n && !before(e, top[n-1]) {
		return top
	}
	for _, x := range top {
		if x == e {
			return top // seen twice: the group changed between chunks
		}
	}
	i := sort.Search(len(top), func(i int) bool { return before(e, top[i]) })
	if len(top) < n {
		top = append(top, nil)
	}
	copy(top[i+1:], top[i:])
	top[i] = e
	return top
}

// before is the order a request's walk visits servers in: Packed by node
// (most Allocated, then most Ready) and then by priorities; Distributed by
// priorities alone; ties by name. The first match in it is the choice.
func (ix *Index) before(req *Request, a, b *entry) bool {
	if req.Scheduling == Packed {
		na, nb := a.node, b.node
		if na.allocated != nb.allocated {
			return na.allocated > nb.allocated
		}
		if na.ready != nb.ready {
			return na.ready > nb.ready
		}
	}
	if c := comparePriorities(req.Priorities, a.gs, b.gs); c != 0 {
		return c < 0
	}
	return a.gs.Name < b.gs.Name
}

// Bounds on a request's size, checked by Normalize. Agones sets none of its
// own beyond list capacity; these leave room for any matchmaker we know of
// while keeping one request's work and memory small.
const (
	MaxSelectors        = 32  // gameServerSelectors, or preferred + required
	MaxSelectorTerms    = 64  // matchLabels, matchAnnotations, matchExpressions, counters, lists: each, per selector
	MaxExpressionValues = 256 // values of one matchExpression
	MaxPriorities       = 16
	MaxActions          = 64 // counters and lists actions, each
	MaxMetadataEntries  = 64 // metadata labels and annotations, each
)

func tooMany(what string, max, got int) string {
	return "at most " + strconv.Itoa(max) + " " + what + ", got " + strconv.Itoa(got)
}
