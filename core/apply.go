package core

import "time"

// Apply returns the server as an allocation by req leaves it: state
// Allocated, the request's labels and annotations merged in,
// agones.dev/last-allocated set to now (AllocatedAt; the annotation reads
// RFC 3339, nanoseconds, UTC), and the
// counter and list actions carried out. gs is not modified; parts of gs the
// request does not change are shared with the result, which is safe because
// GameServers are immutable once handed to the core, and so may the
// request's metadata annotations be (a normalized Request must not be
// modified either).
//
// Counter actions set the capacity first (clamping the count to it), then
// increment or decrement, clamped to [0, capacity]. List actions set the
// capacity first (keeping the first values when the list is longer), then add
// values that are not already present until the list is full, then delete
// values, ignoring those that are absent. Actions naming a counter or list
// the server does not have are skipped; the allocation still happens.
func Apply(gs *GameServer, req *Request, now time.Time) *GameServer {
	out := *gs
	out.State = StateAllocated

	if len(req.Metadata.Labels) > 0 {
		out.Labels = make(map[string]string, len(gs.Labels)+len(req.Metadata.Labels))
		for k, v := range gs.Labels {
			out.Labels[k] = v
		}
		for k, v := range req.Metadata.Labels {
			out.Labels[k] = v
		}
	}

	// The stamp is AllocatedAt, not an entry in a map of its own: without
	// annotations from the request the server keeps sharing its map, and a
	// server without annotations shares the request's (the service's
	// owner annotation comes in one map per identity).
	switch {
	case len(req.Metadata.Annotations) == 0:
	case len(gs.Annotations) == 0:
		out.Annotations = req.Metadata.Annotations
	default:
		out.Annotations = make(map[string]string, len(gs.Annotations)+len(req.Metadata.Annotations))
		for k, v := range gs.Annotations {
			out.Annotations[k] = v
		}
		for k, v := range req.Metadata.Annotations {
			out.Annotations[k] = v
		}
		delete(out.Annotations, LastAllocatedAnnotation)
	}
	out.AllocatedAt = now.UnixNano()

	if len(req.Counters) > 0 && len(gs.Counters) > 0 {
		out.Counters = make(map[string]Counter, len(gs.Counters))
		for k, v := range gs.Counters {
			out.Counters[k] = v
		}
		for k, a := range req.Counters {
			c, ok := out.Counters[k]
			if !ok {
				continue
			}
			out.Counters[k] = applyCounter(c, a)
		}
	}

	if len(req.Lists) > 0 && len(gs.Lists) > 0 {
		out.Lists = make(map[string]List, len(gs.Lists))
		for k, v := range gs.Lists {
			out.Lists[k] = v
		}
		for k, a := range req.Lists {
			l, ok := out.Lists[k]
			if !ok {
				continue
			}
			out.Lists[k] = applyList(l, a)
		}
	}
	return &out
}

func applyCounter(c Counter, a CounterAction) Counter {
	if a.Capacity != nil {
		c.Capacity = max(*a.Capacity, 0)
		c.Count = min(c.Count, c.Capacity)
	}
	if a.Amount != nil {
		switch a.Action {
		case ActionIncrement:
			// Saturate instead of overflowing: amounts near MaxInt64 are legal.
			if *a.Amount > c.Capacity-c.Count {
				c.Count = c.Capacity
			} else {
				c.Count += *a.Amount
			}
		case ActionDecrement:
			if *a.Amount > c.Count {
				c.Count = 0
			} else {
				c.Count -= *a.Amount
			}
		}
	}
	c.Count = max(min(c.Count, c.Capacity), 0)
	return c
}

func applyList(l List, a ListAction) List {
	// Values is shared with the original server: build a new slice.
	capacity := l.Capacity
	if a.Capacity != nil {
		capacity = min(max(*a.Capacity, 0), MaxListCapacity)
	}
	keep := l.Values
	if int64(len(keep)) > capacity {
		keep = keep[:capacity]
	}
	vals := make([]string, len(keep), len(keep)+len(a.AddValues))
	copy(vals, keep)
	for _, v := range a.AddValues {
		if int64(len(vals)) >= capacity {
			break
		}
		if !contains(vals, v) {
			vals = append(vals, v)
		}
	}
	if len(a.DeleteValues) > 0 {
		kept := vals[:0]
		for _, v := range vals {
			if !contains(a.DeleteValues, v) {
				kept = append(kept, v)
			}
		}
		vals = kept
	}
	return List{Values: vals, Capacity: capacity}
}
