package forward

import (
	"context"
	"sync"
	"testing"
	"time"
)

// fakeClock is a Clock that moves only when told to, or by the waits
// asked of it (Sleep advances it at once).
type fakeClock struct {
	mu    sync.Mutex
	now   time.Time
	slept []time.Duration
}

func newFakeClock() *fakeClock { return &fakeClock{now: time.Unix(1_800_000_000, 0)} }

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func (c *fakeClock) Sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.slept = append(c.slept, d)
	c.now = c.now.Add(d)
	return nil
}

func TestBreaker(t *testing.T) {
	clk := newFakeClock()
	var changes []string
	b := newBreaker(BreakerOptions{Failures: 3, OpenFor: time.Second, MaxOpenFor: 3 * time.Second}.withDefaults(),
		func(from, to BreakerState) { changes = append(changes, from.String()+">"+to.String()) })
	allow := func() (bool, bool) { return b.allow(clk.Now()) }

	// Two failures then a success: the count starts again.
	b.failure(clk.Now())
	b.failure(clk.Now())
	b.success()
	b.failure(clk.Now())
	b.failure(clk.Now())
	if ok, _ := allow(); !ok || b.current() != Closed {
		t.Fatalf("opened before 3 consecutive failures: %v", b.current())
	}
	b.failure(clk.Now())
	if ok, _ := allow(); ok || b.current() != Open {
		t.Fatalf("3 consecutive failures: state %v, allowed %v", b.current(), ok)
	}
	clk.Advance(999 * time.Millisecond)
	if ok, _ := allow(); ok {
		t.Fatal("allowed before the open period ended")
	}
	clk.Advance(time.Millisecond)
	ok, probe := allow()
	if !ok || !probe || b.current() != HalfOpen {
		t.Fatalf("after the open period: ok %v probe %v state %v", ok, probe, b.current())
	}
	if ok, _ := allow(); ok {
		t.Fatal("a second try went through while the probe is out")
	}
	// A failed probe reopens for twice as long.
	b.failure(clk.Now())
	clk.Advance(1999 * time.Millisecond)
	if ok, _ := allow(); ok {
		t.Fatal("the open period did not double after a failed probe")
	}
	clk.Advance(time.Millisecond)
	if ok, probe := allow(); !ok || !probe {
		t.Fatal("no probe after the doubled period")
	}
	b.failure(clk.Now())
	clk.Advance(3 * time.Second) // capped at MaxOpenFor
	ok, probe = allow()
	if !ok || !probe {
		t.Fatal("the open period grew past MaxOpenFor")
	}
	// An abandoned probe (the caller's deadline) leaves it half-open for
	// the next caller to probe.
	b.abandon(probe)
	if ok, probe := allow(); !ok || !probe || b.current() != HalfOpen {
		t.Fatalf("after an abandoned probe: ok %v probe %v state %v", ok, probe, b.current())
	}
	b.success()
	if ok, probe := allow(); !ok || probe || b.current() != Closed {
		t.Fatalf("a successful probe did not close it: %v", b.current())
	}
	// Closed again, with the first open period back to OpenFor.
	for range 3 {
		b.failure(clk.Now())
	}
	clk.Advance(time.Second)
	if ok, _ := allow(); !ok {
		t.Error("the open period did not reset after closing")
	}
	want := []string{"closed>open", "open>half-open", "half-open>open", "open>half-open", "half-open>open",
		"open>half-open", "half-open>closed", "closed>open", "open>half-open"}
	if len(changes) != len(want) {
		t.Fatalf("changes %v, want %v", changes, want)
	}
	for i := range want {
		if changes[i] != want[i] {
			t.Fatalf("changes %v, want %v", changes, want)
		}
	}
}
