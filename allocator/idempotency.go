package allocator

import (
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/quartermaster-dev/quartermaster/allocator/pb/allocation"
	"github.com/quartermaster-dev/quartermaster/core"
)

// The idempotency keys this process remembers (allocationkey.go says what
// a key is). Per scope (a caller's key) the table holds one entry:
//
//   - pending: an allocation with the key is under way. Later requests with
//     the key wait for it and take its answer (single flight).
//   - allocated: the key's allocation was made; the server it went to (or
//     the answer of the cluster a forwarded request went to). A request
//     with the key again is answered from that server's current state while
//     the allocation stands, and nothing is applied again.
//   - released: the key's allocation was given back, or its server is gone.
//     A request with the key is refused, never given a new server.
//
// A failed allocation leaves no entry, so a retry tries afresh. Entries are
// forgotten a window after their last change, and the oldest first when
// the table is full: a key forgotten is a new key.

// Defaults for Options.KeyWindow and Options.MaxKeys.
const (
	DefaultKeyWindow = 10 * time.Minute
	DefaultMaxKeys   = 100000
)

type keyState uint8

const (
	keyPending keyState = iota
	keyAllocated
	keyReleased
)

// keyEntry is one key's entry. scope and fingerprint never change; the
// rest changes under the table's lock.
type keyEntry struct {
	scope string
	// fingerprint is KeyFingerprint of the request that made the entry;
	// empty for an entry a release by key made, which any request with
	// the key meets as released.
	fingerprint string
	state       keyState
	// done is closed when a pending entry settles: allocated, or failed
	// (and removed).
	done chan struct{}
	// When allocated: server is the server here, or resp the answer of
	// another cluster (a forwarded request).
	server core.Key
	resp   *allocation.AllocationResponse
	// When failed: the error its waiters answer with, unless retry says
	// the failure was its caller's own (it went away), when they try
	// again themselves.
	err   error
	retry bool
	// at is when the entry last changed; the window counts from it.
	at time.Time
	// prev and next order the table's entries by at, oldest first.
	prev, next *keyEntry
	listed     bool
}

// keyView is a copy of an entry's state, read under the lock.
type keyView struct {
	state  keyState
	server core.Key
	resp   *allocation.AllocationResponse
	err    error
	retry  bool
}

// keyTable maps scopes to entries, bounded in time (window) and size (max).
type keyTable struct {
	window time.Duration
	max    int

	mu         sync.Mutex
	entries    map[string]*keyEntry
	head, tail *keyEntry // oldest, newest
	// evicted counts entries forgotten because the table was full.
	evicted func()
	// waits counts requests that waited for a pending entry (tests).
	waits atomic.Int64
}

func newKeyTable(window time.Duration, max int, evicted func()) *keyTable {
	if window <= 0 {
		window = DefaultKeyWindow
	}
	if max <= 0 {
		max = DefaultMaxKeys
	}
	if evicted == nil {
		evicted = func() {}
	}
	return &keyTable{window: window, max: max, entries: make(map[string]*keyEntry), evicted: evicted}
}

// claim returns scope's entry, or makes a pending one for a request of
// fingerprint fp: leader says the caller made it, and must settle it
// (allocated or failed).
func (t *keyTable) claim(scope, fp string, now time.Time) (e *keyEntry, leader bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.expire(now)
	if e := t.entries[scope]; e != nil {
		return e, false
	}
	e = &keyEntry{scope: scope, fingerprint: fp, state: keyPending, done: make(chan struct{}), at: now}
	t.insert(e)
	return e, true
}

// find returns scope's entry, if remembered.
func (t *keyTable) find(scope string, now time.Time) *keyEntry {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.expire(now)
	return t.entries[scope]
}

// allocated settles a pending entry with its allocation: a server here,
// or resp from another cluster.
func (t *keyTable) allocated(e *keyEntry, server core.Key, resp *allocation.AllocationResponse, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e.state, e.server, e.resp = keyAllocated, server, resp
	t.touch(e, now)
	close(e.done)
}

// failed settles a pending entry whose allocation failed: it leaves the
// table, and its waiters answer err (or, with retry, try again).
func (t *keyTable) failed(e *keyEntry, err error, retry bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e.err, e.retry = err, retry
	t.remove(e)
	close(e.done)
}

