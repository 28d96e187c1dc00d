package sim

// event is one scheduled happening. It is a small value so that the queue
// holds it in flat slices: no allocation per event, and comparisons touch
// only the slices' memory.
type event struct {
	at   int64  // virtual nanoseconds since the epoch
	seq  uint64 // insertion order: breaks ties so runs are reproducible
	kind uint8
	c    uint8 // cluster, when the event belongs to one
	r    uint16
	id   int32 // request, server slot, stream or fleet, by kind
}

// queue hands out events in (at, seq) order. Most pending events are far
// off (a session's end, minutes away), and most pushes and pops are near
// (a round trip, a write), so the queue keeps four tiers:
//
//   - near: a 4-ary min-heap of the events of the current time bucket
//     (bucket = at >> bucketShift), the only ones ever compared;
//   - fine: for each later bucket of the current block (block = bucket >>
//     fineBits), its events unsorted, each filed by an append;
//   - coarse: for each of the next coarseSize-1 blocks, its events
//     unsorted, moved into fine when their block becomes the current one;
//   - far: a 4-ary min-heap of the events beyond those blocks, moved into
//     coarse as their block comes within reach.
//
// The two rings keep the appends of a push in few places: a session's end,
// minutes ahead, goes to one of a few dozen coarse blocks, whose tails stay
// in the cache, where one ring of fine buckets that far ahead would take a
// cache miss for nearly every push.
//
// Invariant: every event in near is in the current bucket or earlier,
// every event in fine is in a later bucket of the current block, every
// event in coarse in a later block within reach, every event in far beyond.
// When near runs dry the next non-empty bucket is heaped into it, so the
// earliest event of near is the earliest of all, and ties are broken by seq
// exactly as one heap would.
type queue struct {
	near     []event
	fine     [][]event
	inFine   int
	coarse   [][]event
	inCoarse int
	far      []event
	cur      int64 // the current bucket
	seq      uint64
}

const (
	bucketShift = 26 // 2^26 ns: a bucket is about 67 ms of virtual time
	fineBits    = 10 // a block is 1024 buckets, about 69 s
	fineSize    = 1 << fineBits
	fineMask    = fineSize - 1
	coarseSize  = 1 << 8 // the coarse ring reaches about 4.9 hours ahead
	coarseMask  = coarseSize - 1
)

func (q *queue) len() int { return len(q.near) + q.inFine + q.inCoarse + len(q.far) }

func less(a, b *event) bool {
	if a.at != b.at {
		return a.at < b.at
	}
	return a.seq < b.seq
}

// push schedules e; its seq is assigned here.
func (q *queue) push(e event) {
	q.seq++
	e.seq = q.seq
	if e.at>>bucketShift <= q.cur {
		q.near = heapPush(q.near, e)
		return
	}
	q.file(e)
}

// file puts e, of a bucket after the current one, in its tier.
func (q *queue) file(e event) {
	b := e.at >> bucketShift
	blk, cur := b>>fineBits, q.cur>>fineBits
	switch {
	case blk == cur:
		if q.fine == nil {
			q.fine = make([][]event, fineSize)
		}
		q.fine[b&fineMask] = append(q.fine[b&fineMask], e)
		q.inFine++
	case blk < cur+coarseSize:
		if q.coarse == nil {
			q.coarse = make([][]event, coarseSize)
		}
		q.coarse[blk&coarseMask] = append(q.coarse[blk&coarseMask], e)
		q.inCoarse++
	default:
		q.far = heapPush(q.far, e)
	}
}

// pop removes and returns the earliest event. The queue must not be empty.
func (q *queue) pop() event {
	if len(q.near) == 0 {
		q.refill()
	}
	var top event
	top, q.near = heapPop(q.near)
	return top
}

// peek returns the earliest event's time; the queue must not be empty.
func (q *queue) peek() int64 {
	if len(q.near) == 0 {
		q.refill()
	}
	return q.near[0].at
}

// refill moves on to the next bucket that holds events and heaps them into
// near. The queue must not be empty.
func (q *queue) refill() {
	for len(q.near) == 0 {
		switch {
		case q.inFine > 0:
			// A later bucket of the current block holds events.
			q.cur++
		case q.inCoarse > 0:
			q.enter((q.cur>>fineBits + 1) << fineBits)
		default:
			q.enter(q.far[0].at >> bucketShift)
		}
		if q.fine == nil {
			continue
		}
		slot := &q.fine[q.cur&fineMask]
		if n := len(*slot); n > 0 {
			q.near = append(q.near, *slot...)
			q.inFine -= n
			clear(*slot)
			*slot = (*slot)[:0]
		}
	}
	for i := (len(q.near) - 2) / 4; i >= 0; i-- {
		siftDown(q.near, i, q.near[i])
	}
}

// enter makes bucket b, in a later block than the current bucket's, the
// current one; fine must be empty and b's block the first with events in
// coarse or far. The block's coarse events go to fine (or near, those of b
// itself), and far events whose block comes within reach move up.
func (q *queue) enter(b int64) {
	q.cur = b
	blk := b >> fineBits
	if q.coarse != nil {
		slot := &q.coarse[blk&coarseMask]
		q.inCoarse -= len(*slot)
		for _, e := range *slot {
			q.refile(e)
		}
		clear(*slot)
		*slot = (*slot)[:0]
	}
	for len(q.far) > 0 && q.far[0].at>>(bucketShift+fineBits) < blk+coarseSize {
		var e event
		e, q.far = heapPop(q.far)
		q.refile(e)
	}
}

// refile puts e, pushed before the current bucket moved on, in its tier
// now: near (unsorted; refill heaps it) when it is in the current bucket.
func (q *queue) refile(e event) {
	if e.at>>bucketShift <= q.cur {
		q.near = append(q.near, e)
		return
	}
	q.file(e)
}

// The heaps are 4-ary: half as deep as a binary one, and a node's children
// share a cache line or two.

func heapPush(h []event, e event) []event {
	h = append(h, e)
	i := len(h) - 1
	for i > 0 {
		p := (i - 1) / 4
		if !less(&e, &h[p]) {
			break
		}
		h[i] = h[p]
		i = p
	}
	h[i] = e
	return h
}

func heapPop(h []event) (event, []event) {
	top := h[0]
	last := len(h) - 1
	x := h[last]
	h = h[:last]
	if last > 0 {
		siftDown(h, 0, x)
	}
	return top, h
}

// siftDown places x at position i or below, moving smaller children up.
func siftDown(h []event, i int, x event) {
	n := len(h)
	for {
		c := 4*i + 1
		if c >= n {
			break
		}
		m := c
		for j := c + 1; j < c+4 && j < n; j++ {
			if less(&h[j], &h[m]) {
				m = j
			}
		}
		if !less(&h[m], &x) {
			break
		}
		h[i] = h[m]
		i = m
	}
	h[i] = x
}
