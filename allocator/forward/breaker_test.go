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
	creds := probeCreds{sec: Secret{Namespace: "default", Name: "s1"}}
	fail := func() { b.failure(clk.Now(), creds) }
	probeDue := func() bool { _, ok := b.beginProbe(clk.Now()); return ok }

	// Two failures then a success: the count starts again.
	fail()
	fail()
	b.success()
	fail()
	fail()
	if !b.allow() || b.current() != Closed {
		t.Fatalf("opened before 3 consecutive failures: %v", b.current())
	}
	if _, open := b.next(); open {
		t.Fatal("next reports a closed breaker open")
	}
	fail()
	if b.allow() || b.current() != Open {
		t.Fatalf("3 consecutive failures: state %v, allowed", b.current())
	}
	if until, open := b.next(); !open || !until.Equal(clk.Now().Add(time.Second)) {
		t.Fatalf("next probe at %v (open %v), want in 1s", until, open)
	}
	clk.Advance(999 * time.Millisecond)
	if probeDue() {
		t.Fatal("a probe was due before the open period ended")
	}
	clk.Advance(time.Millisecond)
	got, ok := b.beginProbe(clk.Now())
	if !ok || b.current() != HalfOpen || got.sec.Name != "s1" {
		t.Fatalf("after the open period: due %v, state %v, creds %q", ok, b.current(), got.sec.Name)
	}
	// Requests still skip it while the probe is out, and no second probe
	// starts.
	if b.allow() || probeDue() {
		t.Fatal("half-open let a request or a second probe through")
	}
	// A failed probe (no credentials of its own) reopens for twice as
	// long and keeps the credentials.
	b.failure(clk.Now(), probeCreds{})
	clk.Advance(1999 * time.Millisecond)
	if probeDue() {
		t.Fatal("the open period did not double after a failed probe")
	}
	clk.Advance(time.Millisecond)
	if got, ok := b.beginProbe(clk.Now()); !ok || got.sec.Name != "s1" {
		t.Fatalf("no probe after the doubled period (due %v, creds %q)", ok, got.sec.Name)
	}
	b.failure(clk.Now(), probeCreds{})
	clk.Advance(3 * time.Second) // capped at MaxOpenFor
	if !probeDue() {
		t.Fatal("the open period grew past MaxOpenFor")
	}
	b.success()
	if !b.allow() || b.current() != Closed {
		t.Fatalf("a successful probe did not close it: %v", b.current())
	}
	// Closed again, with the first open period back to OpenFor.
	for range 3 {
		fail()
	}
	clk.Advance(time.Second)
	if !probeDue() {
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
