package core

import (
	"context"
	"errors"
	"reflect"
	"slices"
	"sort"
	"sync"
	"time"
)

// ErrNoMatch means no server matched any of the request's selectors: the
// UnAllocated outcome.
var ErrNoMatch = errors.New("no game server matches the request")

// Index holds a fleet of GameServers organised for fast allocation.
//
// # Concurrency contract
//
// Every method is safe for concurrent use; one mutex serialises them, and the
// work done under it is small and bounded for the common requests (see
// below), so a single index sustains hundreds of thousands of decisions per
// second. Allocate atomically chooses a server and places a hold on it: until
// Commit or Abort, the held server is invisible to every other allocation, so
// two concurrent allocations never receive the same server. For Packed order
// a held Ready server counts as Allocated on its node already: the writes in
// flight then fill the fullest node together, where counting them as Ready
// would send each concurrent allocation to another node's first server (and
// leave every one of those nodes part-filled). A backend that
// commits elsewhere (an API server) calls Commit once the write is confirmed
// and Abort when it is not (for example on a conflict, after Upsert-ing the
// fresh state); the next Allocate then chooses among the others.
// AllocateAndCommit does both steps under one lock, for backends where the
// index is the source of truth.
//
// # How it stays fast
//
// Servers in state Ready or Allocated are kept in groups: per (namespace,
// state, label=value) for the label values requests select on, and per
// (namespace, state) for requests without matchLabels. Ready servers' fleet
// groups are kept from the start; any other group is built on first use by
// one pass over the index, in chunks that let other callers in between
// (build.go), then kept up to date incrementally, so a server is only in the
// groups that requests actually use. Allocated servers' label groups only
// count their servers until a request selects Allocated servers by a label
// (Index.allocFiled): an allocation and a server's return then touch the
// member lists of the Ready groups alone. A selector is served from its
// smallest group. Within a group asked for Packed order each node has a
// name-sorted member list (made at that first request), and the nodes sit
// in a skiplist in Packed order: most Allocated servers first, then most Ready,
// then by the name of their first member. Per-node counts change with every
// allocation; instead of re-sorting every group a node is in, the change
// marks the node dirty in each group and a group re-sorts its dirty nodes
// when it is next queried.
//
// Packed without priorities walks the skiplist tier by tier (a tier is the
// nodes with equal counts) and merges their member lists by name with a small
// heap, stopping at the first server the whole selector accepts: usually the
// first member of the first node. Distributed without priorities samples
// group members uniformly and keeps the first that matches (falling back to
// an exact uniform choice among all matches after a few misses). Requests
// with priorities compare every matching member of the first tier that has
// one (Packed) or of the group (Distributed): correct, but linear in that
// set.
type Index struct {
	mu      sync.Mutex
	entries map[Key]*entry
	nodes   map[string]*nodeInfo
	groups  map[groupKey]*group
	// baseGroups is how many groups of groups have no label: while there
	// are none, link does not look for one.
	baseGroups int
	// labelKeys are the label keys that have label groups; a server joining
	// a state joins the groups of its values for these keys, so a tracked
	// key's group that does not exist is one nobody is in. Only keys some
	// server carries are tracked (keyCount), and at most maxLabelKeys.
	labelKeys []string
	// keyGroups is how many groups each tracked key has; unindexed are
	// keys dropped for having too many values (served by filtering).
	keyGroups map[string]int
	// keptEmpty is how many of a key's groups are kept (see group.kept):
	// the bound on a key's groups counts the others.
	keptEmpty map[string]int
	unindexed map[string]bool
	// keyBuilds and baseBuilds are the label keys' and base groups' builds
	// under way (build.go): their structures are live but not yet complete.
	keyBuilds  map[string]*build
	baseBuilds map[groupKey]*build
	// allocFiled says Allocated servers are filed in their label groups.
	// Until a request selects Allocated servers, those groups only count
	// their servers (group.counted): the Ready groups need no more of them
	// (group.kept), and an allocation and a server's return then move it
	// through half the member lists. The first such request files them
	// (fileAllocated); allocBuild is that build while under way.
	allocFiled bool
	allocBuild *build
	// keyCount, counterCount and listCount are how many servers (in any
	// state) carry each label key, counter and list; nsCount how many live
	// in each namespace. Requests naming what no server has are answered
	// from these without building anything, so invented names cannot grow
	// the index or use up its bounded structures.
	keyCount     map[string]int
	counterCount map[string]int
	listCount    map[string]int
	nsCount      map[string]int
	nodeSeq      uint64
	holdSeq      uint64
	levels       rng // skiplist levels: deterministic, independent of requests

	// spread is how many of the first Packed matches a choice is drawn
	// from (1: the first, exact Packed); shard of shards is this replica's
	// preferred share of them (shards <= 1: no preference).
	spread, shard, shards int

	// counted is the annotation by whose values Allocated servers are
	// filed ("": none), for CountAllocated and ListAllocated.
	counted string
	owned   map[string][]*entry // by counted value; entry.ownedAt is the position

	// budget is how many servers one decision may examine (SetScanBudget);
	// scan is what the current walk under the lock has left.
	budget int
	scan   budget
	scans  uint64 // selectors that needed scanPick: rare for sane requests

	// scratch space reused across allocations (guarded by mu)
	heap  []cursor
	found []*entry
}

// maxLabelKeys bounds how many label keys get groups of their own; selectors
// on further keys are served from the namespace group with a filter.
const maxLabelKeys = 8

// maxGroupsPerKey bounds the groups of one label key (its values times
// namespaces and states). A key with more values than that (a per-server
// label, say) stops being tracked and is served by filtering.
const maxGroupsPerKey = 4096

type groupKey struct {
	namespace string
	state     State
	label     string // "" for the group of all servers in (namespace, state)
	value     string
}

type entry struct {
	hash    uint64 // nameHash of the name, for replica shards
	gs      *GameServer
	node    *nodeInfo
	removed bool // deleted from the index; a Result may still point here
	held    bool
	// pending says the entry is held in state Ready and so counted as
	// Allocated on its node (see the concurrency contract).
	pending bool
	// ownedAt is 1 + the entry's position in its counted value's list in
	// Index.owned, 0 when it is in none.
	ownedAt int32
	holdSeq uint64
	// in is the groups the entry is in; it starts in inline, which holds
	// the usual one or two (fleet, a selected label) without an object of
	// its own: one less for the GC to mark per server, and a swap in
	// leave finds the moved entry's membership next to the entry itself.
	in     []membership
	inline [2]membership
}

// membership is an entry's place in a group: its position in g.all and,
// in an ordered group, its groupNode (nil in another); pos is -1 when the
// group only counts it (see Index.allocFiled).
type membership struct {
	g   *group
	gn  *groupNode
	pos int // position in g.all
}

