package core

import (
	"cmp"
	"runtime"
	"slices"
	"sync/atomic"
)

// Building groups without stopping the index.
//
// A label key's groups, and a namespace's base group, are created the first
// time a request needs them: every server in the index is looked at, the
// ones that belong are put in name order (so that the groups, and with them
// every seeded random pick, are the same for the same history), and joined.
// On a large fleet that takes a noticeable time, far longer on a busy
// machine, and done under the index's lock it would stall every other
// allocation for as long. So a build runs on a goroutine of its own:
//
//   - It starts under the lock by making the structure live: the key joins
//     ix.labelKeys (or the base group is created), so from then on link()
//     files every server that is added, updated or released into it, as it
//     does for a finished one.
//   - It walks the index's servers in chunks of buildChunk, releasing the lock
//     between chunks, and notes the ones that belong with their names
//     (names never change for an entry, so sorting needs no lock).
//   - It sorts that list by name with the lock released.
//   - It joins them in chunks, skipping each server that link() has filed
//     meanwhile or that no longer belongs (removed, held, in another state
//     or namespace, without the key).
//
// Requests that need the structure wait for the build (or for their context
// to end) without the lock; every other request goes on. Without concurrent
// changes the result is exactly what the one-pass build under the lock
// gave. A build that loses its structure meanwhile (the key stopped being
// tracked, the namespace emptied) ends there, and its waiters look again.

// buildChunk is how many servers a build looks at or joins per hold of the
// lock: a hundred microseconds or so of other callers' waiting. A variable
// so tests can make builds take many steps.
var buildChunk = 256

// buildPaused, when set (by tests), is called between a build's chunks
// while the build does not hold the lock. Atomic: a build abandoned by one
// test may still be running when the next sets it.
var buildPaused atomic.Pointer[func()]

func paused() {
	if f := buildPaused.Load(); f != nil {
		(*f)()
	}
}

// build is one group structure being built; done closes when it is ready
// or abandoned.
type build struct {
	done chan struct{}
	// chunk is buildChunk as it was when the build started (read by the
	// requester, so that a test changing it races with no build).
	chunk int
}

// candidate is a server noted by a build's pass, with what the sort needs
// copied out of it.
type candidate struct {
	name, namespace string
	e               *entry
}

// startKeyBuild starts tracking label key k and building its groups. It is
// called with ix.mu held, k not tracked. It returns nil when k cannot be
// tracked (every slot taken, or k known to have too many values).
func (ix *Index) startKeyBuild(k string) *build {
	if len(ix.labelKeys) >= maxLabelKeys || ix.unindexed[k] {
		return nil
	}
	ix.labelKeys = append(ix.labelKeys, k)
	b := &build{done: make(chan struct{}), chunk: buildChunk}
	ix.keyBuilds[k] = b
	go ix.buildKey(b, k)
	return b
}

// startBaseBuild creates the base group of key (namespace, state), which
// link() fills from now on, and starts building the rest of it. It is
// called with ix.mu held.
func (ix *Index) startBaseBuild(key groupKey) *build {
	g := ix.group(key)
	b := &build{done: make(chan struct{}), chunk: buildChunk}
	ix.baseBuilds[key] = b
	go ix.buildBase(b, g)
	return b
}

// fileAllocated starts filing the Allocated servers that label groups
// only count (see Index.allocFiled): from now on link files them, and a
// build files the ones counted so far. Called with ix.mu held; it returns
// the build, for the request that needs it to wait for.
func (ix *Index) fileAllocated() *build {
	ix.allocFiled = true
	b := &build{done: make(chan struct{}), chunk: buildChunk}
	ix.allocBuild = b
	go ix.buildAllocated(b)
	return b
}

// endKeyBuild ends k's build, if one is under way: it is finished, or k's
// groups were dropped. Called with ix.mu held.
func (ix *Index) endKeyBuild(k string) {
	if b := ix.keyBuilds[k]; b != nil {
		delete(ix.keyBuilds, k)
		close(b.done)
	}
}

// endBaseBuild is endKeyBuild for a base group.
func (ix *Index) endBaseBuild(key groupKey) {
	if b := ix.baseBuilds[key]; b != nil {
		delete(ix.baseBuilds, key)
		close(b.done)
	}
}

