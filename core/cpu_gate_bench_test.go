//go:build unix

package core

import (
	"syscall"
	"testing"
	"time"
)

// processCPU is the CPU time (user and system) this process has used so
// far. Time spent waiting for a core on a busy machine is not in it, which
// is why the performance gate compares it rather than wall time.
func processCPU(b *testing.B) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		b.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkGateAllocate is BenchmarkAllocate's workload (1k and 10k
// servers) as the performance gate measures it: the process's CPU time per
// allocation ("cpu-ns/op"), beside -benchmem's allocations and bytes per
// operation.
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
				b.ReportAllocs()
				b.ResetTimer()
				cpu0 := processCPU(b)
				for i := range b.N {
					res, err := ix.AllocateAndCommit(req, benchNow, uint64(i))
					if err != nil {
						b.Fatal(err)
					}
					ix.Upsert(res.Previous)
				}
				cpu := processCPU(b) - cpu0
				b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
			})
		}
	}
}