type nodeInfo struct {
	name      string
	id        uint64
	ready     int
	allocated int
	servers   int // entries on this node, any state
	// gns are this node's groupNodes, one per group it has members in:
	// join finds a node's place in a group here, among a few, rather than
	// in the group's map of every node; a change of the node's counts marks
	// the ordered groups' ones for re-sorting.
	gns []nodeGroup
}

// nodeGroup is a node's groupNode in a group, with the group beside it:
// walking a node's groups (to mark them dirty, to find one) reads the
// group, one of few and often in cache, rather than each groupNode.
type nodeGroup struct {
	g  *group
	gn *groupNode
}

type group struct {
	key groupKey
	all []*entry
	// counted is how many members the group counts without filing them
	// (an Allocated label group while Index.allocFiled is false, and the
	// members it had then until a build files them): they are in no
	// member list and not in all.
	counted int
	// nodes are an ordered group's groupNodes, each at its groupPos (an
	// unordered group needs no member lists: all is all it keeps). A group
	// keeps a node whose last member left until the node leaves the index
	// (releaseNode), out of its order: servers come and go on the same
	// nodes, and each return would otherwise make the groupNode anew.
	nodes []*groupNode
	// dropped says dropGroup took the group out of the index; other says
	// which group has the same namespace and label but the other
	// allocatable state, when link has seen both (nil once either is
	// dropped). Together they let link find an updated server's groups
	// from the ones it leaves, without hashing their keys.
	dropped bool
	other   *group
	// kept says the label group is empty and kept for its other-state
	// group's servers, which come back to this state one by one: a Ready
	// group of a fleet allocated to the last server would otherwise be
	// dropped at every allocation and made anew, its order included, at
	// every server's return. It counts as absent: for the bound on a key's
	// groups, and to driverGroup. Dropped with its other-state group.
	kept bool
	// ordered says the group keeps its nodes in Packed order. It starts
	// false and turns true on the first Packed query; until then the group
	// keeps no member lists and node count changes do not touch it at all
	// (a group served only Distributed requests, or none, needs neither).
	ordered bool
	order   nodeOrder
	dirty   []*groupNode
	prios   []*prioIndex // per priority key, built when a request first uses it
}

// size is how many servers are in the group, filed or counted.
func (g *group) size() int { return len(g.all) + g.counted }

// groupNode is one node's members within one group.
type groupNode struct {
	g        *group
	node     *nodeInfo
	members  []member // sorted by name
	dirty    bool
	inOrder  bool
	nodePos  int // position in node.gns
	groupPos int // position in g.nodes
	// The key under which the node sits in g.order; refreshed only while
	// the node is out of the order.
	allocated, ready int
	head             string
	next             [maxSkipLevel]*groupNode
}

// NewIndex returns an empty index.
func NewIndex() *Index {
	return &Index{
		entries: map[Key]*entry{},
		nodes:   map[string]*nodeInfo{},
		groups:  map[groupKey]*group{},
		// Fleet is what nearly every request selects on: its groups are
		// kept from the start (see link) so that no request pays for
		// building one.
		labelKeys:    []string{FleetLabel},
		keyGroups:    map[string]int{},
		keptEmpty:    map[string]int{},
		unindexed:    map[string]bool{},
		keyBuilds:    map[string]*build{},
		baseBuilds:   map[groupKey]*build{},
		keyCount:     map[string]int{},
		counterCount: map[string]int{},
		listCount:    map[string]int{},
		nsCount:      map[string]int{},
		levels:       newRNG(0x5eed),
		spread:       1,
		budget:       DefaultScanBudget,
	}
}

// SetCountedAnnotation makes the index file Allocated servers by their
// value of annotation key (the allocator's owner annotation: what each
// identity holds), for CountAllocated and ListAllocated.
func (ix *Index) SetCountedAnnotation(key string) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	ix.counted, ix.owned = key, map[string][]*entry{}
	for _, e := range ix.entries {
		e.ownedAt = 0 // filed afresh: positions in the old lists mean nothing
		ix.tally(e, e.gs, true)
	}
}

// CountAllocated is how many servers in state Allocated carry value under
// the counted annotation, in every namespace.
func (ix *Index) CountAllocated(value string) int {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	return len(ix.owned[value])
}

// ListAllocated returns the servers in state Allocated that carry value
// under the counted annotation, sorted by namespace and name. It costs what
// they are, not what the index holds.
func (ix *Index) ListAllocated(value string) []*GameServer {
	ix.mu.Lock()
	out := make([]*GameServer, 0, len(ix.owned[value]))
	for _, e := range ix.owned[value] {
		out = append(out, e.gs)
	}
	ix.mu.Unlock()
	sortByKey(out)
	return out
}

// tally files e (whose server is, or was, gs) under its counted value. The
// lists are unordered with positions kept in the entries: filing is an
// append and unfiling a swap with the last, where a set of pointers (a map)
// hashed and grew under every allocation.
func (ix *Index) tally(e *entry, gs *GameServer, add bool) {
	if ix.counted == "" || gs.State != StateAllocated {
		return
	}
	v, ok := gs.Annotation(ix.counted)
	if !ok {
		return
	}
	list := ix.owned[v]
	if add {
		if e.ownedAt == 0 {
			ix.owned[v] = append(list, e)
			e.ownedAt = int32(len(list) + 1)
		}
		return
	}
	i := int(e.ownedAt) - 1
	if i < 0 || i >= len(list) || list[i] != e {
		return
	}
	last := len(list) - 1
	list[i] = list[last]
	list[i].ownedAt = int32(i + 1)
	list[last] = nil
	e.ownedAt = 0
	if last == 0 {
		delete(ix.owned, v)
		return
	}
	ix.owned[v] = list[:last]
}

// SetPackedSpread makes Packed allocations (without priorities) choose
// uniformly, by the request's seed, among the first n matches in Packed order
// instead of always the first. Several allocator replicas working from the
// same cache otherwise all race for the same server and all but one lose;
// with a spread they mostly want different ones. The first n matches nearly
// always share the fullest node, so packing barely changes. n < 1 means 1.
func (ix *Index) SetPackedSpread(n int) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	ix.spread = max(n, 1)
}

// SetReplicaShard gives this index's replica (shard of shards, counting from
// 0) a preferred share of the servers: among the first n Packed matches
// (SetPackedSpread), it takes the first whose name hashes to its shard;
// when there is none, the first of its shard among the first shardReach*n;
// only then a seeded-random one of the last n of those. Replicas configured with
// different shards then want disjoint servers and rarely conflict, while
// still packing within the best few. shards <= 1 turns the preference off.
func (ix *Index) SetReplicaShard(shard, shards int) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if shards <= 1 || shard < 0 {
		ix.shard, ix.shards = 0, 0
		return
	}
	ix.shard, ix.shards = shard%shards, shards
}

