package forward

import (
	"container/list"
	"context"
	"strconv"
	"sync"
	"time"
)

// memPlacements is the Placements of one process, for an allocator whose
// replicas share nothing else either (the memory backend). Records are
// kept in the order of their last change: forgotten a window after it,
// and the oldest first when there are more than max. A forgotten record
// is a new key, as the service's own table of keys has it.
type memPlacements struct {
	window time.Duration
	max    int
	now    func() time.Time

	mu      sync.Mutex
	records map[string]*list.Element // of *memPlacement, oldest change first
	order   list.List
	seq     uint64
}

type memPlacement struct {
	key     string
	cluster string
	version uint64
	at      time.Time
}

// The memory placements' bounds when Options leave them out: the
// service's own key window and table size.
const (
	defaultPlacementWindow = 10 * time.Minute
	defaultMaxPlacements   = 100000
)

func newMemPlacements(window time.Duration, max int, now func() time.Time) *memPlacements {
	if window <= 0 {
		window = defaultPlacementWindow
	}
	if max <= 0 {
		max = defaultMaxPlacements
	}
	return &memPlacements{window: window, max: max, now: now, records: map[string]*list.Element{}}
}

func (m *memPlacements) Place(_ context.Context, key, cluster, version string) (string, string, bool, error) {
	now := m.now()
	m.mu.Lock()
	defer m.mu.Unlock()
	m.expire(now)
	e := m.records[key]
	cur, seen := "", ""
	if e != nil {
		r := e.Value.(*memPlacement)
		cur, seen = r.cluster, strconv.FormatUint(r.version, 10)
	}
	if seen != version {
		return cur, seen, false, nil
	}
	m.seq++
	if e == nil {
		e = m.order.PushBack(&memPlacement{key: key})
		m.records[key] = e
		for len(m.records) > m.max {
			m.forget(m.order.Front())
		}
	} else {
		m.order.MoveToBack(e)
	}
	r := e.Value.(*memPlacement)
	r.cluster, r.version, r.at = cluster, m.seq, now
	return cluster, strconv.FormatUint(m.seq, 10), true, nil
}

// expire forgets the records a window old, from the oldest, stopping at
// the first that is not.
func (m *memPlacements) expire(now time.Time) {
	for e := m.order.Front(); e != nil && now.Sub(e.Value.(*memPlacement).at) >= m.window; e = m.order.Front() {
		m.forget(e)
	}
}

func (m *memPlacements) forget(e *list.Element) {
	delete(m.records, e.Value.(*memPlacement).key)
	m.order.Remove(e)
}
