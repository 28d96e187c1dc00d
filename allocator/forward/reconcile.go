package forward

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	qmv1 "github.com/quartermaster-dev/quartermaster/allocator/pb/quartermaster/v1"
)

// Reconciliation. A forwarded request whose answer was lost (sent, and
// then the connection broke or the try timed out) may have allocated a
// server at that remote. When the request is then served by another
// cluster, or fails with a key of the forwarder's own making (nobody else
// can ever ask for that server), the forwarder remembers where the
// allocation may be and releases it there by key once the endpoint is
// reachable: a background queue, bounded, retried with backoff (sooner
// when the endpoint's breaker closes), stopped with the forwarder.
//
// A request with the caller's own key is never reconciled: it does not
// go past a cluster that may hold its allocation (placements.go), and the
// caller's retry is answered with that allocation.

// Defaults of the reconciliation queue.
const (
	// DefaultReconcileBackoff is the wait before a failed release is tried
	// again; it doubles up to DefaultReconcileMaxBackoff.
	DefaultReconcileBackoff    = time.Second
	DefaultReconcileMaxBackoff = 30 * time.Second
	// DefaultReconcileFor is how long a release is tried before it is
	// given up: past the remote's key window, the key no longer finds the
	// allocation anyway.
	DefaultReconcileFor = 15 * time.Minute
	// DefaultReconcileQueue bounds the releases waiting.
	DefaultReconcileQueue = 10000
)

// heldAt is a remote endpoint that may hold an allocation made with key
// for identity: what a release there needs.
type heldAt struct {
	cluster    string // where(policy): tells the clusters of one request apart
	endpoint   string
	namespace  string // the request's namespace, where the Secret is
	secretName string
	serverCA   []byte
	target     string // the namespace at the remote
	identity   string
	key        string
}

type pendingRelease struct {
	heldAt
	since, due time.Time
	attempts   int
}

// reconciler runs the releases of allocations whose answers were lost.
type reconciler struct {
	f           *Forwarder
	backoff     time.Duration
	maxBackoff  time.Duration
	giveUpAfter time.Duration
	max         int

	mu      sync.Mutex
	pending []*pendingRelease
	n       atomic.Int64 // releases queued or under way, read without the lock

	kick    chan struct{}
	stop    context.CancelFunc
	ctx     context.Context
	stopped sync.WaitGroup
	started sync.Once
}

func newReconciler(f *Forwarder, o Options) *reconciler {
	r := &reconciler{
		f: f, backoff: o.ReconcileBackoff, maxBackoff: o.ReconcileMaxBackoff,
		giveUpAfter: o.ReconcileFor, max: o.ReconcileQueue,
		kick: make(chan struct{}, 1),
	}
	if r.backoff <= 0 {
		r.backoff = DefaultReconcileBackoff
	}
	if r.maxBackoff < r.backoff {
		r.maxBackoff = max(DefaultReconcileMaxBackoff, r.backoff)
	}
	if r.giveUpAfter <= 0 {
		r.giveUpAfter = DefaultReconcileFor
	}
	if r.max <= 0 {
		r.max = DefaultReconcileQueue
	}
	r.ctx, r.stop = context.WithCancel(context.Background())
	return r
}

// pendingCount is the number of releases waiting.
func (r *reconciler) pendingCount() int { return int(r.n.Load()) }

// add queues releases; the worker starts with the first. A forwarder
// closed (or closing) queues nothing.
func (r *reconciler) add(hs []heldAt) {
	now := time.Now()
	r.mu.Lock()
	if r.ctx.Err() != nil {
		r.mu.Unlock()
		r.f.m.reconciles.WithLabelValues(reconcileGivenUp).Add(float64(len(hs)))
		return
	}
	for _, h := range hs {
		if len(r.pending) >= r.max {
			r.f.m.reconciles.WithLabelValues(reconcileGivenUp).Inc()
			r.f.log.Warn("forwarding: the reconciliation queue is full; an allocation whose answer was lost stays allocated",
				"endpoint", h.endpoint, "namespace", h.target, "key", h.key)
			continue
		}
		r.pending = append(r.pending, &pendingRelease{heldAt: h, since: now, due: now})
		r.f.m.reconcilePending.Set(float64(r.n.Add(1)))
		r.f.m.reconciles.WithLabelValues(reconcileQueued).Inc()
	}
	r.started.Do(func() {
		r.stopped.Add(1)
		go r.run()
	})
	r.mu.Unlock()
	r.wake()
}

// wake makes the worker look at the queue now (an endpoint's breaker
// closed: its releases may go). It never blocks.
func (r *reconciler) wake() {
	select {
	case r.kick <- struct{}{}:
	default:
	}
}

func (r *reconciler) close() {
	r.mu.Lock()
	r.stop() // under the lock: no add starts the worker after this
	r.mu.Unlock()
	r.stopped.Wait()
}

func (r *reconciler) run() {
	defer r.stopped.Done()
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		due, next := r.take(time.Now())
		for _, p := range due {
			if r.ctx.Err() != nil {
				return
			}
			r.attempt(p)
		}
		if len(due) > 0 {
			continue // attempts take time: look at the clock again
		}
		wait := time.Hour
		if !next.IsZero() {
			wait = max(time.Until(next), 0)
		}
		timer.Reset(wait)
		select {
		case <-r.ctx.Done():
			return
		case <-r.kick:
			r.advance()
		case <-timer.C:
		}
	}
}

