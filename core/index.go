package core

import (
	"errors"
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
// two concurrent allocations never receive the same server. A backend that
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
// groups are kept from the start; any other group is created on first use by
// one scan, then kept up to date incrementally, so a server is only in the
// groups that requests actually use. A selector is served from its smallest
// group. Within
// a group each node has a name-sorted member list, and the nodes sit in a
// skiplist in Packed order: most Allocated servers first, then most Ready,
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
	// labelKeys are the label keys that have label groups; a server joining
	// a state joins the groups of its values for these keys.
	labelKeys []string
	nodeSeq   uint64
	holdSeq   uint64
	levels    rng // skiplist levels: deterministic, independent of requests

	// spread is how many of the first Packed matches a choice is drawn
	// from (1: the first, exact Packed); shard of shards is this replica's
	// preferred share of them (shards <= 1: no preference).
	spread, shard, shards int

	// counted is the annotation by whose values Allocated servers are
	// filed ("": none), for CountAllocated and ListAllocated.
	counted string
	owned   map[string]map[*entry]struct{}

	// scratch space reused across allocations (guarded by mu)
	heap  []cursor
	found []*entry
}

// maxLabelKeys bounds how many label keys get groups of their own; selectors
// on further keys are served from the namespace group with a filter.
const maxLabelKeys = 8

// maxGroups bounds the number of label groups; beyond it, empty ones are
// dropped so that requests for labels nobody has cannot grow the index.
const maxGroups = 4096

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
	holdSeq uint64
	in      []membership
}

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
	// gns are this node's groupNodes in ordered groups: the ones a change
	// of the node's counts must mark for re-sorting.
	gns []*groupNode
}

type group struct {
	key   groupKey
	all   []*entry
	nodes map[*nodeInfo]*groupNode
	// ordered says the group keeps its nodes in Packed order. It starts
	// false and turns true on the first Packed query; until then node
	// count changes do not touch the group at all (a group served only
	// Distributed requests, or none, needs no order).
	ordered bool
	order   nodeOrder
	dirty   []*groupNode
	prios   []*prioIndex // per priority key, built when a request first uses it
}

// groupNode is one node's members within one group.
type groupNode struct {
	g       *group
	node    *nodeInfo
	members []member // sorted by name
	dirty   bool
	inOrder bool
	nodePos int // position in node.gns
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
		// Fleet is what nearly every request selects on: its Ready groups
		// are kept from the start (see link) so that no request pays for
		// building one.
		labelKeys: []string{FleetLabel},
		levels:    newRNG(0x5eed),
		spread:    1,
	}
}

// SetCountedAnnotation makes the index file Allocated servers by their
// value of annotation key (the allocator's owner annotation: what each
// identity holds), for CountAllocated and ListAllocated.
func (ix *Index) SetCountedAnnotation(key string) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	ix.counted, ix.owned = key, map[string]map[*entry]struct{}{}
	for _, e := range ix.entries {
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
	for e := range ix.owned[value] {
		out = append(out, e.gs)
	}
	ix.mu.Unlock()
	sortByKey(out)
	return out
}

// tally files e (whose server is, or was, gs) under its counted value.
func (ix *Index) tally(e *entry, gs *GameServer, add bool) {
	if ix.counted == "" || gs.State != StateAllocated {
		return
	}
	v, ok := gs.Annotations[ix.counted]
	if !ok {
		return
	}
	set := ix.owned[v]
	if add {
		if set == nil {
			set = map[*entry]struct{}{}
			ix.owned[v] = set
		}
		set[e] = struct{}{}
		return
	}
	delete(set, e)
	if len(set) == 0 {
		delete(ix.owned, v)
	}
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

// Remove deletes the server stored under k and reports whether it was there.
func (ix *Index) Remove(k Key) bool {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	e, ok := ix.entries[k]
	if !ok {
		return false
	}
	ix.unlink(e)
	ix.count(e.node, e.gs.State, -1)
	ix.tally(e, e.gs, false)
	ix.releaseNode(e.node)
	delete(ix.entries, k)
	e.removed = true
	return true
}

// Allocate chooses a server for req and holds it (see the concurrency
// contract). req must have come from Normalize. now stamps
// agones.dev/last-allocated; seed drives Distributed's random choice, so the
// same index, request and seed give the same answer. It returns ErrNoMatch
// when no selector matches any server that is not held.
func (ix *Index) Allocate(req *Request, now time.Time, seed uint64) (*Result, error) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	return ix.allocate(req, now, seed)
}

