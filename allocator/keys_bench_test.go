package allocator_test

import (
	"context"
	"strconv"
	"testing"

	"github.com/quartermaster-dev/quartermaster/allocator"
	"github.com/quartermaster-dev/quartermaster/allocator/memory"
	"github.com/quartermaster-dev/quartermaster/allocator/pb/allocation"
)

// BenchmarkServiceAllocate is the service alone, in process (no transport),
// on the memory backend: a request without a key, with a new key each
// time, and the same key again (a duplicate answered from the first
// allocation). The fleet is given back and refilled off the clock.
//
//	go test -run '^$' -bench ServiceAllocate -benchmem ./allocator/
func BenchmarkServiceAllocate(b *testing.B) {
	cfg, err := memory.ParseConfig([]byte(benchFleet))
	if err != nil {
		b.Fatal(err)
	}
	backend := memory.New(cfg, memory.Options{Seed: 1})
	svc, err := allocator.NewService(allocator.Options{Backend: backend})
	if err != nil {
		b.Fatal(err)
	}
	refill := func() {
		for _, gs := range backend.Allocated() {
			_, _ = backend.Release(context.Background(), gs.Key(), "")
		}
		backend.Step()
	}
	keyed := func(key string) *allocation.AllocationRequest {
		return &allocation.AllocationRequest{
			Namespace:           benchRequest.Namespace,
			GameServerSelectors: benchRequest.GameServerSelectors,
			Metadata:            &allocation.MetaPatch{Annotations: map[string]string{allocator.AllocationKeyAnnotation: key}},
		}
	}
	ctx := context.Background()
	// run makes keys differ between the runs of a sub-benchmark (a key of
	// an earlier run was given back by its refill).
	run := 0
	for _, c := range []struct {
		name string
		req  func(i int) *allocation.AllocationRequest
	}{
		{"no-key", func(int) *allocation.AllocationRequest { return benchRequest }},
		{"new-key", func(i int) *allocation.AllocationRequest {
			return keyed("bench-" + strconv.Itoa(run) + "-" + strconv.Itoa(i))
		}},
		// One key per refill: a refill gives its server back.
		{"same-key", func(i int) *allocation.AllocationRequest {
			return keyed("bench-same-" + strconv.Itoa(run) + "-" + strconv.Itoa(i/10000))
		}},
	} {
		b.Run(c.name, func(b *testing.B) {
			run++
			reqs := make([]*allocation.AllocationRequest, 10000)
			for i := range reqs {
				reqs[i] = c.req(i)
			}
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				if i%10000 == 0 {
					b.StopTimer()
					refill()
					for j := range reqs {
						reqs[j] = c.req(i + j)
					}
					b.StartTimer()
				}
				if _, err := svc.Allocate(ctx, "dev", reqs[i%10000]); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