// shardReach: a replica whose shard has nothing among the best spread
// matches looks this many times further for one of its own before taking
// one of another's (from the far end of that reach).
const shardReach = 4

func (ix *Index) firstOfShard(found []*entry) *entry {
	for _, e := range found {
		if e.hash%uint64(ix.shards) == uint64(ix.shard) {
			return e
		}
	}
	return nil
}

// nameHash is FNV-1a: a stable hash, so every replica agrees on shards.
func nameHash(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return h
}

// Len is the number of servers in the index, in any state.
func (ix *Index) Len() int {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	return len(ix.entries)
}

// Get returns the server stored under k.
func (ix *Index) Get(k Key) (*GameServer, bool) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	e, ok := ix.entries[k]
	if !ok {
		return nil, false
	}
	return e.gs, true
}

// List returns every server in the index, sorted by namespace and name.
func (ix *Index) List() []*GameServer { return ix.list(func(*GameServer) bool { return true }) }

// ListState returns the servers in state st, sorted by namespace and name.
func (ix *Index) ListState(st State) []*GameServer {
	return ix.list(func(gs *GameServer) bool { return gs.State == st })
}

func (ix *Index) list(keep func(*GameServer) bool) []*GameServer {
	ix.mu.Lock()
	var out []*GameServer
	for _, e := range ix.entries {
		if keep(e.gs) {
			out = append(out, e.gs)
		}
	}
	ix.mu.Unlock()
	sortByKey(out)
	return out
}

func sortByKey(out []*GameServer) {
	sort.Slice(out, func(i, j int) bool {
		if out[i].Namespace != out[j].Namespace {
			return out[i].Namespace < out[j].Namespace
		}
		return out[i].Name < out[j].Name
	})
}

// Upsert adds gs or replaces the server with the same namespace and name.
// The index keeps the pointer: gs must not be modified afterwards. A held
// server takes the new state but stays held.
func (ix *Index) Upsert(gs *GameServer) {
	ix.mu.Lock()
	ix.upsert(gs)
	ix.mu.Unlock()
}

// A Slot is where an index keeps one server, as UpsertSlot returns it. A
// caller that keeps it hands it to the next UpsertSlot of that server,
// which then need not find the server by its key: on a large fleet that
// search is a good part of an update's cost. The zero Slot is none; a Slot
// of another index, of a server since removed, or of another server is
// ignored.
type Slot struct {
	ix *Index
	e  *entry
}

// UpsertSlot is Upsert with s, the server's Slot from the last UpsertSlot
// of it (or none); it returns the server's Slot now.
func (ix *Index) UpsertSlot(s Slot, gs *GameServer) Slot {
	ix.mu.Lock()
	e := s.e
	if s.ix != ix || e == nil || e.removed || e.gs.Name != gs.Name || e.gs.Namespace != gs.Namespace {
		e = ix.upsert(gs)
	} else {
		ix.update(e, gs)
	}
	ix.mu.Unlock()
	return Slot{ix: ix, e: e}
}

// Remove deletes the server stored under k and reports whether it was there.
func (ix *Index) Remove(k Key) bool {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	e, ok := ix.entries[k]
	if !ok {
		return false
	}
	ix.unlink(e)
	ix.clearPending(e)
	ix.count(e.node, e.gs.State, -1)
	ix.tally(e, e.gs, false)
	ix.countNames(e.gs, -1)
	ix.releaseNode(e.node)
	delete(ix.entries, k)
	e.removed = true
	if ix.nsCount[k.Namespace]--; ix.nsCount[k.Namespace] <= 0 {
		delete(ix.nsCount, k.Namespace)
		// The namespace is gone: so are its groups (its label groups
		// emptied and went with their last member).
		for _, st := range []State{StateReady, StateAllocated} {
			if g := ix.groups[groupKey{namespace: k.Namespace, state: st}]; g != nil {
				ix.dropGroup(g)
			}
		}
	}
	return true
}

// Allocate chooses a server for req and holds it (see the concurrency
// contract). req must have come from Normalize. now stamps
// agones.dev/last-allocated; seed drives Distributed's random choice, so the
// same index, request and seed give the same answer. It returns ErrNoMatch
// when no selector matches any server that is not held, and ErrScanBudget
// when the decision would examine more servers than the scan budget allows
// (see SetScanBudget).
func (ix *Index) Allocate(req *Request, now time.Time, seed uint64) (*Result, error) {
	return ix.allocate(context.Background(), req, now, seed, false)
}

// AllocateContext is Allocate that also gives up, with ctx's error, when ctx
// ends while a long scan is under way.
func (ix *Index) AllocateContext(ctx context.Context, req *Request, now time.Time, seed uint64) (*Result, error) {
	return ix.allocate(ctx, req, now, seed, false)
}

// AllocateAndCommit allocates and commits in one step: the index is the
// source of truth (the memory backend, the simulator).
func (ix *Index) AllocateAndCommit(req *Request, now time.Time, seed uint64) (*Result, error) {
	return ix.allocate(context.Background(), req, now, seed, true)
}

// AllocateAndCommitContext is AllocateAndCommit that also gives up when ctx
// ends, as AllocateContext does.
func (ix *Index) AllocateAndCommitContext(ctx context.Context, req *Request, now time.Time, seed uint64) (*Result, error) {
	return ix.allocate(ctx, req, now, seed, true)
}

// Commit ends the hold of res, storing committed as the server's new state
// (res.GameServer when committed is nil; a backend passes the object its
// store returned, with the new Version). It does nothing if the server was
// removed meanwhile or the hold already ended.
func (ix *Index) Commit(res *Result, committed *GameServer) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	if committed == nil {
		committed = res.GameServer
	}
	ix.commit(res, committed)
}

// Abort ends the hold of res without changing the server, which becomes a
// candidate again in whatever state it now has.
func (ix *Index) Abort(res *Result) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	e := res.entry
	if e == nil || e.removed || !e.held || e.holdSeq != res.hold {
		return
	}
	e.held = false
	ix.clearPending(e)
	ix.link(e, nil)
}

func (ix *Index) commit(res *Result, committed *GameServer) {
	e := res.entry
	if e == nil || e.removed || !e.held || e.holdSeq != res.hold {
		return
	}
	e.held = false
	if committed.Namespace != e.gs.Namespace || committed.Name != e.gs.Name {
		ix.clearPending(e)
		ix.upsert(committed) // not the same server: treat as any update
		return
	}
	ix.update(e, committed)
}

