package loadgen

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"strconv"
	"time"

	"google.golang.org/grpc/codes"
)

// Idempotency keys. With Options.AllocationKeys every request carries a
// key of its own (Quartermaster's quartermaster.dev/allocation-key), and a
// request whose answer was lost is sent again with the same key within its
// deadline: the allocator answers a key it has seen with the allocation it
// already made, so a retry never holds a second server. A request that is
// still without an answer when its deadline passes is given up by the
// caller; when servers are released, the engine then keeps asking with
// the key (Options.ResolveFor) until it learns what the lost answers
// allocated, and gives that back, so a run leaves nothing Allocated that
// no one knows of.

// Try is one attempt at a keyed request.
type Try struct {
	// Key is the request's idempotency key, the same on every attempt.
	Key string
	// Attempt numbers the tries within the request's deadline, from 0.
	Attempt int
	// Resolve marks a try sent after the caller gave the request up: it
	// asks what the key's allocation is, to give it back.
	Resolve bool
}

// A KeyedCaller can send a request with an idempotency key, and release
// by key: Release of a Session with Key set and no Name gives back the
// key's allocation. Options.AllocationKeys needs every target's Caller to
// be one.
type KeyedCaller interface {
	Caller
	CallKeyed(ctx context.Context, t Try) (codes.Code, *Session)
}

// AnswerLost says whether an answer with code leaves the caller not
// knowing what the allocator did: the request may have been written and
// its answer lost on the way (the connection broke, the allocator died,
// the deadline passed). Only those are retried; any other answer is the
// allocator's own.
func AnswerLost(code codes.Code) bool {
	switch code {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled, codes.Unknown, codes.Internal:
		return true
	}
	return false
}

// Retry waits: a try that failed fast (the connection refused) waits
// before the next, doubling up to retryMaxWait; one that ran out its own
// deadline is followed at once.
const (
	retryFirstWait = 50 * time.Millisecond
	retryMaxWait   = 500 * time.Millisecond
	resolveMaxWait = 2 * time.Second
)

// DefaultResolveFor is how long a given-up request's key is asked about.
const DefaultResolveFor = time.Minute

// keyPrefix is a run's keys' prefix: random, so two runs (or the shards of
// one load) never share a key.
func keyPrefix() (string, error) {
	var b [6]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", fmt.Errorf("allocation keys: %w", err)
	}
	return "load-" + hex.EncodeToString(b[:]) + "-", nil
}

// newKey is the next request's key.
func (r *runner) newKey() string {
	return r.keyPrefix + strconv.FormatUint(r.keySeq.Add(1), 10)
}

// sleepCtx waits d or until ctx ends; false if ctx ended.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// callKeyed sends one request with a new key, and again with that key
// while its answer is lost and ctx (the request's deadline) leaves time.
func (r *runner) callKeyed(ctx context.Context, tr *targetRun) (codes.Code, *Session, string) {
	kc := tr.Caller.(KeyedCaller) // checked by Run
	key := r.newKey()
	wait := retryFirstWait
	for attempt := 0; ; attempt++ {
		actx, cancel := context.WithTimeout(ctx, r.opt.AttemptTimeout)
		code, sess := kc.CallKeyed(actx, Try{Key: key, Attempt: attempt})
		tryTimedOut := actx.Err() == context.DeadlineExceeded
		cancel()
		if !AnswerLost(code) || ctx.Err() != nil {
			return code, sess, key
		}
		if !tryTimedOut {
			if !sleepCtx(ctx, wait) {
				return code, sess, key
			}
			wait = min(2*wait, retryMaxWait)
		}
		tr.retries.Add(1)
	}
}

// resolve asks, off the request path, what a given-up request's key
// allocated, for up to ResolveFor, and gives back what it finds.
func (r *runner) resolve(tr *targetRun, key string) {
	kc := tr.Caller.(KeyedCaller)
	r.relWG.Add(1)
	go func() {
		defer r.relWG.Done()
		end := time.Now().Add(r.opt.ResolveFor)
		wait := 4 * retryFirstWait
		for n := 0; ; n++ {
			ctx, cancel := context.WithTimeout(context.Background(), r.opt.Timeout)
			code, sess := kc.CallKeyed(ctx, Try{Key: key, Attempt: n, Resolve: true})
			cancel()
			switch {
			case code == codes.OK && sess != nil:
				tr.resolved.Add(1)
				r.release(tr, sess, 0)
				return
			case !AnswerLost(code):
				// The allocator answered: nothing is held for the key
				// (released, or the fleet had nothing to give).
				tr.resolvedEmpty.Add(1)
				return
			case time.Now().Add(wait).After(end):
				tr.resolveFailed.Add(1)
				return
			}
			time.Sleep(wait)
			wait = min(2*wait, resolveMaxWait)
		}
	}()
}