// advance makes due now the releases whose endpoint's breaker is closed.
func (r *reconciler) advance() {
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, p := range r.pending {
		if p.attempts > 0 && p.due.After(now) && r.f.BreakerState(p.endpoint) == Closed {
			p.due = now
		}
	}
}

// take removes and returns the releases due at now, and when the next
// one left is due (zero for none).
func (r *reconciler) take(now time.Time) (due []*pendingRelease, next time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	keep := r.pending[:0]
	for _, p := range r.pending {
		if !p.due.After(now) {
			due = append(due, p)
			continue
		}
		keep = append(keep, p)
		if next.IsZero() || p.due.Before(next) {
			next = p.due
		}
	}
	clear(r.pending[len(keep):])
	r.pending = keep
	return due, next
}

// Outcomes of the reconciliation metric.
const (
	reconcileQueued    = "queued"        // a release was queued
	reconcileAttempted = "attempted"     // a release was sent
	reconcileReleased  = "released"      // it gave an allocation back
	reconcileNothing   = "nothing_there" // the remote held nothing for the key
	reconcileGivenUp   = "given_up"      // it was dropped unreleased
)

// attempt sends one release; p is requeued when the endpoint could not be
// reached, else it is done.
func (r *reconciler) attempt(p *pendingRelease) {
	f := r.f
	outcome, why := "", ""
	switch res, msg := r.release(p); res {
	case releaseDone:
		outcome = reconcileReleased
	case releaseNothing:
		outcome = reconcileNothing
	case releaseRefused:
		outcome, why = reconcileGivenUp, msg
	case releaseLater:
		if time.Since(p.since) < r.giveUpAfter {
			p.attempts++
			p.due = time.Now().Add(min(r.backoff<<min(p.attempts-1, 16), r.maxBackoff))
			r.mu.Lock()
			r.pending = append(r.pending, p)
			r.mu.Unlock()
			return
		}
		outcome, why = reconcileGivenUp, "still unreachable after "+r.giveUpAfter.String()+": "+msg
	}
	f.m.reconciles.WithLabelValues(outcome).Inc()
	f.m.reconcilePending.Set(float64(r.n.Add(-1)))
	if outcome == reconcileGivenUp {
		f.log.Warn("forwarding: gave up releasing an allocation whose answer was lost",
			"endpoint", p.endpoint, "namespace", p.target, "key", p.key, "reason", why)
	} else {
		f.log.Info("forwarding: reconciled an allocation whose answer was lost",
			"endpoint", p.endpoint, "namespace", p.target, "key", p.key, "outcome", outcome)
	}
}

type releaseResult int

const (
	releaseDone    releaseResult = iota // the remote released the allocation
	releaseNothing                      // it holds none for the key
	releaseLater                        // not reached: try again later
	releaseRefused                      // it will not release: give up
)

// release asks p's endpoint to give back the allocation made with p's key.
func (r *reconciler) release(p *pendingRelease) (releaseResult, string) {
	f := r.f
	br := f.breaker(p.endpoint)
	if !br.allow() {
		return releaseLater, "breaker open"
	}
	sec, ok := f.src.Secret(p.namespace, p.secretName)
	if !ok {
		return releaseLater, "Secret " + p.namespace + "/" + p.secretName + " not found"
	}
	c, err := f.clients.get(p.endpoint, sec, p.serverCA, false)
	if err != nil {
		return releaseLater, err.Error()
	}
	defer f.clients.put(c)
	md := metadata.Pairs(HopsKey, f.self)
	if p.identity != "" {
		md.Set(OnBehalfOfKey, p.identity)
	}
	ctx, cancel := context.WithTimeout(metadata.NewOutgoingContext(r.ctx, md), f.tryTimeout)
	defer cancel()
	f.m.reconciles.WithLabelValues(reconcileAttempted).Inc()
	_, err = qmv1.NewAllocationAdminClient(c.cc).Release(ctx, &qmv1.ReleaseRequest{Namespace: p.target, AllocationKey: p.key})
	st := status.Convert(err)
	switch st.Code() {
	case codes.OK:
		br.success()
		return releaseDone, ""
	case codes.NotFound:
		br.success()
		return releaseNothing, ""
	case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled:
		if r.ctx.Err() == nil {
			br.failure(f.clock.Now(), probeCreds{sec: sec, serverCA: p.serverCA})
		}
		return releaseLater, st.Message()
	}
	br.success()
	if keyReleasedAnswer(st) {
		return releaseNothing, ""
	}
	return releaseRefused, st.Code().String() + ": " + st.Message()
}

// keyReleasedAnswer reports whether a remote answered that the allocation
// a key names was released already (the allocator's ErrKeyReleased).
func keyReleasedAnswer(st *status.Status) bool {
	return st.Code() == codes.FailedPrecondition && strings.Contains(st.Message(), keyReleasedText)
}

// keyReleasedText is the allocator's ErrKeyReleased message (a test holds
// them equal).
const keyReleasedText = "the allocation made with this idempotency key was released"
