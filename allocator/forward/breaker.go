package forward

import (
	"context"
	"sync"
	"time"
)

// Clock is the forwarder's time: the breaker's open periods and the waits
// between retries. Tests pass a fake one.
type Clock interface {
	Now() time.Time
	// Sleep waits d, or until ctx ends (then it returns ctx's error).
	Sleep(ctx context.Context, d time.Duration) error
}

// RealClock is the wall clock.
type RealClock struct{}

// Now implements Clock.
func (RealClock) Now() time.Time { return time.Now() }

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
	// Open: the endpoint is skipped until its open period ends.
	Open BreakerState = 1
	// HalfOpen: the open period ended; one try (the probe) goes through
	// and decides between Closed and Open.
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
	// OpenFor is how long a newly opened breaker skips its endpoint before
	// a probe (default 1 s); each failed probe doubles it, up to MaxOpenFor
	// (default 30 s).
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
// is up.
type breaker struct {
	opts     BreakerOptions
	onChange func(from, to BreakerState)

	mu      sync.Mutex
	state   BreakerState
	fails   int
	openFor time.Duration
	until   time.Time
	probing bool
}

func newBreaker(o BreakerOptions, onChange func(from, to BreakerState)) *breaker {
	return &breaker{opts: o, onChange: onChange, openFor: o.OpenFor}
}

// allow reports whether a try may go to the endpoint at now, and whether
// that try is the half-open probe (its outcome must be reported, or the
// probe given back with abandon).
func (b *breaker) allow(now time.Time) (ok, probe bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch b.state {
	case Closed:
		return true, false
	case Open:
		if now.Before(b.until) {
			return false, false
		}
		b.set(HalfOpen)
		fallthrough
	default: // HalfOpen
		if b.probing {
			return false, false
		}
		b.probing = true
		return true, true
	}
}

// success records a try that reached the allocator.
func (b *breaker) success() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.fails = 0
	b.probing = false
	b.openFor = b.opts.OpenFor
	if b.state != Closed {
		b.set(Closed)
	}
}

// failure records a transport failure at now.
func (b *breaker) failure(now time.Time) {
	b.mu.Lock()
	defer b.mu.Unlock()
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
		b.probing = false
		b.openFor = min(2*b.openFor, b.opts.MaxOpenFor)
		b.until = now.Add(b.openFor)
		b.set(Open)
	case Open:
		// A try that started before the breaker opened.
	}
}

// abandon gives back a probe whose try ended for the caller's own reasons
// (its deadline), which says nothing about the endpoint.
func (b *breaker) abandon(probe bool) {
	if !probe {
		return
	}
	b.mu.Lock()
	b.probing = false
	b.mu.Unlock()
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
