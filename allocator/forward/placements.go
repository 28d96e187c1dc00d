package forward

import (
	"context"
	"strconv"
	"sync"
	"time"
)

// Placements remember, per forwarded key (a derivedKey of the caller's
// key), the one cluster a keyed request was last sent to. Every send of a
// caller-keyed request to a cluster, local or remote, is recorded first,
// and the record moves to another cluster only when the one it names has
// answered that it holds nothing for the key. So at any moment at most one
// cluster may hold the key's allocation, and a retry of the request,
// through any replica of this allocator, asks that cluster first; when it
// cannot be reached, the retry is answered Unavailable instead of being
// served elsewhere (which would leave the first allocation held for
// nobody).
//
// A record has a version, and Place changes it only from the version its
// caller last saw: two tries of one key at once (a caller's retry while
// its first try still runs) cannot both move the record, and the one that
// loses learns where the other went.
type Placements interface {
	// Place records that key's request is being sent to cluster ("":
	// none may hold it), if the record is still at version ("" when the
	// caller has seen no record: it must not exist). Otherwise ok is
	// false and cur and curVersion are the record as it is now (cur ""
	// when it names no cluster). Each successful Place gives a new
	// version, even to the same cluster.
	Place(ctx context.Context, key, cluster, version string) (cur, curVersion string, ok bool, err error)
}

// memPlacements is the Placements of one process, for an allocator whose
// replicas share nothing else either (the memory backend). Records are
// forgotten a window after their last change; a forgotten record is a new
// key, as the service's own table of keys has it.
type memPlacements struct {
	window time.Duration
	max    int
	now    func() time.Time

	mu      sync.Mutex
	records map[string]memPlacement
	seq     uint64
	sweepAt time.Time
}

type memPlacement struct {
	cluster string
	version uint64
	at      time.Time
}

// The memory placements' bounds: the service's key window and table size.
const (
	defaultPlacementWindow = 10 * time.Minute
	defaultMaxPlacements   = 100000
)

func newMemPlacements(now func() time.Time) *memPlacements {
	return &memPlacements{window: defaultPlacementWindow, max: defaultMaxPlacements, now: now, records: map[string]memPlacement{}}
}

func (m *memPlacements) Place(_ context.Context, key, cluster, version string) (string, string, bool, error) {
	now := m.now()
	m.mu.Lock()
	defer m.mu.Unlock()
	m.sweep(now)
	r, found := m.records[key]
	if found && now.Sub(r.at) >= m.window {
		found = false
	}
	seen := ""
	if found {
		seen = strconv.FormatUint(r.version, 10)
	}
	if seen != version {
		return r.cluster, seen, false, nil
	}
	m.seq++
	m.records[key] = memPlacement{cluster: cluster, version: m.seq, at: now}
	return cluster, strconv.FormatUint(m.seq, 10), true, nil
}

// sweep forgets expired records, at most once a tenth of a window, and
// any records beyond max (arbitrary ones: a forgotten record is a new key).
func (m *memPlacements) sweep(now time.Time) {
	if len(m.records) < m.max && now.Before(m.sweepAt) {
		return
	}
	m.sweepAt = now.Add(m.window / 10)
	for k, r := range m.records {
		if now.Sub(r.at) >= m.window {
			delete(m.records, k)
		}
	}
	for k := range m.records {
		if len(m.records) < m.max {
			break
		}
		delete(m.records, k)
	}
}
