package loadgen

import (
	"testing"
	"time"
)

const us = time.Microsecond

// plan is one arrival planned at a made-up instant.
type planned struct {
	timer time.Duration
	fine  bool
}

func TestPrecisionOnScheduleWaitsTheLastStretchPrecisely(t *testing.T) {
	p := newPrecision(time.Millisecond)
	// 1,000/s: arrivals every 1 ms, the loop ready 100 µs after each send.
	// The first has no gap to judge the rate by: timer only.
	if timer, fine := p.plan(0, 0); timer != 0 || fine {
		t.Fatalf("first arrival, already due: %v %v", timer, fine)
	}
	for n := 1; n < 10; n++ {
		due := time.Duration(n) * time.Millisecond
		timer, fine := p.plan(due-900*us, due)
		if !fine || timer != 0 {
			t.Fatalf("arrival %d, 900µs ahead: timer %v fine %v; want all of it precise", n, timer, fine)
		}
	}
	// A long wait: the timer takes all but the stretch.
	timer, fine := p.plan(10*time.Millisecond, 10*time.Millisecond+5*time.Millisecond)
	if !fine || timer != 4*time.Millisecond {
		t.Fatalf("5ms ahead: timer %v fine %v; want 4ms then precise", timer, fine)
	}
	if p.precise != 10 || p.behind != 0 {
		t.Fatalf("precise %d behind %d; want 10, 0", p.precise, p.behind)
	}
}

func TestPrecisionOffWhenTurnedOff(t *testing.T) {
	p := newPrecision(-1)
	for n := 0; n < 5; n++ {
		due := time.Duration(n) * time.Millisecond
		if timer, fine := p.plan(due-500*us, due); fine || timer != 500*us {
			t.Fatalf("arrival %d: timer %v fine %v; want a 500µs timer only", n, timer, fine)
		}
	}
	if p.precise != 0 {
		t.Fatalf("precise %d", p.precise)
	}
}

func TestPrecisionTimersOnlyAtHighRates(t *testing.T) {
	p := newPrecision(time.Millisecond)
	// 4,000/s: a gap of 250 µs, under preciseMinGap.
	var got []planned
	for n := 0; n < 50; n++ {
		due := time.Duration(n) * 250 * us
		timer, fine := p.plan(due-200*us, due)
		got = append(got, planned{timer, fine})
	}
	for n, g := range got {
		if g.fine || g.timer != 200*us {
			t.Fatalf("arrival %d at 4,000/s: %+v; want a timer only", n, g)
		}
	}
	// The rate drops to 1,000/s: after the smoothed gap passes the
	// threshold, precise waits come back.
	base := 50 * 250 * us
	var firstFine int
	for n := 1; n <= 50; n++ {
		due := base + time.Duration(n)*time.Millisecond
		if _, fine := p.plan(due-500*us, due); fine && firstFine == 0 {
			firstFine = n
		}
	}
	if firstFine == 0 || firstFine > 10 {
		t.Fatalf("after dropping to 1,000/s precise waits came back at arrival %d; want within 10", firstFine)
	}
}

func TestPrecisionPausesWhenBehind(t *testing.T) {
	p := newPrecision(time.Millisecond)
	ms := time.Millisecond
	p.plan(0, 0)
	if _, fine := p.plan(500*us, ms); !fine {
		t.Fatal("on schedule at 1,000/s: want a precise wait")
	}
	// The generator was descheduled: it reaches the arrival due at 2 ms
	// at 50 ms.
	if timer, fine := p.plan(50*ms, 2*ms); timer != 0 || fine {
		t.Fatalf("48ms late: timer %v fine %v; want to send at once", timer, fine)
	}
	if p.behind != 1 {
		t.Fatalf("behind %d, want 1", p.behind)
	}
	// Catching up, and for the cool-down after, timers only, even with
	// time to spare; lateness inside the slack does not count as behind.
	cd := preciseCooldown
	for at := 60 * ms; at < 50*ms+cd; at += cd / 10 {
		if timer, fine := p.plan(at, at+900*us); fine || timer != 900*us {
			t.Fatalf("at %v, in the cool-down: timer %v fine %v; want a timer only", at, timer, fine)
		}
	}
	p.woke(50*ms+cd/2, 50*ms+cd/2-preciseSlack) // exactly the slack: not behind, not extended
	if p.behind != 1 {
		t.Fatalf("lateness within the slack counted as behind")
	}
	if _, fine := p.plan(50*ms+cd, 50*ms+cd+900*us); !fine {
		t.Fatal("after the cool-down: want precise waits again")
	}
	// A timer that wakes late (a stall while sleeping) pauses them too,
	// and a second stall inside the cool-down extends it without
	// counting twice.
	p.woke(2*time.Second, 2*time.Second-5*ms)
	p.woke(2*time.Second+cd/2, 2*time.Second+cd/2-5*ms)
	if p.behind != 2 {
		t.Fatalf("behind %d, want 2", p.behind)
	}
	end := 2*time.Second + cd/2 + cd
	if _, fine := p.plan(end-cd/10, end-cd/10+ms); fine {
		t.Fatalf("the second stall's cool-down should run until %v", end)
	}
	if _, fine := p.plan(end+cd/10, end+cd/10+ms); !fine {
		t.Fatalf("after %v: want precise waits again", end)
	}
}

func TestPrecisionFollowsPoissonMeanGap(t *testing.T) {
	// Poisson arrivals at 1,000/s have many gaps under 400 µs, but their
	// mean is 1 ms: the smoothed gap keeps precise waits on for most.
	p := newPrecision(time.Millisecond)
	sched := NewPoisson(1000, 7)
	fine := 0
	const n = 2000
	for i := uint64(0); i < n; i++ {
		due, _ := sched.Pace(0, i)
		if _, f := p.plan(due-100*us, due); f {
			fine++
		}
	}
	if fine < n*9/10 {
		t.Fatalf("%d of %d arrivals precise at a Poisson 1,000/s; want at least 90%%", fine, n)
	}
}