// allocate tries the selectors in order, each under its own hold of the
// lock, so a request with many selectors does not keep other callers out
// for all of them at once.
func (ix *Index) allocate(ctx context.Context, req *Request, now time.Time, seed uint64, commit bool) (*Result, error) {
	r := newRNG(seed)
	spent := 0
	for i := range req.Selectors {
		if i > 0 {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
		}
		sel := &req.Selectors[i]
		ix.mu.Lock()
		e, err := ix.choose(ctx, req, sel, &r, &spent)
		if err != nil || e == nil {
			ix.mu.Unlock()
			if err != nil {
				return nil, err
			}
			continue
		}
		ix.unlink(e)
		ix.holdSeq++
		e.held = true
		e.holdSeq = ix.holdSeq
		res := &Result{
			GameServer: Apply(e.gs, req, now),
			Previous:   e.gs,
			Selector:   i,
			hold:       e.holdSeq,
			entry:      e,
		}
		if commit {
			ix.commit(res, res.GameServer)
		} else {
			ix.markPending(e)
		}
		ix.mu.Unlock()
		return res, nil
	}
	return nil, ErrNoMatch
}

// upsert stores gs and returns its entry.
func (ix *Index) upsert(gs *GameServer) *entry {
	k := gs.Key()
	e := ix.entries[k]
	if e == nil {
		e = &entry{hash: nameHash(gs.Name)}
		e.in = e.inline[:0]
		ix.entries[k] = e
		ix.nsCount[k.Namespace]++
		ix.place(e, gs, true, nil)
		return e
	}
	ix.update(e, gs)
	return e
}

// update replaces the server of an existing entry.
func (ix *Index) update(e *entry, gs *GameServer) {
	// The groups e is in, or was in when it was last unlinked (a held
	// entry's, left when it was allocated): where link looks first for
	// the groups of the new state. Stale ones are only hints.
	var was [4]*group
	for i, m := range e.in[:min(cap(e.in), len(was))] {
		was[i] = m.g
	}
	ix.unlink(e)
	ix.clearPending(e)
	ix.count(e.node, e.gs.State, -1)
	ix.tally(e, e.gs, false)
	// Most updates (an allocation, a counter moving) keep the same label,
	// counter and list names: counting them again would be wasted work on
	// the hot path.
	renamed := !sameKeys(e.gs.Labels, gs.Labels) || !sameKeys(e.gs.Counters, gs.Counters) || !sameKeys(e.gs.Lists, gs.Lists)
	if renamed {
		ix.countNames(e.gs, -1)
	}
	if e.node.name != gs.NodeName {
		ix.releaseNode(e.node)
		e.node = nil
	}
	ix.place(e, gs, renamed, was[:])
	if e.held {
		ix.markPending(e)
	}
}

// markPending counts a held Ready server as Allocated on its node, for
// Packed order, until clearPending.
func (ix *Index) markPending(e *entry) {
	if e.pending || e.gs.State != StateReady {
		return
	}
	e.pending = true
	e.node.ready--
	e.node.allocated++
	e.node.markDirty()
}

// clearPending undoes markPending; it must run before the entry's state
// or node changes, so the counts move back where they were added.
func (ix *Index) clearPending(e *entry) {
	if !e.pending {
		return
	}
	e.pending = false
	e.node.allocated--
	e.node.ready++
	e.node.markDirty()
}

// place stores gs in e and files it by node, state and groups; countNames
// says whether its label, counter and list names are new to the counts,
// was are groups to look for its own among first (see lookup).
func (ix *Index) place(e *entry, gs *GameServer, countNames bool, was []*group) {
	e.gs = gs
	if e.node == nil {
		e.node = ix.nodeFor(gs.NodeName)
	}
	ix.count(e.node, gs.State, +1)
	ix.tally(e, gs, true)
	if countNames {
		ix.countNames(gs, +1)
	}
	if !e.held {
		ix.link(e, was)
	}
}

// countNames moves the per-name server counts by delta for gs's label keys,
// counters and lists. A label key nobody carries any more stops being
// tracked (its groups are empty and gone already), freeing its slot.
func (ix *Index) countNames(gs *GameServer, delta int) {
	for k := range gs.Labels {
		if n := ix.keyCount[k] + delta; n > 0 {
			ix.keyCount[k] = n
		} else {
			delete(ix.keyCount, k)
			delete(ix.unindexed, k)
			if k != FleetLabel {
				ix.untrack(k)
			}
		}
	}
	moveCount(ix.counterCount, gs.Counters, delta)
	moveCount(ix.listCount, gs.Lists, delta)
}

func moveCount[V any](counts map[string]int, names map[string]V, delta int) {
	for k := range names {
		if n := counts[k] + delta; n > 0 {
			counts[k] = n
		} else {
			delete(counts, k)
		}
	}
}

// sameKeys reports whether a and b have the same keys. Servers of a fleet
// often share one labels map (a backend's template, the simulator's fleet):
// the same map has the same keys without a look at them.
func sameKeys[V any](a, b map[string]V) bool {
	if len(a) != len(b) {
		return false
	}
	if len(a) == 0 || reflect.ValueOf(a).UnsafePointer() == reflect.ValueOf(b).UnsafePointer() {
		return true
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			return false
		}
	}
	return true
}

func (ix *Index) nodeFor(name string) *nodeInfo {
	n := ix.nodes[name]
	if n == nil {
		ix.nodeSeq++
		n = &nodeInfo{name: name, id: ix.nodeSeq}
		ix.nodes[name] = n
	}
	n.servers++
	return n
}

func (ix *Index) releaseNode(n *nodeInfo) {
	n.servers--
	if n.servers != 0 {
		return
	}
	if ix.nodes[n.name] == n {
		delete(ix.nodes, n.name)
	}
	// With no server left the node is empty in every group, kept there
	// for its servers' return, which will not come. An ordered group's
	// node still dirty is dropped when the group re-sorts it (refresh
	// sees the node has no server); the others go now.
	for i := len(n.gns) - 1; i >= 0; i-- {
		if ng := n.gns[i]; !ng.g.ordered || !ng.gn.dirty {
			ng.g.dropNode(ng.gn)
		}
	}
}

// count moves a node's Ready/Allocated tallies and marks the node for
// re-sorting in every group that holds some of its servers.
func (ix *Index) count(n *nodeInfo, st State, delta int) {
	switch st {
	case StateReady:
		n.ready += delta
	case StateAllocated:
		n.allocated += delta
	default:
		return
	}
	n.markDirty()
}

// markDirty marks the node for re-sorting in every ordered group it is in.
// A node with no members in a group and out of its order has nothing to
// re-sort there: join marks it when a member arrives.
func (n *nodeInfo) markDirty() {
	for _, ng := range n.gns {
		if ng.g.ordered && (ng.gn.inOrder || len(ng.gn.members) > 0) {
			ng.gn.markDirty()
		}
	}
}

