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
// (a round trip, a write), so the queue keeps three tiers:
//
//   - near: a 4-ary min-heap of the events of the current time bucket
//     (bucket = at >> bucketShift), the only ones ever compared;
//   - ring: for each of the next ringSize-1 buckets, its events unsorted,
//     each filed by an append;
//   - far: a 4-ary min-heap of the events beyond the ring, moved into the
//     ring as the current bucket comes within ringSize of theirs.
//
// Invariant: every event in near is in the current bucket or earlier, every
// event in ring or far is in a later one. When near runs dry the next
// non-empty bucket is heaped into it, so the earliest event of near is the
// earliest of all, and ties are broken by seq exactly as one heap would.
type queue struct {
	near   []event
	ring   [][]event
	inRing int
	far    []event
	cur    int64 // the current bucket
	seq    uint64
}

const (
	bucketShift = 26 // 2^26 ns: a bucket is about 67 ms of virtual time
	ringSize    = 1 << 16
	ringMask    = ringSize - 1
)

func (q *queue) len() int { return len(q.near) + q.inRing + len(q.far) }

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
	b := e.at >> bucketShift
	switch {
	case b <= q.cur:
		q.near = heapPush(q.near, e)
	case b < q.cur+ringSize:
		if q.ring == nil {
			q.ring = make([][]event, ringSize)
		}
		q.ring[b&ringMask] = append(q.ring[b&ringMask], e)
		q.inRing++
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
		if q.inRing == 0 {
			// Nothing within the ring: jump to the far heap's first bucket.
			q.cur = q.far[0].at >> bucketShift
		} else {
			q.cur++
		}
		for len(q.far) > 0 && q.far[0].at>>bucketShift < q.cur+ringSize {
			var e event
			e, q.far = heapPop(q.far)
			if q.ring == nil {
				q.ring = make([][]event, ringSize)
			}
			// The current bucket's slot is taken into near just below.
			b := e.at >> bucketShift
			q.ring[b&ringMask] = append(q.ring[b&ringMask], e)
			q.inRing++
		}
		if q.ring == nil {
			continue
		}
		slot := &q.ring[q.cur&ringMask]
		if n := len(*slot); n > 0 {
			q.near = append(q.near, *slot...)
			q.inRing -= n
			clear(*slot)
			*slot = (*slot)[:0]
		}
	}
	for i := (len(q.near) - 2) / 4; i >= 0; i-- {
		siftDown(q.near, i, q.near[i])
	}
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
