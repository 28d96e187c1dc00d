package core

import (
	"fmt"
	"runtime"
	"slices"
	"testing"
	"time"
)

// benchFleet is the benchmark's fleet: n servers over 2,000 nodes and 10
// fleets, each with a "rooms" counter, all Ready.
func benchFleet(n int) []*GameServer {
	out := make([]*GameServer, n)
	for i := range n {
		fleet := fmt.Sprintf("fleet-%d", i%10)
		out[i] = &GameServer{
			Namespace: "default",
			Name:      fmt.Sprintf("%s-%07d", fleet, i),
			NodeName:  fmt.Sprintf("node-%04d", i%2000),
			State:     StateReady,
			Labels:    map[string]string{FleetLabel: fleet, "agones.dev/gameserverset": fleet + "-set"},
			Address:   "10.0.0.1",
			Ports:     []Port{{Name: "default", Port: int32(7000 + i%1000)}},
			Counters:  map[string]Counter{"rooms": {Count: 0, Capacity: 10}},
		}
	}
	return out
}

// benchRequest selects one fleet with a counter filter.
func benchRequest(s Strategy) *Request {
	req, err := Normalize(&Request{
		Scheduling: s,
		Selectors: []Selector{{
			MatchLabels: map[string]string{FleetLabel: "fleet-3"},
			Counters:    map[string]CounterSelector{"rooms": {MinAvailable: 1}},
		}},
	})
	if err != nil {
		panic(err)
	}
	return req
}

var benchSizes = []struct {
	name string
	n    int
}{{"1k", 1_000}, {"10k", 10_000}, {"100k", 100_000}}

var benchStrategies = []struct {
	name string
	s    Strategy
}{{"packed", Packed}, {"distributed", Distributed}}

var benchNow = time.Date(2026, 11, 22, 12, 0, 0, 0, time.UTC)

// warm makes one allocation and gives it back, so that groups and priority
// indexes built on first use exist before timing starts: the benchmarks
// measure the steady state.
func warm(b *testing.B, ix *Index, req *Request) {
	res, err := ix.Allocate(req, benchNow, 0)
	if err != nil {
		b.Fatal(err)
	}
	ix.Abort(res)
}

// BenchmarkAllocate allocates a server and returns it (back to Ready), so
// the fleet is the same at every iteration.
func BenchmarkAllocate(b *testing.B) {
	for _, st := range benchStrategies {
		for _, sz := range benchSizes {
			b.Run(st.name+"-"+sz.name, func(b *testing.B) {
				ix := NewIndex()
				for _, gs := range benchFleet(sz.n) {
					ix.Upsert(gs)
				}
				req := benchRequest(st.s)
				warm(b, ix, req)
				b.ReportAllocs()
				b.ResetTimer()
				for i := range b.N {
					res, err := ix.AllocateAndCommit(req, benchNow, uint64(i))
					if err != nil {
						b.Fatal(err)
					}
					ix.Upsert(res.Previous)
				}
			})
		}
	}
}

// BenchmarkNaiveAllocate is the same workload on the scan-and-sort reference.
func BenchmarkNaiveAllocate(b *testing.B) {
	for _, st := range benchStrategies {
		for _, sz := range benchSizes {
			b.Run(st.name+"-"+sz.name, func(b *testing.B) {
				ref := newNaive()
				for _, gs := range benchFleet(sz.n) {
					ref.upsert(gs)
				}
				req := benchRequest(st.s)
				b.ReportAllocs()
				b.ResetTimer()
				for range b.N {
					cands, _ := ref.candidates(req)
					if len(cands) == 0 {
						b.Fatal("no candidates")
					}
					ref.upsert(Apply(cands[0], req, benchNow))
					ref.upsert(cands[0])
				}
			})
		}
	}
}

// BenchmarkIndexUpdate measures one Upsert that changes a server's state
// (Ready to Allocated and back, alternating), the informer's common event.
func BenchmarkIndexUpdate(b *testing.B) {
	for _, sz := range benchSizes {
		b.Run(sz.name, func(b *testing.B) {
			fleet := benchFleet(sz.n)
			ix := NewIndex()
			for _, gs := range fleet {
				ix.Upsert(gs)
			}
			// Make the fleet label groups exist, as they do in service.
			for f := range 10 {
				req, _ := Normalize(&Request{Selectors: []Selector{{MatchLabels: map[string]string{FleetLabel: fmt.Sprintf("fleet-%d", f)}}}})
				res, _ := ix.Allocate(req, benchNow, 0)
				ix.Abort(res)
			}
			allocated := make([]*GameServer, len(fleet))
			for i, gs := range fleet {
				a := *gs
				a.State = StateAllocated
				allocated[i] = &a
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				j := i % len(fleet)
				if (i/len(fleet))%2 == 0 {
					ix.Upsert(allocated[j])
				} else {
					ix.Upsert(fleet[j])
				}
			}
		})
	}
}