func (gn *groupNode) markDirty() {
	if !gn.dirty {
		gn.dirty = true
		gn.g.dirty = append(gn.g.dirty, gn)
	}
}

// find returns e's position in the member list, or -1. Short lists (a node
// rarely holds more than a few dozen servers) are scanned for the pointer,
// which touches one contiguous slice; long ones are searched by name.
func (gn *groupNode) find(e *entry) int {
	if len(gn.members) > 0 && gn.members[0].e == e {
		return 0 // Packed takes a node's first member
	}
	if len(gn.members) <= 64 {
		for i := range gn.members {
			if gn.members[i].e == e {
				return i
			}
		}
		return -1
	}
	name := e.gs.Name
	i := sort.Search(len(gn.members), func(i int) bool { return gn.members[i].name >= name })
	if i < len(gn.members) && gn.members[i].e == e {
		return i
	}
	return -1
}

func allocatable(st State) bool { return st == StateReady || st == StateAllocated }

// link puts an unheld entry into the groups its namespace, state and labels
// call for. Groups of tracked label keys are created here, as their first
// member arrives, so they always hold every candidate. was are groups to
// look among before the index's map (see lookup); nil: none.
func (ix *Index) link(e *entry, was []*group) {
	gs := e.gs
	if !allocatable(gs.State) {
		return
	}
	if ix.baseGroups > 0 {
		if g := ix.lookup(groupKey{namespace: gs.Namespace, state: gs.State}, was); g != nil {
			ix.join(e, g)
		}
	}
	overflow := ""
	for _, k := range ix.labelKeys {
		v, ok := gs.Labels[k]
		if !ok {
			continue
		}
		key := groupKey{gs.Namespace, gs.State, k, v}
		g := ix.lookup(key, was)
		if g == nil || g.kept {
			if ix.keyGroups[k]-ix.keptEmpty[k] >= maxGroupsPerKey {
				overflow = k
				continue
			}
			if g == nil {
				g = ix.group(key)
			}
		}
		ix.join(e, g)
	}
	if overflow != "" {
		ix.unindexed[overflow] = true
		ix.untrack(overflow)
	}
}

// lookup returns the group of key, or nil when there is none. It looks
// first among was and their other-state groups: a server that changes
// state moves between the two groups of each of its labels, and comparing
// keys costs less than hashing one for the map. Any group of was that is
// not dropped is the map's group of its key, so what lookup returns is
// what the map holds. A map hit pairs the group with its other-state
// group among was, for the next lookup.
func (ix *Index) lookup(key groupKey, was []*group) *group {
	for _, h := range was {
		if h == nil {
			continue
		}
		if h.key == key && !h.dropped {
			return h
		}
		if o := h.other; o != nil && o.key == key {
			return o
		}
	}
	g := ix.groups[key]
	if g == nil || g.other != nil {
		return g
	}
	for _, h := range was {
		if h != nil && !h.dropped && h.other == nil && h.key.state != key.state &&
			h.key.namespace == key.namespace && h.key.label == key.label && h.key.value == key.value {
			h.other, g.other = g, h
			break
		}
	}
	return g
}

// untrack stops keeping groups for label key k and drops the ones it has.
func (ix *Index) untrack(k string) {
	i := 0
	for i < len(ix.labelKeys) && ix.labelKeys[i] != k {
		i++
	}
	if i == len(ix.labelKeys) {
		return
	}
	ix.labelKeys = append(ix.labelKeys[:i], ix.labelKeys[i+1:]...)
	ix.endKeyBuild(k)
	if ix.keyGroups[k] == 0 {
		return
	}
	counted := false
	for key, g := range ix.groups {
		if key.label != k {
			continue
		}
		counted = counted || g.counted > 0
		for _, e := range g.all {
			for j := range e.in {
				if e.in[j].g == g {
					e.in = append(e.in[:j], e.in[j+1:]...)
					break
				}
			}
		}
		g.all, g.counted = nil, 0
		ix.dropGroup(g)
	}
	if counted {
		// The counted members are listed nowhere but in their entries.
		for _, e := range ix.entries {
			e.in = slices.DeleteFunc(e.in, func(m membership) bool { return m.pos < 0 && m.g.dropped })
		}
	}
}

func (ix *Index) tracked(k string) bool {
	for _, x := range ix.labelKeys {
		if x == k {
			return true
		}
	}
	return false
}

func (ix *Index) unlink(e *entry) {
	for _, m := range e.in {
		ix.leave(e, m)
	}
	e.in = e.in[:0]
}

func (ix *Index) group(k groupKey) *group {
	g := ix.groups[k]
	if g == nil {
		g = &group{key: k}
		g.order.rnd = &ix.levels
		ix.groups[k] = g
		if k.label != "" {
			ix.keyGroups[k.label]++
		} else {
			ix.baseGroups++
		}
	}
	return g
}

func (ix *Index) moveKept(label string, delta int) {
	if n := ix.keptEmpty[label] + delta; n > 0 {
		ix.keptEmpty[label] = n
	} else {
		delete(ix.keptEmpty, label)
	}
}

// dropGroup forgets an empty group: its nodes stop pointing at it, and a
// scan that still holds it (see scanPick) finds nothing in it.
func (ix *Index) dropGroup(g *group) {
	if ix.groups[g.key] != g {
		return
	}
	delete(ix.groups, g.key)
	if g.key.label != "" {
		if ix.keyGroups[g.key.label]--; ix.keyGroups[g.key.label] <= 0 {
			delete(ix.keyGroups, g.key.label)
		}
	} else {
		ix.baseGroups--
		ix.endBaseBuild(g.key)
	}
	g.dropped = true
	if g.kept {
		g.kept = false
		ix.moveKept(g.key.label, -1)
	}
	if o := g.other; o != nil {
		o.other, g.other = nil, nil
		if o.kept {
			ix.dropGroup(o) // kept for g's servers, which are gone
		}
	}
	for len(g.nodes) > 0 {
		g.dropNode(g.nodes[len(g.nodes)-1])
	}
	g.nodes = nil
	clear(g.dirty)
	g.dirty, g.prios = nil, nil
}

func (ix *Index) join(e *entry, g *group) {
	if g.kept {
		g.kept = false
		ix.moveKept(g.key.label, -1)
	}
	if !ix.allocFiled && g.key.state == StateAllocated && g.key.label != "" {
		g.counted++
		e.in = append(e.in, membership{g: g, pos: -1})
		return
	}
	var gn *groupNode
	if g.ordered {
		gn = g.listMember(e)
	}
	e.in = append(e.in, membership{g: g, gn: gn, pos: len(g.all)})
	g.all = append(g.all, e)
	for _, p := range g.prios {
		p.add(e)
	}
}

