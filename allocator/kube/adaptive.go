package kube

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/quartermaster-dev/quartermaster/allocator"
	"github.com/quartermaster-dev/quartermaster/core"
)

// Adaptive Packed spread. Replicas that do not know of each other (no
// membership, or a moment when their views of it differ) all want the
// same best server, and all but one of them lose the write. Each replica
// therefore widens its own spread (core.Index.SetPackedSpread) when its
// writes conflict, so that its next choices land on servers the others are
// less likely to want, and narrows it back towards its base when the
// conflicts stop, because a wide spread costs packing.

// Defaults for the adaptive spread and the contention budget.
const (
	// DefaultMaxSpread bounds how wide conflicts can make the spread: 256
	// of the best matches still fill the fullest few nodes first, and with
	// a few dozen writes in flight across the replicas it makes a second
	// conflict in a row unlikely.
	DefaultMaxSpread = 256
	// DefaultNarrowAfter is how long a replica must go without a conflict
	// before its spread halves (towards its base).
	DefaultNarrowAfter = 2 * time.Second
	// DefaultContentionRounds is how many times an allocation that used up
	// MaxConflictRetries starts over (with the spread widened meanwhile)
	// before answering Contention: every lost race takes a server out of
	// the running, so a request keeps trying while Ready matches remain and
	// its deadline allows.
	DefaultContentionRounds = 4
	// replicaSpread is the base spread when replicas share the servers by
	// shard (membership or --replica-shard): enough of the best matches for
	// each replica's writes in flight to find servers of its own shard.
	replicaSpread = 64
	// widenEvery limits widening to once per this interval: a burst of
	// conflicts from one race (every caller that chose the same server)
	// is one piece of news, not many.
	widenEvery = 50 * time.Millisecond
)

// spreadControl is a replica's Packed spread: a base (configured, or from
// the replica count) widened by conflicts and narrowed by quiet.
type spreadControl struct {
	mu sync.Mutex
	// configured is Config.PackedSpread (0: not given), which wins over
	// the membership's base.
	configured int
	base, cur  int
	max        int
	// lastWiden and lastConflict drive widening and narrowing.
	lastWiden, lastConflict, lastNarrow time.Time
	narrowAfter                         time.Duration
	apply                               func(int)
}

// newSpreadControl starts at the configured spread (or 1, exact Packed).
func newSpreadControl(configured int, apply func(int)) *spreadControl {
	s := &spreadControl{configured: configured, max: DefaultMaxSpread, narrowAfter: DefaultNarrowAfter, apply: apply}
	s.base = max(configured, 1)
	s.cur = s.base
	s.max = max(s.max, s.base)
	apply(s.cur)
	return s
}

// setReplicas sets the base for a replica count: the configured spread if
// any, else exact Packed alone and replicaSpread with others. The current
// spread never drops below the new base at once; above it, it narrows as
// usual.
func (s *spreadControl) setReplicas(n int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.base = max(s.configured, 1)
	if s.configured == 0 && n > 1 {
		s.base = replicaSpread
	}
	s.max = max(DefaultMaxSpread, s.base)
	if s.cur < s.base || s.cur > s.max {
		s.cur = min(max(s.cur, s.base), s.max)
		s.apply(s.cur)
	}
}

// observe records one allocation's outcome: how many of its writes lost a
// race. Conflicts widen the spread (doubling, at most once per widenEvery);
// an allocation without any, once none has happened for narrowAfter,
// halves it towards the base (again at most once per narrowAfter, so a
// burst of quiet allocations does not snap it back at once).
func (s *spreadControl) observe(conflicts int, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if conflicts > 0 {
		s.lastConflict = now
		if s.cur < s.max && now.Sub(s.lastWiden) >= widenEvery {
			s.cur = min(max(2*s.cur, 4), s.max)
			s.lastWiden = now
			s.apply(s.cur)
		}
		return
	}
	if s.cur > s.base && now.Sub(s.lastConflict) >= s.narrowAfter && now.Sub(s.lastNarrow) >= s.narrowAfter {
		s.cur = max(s.cur/2, s.base)
		s.lastNarrow = now
		s.apply(s.cur)
	}
}

// current returns the spread in force.
func (s *spreadControl) current() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cur
}

// Allocate implements allocator.Backend. A request that used up its
// conflict retries starts over, up to DefaultContentionRounds times, while
// its context allows: each lost race has taken a server out of the
// running and widened the spread, so a conflict costs a retry rather than
// the request. It answers Contention only when those rounds are used up,
// and "nothing matches" as soon as no Ready match is left.
//
// A request with an idempotency key goes through its key's record first
// (keys.go), so that it is allocated once across replicas.
func (b *Backend) Allocate(ctx context.Context, req *core.Request, now time.Time, seed uint64) (*allocator.Allocation, error) {
	if key, ok := allocator.KeyOf(req); ok {
		return b.allocateKeyed(ctx, req, key, now, seed)
	}
	return b.allocate(ctx, req, now, seed)
}

// allocate is Allocate without regard to a key.
func (b *Backend) allocate(ctx context.Context, req *core.Request, now time.Time, seed uint64) (*allocator.Allocation, error) {
	total := 0
	for round := 0; ; round++ {
		// Another seed per round, still derived from the request's.
		a, err := b.allocateOnce(ctx, req, now, seed+uint64(round)*0xbf58476d1ce4e5b9)
		conflicts := 0
		if a != nil {
			// Retries counts the choices made again; a round that ends in
			// Contention lost one race more than it retried.
			conflicts = a.Retries
			if errors.Is(err, allocator.ErrContention) {
				conflicts++
			}
		}
		total += conflicts
		b.spread.observe(conflicts, time.Now())
		if err == nil {
			a.Retries = total
			b.metrics.allocated(total)
			return a, nil
		}
		if !errors.Is(err, allocator.ErrContention) || round+1 >= DefaultContentionRounds || ctx.Err() != nil {
			if errors.Is(err, allocator.ErrContention) {
				b.metrics.allocated(total)
				return &allocator.Allocation{Retries: total}, err
			}
			return nil, err
		}
	}
}

// setReplicas makes this replica shard of n (0 <= shard < n), as the
// membership sees it; n <= 1 turns shards off.
func (b *Backend) setReplicas(shard, n int) {
	b.ix.SetReplicaShard(shard, n)
	b.spread.setReplicas(n)
	b.metrics.setReplicas(shard, n)
}

// PackedSpread is the Packed spread in force (for metrics and tests).
func (b *Backend) PackedSpread() int { return b.spread.current() }
