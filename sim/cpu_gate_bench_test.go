//go:build unix

package sim

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

// BenchmarkGateSim is the speed benchmark's scenario (100k servers, four
// clusters, seed 2026) for twenty virtual minutes, as the performance gate
// measures it: the process's CPU time per simulated event ("cpu-ns/event")
// and the events themselves, which at a fixed seed change only when the
// simulator's behaviour does. -benchmem's allocations and bytes are per
// run of the twenty minutes.
func BenchmarkGateSim(b *testing.B) {
	b.ReportAllocs()
	var events int64
	cpu0 := processCPU(b)
	for range b.N {
		res, err := Run(dayAt100k(1, 20*time.Minute))
		if err != nil {
			b.Fatal(err)
		}
		events += int64(res.Events)
	}
	cpu := processCPU(b) - cpu0
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(events), "cpu-ns/event")
	b.ReportMetric(float64(events)/float64(b.N), "events/op")
}