// listMember puts e in its node's member list of g, an ordered group,
// and returns that groupNode.
func (g *group) listMember(e *entry) *groupNode {
	var gn *groupNode
	for _, ng := range e.node.gns {
		if ng.g == g {
			gn = ng.gn
			break
		}
	}
	if gn == nil {
		gn = &groupNode{g: g, node: e.node, nodePos: len(e.node.gns), groupPos: len(g.nodes)}
		g.nodes = append(g.nodes, gn)
		e.node.gns = append(e.node.gns, nodeGroup{g: g, gn: gn})
	}
	name := e.gs.Name
	// Packed allocates a node's servers in name order, so an Allocated
	// group's node usually gains a name after all it has: check the last
	// first. A binary search compares with names stored elsewhere in
	// memory, a cache miss each on a large fleet.
	i := len(gn.members)
	if i > 0 && gn.members[i-1].name >= name {
		i = sort.Search(i, func(i int) bool { return gn.members[i].name >= name })
	}
	gn.members = append(gn.members, member{})
	copy(gn.members[i+1:], gn.members[i:])
	gn.members[i] = member{name: name, e: e}
	gn.markDirty()
	return gn
}

func (ix *Index) leave(e *entry, m membership) {
	g := m.g
	if m.pos < 0 {
		g.counted--
	} else {
		unfile(e, m)
	}
	if g.size() == 0 && g.key.label != "" {
		// A label group exists only while someone is in it (link makes
		// it again for the next member), or its other-state group.
		if o := g.other; o != nil && o.size() > 0 {
			g.kept = true
			ix.moveKept(g.key.label, +1)
		} else {
			ix.dropGroup(g)
		}
	}
}

// unfile takes e out of g.all and the member lists of m's group g, which
// files it.
func unfile(e *entry, m membership) {
	gn, g := m.gn, m.g
	for _, p := range g.prios {
		p.remove(e)
	}
	if gn != nil {
		unlist(e, gn)
	}
	last := len(g.all) - 1
	moved := g.all[last]
	g.all[m.pos] = moved
	g.all[last] = nil
	g.all = g.all[:last]
	if moved != e {
		for j := range moved.in {
			if moved.in[j].g == g {
				moved.in[j].pos = m.pos
				break
			}
		}
	}
}

// unlist takes e out of gn's member list, and marks gn for re-sorting.
func unlist(e *entry, gn *groupNode) {
	if i := gn.find(e); i == 0 {
		// Packed allocates a node's first server by name: dropping the
		// head must not shift the whole list (hundreds of servers on a
		// big node). The slice starts one further on; append reallocates
		// when the tail runs out, which gives the front back.
		gn.members[0] = member{}
		if len(gn.members) == 1 {
			gn.members = gn.members[:0] // keeps the whole capacity for the next
		} else {
			gn.members = gn.members[1:]
		}
	} else if i > 0 {
		copy(gn.members[i:], gn.members[i+1:])
		gn.members[len(gn.members)-1] = member{}
		gn.members = gn.members[:len(gn.members)-1]
	}
	gn.markDirty()
}

// refresh re-sorts up to n of the group's dirty nodes (all of them when
// n < 0), dropping nodes left empty, and reports whether none are left. The
// first call starts the order: every node is dirty then.
func (g *group) refresh(n int) bool {
	if !g.ordered {
		g.startOrder()
	}
	for ; n != 0 && len(g.dirty) > 0; n-- {
		last := len(g.dirty) - 1
		gn := g.dirty[last]
		g.dirty[last] = nil
		g.dirty = g.dirty[:last]
		gn.dirty = false
		if len(gn.members) == 0 {
			// Out of the order, but kept while the node has servers:
			// servers come and go on the same nodes, and a node whose
			// last Ready server was allocated gets one back at the end
			// of a session.
			if gn.inOrder {
				g.order.delete(gn)
				gn.inOrder = false
			}
			if gn.node.servers == 0 {
				g.dropNode(gn)
			}
			continue
		}
		head := gn.members[0].name
		nd := gn.node
		if gn.inOrder {
			if gn.allocated == nd.allocated && gn.ready == nd.ready && gn.head == head {
				continue
			}
			g.order.delete(gn)
		}
		gn.allocated, gn.ready, gn.head = nd.allocated, nd.ready, head
		g.order.insert(gn)
		gn.inOrder = true
	}
	return len(g.dirty) == 0
}

// startOrder makes the group keep its nodes in Packed order from now on:
// it lists its members by node, starts tracking the nodes' count changes
// and marks them all dirty, so that refresh builds the order (in chunks,
// if the caller wants).
func (g *group) startOrder() {
	g.ordered = true
	for _, e := range g.all {
		gn := g.listMember(e)
		for j := range e.in {
			if e.in[j].g == g {
				e.in[j].gn = gn
				break
			}
		}
	}
}

func (g *group) dropNode(gn *groupNode) {
	last := len(g.nodes) - 1
	g.nodes[gn.groupPos] = g.nodes[last]
	g.nodes[gn.groupPos].groupPos = gn.groupPos
	g.nodes[last] = nil
	g.nodes = g.nodes[:last]
	gns := gn.node.gns
	last = len(gns) - 1
	gns[gn.nodePos] = gns[last]
	gns[gn.nodePos].gn.nodePos = gn.nodePos
	gns[last] = nodeGroup{}
	gn.node.gns = gns[:last]
}

// driverGroup returns the smallest group that holds every candidate for sel,
// or nil when it can tell that nothing can match: the namespace holds no
// server, or a matchLabels key or value is one no server in it has. When a
// group it needs is still being built (build.go) it returns that build
// instead, to be waited for without the lock.
func (ix *Index) driverGroup(ns string, sel *Selector) (*group, *build) {
	if ix.nsCount[ns] == 0 {
		return nil, nil
	}
	st := sel.State
	if st == "" {
		st = StateReady
	}
	var best *group
	for _, p := range sel.labelPairs() {
		k, v := p.key, p.value
		if !ix.tracked(k) {
			if ix.keyCount[k] == 0 {
				return nil, nil
			}
			b := ix.startKeyBuild(k)
			if b == nil {
				continue // filtered instead
			}
			return nil, b
		}
		if b := ix.keyBuilds[k]; b != nil {
			return nil, b
		}
		if st == StateAllocated && ix.allocBuild != nil {
			return nil, ix.allocBuild
		}
		if st == StateAllocated && !ix.allocFiled {
			return nil, ix.fileAllocated()
		}
		// A tracked key's groups hold all of its servers: none, none here.
		g := ix.groups[groupKey{ns, st, k, v}]
		if g == nil || g.kept {
			return nil, nil
		}
		// Smallest group first; ties by label key so that the choice (and
		// with it a seeded random pick) does not depend on map order.
		if best == nil || len(g.all) < len(best.all) ||
			(len(g.all) == len(best.all) && k < best.key.label) {
			best = g
		}
	}
	if best == nil {
		base := groupKey{namespace: ns, state: st}
		if b := ix.baseBuilds[base]; b != nil {
			return nil, b
		}
		if best = ix.groups[base]; best == nil {
			// Kept from now on while the namespace has servers.
			return nil, ix.startBaseBuild(base)
		}
	}
	return best, nil
}

