package forward

import (
	"context"
	"sync"
	"time"
)

// Clock is the forwarder's time: the breaker's open periods, the waits
// between retries and the background probes' schedule. Tests pass a fake
// one.
type Clock interface {
	Now() time.Time
	// Sleep waits d, or until ctx ends (then it returns ctx's error).
	Sleep(ctx context.Context, d time.Duration) error
}

// AfterClock is a Clock that can also wake a waiter once d has passed on
// it, as RealClock does. The background prober waits for a probe's due
// time with it; with a Clock that lacks it, the prober reads Now every
// few milliseconds of wall time instead, which is what a fake clock moved
// by a test needs.
type AfterClock interface {
	Clock
	After(d time.Duration) <-chan time.Time
}

// RealClock is the wall clock.
type RealClock struct{}

// Now implements Clock.
func (RealClock) Now() time.Time { return time.Now() }

// After implements AfterClock.
func (RealClock) After(d time.Duration) <-chan time.Time { return time.After(d) }

// Sleep implements Clock.
func (RealClock) Sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// BreakerState is where an endpoint's breaker stands. The values are the
// ones the breaker-state gauge reports.
type BreakerState int

const (
	// Closed: tries go through; consecutive transport failures are counted.
	Closed BreakerState = 0
	// Open: the endpoint is skipped; when the open period ends a
	// background probe checks it.
	Open BreakerState = 1
	// HalfOpen: the background probe is out; requests still skip the
	// endpoint, and the probe's answer decides between Closed and Open.
	HalfOpen BreakerState = 2
)

func (s BreakerState) String() string {
	switch s {
	case Closed:
		return "closed"
	case Open:
		return "open"
	case HalfOpen:
		return "half-open"
	}
	return "unknown"
}

// BreakerOptions tune the per-endpoint breakers.
type BreakerOptions struct {
	// Failures is how many consecutive transport failures open the
	// breaker (default 3).
	Failures int
	// OpenFor is how long a newly opened breaker waits before its first
	// background probe (default 1 s); each failed probe doubles it, up to
	// MaxOpenFor (default 30 s).
	OpenFor, MaxOpenFor time.Duration
}

func (o BreakerOptions) withDefaults() BreakerOptions {
	if o.Failures <= 0 {
		o.Failures = 3
	}
	if o.OpenFor <= 0 {
		o.OpenFor = time.Second
	}
	if o.MaxOpenFor < o.OpenFor {
		o.MaxOpenFor = max(30*time.Second, o.OpenFor)
	}
	return o
}

// breaker is one endpoint's three-state machine. Only transport failures
// count against it: an allocator that answers, even "no game server",
// is up. Requests go through only while it is closed; once open, the
// forwarder's background prober (not a caller's request) finds out when
// the endpoint is back.
type breaker struct {
	opts     BreakerOptions
	onChange func(from, to BreakerState)

	mu      sync.Mutex
	state   BreakerState
	fails   int
	openFor time.Duration
	until   time.Time
	// creds are those of the last failed try: what the probe presents.
	creds probeCreds
}

// probeCreds are the credentials a probe of the endpoint presents: those
// of the policy and Secret whose request failed there.
type probeCreds struct {
	sec      Secret
	serverCA []byte
}

func newBreaker(o BreakerOptions, onChange func(from, to BreakerState)) *breaker {
	return &breaker{opts: o, onChange: onChange, openFor: o.OpenFor}
}

// allow reports whether a request may try the endpoint: only while the
// breaker is closed.
func (b *breaker) allow() bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.state == Closed
}

// next returns when the open breaker's next probe is due, and false once
// it is closed (the prober's work is done).
func (b *breaker) next() (time.Time, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.until, b.state != Closed
}

// beginProbe moves an open breaker whose period ended by now to half-open
// and returns the credentials to probe with; false when it is not due (or
// no longer open).
func (b *breaker) beginProbe(now time.Time) (probeCreds, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.state != Open || now.Before(b.until) {
		return probeCreds{}, false
	}
	b.set(HalfOpen)
	return b.creds, true
}

// success records a try or probe that reached the allocator.
func (b *breaker) success() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.fails = 0
	b.openFor = b.opts.OpenFor
	if b.state != Closed {
		b.set(Closed)
	}
}

// failure records a transport failure at now of a try that presented c
// (a probe passes the zero value: the credentials stay).
func (b *breaker) failure(now time.Time, c probeCreds) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if c.sec.Name != "" {
		b.creds = c
	}
	switch b.state {
	case Closed:
		b.fails++
		if b.fails >= b.opts.Failures {
			b.openFor = b.opts.OpenFor
			b.until = now.Add(b.openFor)
			b.set(Open)
		}
	case HalfOpen:
		// The probe failed: wait longer before the next one.
		b.openFor = min(2*b.openFor, b.opts.MaxOpenFor)
		b.until = now.Add(b.openFor)
		b.set(Open)
	case Open:
		// A try that started before the breaker opened.
	}
}

func (b *breaker) current() BreakerState {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.state
}

func (b *breaker) set(to BreakerState) {
	from := b.state
	b.state = to
	if b.onChange != nil && from != to {
		b.onChange(from, to)
	}
}