// AllocateAndCommit allocates and commits in one step: the index is the
// source of truth (the memory backend, the simulator).
func (ix *Index) AllocateAndCommit(req *Request, now time.Time, seed uint64) (*Result, error) {
	ix.mu.Lock()
	defer ix.mu.Unlock()
	res, err := ix.allocate(req, now, seed)
	if err != nil {
		return nil, err
	}
	ix.commit(res, res.GameServer)
	return res, nil
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
	ix.link(e)
}

func (ix *Index) commit(res *Result, committed *GameServer) {
	e := res.entry
	if e == nil || e.removed || !e.held || e.holdSeq != res.hold {
		return
	}
	e.held = false
	if committed.Namespace != e.gs.Namespace || committed.Name != e.gs.Name {
		ix.upsert(committed) // not the same server: treat as any update
		return
	}
	ix.update(e, committed)
}

func (ix *Index) allocate(req *Request, now time.Time, seed uint64) (*Result, error) {
	r := newRNG(seed)
	for i := range req.Selectors {
		sel := &req.Selectors[i]
		e := ix.pick(req, sel, &r)
		if e == nil {
			continue
		}
		ix.unlink(e)
		ix.holdSeq++
		e.held = true
		e.holdSeq = ix.holdSeq
		return &Result{
			GameServer: Apply(e.gs, req, now),
			Previous:   e.gs,
			Selector:   i,
			hold:       e.holdSeq,
			entry:      e,
		}, nil
	}
	return nil, ErrNoMatch
}

func (ix *Index) upsert(gs *GameServer) {
	k := gs.Key()
	e := ix.entries[k]
	if e == nil {
		e = &entry{hash: nameHash(gs.Name)}
		ix.entries[k] = e
		ix.place(e, gs)
		return
	}
	ix.update(e, gs)
}

// update replaces the server of an existing entry.
func (ix *Index) update(e *entry, gs *GameServer) {
	ix.unlink(e)
	ix.count(e.node, e.gs.State, -1)
	ix.tally(e, e.gs, false)
	if e.node.name != gs.NodeName {
		ix.releaseNode(e.node)
		e.node = nil
	}
	ix.place(e, gs)
}

