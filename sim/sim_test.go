package sim

import (
	"container/heap"
	"errors"
	"math"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/quartermaster-dev/quartermaster/core"
)

func TestQueueOrdersByTimeThenInsertion(t *testing.T) {
	var q queue
	// Many events at few distinct times: equal times must pop in the order
	// they were pushed.
	for i := range 1000 {
		q.push(event{at: int64((i * 7919) % 5), id: int32(i)})
	}
	lastAt, lastID := int64(-1), int32(-1)
	for q.len() > 0 {
		e := q.pop()
		if e.at < lastAt || (e.at == lastAt && e.id < lastID) {
			t.Fatalf("popped (%d, %d) after (%d, %d)", e.at, e.id, lastAt, lastID)
		}
		lastAt, lastID = e.at, e.id
	}
}

// TestQueueMatchesSortedOrder interleaves pushes and pops over times that
// fall in the current bucket, the fine ring, the coarse ring and beyond it
// (the far heap), the
// way the simulator does (nothing is scheduled before the last event
// popped), and checks every pop against a plain heap ordered by time, then
// push order.
func TestQueueMatchesSortedOrder(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var q queue
	var ref refHeap
	now, id := int64(0), int32(0)
	spans := []int64{1 << 20, 1 << bucketShift, 50 << bucketShift, fineSize << bucketShift, 50 * fineSize << bucketShift,
		coarseSize * fineSize << bucketShift, 3 * coarseSize * fineSize << bucketShift}
	popped, sawFine, sawCoarse, sawFar := 0, false, false, false
	for step := 0; ; step++ {
		if step < 60_000 && (q.len() == 0 || r.IntN(3) > 0) {
			// Several at the same time now and then, for the tie-break.
			at := now
			if r.IntN(8) > 0 {
				at += r.Int64N(spans[r.IntN(len(spans))])
			}
			q.push(event{at: at, id: id})
			heap.Push(&ref, event{at: at, id: id})
			id++
			sawFine = sawFine || q.inFine > 0
			sawCoarse = sawCoarse || q.inCoarse > 0
			sawFar = sawFar || len(q.far) > 0
			continue
		}
		if q.len() == 0 {
			break
		}
		want := heap.Pop(&ref).(event)
		if q.peek() != want.at {
			t.Fatalf("pop %d: peek %d, want %d", popped, q.peek(), want.at)
		}
		e := q.pop()
		if e.at != want.at || e.id != want.id {
			t.Fatalf("pop %d: got (%d, %d), want (%d, %d)", popped, e.at, e.id, want.at, want.id)
		}
		now = e.at
		popped++
		if q.len() != ref.Len() {
			t.Fatalf("len %d, want %d", q.len(), ref.Len())
		}
	}
	if popped != int(id) || !sawFine || !sawCoarse || !sawFar {
		t.Fatalf("%d pushed, %d popped; fine ring used: %v, coarse ring used: %v, far heap used: %v", id, popped, sawFine, sawCoarse, sawFar)
	}
}

// refHeap is container/heap's plain binary heap of events by (at, id).
type refHeap []event

func (h refHeap) Len() int { return len(h) }
func (h refHeap) Less(i, j int) bool {
	return h[i].at < h[j].at || h[i].at == h[j].at && h[i].id < h[j].id
}
func (h refHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *refHeap) Push(x any)   { *h = append(*h, x.(event)) }
func (h *refHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}

func TestScheduleExpectedAndInverse(t *testing.T) {
	five := 5.0
	cases := map[string]RateSpec{
		"constant": {Constant: &five},
		"steps":    {Steps: []Step{{0, 2}, {10 * time.Minute, 0}, {20 * time.Minute, 8}}},
		"diurnal":  {Diurnal: &Diurnal{Mean: 4, Amplitude: 3, Period: time.Hour, Peak: 10 * time.Minute}},
		"spikes":   {Constant: &five, Spikes: []Spike{{Start: 5 * time.Minute, Duration: time.Minute, Factor: 3, Add: 1}}},
	}
	for name, spec := range cases {
		t.Run(name, func(t *testing.T) {
			s, err := NewSchedule(spec, time.Hour)
			if err != nil {
				t.Fatal(err)
			}
			// The inverse of the expected count is the identity.
			total := s.Expected(time.Hour)
			for x := 0.5; x < total; x += total / 97 {
				at, ok := s.NextAt(x)
				if !ok {
					t.Fatalf("NextAt(%v) found nothing below the total %v", x, total)
				}
				if got := s.Expected(at); math.Abs(got-x) > 1e-6*max(1, x) {
					t.Fatalf("Expected(NextAt(%v)) = %v", x, got)
				}
			}
			if _, ok := s.NextAt(total + 1); ok {
				t.Fatal("an arrival past the horizon")
			}
		})
	}
	s, _ := NewSchedule(cases["steps"], time.Hour)
	if got := s.Expected(time.Hour); math.Abs(got-(600*2+2400*8)) > 1e-6 {
		t.Fatalf("steps integrate to %v", got)
	}
	d, _ := NewSchedule(cases["diurnal"], time.Hour)
	if got := d.Expected(time.Hour); math.Abs(got-4*3600)/(4*3600) > 1e-4 {
		t.Fatalf("a whole diurnal period integrates to %v, want %v", got, 4*3600)
	}
	if r := d.Rate(10 * time.Minute); math.Abs(r-7) > 0.01 {
		t.Fatalf("diurnal peak rate %v, want 7", r)
	}
}

