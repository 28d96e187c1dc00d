package sim

// event is one scheduled happening. It is a small value so that the heap is
// one flat slice: no allocation per event, and comparisons touch only the
// slice's memory.
type event struct {
	at   int64  // virtual nanoseconds since the epoch
	seq  uint64 // insertion order: breaks ties so runs are reproducible
	kind uint8
	c    uint8 // cluster, when the event belongs to one
	r    uint16
	id   int32 // request, server slot, stream or fleet, by kind
}

// queue is a min-heap of events ordered by (at, seq).
type queue struct {
	h   []event
	seq uint64
}

func (q *queue) len() int { return len(q.h) }

func less(a, b *event) bool {
	if a.at != b.at {
		return a.at < b.at
	}
	return a.seq < b.seq
}

// The heap is 4-ary: half as deep as a binary one, and a node's children
// share a cache line or two, which matters with tens of thousands of pending
// events (one per running session).

// push schedules e; its seq is assigned here.
func (q *queue) push(e event) {
	q.seq++
	e.seq = q.seq
	q.h = append(q.h, e)
	h := q.h
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
}

// pop removes and returns the earliest event. The queue must not be empty.
func (q *queue) pop() event {
	h := q.h
	top := h[0]
	last := len(h) - 1
	x := h[last]
	h = h[:last]
	q.h = h
	if last == 0 {
		return top
	}
	i := 0
	for {
		c := 4*i + 1
		if c >= last {
			break
		}
		m := c
		for j := c + 1; j < c+4 && j < last; j++ {
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
	return top
}

// peek returns the earliest event's time; the queue must not be empty.
func (q *queue) peek() int64 { return q.h[0].at }
