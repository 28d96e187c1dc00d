package allocator

import (
	"context"
	"errors"
	"time"

	"github.com/quartermaster-dev/quartermaster/core"
)

// Backend is where game servers live: it feeds the core's decisions with
// candidates and makes them durable. The service owns the API, identity,
// limits and metrics; a backend owns state.
//
// Two implementations fit: the embedded memory backend, whose index is the
// source of truth (it allocates and commits in one step), and a Kubernetes
// backend, whose index is fed by an informer and whose commits are API-server
// Updates guarded by resourceVersion. The latter can use CommitLoop for its
// Allocate, so the retry-on-conflict logic exists once.
type Backend interface {
	// Allocate chooses and commits a server for req, which has been through
	// core.Normalize. now stamps the allocation, seed drives random choices.
	// It returns core.ErrNoMatch when nothing matches, ErrContention when
	// commits kept losing races, or ctx's error when ctx ends first.
	//
	// A request with an idempotency key (KeyOf, scoped by its
	// OwnerAnnotation) is allocated at most once per key while the key is
	// remembered: a backend shared by several processes (Kubernetes) must
	// hold that across processes; the Service holds it within one. A key
	// already allocated gives that allocation back with Replayed set, a
	// key first used with another request a *KeyConflictError, a key whose
	// allocation was released ErrKeyReleased.
	Allocate(ctx context.Context, req *core.Request, now time.Time, seed uint64) (*Allocation, error)
	// Get returns the current state of one server.
	Get(key core.Key) (*core.GameServer, bool)
	// Allocated returns every server in state Allocated, in any order. It is
	// for List and bookkeeping, not for the request path.
	Allocated() []*core.GameServer
	// Release ends an allocation: the server leaves Allocated (it is shut
	// down and replaced, as Agones does when a session ends). It returns
	// ErrNotFound when the server does not exist and ErrNotAllocated when
	// it is not Allocated. ifAllocatedAt, when not empty, must equal the
	// server's last-allocated annotation, so that a Release racing with a
	// re-allocation to someone else does not end the newer allocation.
	Release(ctx context.Context, key core.Key, ifAllocatedAt string) (*core.GameServer, error)
	// AllocatedTo returns the servers in state Allocated that carry owner
	// in their OwnerAnnotation, in every namespace: what an identity holds,
	// as far as this backend sees (with several replicas, their writes
	// arrive through its informer). It costs what the owner holds, not
	// what the backend holds: admission and List call it per request.
	AllocatedTo(owner string) []*core.GameServer
	// CountAllocatedTo is len(AllocatedTo(owner)) without building the
	// list: admission asks it on every request of a limited identity.
	CountAllocatedTo(owner string) int
	// Ready reports whether the backend can serve (its cache has synced).
	Ready() bool
}

// StoreReader is a Backend whose Get answers from a cache that may lag
// its store (the Kubernetes backend's informer, behind another replica's
// writes). ReadThrough reads one server from the store itself; it returns
// ErrNotFound when the server does not exist, ErrStoreUnavailable when the
// store cannot be reached.
type StoreReader interface {
	ReadThrough(ctx context.Context, key core.Key) (*core.GameServer, error)
}

// KeyReader is a Backend that records idempotency keys in its store, so
// that a replica can find the allocation another replica made with a key
// (a Release by key sent to a replica that neither made it nor has seen
// it). ReadKeyed returns the server Allocated to identity with key as the
// store has it, or nil when the store holds none.
type KeyReader interface {
	ReadKeyed(ctx context.Context, identity, key string) (*core.GameServer, error)
}

// Allocation is a committed allocation.
type Allocation struct {
	GameServer *core.GameServer
	// Retries is how many times a commit lost a race and the core chose
	// again (always 0 for the memory backend).
	Retries int
	// Replayed says the request carried an idempotency key whose
	// allocation already existed (made by another call, perhaps on
	// another replica): GameServer is that allocation as it stands, and
	// nothing was written.
	Replayed bool
}

// Backend errors the service maps to status codes.
var (
	// ErrContention: commits kept conflicting (Agones' Contention outcome).
	ErrContention = errors.New("too much contention: allocation attempts kept conflicting with concurrent updates")
	// ErrNotFound: no such game server.
	ErrNotFound = errors.New("game server not found")
	// ErrNotAllocated: the game server is not (or no longer) allocated.
	ErrNotAllocated = errors.New("game server is not allocated")
	// ErrStoreUnavailable: the store of record (the Kubernetes API server)
	// could not be reached or is overloaded; nothing was written, and the
	// caller may retry (Unavailable).
	ErrStoreUnavailable = errors.New("the API server could not be reached; nothing was allocated")
)

// Committer writes one allocation decision to the store of record. It is
// the part a store-backed backend (Kubernetes) supplies to CommitLoop.
type Committer interface {
	// Commit makes res durable, using res.Previous.Version as the
	// precondition. It returns the stored object (with its new Version), or
	// a *ConflictError when the precondition failed.
	Commit(ctx context.Context, res *core.Result) (*core.GameServer, error)
}

// ConflictError says a commit lost a race. Fresh, when known, is the
// server's current state, which goes back into the index so that the next
// choice is made on it; nil means the server is gone. A committer that keeps
// the index itself (the kube backend, whose informer writes it under the
// backend's lock) sets Reconciled instead: the index already has what the
// committer knows, and an update from outside that lock could undo a newer
// one from the informer (bring back a deleted server, say).
type ConflictError struct {
	Key        core.Key
	Fresh      *core.GameServer
	Reconciled bool
}

func (e *ConflictError) Error() string {
	return "conflict committing allocation of " + e.Key.Namespace + "/" + e.Key.Name
}

// CommitLoop is Allocate for a backend whose index caches a store that may
// have moved on: choose (with a hold), commit, and on a conflict put the
// fresh state into the index, drop the hold and choose again, at most
// maxRetries times, then ErrContention. The core is never told about the
// race except through the fresh state, as docs/architecture.md asks.
func CommitLoop(ctx context.Context, ix *core.Index, c Committer, req *core.Request, now time.Time, seed uint64, maxRetries int) (*Allocation, error) {
	for attempt := 0; ; attempt++ {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		// A different seed per attempt, still derived from the request's,
		// so a replay makes the same choices.
		res, err := ix.AllocateContext(ctx, req, now, seed+uint64(attempt)*0x9e3779b97f4a7c15)
		if err != nil {
			return nil, err
		}
		stored, err := c.Commit(ctx, res)
		if err == nil {
			ix.Commit(res, stored)
			return &Allocation{GameServer: stored, Retries: attempt}, nil
		}
		var conflict *ConflictError
		if !errors.As(err, &conflict) {
			ix.Abort(res)
			return nil, err
		}
		switch {
		case conflict.Reconciled:
		case conflict.Fresh != nil:
			ix.Upsert(conflict.Fresh)
		default:
			ix.Remove(res.Previous.Key())
		}
		ix.Abort(res)
		if attempt >= maxRetries {
			// The Allocation carries the retry count for the metrics.
			return &Allocation{Retries: attempt}, ErrContention
		}
	}
}