// buildKey joins every server carrying k to k's groups (see above).
func (ix *Index) buildKey(b *build, k string) {
	current := func() bool { return ix.keyBuilds[k] == b }
	ix.mu.Lock()
	defer ix.mu.Unlock()
	found, ok := ix.collect(current, b.chunk, ix.keyCount[k], func(e *entry) bool {
		_, has := e.gs.Labels[k]
		return has && !e.held && allocatable(e.gs.State)
	})
	if !ok {
		return
	}
	for i, c := range found {
		if i > 0 && i%b.chunk == 0 && !ix.buildYield(current) {
			return
		}
		e := c.e
		if e.removed || e.held || !allocatable(e.gs.State) {
			continue
		}
		if i := e.inKey(k); i >= 0 {
			if e.in[i].pos >= 0 || !ix.allocFiled {
				continue // where it belongs already
			}
			// Counted, to be filed now (fileAllocated).
			e.in[i].g.counted--
			e.in = slices.Delete(e.in, i, i+1)
		}
		v, has := e.gs.Labels[k]
		if !has {
			continue
		}
		key := groupKey{e.gs.Namespace, e.gs.State, k, v}
		g := ix.groups[key]
		if g == nil || g.kept {
			if ix.keyGroups[k]-ix.keptEmpty[k] >= maxGroupsPerKey {
				// Too many values: filter instead (untrack ends
				// this build).
				ix.unindexed[k] = true
				ix.untrack(k)
				return
			}
			if g == nil {
				g = ix.group(key)
			}
		}
		ix.join(e, g)
	}
	ix.endKeyBuild(k)
}

// buildBase joins every unheld server of g's namespace and state to g.
func (ix *Index) buildBase(b *build, g *group) {
	key := g.key
	current := func() bool { return ix.baseBuilds[key] == b && ix.groups[key] == g }
	ix.mu.Lock()
	defer ix.mu.Unlock()
	found, ok := ix.collect(current, b.chunk, ix.nsCount[key.namespace], func(e *entry) bool {
		return !e.held && e.gs.Namespace == key.namespace && e.gs.State == key.state
	})
	if !ok {
		return
	}
	for i, c := range found {
		if i > 0 && i%b.chunk == 0 && !ix.buildYield(current) {
			return
		}
		e := c.e
		if e.removed || e.held || e.gs.State != key.state || e.inGroup(g) {
			continue
		}
		ix.join(e, g)
	}
	ix.endBaseBuild(key)
}

// buildAllocated files every server a label group counts (see
// fileAllocated), in name order as other builds join theirs. A server
// that has left its counted groups meanwhile has been filed by link, or
// belongs in none; one a key's build filed meanwhile is skipped.
func (ix *Index) buildAllocated(b *build) {
	current := func() bool { return ix.allocBuild == b }
	ix.mu.Lock()
	defer ix.mu.Unlock()
	expect := 0
	for _, g := range ix.groups {
		expect += g.counted
	}
	found, _ := ix.collect(current, b.chunk, expect, (*entry).counted)
	for i, c := range found {
		if i > 0 && i%b.chunk == 0 {
			ix.buildYield(current)
		}
		e := c.e
		for j := 0; j < len(e.in); {
			m := e.in[j]
			if m.pos >= 0 {
				j++
				continue
			}
			m.g.counted--
			e.in = slices.Delete(e.in, j, j+1)
			ix.join(e, m.g) // files it, at the end of e.in
		}
	}
	ix.allocBuild = nil
	close(b.done)
}

// counted reports whether a group counts e without filing it.
func (e *entry) counted() bool {
	for _, m := range e.in {
		if m.pos < 0 {
			return true
		}
	}
	return false
}

// collect is a build's pass: the servers for which keep is true, sorted by
// name and namespace. It is called with ix.mu held and returns with it held,
// releasing it between chunks and for the sort. ok is false when the build
// was abandoned meanwhile (current turned false). expect is how many servers
// keep will likely accept (the key's or namespace's count): room for them is
// made at once, where growing by appends would allocate several times as
// much.
//
// The pass ranges over ix.entries across releases of the lock. Go allows a
// map to change during a range over it (what is added may or may not be
// visited, what is deleted before it is reached is not); here every change
// is made by another holder of the lock, and link() files whatever is added
// meanwhile, so what the pass misses needs no joining.
func (ix *Index) collect(current func() bool, chunk, expect int, keep func(*entry) bool) (found []candidate, ok bool) {
	found = make([]candidate, 0, min(expect, len(ix.entries)))
	n := 0
	for _, e := range ix.entries {
		if n++; n%chunk == 0 && !ix.buildYield(current) {
			return nil, false
		}
		if keep(e) {
			found = append(found, candidate{name: e.gs.Name, namespace: e.gs.Namespace, e: e})
		}
	}
	ix.mu.Unlock()
	slices.SortFunc(found, func(a, b candidate) int {
		return cmp.Or(cmp.Compare(a.name, b.name), cmp.Compare(a.namespace, b.namespace))
	})
	paused()
	ix.mu.Lock()
	return found, current()
}

// buildYield lets waiting callers have the lock between a build's chunks and
// reports whether the build is still current. Called, and returns, with
// ix.mu held.
func (ix *Index) buildYield(current func() bool) bool {
	ix.mu.Unlock()
	paused()
	runtime.Gosched()
	ix.mu.Lock()
	return current()
}

// inKey returns the position in e.in of e's membership of one of label
// key k's groups, or -1 when it is in none.
func (e *entry) inKey(k string) int {
	for i, m := range e.in {
		if m.g.key.label == k {
			return i
		}
	}
	return -1
}

// inGroup reports whether e is in g.
func (e *entry) inGroup(g *group) bool {
	for _, m := range e.in {
		if m.g == g {
			return true
		}
	}
	return false
}