// BenchmarkIndexMemory reports the index's own memory per server (the
// GameServer objects, which the backend owns, are excluded) after every
// fleet's label group exists.
func BenchmarkIndexMemory(b *testing.B) {
	for _, sz := range benchSizes {
		b.Run(sz.name, func(b *testing.B) {
			fleet := benchFleet(sz.n)
			var perServer float64
			for range b.N {
				var before, after runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				ix := NewIndex()
				for _, gs := range fleet {
					ix.Upsert(gs)
				}
				for f := range 10 {
					req, _ := Normalize(&Request{Selectors: []Selector{{MatchLabels: map[string]string{FleetLabel: fmt.Sprintf("fleet-%d", f)}}}})
					res, _ := ix.Allocate(req, benchNow, 0)
					ix.Abort(res)
				}
				runtime.GC()
				runtime.ReadMemStats(&after)
				perServer = float64(after.HeapAlloc-before.HeapAlloc) / float64(sz.n)
				runtime.KeepAlive(ix)
			}
			b.ReportMetric(perServer, "B/server")
		})
	}
}

// BenchmarkAllocatePriorities is BenchmarkAllocate's workload with a
// priority on the "rooms" counter (fullest first) and an Increment action, as
// high-density game servers use: the fleet starts uniform, so Packed's top
// tier is every node and Distributed orders the whole fleet.
func BenchmarkAllocatePriorities(b *testing.B) {
	one := int64(1)
	for _, st := range benchStrategies {
		for _, sz := range benchSizes {
			b.Run(st.name+"-"+sz.name, func(b *testing.B) {
				ix := NewIndex()
				for _, gs := range benchFleet(sz.n) {
					ix.Upsert(gs)
				}
				req := benchRequest(st.s)
				req.Priorities = []Priority{{Type: PriorityCounter, Key: "rooms", Order: Ascending}}
				req.Counters = map[string]CounterAction{"rooms": {Action: ActionIncrement, Amount: &one}}
				warm(b, ix, req)
				b.ReportAllocs()
				b.ResetTimer()
				for i := range b.N {
					res, err := ix.AllocateAndCommit(req, benchNow, uint64(i))
					if err != nil {
						b.Fatal(err)
					}
					ix.Upsert(res.Previous)
				}
			})
		}
	}
}

// BenchmarkAdversarialStall measures what a costly request does to everyone
// else: a victim allocates (and gives back) from a 100k-server fleet while
// another goroutine sends, back to back, requests of 32 selectors that
// narrow to nothing (a counter no server satisfies: every selector is a
// full pass, and the request ends at the scan budget). The reference is the
// same victim beside a goroutine that only burns CPU: on a 2-core machine a
// busy neighbour alone moves the victim's tail, and what is measured here is
// what the index's lock adds to that. Rounds alternate alone, beside the
// spinner and beside the adversary; it reports the medians over rounds of
// the victim's p99 beside the adversary over its p99 beside the spinner
// (the target: at most 2) and over its p99 alone.
//
//	go test -run '^$' -bench AdversarialStall -benchtime 1x -v ./core/
func BenchmarkAdversarialStall(b *testing.B) {
	const rounds, ops = 5, 20_000
	ix := NewIndex()
	for _, gs := range benchFleet(100_000) {
		ix.Upsert(gs)
	}
	victim := benchRequest(Packed)
	adv := &Request{}
	for range MaxSelectors {
		adv.Selectors = append(adv.Selectors, Selector{Counters: map[string]CounterSelector{"rooms": {MinCount: 99}}})
	}
	adversary, err := Normalize(adv)
	if err != nil {
		b.Fatal(err)
	}
	warm(b, ix, victim)
	// The first request in a namespace without labels builds the
	// namespace's group (one pass, once); make it before timing.
	if _, err := ix.Allocate(adversary, benchNow, 0); err != ErrScanBudget {
		b.Fatalf("adversary: %v, want ErrScanBudget", err)
	}
	spin := func(n int) {
		x := uint64(n)
		for range 5_000_000 {
			x = x*6364136223846793005 + 1
		}
		benchSink = x
	}
	attack := func(n int) {
		if _, err := ix.Allocate(adversary, benchNow, uint64(n)); err != ErrScanBudget {
			b.Errorf("adversary: %v, want ErrScanBudget", err)
		}
	}
	lat := make([]time.Duration, ops)
	phase := func(name string, neighbour func(int)) (p99 time.Duration) {
		stop := make(chan struct{})
		done := make(chan int)
		if neighbour != nil {
			go func() {
				n := 0
				for {
					select {
					case <-stop:
						done <- n
						return
					default:
					}
					neighbour(n)
					n++
				}
			}()
			time.Sleep(5 * time.Millisecond) // let it get going
		}
		for i := range lat {
			t := time.Now()
			res, err := ix.AllocateAndCommit(victim, benchNow, uint64(i))
			lat[i] = time.Since(t)
			if err != nil {
				b.Fatal(err)
			}
			ix.Upsert(res.Previous)
		}
		n := 0
		if neighbour != nil {
			close(stop)
			n = <-done
		}
		slices.Sort(lat)
		b.Logf("%-10s (%3d neighbour runs): victim p50 %v p90 %v p99 %v p99.9 %v max %v", name, n,
			lat[len(lat)/2], lat[len(lat)*90/100], lat[len(lat)*99/100], lat[len(lat)*999/1000], lat[len(lat)-1])
		return lat[len(lat)*99/100]
	}
	var vsSpin, vsAlone []float64
	for range rounds {
		alone := phase("alone", nil)
		busy := phase("spinner", spin)
		adv := phase("adversary", attack)
		vsSpin = append(vsSpin, float64(adv)/float64(busy))
		vsAlone = append(vsAlone, float64(adv)/float64(alone))
	}
	slices.Sort(vsSpin)
	slices.Sort(vsAlone)
	b.ReportMetric(vsSpin[len(vsSpin)/2], "p99-vs-spinner")
	b.ReportMetric(vsAlone[len(vsAlone)/2], "p99-vs-alone")
}