// choose returns sel's choice, or nil when nothing matches. It is called
// with ix.mu held and returns with it held, but may release it meanwhile
// (see scanPick). spent counts the servers examined for this request so far.
func (ix *Index) choose(ctx context.Context, req *Request, sel *Selector, r *rng, spent *int) (*entry, error) {
	g, b := ix.driverGroup(req.Namespace, sel)
	for b != nil {
		// A group it needs is being built: wait without the lock, then
		// look again (the build may also have been abandoned).
		ix.mu.Unlock()
		select {
		case <-b.done:
		case <-ctx.Done():
		}
		ix.mu.Lock()
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		g, b = ix.driverGroup(req.Namespace, sel)
	}
	if g == nil || len(g.all) == 0 {
		return nil, nil
	}
	if req.Scheduling == Packed {
		// The walk needs the group's order, which may be far behind (a
		// group first used now, or whose nodes others have kept busy):
		// bring it up to date in chunks, letting others in between.
		for rounds := 0; !g.refresh(scanChunk); rounds++ {
			if rounds > len(g.nodes)/scanChunk+16 {
				// Others dirty it as fast as it is sorted: scan instead.
				return ix.scanPick(ctx, req, sel, g, r, spent)
			}
			if err := ix.yield(ctx); err != nil {
				return nil, err
			}
			if ix.groups[g.key] != g || g.kept {
				return ix.choose(ctx, req, sel, r, spent) // dropped (or emptied) meanwhile
			}
		}
	}
	// A Packed spread collects its first spread (and, with shards, up to
	// shardReach times more) matches under the lock: that is its usual
	// cost, not a sign of rare matches.
	fast := fastScanTests
	if req.Scheduling == Packed && len(req.Priorities) == 0 && ix.spread > 1 {
		fast += 2 * ix.spread * (1 + shardReach)
	}
	fast = min(fast, ix.budget-*spent)
	ix.scan = budget{left: fast}
	e := ix.pick(req, sel, g, r)
	if ix.scan.left >= 0 {
		*spent += fast - ix.scan.left
		return e, nil
	}
	// The walk in order did not settle it within a small bound: the
	// matches are rare or absent. Scan instead, letting others in between.
	*spent += fast
	return ix.scanPick(ctx, req, sel, g, r, spent)
}

// pick is the walk in the request's order, under the lock, bounded by
// ix.scan: it returns nil with ix.scan.left < 0 when the bound ran out.
func (ix *Index) pick(req *Request, sel *Selector, g *group, r *rng) *entry {
	b := &ix.scan
	switch {
	case req.Scheduling == Distributed && len(req.Priorities) == 0:
		return pickRandom(g, sel, r, b)
	case req.Scheduling == Distributed:
		if e, ok := firstInPriorityOrder(ix, g, sel, req.Priorities, nil); ok {
			return e
		}
		return pickBest(g.all, sel, g.key.label, req.Priorities, nil, b)
	case len(req.Priorities) == 0 && ix.spread > 1:
		g.refresh(-1)
		return ix.spreadChoice(func(n int) []*entry { return ix.collectPacked(g, sel, n) }, r)
	case len(req.Priorities) == 0:
		g.refresh(-1)
		return ix.pickPacked(g, sel)
	default:
		g.refresh(-1)
		return ix.pickPackedPriorities(g, sel, req.Priorities)
	}
}

// spreadChoice picks among the first matches in Packed order (SetPackedSpread,
// SetReplicaShard); firstN(n) returns up to n of them, in order.
func (ix *Index) spreadChoice(firstN func(n int) []*entry, r *rng) *entry {
	found := firstN(ix.spread)
	if len(found) == 0 || ix.scan.left < 0 {
		return nil
	}
	if ix.shards > 1 {
		if e := ix.firstOfShard(found); e != nil {
			return e
		}
		if len(found) == ix.spread {
			// None of this replica's share among the best: the other
			// replicas are taking those right now, and its cache is
			// behind on them. One of its own a little further down
			// costs some packing; racing them costs a failed write
			// and a re-read on the API server, several times the
			// write itself.
			found = firstN(ix.spread * shardReach)
			if ix.scan.left < 0 {
				return nil
			}
			if e := ix.firstOfShard(found); e != nil {
				return e
			}
		}
		// Its share is used up within reach (a fleet running dry):
		// take one of the others' from the far end of what it
		// collected, which their owners, taking from the front,
		// reach last.
		found = found[max(0, len(found)-ix.spread):]
	}
	return found[r.intN(uint64(len(found)))]
}

// cursor walks one node's member list during the k-way merge.
// member is one server in a groupNode. The name is kept beside the pointer
// so that searching and merging compare names without chasing pointers.
type member struct {
	name string
	e    *entry
}

type cursor struct {
	gn  *groupNode
	pos int
}

func (c cursor) name() string { return c.gn.members[c.pos].name }

// pickPacked returns the first matching server in Packed order without
// priorities: tier by tier, and within a tier by name across its nodes.
func (ix *Index) pickPacked(g *group, sel *Selector) *entry {
	known := g.key.label
	b := &ix.scan
	h := ix.heap[:0]
	defer func() { ix.heap = h[:0] }()
	var found *entry
	var tierA, tierR int
	for gn := g.order.first(); gn != nil; gn = gn.next[0] {
		if !b.take(1) {
			return nil
		}
		if gn != g.order.first() && (gn.allocated != tierA || gn.ready != tierR) {
			if found, h = drain(h, sel, known, false, "", b); found != nil {
				return found
			}
		}
		tierA, tierR = gn.allocated, gn.ready
		// Every member below this node's first member is in the heap
		// already; test those before the new node can compete.
		if found, h = drain(h, sel, known, true, gn.head, b); found != nil {
			return found
		}
		h = heapPush(h, cursor{gn: gn})
	}
	found, h = drain(h, sel, known, false, "", b)
	return found
}

// collectPacked returns up to n matches in Packed order (the first is what
// pickPacked returns). The slice is scratch space, valid until the next call.
func (ix *Index) collectPacked(g *group, sel *Selector, n int) []*entry {
	known := g.key.label
	found := ix.found[:0]
	h := ix.heap[:0]
	defer func() { ix.heap = h[:0]; ix.found = found[:0] }()
	b := &ix.scan
	var tierA, tierR int
	for gn := g.order.first(); gn != nil && len(found) < n; gn = gn.next[0] {
		if !b.take(1) {
			return found
		}
		if gn != g.order.first() && (gn.allocated != tierA || gn.ready != tierR) {
			found, h = collect(h, sel, known, false, "", found, n, b)
		}
		tierA, tierR = gn.allocated, gn.ready
		found, h = collect(h, sel, known, true, gn.head, found, n, b)
		h = heapPush(h, cursor{gn: gn})
	}
	found, h = collect(h, sel, known, false, "", found, n, b)
	return found
}