func TestPace(t *testing.T) {
	ten := 10.0
	s, _ := NewSchedule(RateSpec{Constant: &ten}, time.Second)
	// Ten hits in a second at 10/s: hit i is due at i*100ms.
	for hits := uint64(0); hits < 10; hits++ {
		wait, stop := s.Pace(0, hits)
		if stop || wait != time.Duration(hits)*100*time.Millisecond {
			t.Fatalf("Pace(0, %d) = %v, %v", hits, wait, stop)
		}
	}
	if _, stop := s.Pace(time.Second, 10); !stop {
		t.Fatal("a schedule past its horizon must stop")
	}
	if wait, _ := s.Pace(450*time.Millisecond, 3); wait != 0 {
		t.Fatalf("a late hit waits %v", wait)
	}
}

func TestBadSchedules(t *testing.T) {
	neg := -1.0
	for name, spec := range map[string]RateSpec{
		"none":          {},
		"negative":      {Constant: &neg},
		"steps order":   {Steps: []Step{{time.Minute, 1}, {0, 1}}},
		"diurnal below": {Diurnal: &Diurnal{Mean: 1, Amplitude: 2, Period: time.Hour}},
	} {
		if _, err := NewSchedule(spec, time.Hour); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func TestConfigErrors(t *testing.T) {
	good := func() *Config { return lossSystem(2, 1, time.Second, time.Minute, 1) }
	for name, mut := range map[string]func(*Config){
		"no duration":     func(c *Config) { c.Duration = 0 },
		"no clusters":     func(c *Config) { c.Clusters = nil },
		"unknown cluster": func(c *Config) { c.Streams[0].Cluster = "x" },
		"bad policy":      func(c *Config) { c.Policies = []core.Policy{{Connection: core.ConnectionInfo{ClusterName: "x"}}} },
		"overfull":        func(c *Config) { c.Clusters[0].Fleets[0].Replicas = 100 },
		"bad request": func(c *Config) {
			c.Streams[0].Request.Counters = map[string]core.CounterAction{"x": {Action: "Multiply"}}
		},
	} {
		c := good()
		mut(c)
		if _, err := Run(c); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func TestStop(t *testing.T) {
	cfg := lossSystem(5, 10, time.Second, time.Hour, 1)
	cfg.ProgressEvery = 1000
	cfg.Stop = func() bool { return true }
	if _, err := Run(cfg); !errors.Is(err, ErrStopped) {
		t.Fatalf("err = %v, want ErrStopped", err)
	}
}

// Several replicas with stale caches conflict, retry and still allocate
// each server at most once at a time: the truth never has more Allocated
// servers than exist, and every conflict shows up as a retry.
func TestStaleReplicasConflictAndRecover(t *testing.T) {
	cfg := lossSystem(200, 20, 5*time.Second, 10*time.Minute, 3)
	cl := &cfg.Clusters[0]
	cl.Nodes, cl.SlotsPerNode = 20, 10
	cl.Replicas = 3
	cl.InformerDelay = Const(time.Second)
	cl.WriteLatency = Const(10 * time.Millisecond)
	cl.MaxRetries = 50
	res, err := Run(cfg)
	if err != nil {
		t.Fatal(err)
	}
	c := res.Clusters["c"]
	if c.Retries == 0 {
		t.Fatal("no conflicts with three replicas a second behind")
	}
	if res.Totals.SuccessRate < 0.999 {
		t.Fatalf("success %.4f", res.Totals.SuccessRate)
	}
	if c.MeanAllocated > 200 {
		t.Fatalf("more servers allocated (%v) than exist", c.MeanAllocated)
	}
}
