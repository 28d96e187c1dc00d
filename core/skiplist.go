package core

// nodeOrder is a skiplist of a group's nodes in Packed order. The links live
// in the groupNode itself, so inserting and deleting allocate nothing.
//
// A skiplist rather than a balanced tree because iteration in order is just
// following level-0 links, which the k-way merge in pickPacked needs.
type nodeOrder struct {
	head  groupNode // sentinel; only its links are used
	level int
	rnd   *rng
}

const maxSkipLevel = 12 // p = 1/4: plenty for 4^12 nodes

// packedBefore orders nodes for Packed: more Allocated servers first, then
// more Ready servers, then by the name of the node's first member (so that
// nodes with equal counts are visited in the order of their best candidate),
// then by a serial number to make the order total.
func packedBefore(a, b *groupNode) bool {
	if a.allocated != b.allocated {
		return a.allocated > b.allocated
	}
	if a.ready != b.ready {
		return a.ready > b.ready
	}
	if a.head != b.head {
		return a.head < b.head
	}
	return a.node.id < b.node.id
}

func (o *nodeOrder) first() *groupNode { return o.head.next[0] }

func (o *nodeOrder) randomLevel() int {
	lvl := 1
	for x := o.rnd.uint64(); lvl < maxSkipLevel && x&3 == 0; x >>= 2 {
		lvl++
	}
	return lvl
}

func (o *nodeOrder) insert(gn *groupNode) {
	var update [maxSkipLevel]*groupNode
	x := &o.head
	for i := o.level - 1; i >= 0; i-- {
		for x.next[i] != nil && packedBefore(x.next[i], gn) {
			x = x.next[i]
		}
		update[i] = x
	}
	lvl := o.randomLevel()
	for i := o.level; i < lvl; i++ {
		update[i] = &o.head
	}
	if lvl > o.level {
		o.level = lvl
	}
	for i := 0; i < lvl; i++ {
		gn.next[i] = update[i].next[i]
		update[i].next[i] = gn
	}
}

func (o *nodeOrder) delete(gn *groupNode) {
	x := &o.head
	for i := o.level - 1; i >= 0; i-- {
		for x.next[i] != nil && x.next[i] != gn && packedBefore(x.next[i], gn) {
			x = x.next[i]
		}
		if x.next[i] == gn {
			x.next[i] = gn.next[i]
			gn.next[i] = nil
		}
	}
	for o.level > 0 && o.head.next[o.level-1] == nil {
		o.level--
	}
}