// released records that scope's allocation was given back (or found gone):
// its entry, or a new one when none is remembered, is released from now on.
func (t *keyTable) released(scope string, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	e := t.entries[scope]
	if e == nil || e.state == keyPending {
		// A pending allocation settles on its own; the release that
		// waited for it comes back here once it has.
		if e != nil {
			return
		}
		e = &keyEntry{scope: scope, done: make(chan struct{})}
		close(e.done)
		t.insert(e)
	}
	e.state, e.resp = keyReleased, nil
	t.touch(e, now)
}

// view reads e's state.
func (t *keyTable) view(e *keyEntry) keyView {
	t.mu.Lock()
	defer t.mu.Unlock()
	return keyView{state: e.state, server: e.server, resp: e.resp, err: e.err, retry: e.retry}
}

// expire forgets the entries whose window has passed. Entries are in the
// order of their last change, so it stops at the first that has not; a
// pending entry (at the front only while its allocation runs) stops it too,
// and the entries behind it go once it has settled.
func (t *keyTable) expire(now time.Time) {
	for e := t.head; e != nil && e.state != keyPending && now.Sub(e.at) >= t.window; e = t.head {
		t.remove(e)
	}
}

// insert adds e at the newest end, forgetting the oldest entries while
// the table holds more than max.
func (t *keyTable) insert(e *keyEntry) {
	t.entries[e.scope] = e
	t.link(e)
	for len(t.entries) > t.max && t.head != e {
		t.remove(t.head)
		t.evicted()
	}
}

// touch moves e to the newest end, changed at now.
func (t *keyTable) touch(e *keyEntry, now time.Time) {
	e.at = now
	if !e.listed {
		return // evicted or expired meanwhile: it stays out
	}
	t.unlink(e)
	t.link(e)
}

func (t *keyTable) remove(e *keyEntry) {
	if !e.listed {
		return
	}
	t.unlink(e)
	if t.entries[e.scope] == e {
		delete(t.entries, e.scope)
	}
}

func (t *keyTable) link(e *keyEntry) {
	e.prev, e.next, e.listed = t.tail, nil, true
	if t.tail != nil {
		t.tail.next = e
	} else {
		t.head = e
	}
	t.tail = e
}

func (t *keyTable) unlink(e *keyEntry) {
	if e.prev != nil {
		e.prev.next = e.next
	} else {
		t.head = e.next
	}
	if e.next != nil {
		e.next.prev = e.prev
	} else {
		t.tail = e.prev
	}
	e.prev, e.next, e.listed = nil, nil, false
}

// checkKey refuses a key that is too long or not visible ASCII (what a
// gRPC header and an annotation value both carry as they are).
func checkKey(key string) error {
	ok := len(key) <= MaxAllocationKeyLength
	for i := 0; ok && i < len(key); i++ {
		ok = key[i] > ' ' && key[i] < 0x7f
	}
	if ok {
		return nil
	}
	return status.Errorf(codes.InvalidArgument,
		"idempotency key %s (annotation %s or header %s): a key is 1 to %d characters of visible ASCII, without spaces or control characters (%d bytes given)",
		quoteKey(key), AllocationKeyAnnotation, AllocationKeyHeader, MaxAllocationKeyLength, len(key))
}

// quoteKey is key for an error message: quoted, and cut short if long.
func quoteKey(key string) string {
	if len(key) > MaxAllocationKeyLength {
		return strconv.Quote(key[:MaxAllocationKeyLength]) + "..."
	}
	return strconv.Quote(key)
}

// keyConflictError is the answer to a key sent again with another request.
func keyConflictError(key string) error {
	return status.Error(codes.InvalidArgument, (&KeyConflictError{Key: key}).Error())
}

// keyReleasedError is the answer to a key whose allocation was released.
func keyReleasedError(key string) error {
	return status.Error(codes.FailedPrecondition, fmt.Sprintf(
		"idempotency key %s: %v; it is not used for a new server while it is remembered: use a new key for a new allocation",
		quoteKey(key), ErrKeyReleased))
}
