package allocator_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/quartermaster-dev/quartermaster/allocator/pb/allocation"
)

// BenchmarkAdversarialStall is the service-level twin of core's benchmark of
// the same name: 16 callers allocate (over gRPC with mTLS, in this process)
// from a fleet of 100,000 servers, alone and beside two callers that send,
// back to back, requests of 32 selectors matching nothing (a counter no
// server satisfies: each selector is a pass over the fleet, and the request
// ends at the index's scan budget). Phases alternate over rounds; between
// phases the fleet is given back, off the clock. It reports the median over
// rounds of the callers' p99 beside the adversary over their p99 alone (the
// target: at most 2). The adversary's two callers keep up to two cores busy
// by themselves, so on a 2-core machine part of that ratio is plain CPU
// sharing, not waiting for the index.
//
//	go test -run '^$' -bench AdversarialStall -benchtime 1x -v ./allocator/
func BenchmarkAdversarialStall(b *testing.B) {
	const rounds, callers, slice = 5, 16, time.Second
	h := startHarness(b, harnessOpts{fleets: `
apiVersion: quartermaster.dev/v1alpha1
kind: Fleets
nodes: 500
fleets:
- name: big
  replicas: 100000
  counters: {rooms: {capacity: 4}}
`})
	conn := h.dial(nil)
	client := allocation.NewAllocationServiceClient(conn)
	victim := &allocation.AllocationRequest{GameServerSelectors: []*allocation.GameServerSelector{
		{MatchLabels: map[string]string{"agones.dev/fleet": "big"}},
	}}
	adversary := &allocation.AllocationRequest{}
	for range 32 {
		adversary.GameServerSelectors = append(adversary.GameServerSelectors, &allocation.GameServerSelector{
			Counters: map[string]*allocation.CounterSelector{"rooms": {MinCount: 99}},
		})
	}
	call := func(req *allocation.AllocationRequest) error {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_, err := client.Allocate(ctx, req)
		return err
	}
	// The first request without labels builds the namespace's group (one
	// pass, once): before timing.
	if err := call(adversary); status.Code(err) != codes.ResourceExhausted {
		b.Fatalf("adversary: %v, want ResourceExhausted (scan budget)", err)
	}
	attack := func(int) error {
		if err := call(adversary); status.Code(err) != codes.ResourceExhausted {
			return err
		}
		return nil
	}
	phase := func(name string, neighbour func(int) error) time.Duration {
		stop := make(chan struct{})
		var wg sync.WaitGroup
		runs := make([]int, 2)
		if neighbour != nil {
			for w := range runs {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for n := 0; ; n++ {
						select {
						case <-stop:
							return
						default:
						}
						if err := neighbour(n); err != nil {
							b.Errorf("%s: %v", name, err)
							return
						}
						runs[w]++
					}
				}()
			}
			time.Sleep(20 * time.Millisecond)
		}
		lats := make([][]time.Duration, callers)
		var cw sync.WaitGroup
		end := time.Now().Add(slice)
		for c := range callers {
			cw.Add(1)
			go func() {
				defer cw.Done()
				for time.Now().Before(end) {
					t := time.Now()
					if err := call(victim); err != nil {
						b.Errorf("victim: %v", err)
						return
					}
					lats[c] = append(lats[c], time.Since(t))
				}
			}()
		}
		cw.Wait()
		close(stop)
		wg.Wait()
		all := slices.Concat(lats...)
		slices.Sort(all)
		p := func(q float64) time.Duration { return all[int(q*float64(len(all)-1))] }
		b.Logf("%-10s (%3d neighbour runs): %6d calls, p50 %v p90 %v p99 %v max %v",
			name, runs[0]+runs[1], len(all), p(.5), p(.9), p(.99), all[len(all)-1])
		// Give the fleet back, off the clock.
		for _, gs := range h.backend.Allocated() {
			_, _ = h.backend.Release(context.Background(), gs.Key(), "")
		}
		h.backend.Step()
		return p(.99)
	}
	var ratios []float64
	for range rounds {
		alone := phase("alone", nil)
		adv := phase("adversary", attack)
		ratios = append(ratios, float64(adv)/float64(alone))
	}
	slices.Sort(ratios)
	b.ReportMetric(ratios[len(ratios)/2], "p99-vs-alone")
}
