// Package memory is the allocator's embedded backend: game servers held in
// a core.Index in this process, with a fleet agent that plays the part of
// Agones' fleet controller over simulated nodes (keeping each fleet at its
// size, shutting a server down some time after it is allocated and starting
// a fresh one in its place).
//
// It needs no cluster, so `qm serve` runs anywhere, and the service's tests
// and benchmarks measure the service itself rather than an API server. The
// index is the source of truth, so an allocation is chosen and committed
// under one lock and can never conflict.
package memory

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/quartermaster-dev/quartermaster/allocator"
	"github.com/quartermaster-dev/quartermaster/core"
)

// Backend is the in-memory allocator.Backend.
type Backend struct {
	ix    *core.Index
	clock Clock

	// mu orders allocations (shared) against removals (exclusive), so a
	// Release or a session's end cannot remove a server that an allocation
	// has just handed to someone else between the check and the removal.
	mu sync.RWMutex

	// sessions are the fleets whose allocations end on their own; only
	// their allocations are reported to the agent. Read-only after New.
	sessions map[core.Key]time.Duration

	evMu   sync.Mutex
	events []event
	notify chan struct{}

	agent   *agent
	running atomic.Bool
}

type eventKind int

const (
	evAllocated eventKind = iota
	evRemoved
)

// event tells the agent about a change it did not make itself.
type event struct {
	kind  eventKind
	gs    *core.GameServer
	stamp string // agones.dev/last-allocated of an allocation
	end   time.Time
}

// Options configure New.
type Options struct {
	// Clock drives the fleet agent; RealClock when nil.
	Clock Clock
	// Seed makes generated server names repeatable.
	Seed uint64
}

var _ allocator.Backend = (*Backend)(nil)

// New returns a backend holding the fleets of cfg (nil for none), each
// filled to its size at once with Ready servers. Run starts the agent that
// keeps them so; without it the fleets only shrink.
func New(cfg *Config, opts Options) *Backend {
	if opts.Clock == nil {
		opts.Clock = RealClock{}
	}
	if cfg == nil {
		cfg = &Config{Nodes: 1}
	}
	b := &Backend{
		ix:       core.NewIndex(),
		clock:    opts.Clock,
		sessions: map[core.Key]time.Duration{},
		notify:   make(chan struct{}, 1),
	}
	for _, f := range cfg.Fleets {
		if f.SessionDuration.Duration > 0 {
			b.sessions[core.Key{Namespace: f.Namespace, Name: f.Name}] = f.SessionDuration.Duration
		}
	}
	b.ix.SetCountedAnnotation(allocator.OwnerAnnotation)
	b.agent = newAgent(b, cfg, opts.Seed)
	b.agent.fill(b.clock.Now(), true)
	return b
}

// Index exposes the underlying index, for tests and tools that want to look
// at or seed the servers directly.
func (b *Backend) Index() *core.Index { return b.ix }

// Add puts a server the agent does not manage into the backend (tests).
func (b *Backend) Add(gs *core.GameServer) { b.ix.Upsert(gs) }

// Allocate implements allocator.Backend: choose and commit in one step.
func (b *Backend) Allocate(ctx context.Context, req *core.Request, now time.Time, seed uint64) (*allocator.Allocation, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	b.mu.RLock()
	res, err := b.ix.AllocateAndCommitContext(ctx, req, now, seed)
	b.mu.RUnlock()
	if err != nil {
		return nil, err
	}
	gs := res.GameServer
	if len(b.sessions) > 0 {
		if d, ok := b.sessions[core.Key{Namespace: gs.Namespace, Name: gs.Labels[core.FleetLabel]}]; ok {
			b.post(event{kind: evAllocated, gs: gs, stamp: gs.LastAllocated(), end: now.Add(d)})
		}
	}
	return &allocator.Allocation{GameServer: gs}, nil
}

// Get implements allocator.Backend.
func (b *Backend) Get(key core.Key) (*core.GameServer, bool) { return b.ix.Get(key) }

// Allocated implements allocator.Backend.
func (b *Backend) Allocated() []*core.GameServer { return b.ix.ListState(core.StateAllocated) }

// AllocatedTo implements allocator.Backend.
func (b *Backend) AllocatedTo(owner string) []*core.GameServer { return b.ix.ListAllocated(owner) }

// CountAllocatedTo implements allocator.Backend.
func (b *Backend) CountAllocatedTo(owner string) int { return b.ix.CountAllocated(owner) }

// Release implements allocator.Backend: the server is shut down (removed)
// and the agent starts a replacement.
func (b *Backend) Release(ctx context.Context, key core.Key, ifAllocatedAt string) (*core.GameServer, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	b.mu.Lock()
	gs, ok := b.ix.Get(key)
	switch {
	case !ok:
		b.mu.Unlock()
		return nil, allocator.ErrNotFound
	case gs.State != core.StateAllocated,
		ifAllocatedAt != "" && gs.LastAllocated() != ifAllocatedAt:
		b.mu.Unlock()
		return nil, allocator.ErrNotAllocated
	}
	b.ix.Remove(key)
	b.mu.Unlock()
	b.post(event{kind: evRemoved, gs: gs})
	out := *gs
	out.State = core.StateShutdown
	return &out, nil
}

// Ready implements allocator.Backend: memory is always in sync.
func (b *Backend) Ready() bool { return true }

// removeIf removes key when it is still the allocation stamped stamp, the
// end of a session.
func (b *Backend) removeIf(key core.Key, stamp string) (*core.GameServer, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	gs, ok := b.ix.Get(key)
	if !ok || gs.State != core.StateAllocated || gs.LastAllocated() != stamp {
		return nil, false
	}
	b.ix.Remove(key)
	return gs, true
}

func (b *Backend) post(e event) {
	b.evMu.Lock()
	b.events = append(b.events, e)
	b.evMu.Unlock()
	if e.kind == evRemoved {
		select {
		case b.notify <- struct{}{}:
		default:
		}
	}
}

func (b *Backend) takeEvents(buf []event) []event {
	b.evMu.Lock()
	buf = append(buf[:0], b.events...)
	clear(b.events)
	b.events = b.events[:0]
	b.evMu.Unlock()
	return buf
}

// maxAgentWait bounds how long the agent sleeps, so allocations that end
// sessions are noticed within it even when nothing wakes it.
const maxAgentWait = 100 * time.Millisecond

// Run runs the fleet agent until ctx ends.
func (b *Backend) Run(ctx context.Context) {
	if !b.running.CompareAndSwap(false, true) {
		return
	}
	defer b.running.Store(false)
	for {
		next := b.Step()
		wait := maxAgentWait
		if !next.IsZero() {
			if d := next.Sub(b.clock.Now()); d < wait {
				wait = max(d, 0)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-b.notify:
		case <-b.clock.After(wait):
		}
	}
}

// Step makes the fleets what they should be at the clock's current time:
// sessions that have ended are shut down, servers done starting become
// Ready, and every fleet is filled back to its size. It returns when the
// next scheduled change is due (zero when none is). Tests call it after
// advancing a FakeClock.
func (b *Backend) Step() time.Time {
	return b.agent.step(b.clock.Now())
}

// Instant implements allocator.InstantBackend: Allocate takes one lock and
// never waits on anything else.
func (b *Backend) Instant() bool { return true }