// place stores gs in e and files it by node, state and groups.
func (ix *Index) place(e *entry, gs *GameServer) {
	e.gs = gs
	if e.node == nil {
		e.node = ix.nodeFor(gs.NodeName)
	}
	ix.count(e.node, gs.State, +1)
	ix.tally(e, gs, true)
	if !e.held {
		ix.link(e)
	}
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
	if n.servers == 0 && ix.nodes[n.name] == n {
		delete(ix.nodes, n.name)
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
	for _, gn := range n.gns {
		gn.markDirty()
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
// call for.
func (ix *Index) link(e *entry) {
	gs := e.gs
	if !allocatable(gs.State) {
		return
	}
	if g := ix.groups[groupKey{namespace: gs.Namespace, state: gs.State}]; g != nil {
		ix.join(e, g)
	}
	for _, k := range ix.labelKeys {
		v, ok := gs.Labels[k]
		if !ok {
			continue
		}
		key := groupKey{gs.Namespace, gs.State, k, v}
		g := ix.groups[key]
		if g == nil && k == FleetLabel && gs.State == StateReady {
			// Every Ready server of this fleet passes through here, so
			// a group created now (empty) is complete.
			g = ix.group(key)
		}
		if g != nil {
			ix.join(e, g)
		}
	}
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
		g = &group{key: k, nodes: map[*nodeInfo]*groupNode{}}
		g.order.rnd = &ix.levels
		ix.groups[k] = g
	}
	return g
}

func (ix *Index) join(e *entry, g *group) {
	gn := g.nodes[e.node]
	if gn == nil {
		gn = &groupNode{g: g, node: e.node}
		g.nodes[e.node] = gn
		if g.ordered {
			gn.nodePos = len(e.node.gns)
			e.node.gns = append(e.node.gns, gn)
		}
	}
	name := e.gs.Name
	i := sort.Search(len(gn.members), func(i int) bool { return gn.members[i].name >= name })
	gn.members = append(gn.members, member{})
	copy(gn.members[i+1:], gn.members[i:])
	gn.members[i] = member{name: name, e: e}
	if g.ordered {
		gn.markDirty()
	}
	e.in = append(e.in, membership{g: g, gn: gn, pos: len(g.all)})
	g.all = append(g.all, e)
	for _, p := range g.prios {
		p.add(e)
	}
}

func (ix *Index) leave(e *entry, m membership) {
	gn, g := m.gn, m.g
	for _, p := range g.prios {
		p.remove(e)
	}
	if i := gn.find(e); i >= 0 {
		copy(gn.members[i:], gn.members[i+1:])
		gn.members[len(gn.members)-1] = member{}
		gn.members = gn.members[:len(gn.members)-1]
	}
	if g.ordered {
		gn.markDirty()
	} else if len(gn.members) == 0 {
		delete(g.nodes, gn.node)
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

// refresh re-sorts the group's dirty nodes and drops nodes left empty; the
// first call builds the order.
func (g *group) refresh() {
	if !g.ordered {
		g.buildOrder()
		return
	}
	for _, gn := range g.dirty {
		gn.dirty = false
		if len(gn.members) == 0 {
			if gn.inOrder {
				g.order.delete(gn)
				gn.inOrder = false
			}
			g.dropNode(gn)
			continue
		}
		head := gn.members[0].name
		n := gn.node
		if gn.inOrder {
			if gn.allocated == n.allocated && gn.ready == n.ready && gn.head == head {
				continue
			}
			g.order.delete(gn)
		}
		gn.allocated, gn.ready, gn.head = n.allocated, n.ready, head
		g.order.insert(gn)
		gn.inOrder = true
	}
	clear(g.dirty)
	g.dirty = g.dirty[:0]
}

// buildOrder puts every node of the group into Packed order and starts
// tracking their count changes.
func (g *group) buildOrder() {
	g.ordered = true
	for n, gn := range g.nodes {
		if len(gn.members) == 0 {
			delete(g.nodes, n)
			continue
		}
		gn.nodePos = len(n.gns)
		n.gns = append(n.gns, gn)
		gn.allocated, gn.ready, gn.head = n.allocated, n.ready, gn.members[0].name
		g.order.insert(gn)
		gn.inOrder = true
	}
	g.dirty = g.dirty[:0]
}

func (g *group) dropNode(gn *groupNode) {
	delete(g.nodes, gn.node)
	gns := gn.node.gns
	last := len(gns) - 1
	gns[gn.nodePos] = gns[last]
	gns[gn.nodePos].nodePos = gn.nodePos
	gns[last] = nil
	gn.node.gns = gns[:last]
}

// driverGroup returns the smallest group that holds every candidate for sel,
// creating label groups on first use.
func (ix *Index) driverGroup(ns string, sel *Selector) *group {
	st := sel.State
	if st == "" {
		st = StateReady
	}
	base := groupKey{namespace: ns, state: st}
	var best *group
	for _, p := range sel.labelPairs() {
		k, v := p.key, p.value
		g := ix.groups[groupKey{ns, st, k, v}]
		if g == nil {
			if g = ix.newLabelGroup(base, k, v); g == nil {
				continue
			}
		}
		// Smallest group first; ties by label key so that the choice (and
		// with it a seeded random pick) does not depend on map order.
		if best == nil || len(g.all) < len(best.all) ||
			(len(g.all) == len(best.all) && k < best.key.label) {
			best = g
		}
	}
	if best == nil {
		best = ix.groups[base]
		if best == nil {
			best = ix.newGroup(base, func(*GameServer) bool { return true })
		}
	}
	return best
}

// newLabelGroup builds the group for label k=v within base (a namespace
// group) by scanning base once. It returns nil when k cannot have a group of
// its own.
func (ix *Index) newLabelGroup(base groupKey, k, v string) *group {
	known := false
	for _, x := range ix.labelKeys {
		if x == k {
			known = true
			break
		}
	}
	if !known {
		if len(ix.labelKeys) >= maxLabelKeys {
			return nil
		}
		ix.labelKeys = append(ix.labelKeys, k)
	}
	if len(ix.groups) >= maxGroups {
		ix.dropEmptyLabelGroups()
		if len(ix.groups) >= maxGroups {
			return nil
		}
	}
	return ix.newGroup(groupKey{base.namespace, base.state, k, v}, func(gs *GameServer) bool {
		got, ok := gs.Labels[k]
		return ok && got == v
	})
}

// newGroup creates the group for key and fills it with one scan: of the
// namespace group when it exists, else of every server.
func (ix *Index) newGroup(key groupKey, in func(*GameServer) bool) *group {
	g := ix.group(key)
	if src := ix.groups[groupKey{namespace: key.namespace, state: key.state}]; src != nil && src != g {
		for _, e := range src.all {
			if in(e.gs) {
				ix.join(e, g)
			}
		}
		return g
	}
	var found []*entry
	for _, e := range ix.entries {
		if !e.held && e.gs.Namespace == key.namespace && e.gs.State == key.state && in(e.gs) {
			found = append(found, e)
		}
	}
	// Map order is random; join in name order so that the group, and with
	// it every seeded random pick, is the same for the same history.
	sort.Slice(found, func(i, j int) bool { return found[i].gs.Name < found[j].gs.Name })
	for _, e := range found {
		ix.join(e, g)
	}
	return g
}

func (ix *Index) dropEmptyLabelGroups() {
	for k, g := range ix.groups {
		if k.label != "" && len(g.all) == 0 {
			g.refresh() // unhooks its empty nodes from node.gns
			delete(ix.groups, k)
		}
	}
}

func (ix *Index) pick(req *Request, sel *Selector, r *rng) *entry {
	g := ix.driverGroup(req.Namespace, sel)
	if g == nil || len(g.all) == 0 {
		return nil
	}
	switch {
	case req.Scheduling == Distributed && len(req.Priorities) == 0:
		return pickRandom(g, sel, r)
	case req.Scheduling == Distributed:
		if e, ok := firstInPriorityOrder(g, sel, req.Priorities, nil, &ix.levels); ok {
			return e
		}
		return pickBest(g.all, sel, g.key.label, req.Priorities, nil)
	case len(req.Priorities) == 0 && ix.spread > 1:
		g.refresh()
		found := ix.collectPacked(g, sel, ix.spread)
		if len(found) == 0 {
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
				found = ix.collectPacked(g, sel, ix.spread*shardReach)
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
	case len(req.Priorities) == 0:
		g.refresh()
		return ix.pickPacked(g, sel)
	default:
		g.refresh()
		return ix.pickPackedPriorities(g, sel, req.Priorities)
	}
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
	h := ix.heap[:0]
	defer func() { ix.heap = h[:0] }()
	var found *entry
	var tierA, tierR int
	for gn := g.order.first(); gn != nil; gn = gn.next[0] {
		if gn != g.order.first() && (gn.allocated != tierA || gn.ready != tierR) {
			if found, h = drain(h, sel, known, false, ""); found != nil {
				return found
			}
		}
		tierA, tierR = gn.allocated, gn.ready
		// Every member below this node's first member is in the heap
		// already; test those before the new node can compete.
		if found, h = drain(h, sel, known, true, gn.head); found != nil {
			return found
		}
		h = heapPush(h, cursor{gn: gn})
	}
	found, h = drain(h, sel, known, false, "")
	return found
}

// collectPacked returns up to n matches in Packed order (the first is what
// pickPacked returns). The slice is scratch space, valid until the next call.
func (ix *Index) collectPacked(g *group, sel *Selector, n int) []*entry {
	known := g.key.label
	found := ix.found[:0]
	h := ix.heap[:0]
	defer func() { ix.heap = h[:0]; ix.found = found[:0] }()
	var tierA, tierR int
	for gn := g.order.first(); gn != nil && len(found) < n; gn = gn.next[0] {
		if gn != g.order.first() && (gn.allocated != tierA || gn.ready != tierR) {
			found, h = collect(h, sel, known, false, "", found, n)
		}
		tierA, tierR = gn.allocated, gn.ready
		found, h = collect(h, sel, known, true, gn.head, found, n)
		h = heapPush(h, cursor{gn: gn})
	}
	found, h = collect(h, sel, known, false, "", found, n)
	return found
}

// collect is drain that keeps going until it has n matches.
func collect(h []cursor, sel *Selector, known string, bounded bool, bound string, found []*entry, n int) ([]*entry, []cursor) {
	for len(h) > 0 && len(found) < n {
		top := &h[0]
		if bounded && top.name() >= bound {
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
func drain(h []cursor, sel *Selector, known string, bounded bool, bound string) (*entry, []cursor) {
	for len(h) > 0 {
		top := &h[0]
		if bounded && top.name() >= bound {
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
	size := 0
	var best *entry
	for gn := g.order.first(); gn != nil; gn = gn.next[0] {
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
		if e, ok := firstInPriorityOrder(g, sel, ps, inTier, &ix.levels); ok {
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
func pickBest(es []*entry, sel *Selector, known string, ps []Priority, best *entry) *entry {
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
func pickRandom(g *group, sel *Selector, r *rng) *entry {
	known := g.key.label
	n := uint64(len(g.all))
	for range randomProbes {
		if e := g.all[r.intN(n)]; sel.matchesWithin(e.gs, known) {
			return e
		}
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
