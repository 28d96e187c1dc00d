package core

import (
	"fmt"
	"runtime"
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
