//go:build unix

package core

import (
	"slices"
	"syscall"
	"testing"
)

// processCPUNs is the CPU time (user and system) this process has used so
// far, in nanoseconds. Time spent waiting for a core on a busy machine is
// not in it, which is why the performance gate compares it rather than
// wall time.
func processCPUNs(b *testing.B) int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}

// gateBatch is how many allocations the gate benchmark times at a time: a
// batch lasts a fraction of a millisecond, shorter than the time a busy
// machine's scheduler gives a process before switching, so that some
// batches run whole on a warm core.
const gateBatch = 128

// BenchmarkGateAllocate is BenchmarkAllocate's workload (1k and 10k
// servers) as the performance gate measures it: CPU time per allocation
// ("cpu-ns/op"), beside -benchmem's allocations and bytes per operation.
//
// The CPU time is read every gateBatch allocations, and cpu-ns/op is the
// lower quartile of the batches' CPU per allocation (cpu-mean-ns/op, the
// whole loop's mean, is reported beside it). Another process on the
// machine can only add to a batch's CPU: each switch to it and back
// leaves this process's caches to be refilled, at a cost per allocation
// that grows with how often the machine switches, which the load
// decides. The least disturbed batches say what an allocation costs; a
// slowdown of the code moves every batch alike.
func BenchmarkGateAllocate(b *testing.B) {
	for _, st := range benchStrategies {
		for _, sz := range benchSizes {
			if sz.n > 10_000 {
				continue
			}
			b.Run(st.name+"-"+sz.name, func(b *testing.B) {
				ix := NewIndex()
				for _, gs := range benchFleet(sz.n) {
					ix.Upsert(gs)
				}
				req := benchRequest(st.s)
				warm(b, ix, req)
				batches := make([]float64, 0, b.N/gateBatch)
				b.ReportAllocs()
				b.ResetTimer()
				cpu0 := processCPUNs(b)
				last := cpu0
				for i := range b.N {
					res, err := ix.AllocateAndCommit(req, benchNow, uint64(i))
					if err != nil {
						b.Fatal(err)
					}
					ix.Upsert(res.Previous)
					if (i+1)%gateBatch == 0 {
						now := processCPUNs(b)
						batches = append(batches, float64(now-last)/gateBatch)
						last = now
					}
				}
				mean := float64(processCPUNs(b)-cpu0) / float64(b.N)
				b.StopTimer()
				perOp := mean
				if len(batches) > 0 {
					slices.Sort(batches)
					perOp = batches[(len(batches)-1)/4]
				}
				b.ReportMetric(perOp, "cpu-ns/op")
				b.ReportMetric(mean, "cpu-mean-ns/op")
			})
		}
	}
}
