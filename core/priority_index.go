package core

import "sort"

// prioIndex orders a group's members by one priority key: members are
// bucketed by the available capacity of that counter or list, each bucket in
// name order, plus a bucket for members without the key. Walking buckets in
// the priority's order and each bucket by name visits members exactly in
// (priority, name) order, so a request with priorities stops at its first
// match instead of comparing the whole group.
type prioIndex struct {
	typ     PriorityType
	key     string
	vals    []int64 // distinct values that have a bucket, ascending
	buckets map[int64]*nameSet
	missing nameSet
	rnd     *rng
}

// maxPrioIndexes bounds the priority keys indexed per group; requests on
// further keys fall back to comparing candidates.
const maxPrioIndexes = 4

func (p *prioIndex) value(gs *GameServer) (int64, bool) {
	if p.typ == PriorityList {
		l, ok := gs.Lists[p.key]
		return l.Available(), ok
	}
	c, ok := gs.Counters[p.key]
	return c.Available(), ok
}

func (p *prioIndex) add(e *entry) {
	v, ok := p.value(e.gs)
	if !ok {
		p.missing.insert(e, p.rnd)
		return
	}
	b := p.buckets[v]
	if b == nil {
		b = &nameSet{}
		p.buckets[v] = b
		i := sort.Search(len(p.vals), func(i int) bool { return p.vals[i] >= v })
		p.vals = append(p.vals, 0)
		copy(p.vals[i+1:], p.vals[i:])
		p.vals[i] = v
	}
	b.insert(e, p.rnd)
}

func (p *prioIndex) remove(e *entry) {
	v, ok := p.value(e.gs)
	if !ok {
		p.missing.delete(e)
		return
	}
	b := p.buckets[v]
	if b == nil {
		return
	}
	b.delete(e)
	if b.n == 0 {
		delete(p.buckets, v)
		i := sort.Search(len(p.vals), func(i int) bool { return p.vals[i] >= v })
		if i < len(p.vals) && p.vals[i] == v {
			p.vals = append(p.vals[:i], p.vals[i+1:]...)
		}
	}
}

// walk calls visit for each bucket in the order of priority ps[0] (missing
// last) until visit returns a server.
func (p *prioIndex) walk(order Order, visit func(*nameSet) *entry) *entry {
	if order == Descending {
		for i := len(p.vals) - 1; i >= 0; i-- {
			if e := visit(p.buckets[p.vals[i]]); e != nil {
				return e
			}
		}
	} else {
		for _, v := range p.vals {
			if e := visit(p.buckets[v]); e != nil {
				return e
			}
		}
	}
	return visit(&p.missing)
}

// hasPriorityKey reports whether some server has p's counter or list.
func (ix *Index) hasPriorityKey(p *Priority) bool {
	if p.Type == PriorityList {
		return ix.listCount[p.Key] > 0
	}
	return ix.counterCount[p.Key] > 0
}

// prioIndexFor returns the group's index for priority p, building it with one
// pass over the group on first use; nil when the group has too many.
func (g *group) prioIndexFor(p *Priority, rnd *rng) *prioIndex {
	for _, x := range g.prios {
		if x.typ == p.Type && x.key == p.Key {
			return x
		}
	}
	if len(g.prios) >= maxPrioIndexes {
		return nil
	}
	x := &prioIndex{typ: p.Type, key: p.Key, buckets: map[int64]*nameSet{}, rnd: rnd}
	for _, e := range g.all {
		x.add(e)
	}
	g.prios = append(g.prios, x)
	return x
}

// firstInPriorityOrder returns the first member of g in (priorities, name)
// order that sel accepts and keep (if not nil) approves, using the index of
// the first priority. ok is false when the group cannot index that priority.
func firstInPriorityOrder(ix *Index, g *group, sel *Selector, ps []Priority, keep func(*entry) bool) (found *entry, ok bool) {
	// An index for a name no server has would order nothing, yet take one
	// of the group's few slots for good.
	if !ix.hasPriorityKey(&ps[0]) {
		return nil, false
	}
	p := g.prioIndexFor(&ps[0], &ix.levels)
	if p == nil {
		return nil, false
	}
	bud := &ix.scan
	known := g.key.label
	rest := ps[1:]
	return p.walk(ps[0].Order, func(b *nameSet) *entry {
		var best *entry
		for n := b.first(); n != nil; n = n.next[0] {
			if !bud.take(1) {
				return nil
			}
			if keep != nil && !keep(n.e) {
				continue
			}
			if len(rest) == 0 {
				if sel.matchesWithin(n.e.gs, known) {
					return n.e
				}
				continue
			}
			// Equal on the first priority: the others, then the name,
			// decide; the bucket is in name order so ties keep the first.
			best = better(n.e, sel, known, rest, best)
		}
		return best
	}), true
}

// nameSet is a skiplist of entries ordered by name.
type nameSet struct {
	head  nameNode
	level int
	n     int
}

type nameNode struct {
	name string
	e    *entry
	next []*nameNode
}

func (s *nameSet) first() *nameNode {
	if s.n == 0 {
		return nil
	}
	return s.head.next[0]
}

func (s *nameSet) insert(e *entry, rnd *rng) {
	if s.head.next == nil {
		s.head.next = make([]*nameNode, maxSkipLevel)
	}
	name := e.gs.Name
	var update [maxSkipLevel]*nameNode
	x := &s.head
	for i := s.level - 1; i >= 0; i-- {
		for x.next[i] != nil && x.next[i].name < name {
			x = x.next[i]
		}
		update[i] = x
	}
	lvl := 1
	for r := rnd.uint64(); lvl < maxSkipLevel && r&3 == 0; r >>= 2 {
		lvl++
	}
	for i := s.level; i < lvl; i++ {
		update[i] = &s.head
	}
	if lvl > s.level {
		s.level = lvl
	}
	n := &nameNode{name: name, e: e, next: make([]*nameNode, lvl)}
	for i := 0; i < lvl; i++ {
		n.next[i] = update[i].next[i]
		update[i].next[i] = n
	}
	s.n++
}

func (s *nameSet) delete(e *entry) {
	if s.n == 0 {
		return
	}
	name := e.gs.Name
	x := &s.head
	var target *nameNode
	for i := s.level - 1; i >= 0; i-- {
		for x.next[i] != nil && x.next[i].name < name {
			x = x.next[i]
		}
		if n := x.next[i]; n != nil && n.e == e {
			x.next[i] = n.next[i]
			target = n
		}
	}
	if target == nil {
		return
	}
	s.n--
	for s.level > 0 && s.head.next[s.level-1] == nil {
		s.level--
	}
}