// collect is drain that keeps going until it has n matches.
func collect(h []cursor, sel *Selector, known string, bounded bool, bound string, found []*entry, n int, b *budget) ([]*entry, []cursor) {
	for len(h) > 0 && len(found) < n {
		top := &h[0]
		if bounded && top.name() >= bound {
			break
		}
		if !b.take(1) {
			break
		}
		if e := top.gn.members[top.pos].e; sel.matchesWithin(e.gs, known) {
			found = append(found, e)
		}
		top.pos++
		if top.pos == len(top.gn.members) {
			h = heapPop(h)
		} else {
			heapDown(h, 0)
		}
	}
	return found, h
}

// drain tests heap members in name order, stopping at the first match or,
// when bounded, at the first name not below bound.
func drain(h []cursor, sel *Selector, known string, bounded bool, bound string, b *budget) (*entry, []cursor) {
	for len(h) > 0 {
		top := &h[0]
		if bounded && top.name() >= bound {
			return nil, h
		}
		if !b.take(1) {
			return nil, h
		}
		e := top.gn.members[top.pos].e
		if sel.matchesWithin(e.gs, known) {
			return e, h
		}
		top.pos++
		if top.pos == len(top.gn.members) {
			h = heapPop(h)
		} else {
			heapDown(h, 0)
		}
	}
	return nil, h
}

func heapPush(h []cursor, c cursor) []cursor {
	h = append(h, c)
	i := len(h) - 1
	for i > 0 {
		p := (i - 1) / 2
		if h[p].name() <= h[i].name() {
			break
		}
		h[p], h[i] = h[i], h[p]
		i = p
	}
	return h
}

func heapPop(h []cursor) []cursor {
	last := len(h) - 1
	h[0] = h[last]
	h[last] = cursor{}
	h = h[:last]
	if len(h) > 0 {
		heapDown(h, 0)
	}
	return h
}

func heapDown(h []cursor, i int) {
	for {
		l := 2*i + 1
		if l >= len(h) {
			return
		}
		m := l
		if r := l + 1; r < len(h) && h[r].name() < h[l].name() {
			m = r
		}
		if h[i].name() <= h[m].name() {
			return
		}
		h[i], h[m] = h[m], h[i]
		i = m
	}
}

// pickPackedPriorities returns, from the first tier holding any match, the
// match that the priorities and then the name put first. The first match in
// plain Packed order names that tier. A small tier is compared member by
// member; a large one (all nodes alike, as in a fresh fleet) is searched
// through the group's priority index, keeping only members of the tier.
func (ix *Index) pickPackedPriorities(g *group, sel *Selector, ps []Priority) *entry {
	first := ix.pickPacked(g, sel)
	if first == nil {
		return nil
	}
	tierA, tierR := first.node.allocated, first.node.ready
	known := g.key.label
	b := &ix.scan
	size := 0
	var best *entry
	// Only whether the tier is large matters, so the count stops there.
	// It walks nodes, not servers: not charged to the scan's budget.
	enough := max(prioIndexMinTier+1, (len(g.all)+7)/8)
	for gn := g.order.first(); gn != nil && size < enough; gn = gn.next[0] {
		if gn.allocated != tierA || gn.ready != tierR {
			if size > 0 {
				break
			}
			continue
		}
		size += len(gn.members)
	}
	// The index pays off when the tier is large and a fair share of the
	// group (so walking it in priority order skips few non-tier members).
	if size > prioIndexMinTier && size*8 >= len(g.all) {
		inTier := func(e *entry) bool { return e.node.allocated == tierA && e.node.ready == tierR }
		if e, ok := firstInPriorityOrder(ix, g, sel, ps, inTier); ok {
			return e
		}
	}
	for gn := g.order.first(); gn != nil; gn = gn.next[0] {
		if gn.allocated != tierA || gn.ready != tierR {
			if best != nil {
				break
			}
			continue
		}
		if !b.take(len(gn.members)) {
			return nil
		}
		for _, m := range gn.members {
			best = better(m.e, sel, known, ps, best)
		}
	}
	return best
}

// prioIndexMinTier is the tier size up to which comparing every member is
// cheaper than walking the priority index. A variable so tests can force
// either path.
var prioIndexMinTier = 64

// pickBest returns the match among es that the priorities, then the name,
// put first, starting from best (which may be nil).
func pickBest(es []*entry, sel *Selector, known string, ps []Priority, best *entry, b *budget) *entry {
	if !b.take(len(es)) {
		return nil
	}
	for _, e := range es {
		best = better(e, sel, known, ps, best)
	}
	return best
}

// better returns e if it matches and comes before best, else best.
func better(e *entry, sel *Selector, known string, ps []Priority, best *entry) *entry {
	if !sel.matchesWithin(e.gs, known) {
		return best
	}
	if best == nil {
		return e
	}
	c := comparePriorities(ps, e.gs, best.gs)
	if c < 0 || (c == 0 && e.gs.Name < best.gs.Name) {
		return e
	}
	return best
}

// randomProbes is how many uniform draws Distributed tries before counting
// the matches exactly.
const randomProbes = 16

// pickRandom returns a uniformly random match in g. Draws from the whole
// group that are accepted are uniform over the matches; when matches are too
// rare for that to succeed quickly, it counts them and draws directly.
func pickRandom(g *group, sel *Selector, r *rng, b *budget) *entry {
	known := g.key.label
	n := uint64(len(g.all))
	if !b.take(randomProbes) {
		return nil
	}
	for range randomProbes {
		if e := g.all[r.intN(n)]; sel.matchesWithin(e.gs, known) {
			return e
		}
	}
	// Counting takes two passes in the worst case.
	if !b.take(2 * len(g.all)) {
		return nil
	}
	matches := 0
	for _, e := range g.all {
		if sel.matchesWithin(e.gs, known) {
			matches++
		}
	}
	if matches == 0 {
		return nil
	}
	k := int(r.intN(uint64(matches)))
	for _, e := range g.all {
		if sel.matchesWithin(e.gs, known) {
			if k == 0 {
				return e
			}
			k--
		}
	}
	return nil
}

// Scans is how many selectors were served by a scan instead of the walk
// in order (see scanPick): rare for sane requests.
func (ix *Index) Scans() uint64 {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	return ix.scans
}