var benchSink uint64

// BenchmarkFirstLabelKey measures what the first request naming a label key
// costs everyone else. The index builds that key's groups then (every
// server looked at, the ones carrying it sorted by name); at 250,000
// servers that is a fraction of a second of CPU on a quiet machine, many
// seconds on a busy one, so it must not happen under the index's lock. A
// victim allocates (a fleet label, Packed, given back each time) alone and
// then while, per round, a first request names a new key carried by every
// server. It reports, as medians over rounds, the build's wall time, the
// victim's longest wait during the build as a share of it (1: the victim
// stood still for the whole build) and the victim's p99 during the build
// over its p99 alone.
//
//	go test -run '^$' -bench FirstLabelKey -benchtime 1x -v ./core/
func BenchmarkFirstLabelKey(b *testing.B) {
	const servers, rounds, alone = 250_000, 3, 20_000
	ix := NewIndex()
	for i, gs := range benchFleet(servers) {
		for r := range rounds {
			gs.Labels[fmt.Sprintf("key-%d", r)] = fmt.Sprintf("v%d", i%4)
		}
		ix.Upsert(gs)
	}
	victim := benchRequest(Packed)
	warm(b, ix, victim)
	allocate := func(i int) time.Duration {
		t := time.Now()
		res, err := ix.AllocateAndCommit(victim, benchNow, uint64(i))
		d := time.Since(t)
		if err != nil {
			b.Fatal(err)
		}
		ix.Upsert(res.Previous)
		return d
	}
	p99 := func(lat []time.Duration) time.Duration {
		slices.Sort(lat)
		return lat[len(lat)*99/100]
	}
	var builds, stalls, p99s []float64
	for r := range rounds {
		lat := make([]time.Duration, alone)
		for i := range lat {
			lat[i] = allocate(i)
		}
		aloneP99, aloneMax := p99(lat), slices.Max(lat)
		first, err := Normalize(&Request{Selectors: []Selector{{MatchLabels: map[string]string{fmt.Sprintf("key-%d", r): "v1"}}}})
		if err != nil {
			b.Fatal(err)
		}
		done := make(chan time.Duration)
		go func() {
			t := time.Now()
			res, err := ix.Allocate(first, benchNow, 1)
			d := time.Since(t)
			if err != nil {
				b.Error(err)
			} else {
				ix.Abort(res)
			}
			done <- d
		}()
		lat = lat[:0]
		var build time.Duration
	during:
		for i := 0; ; i++ {
			select {
			case build = <-done:
				break during
			default:
			}
			lat = append(lat, allocate(i))
		}
		longest := slices.Max(lat)
		b.Logf("round %d: build %v; victim alone p99 %v, longest %v; during the build %d allocations, p99 %v, longest %v",
			r, build, aloneP99, aloneMax, len(lat), p99(lat), longest)
		builds = append(builds, float64(build.Milliseconds()))
		stalls = append(stalls, float64(longest)/float64(build))
		p99s = append(p99s, float64(p99(lat))/float64(aloneP99))
	}
	median := func(xs []float64) float64 { slices.Sort(xs); return xs[len(xs)/2] }
	b.ReportMetric(median(builds), "build-ms")
	b.ReportMetric(median(stalls), "longest-wait/build")
	b.ReportMetric(median(p99s), "p99-during/alone")
}
