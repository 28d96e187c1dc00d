package core

import (
	"errors"
	"fmt"
	"sync"
	"testing"
)

// TestSpreadAndShardChangeWhileAllocating: an allocator replica changes its
// Packed spread and shard while it serves (conflicts widen the spread; the
// replica count comes and goes with the other replicas' Leases). Every
// allocation must still hand out a Ready server of the fleet exactly once,
// and the fleet must drain completely. Run with -race.
func TestSpreadAndShardChangeWhileAllocating(t *testing.T) {
	const servers, workers = 2000, 8
	ix := NewIndex()
	for i := range servers {
		ix.Upsert(ready(fmt.Sprintf("gs-%04d", i), fmt.Sprintf("n%02d", i%40), FleetLabel, "f"))
	}
	req := mustNormalize(t, &Request{Selectors: []Selector{{MatchLabels: map[string]string{FleetLabel: "f"}}}})
	stop := make(chan struct{})
	var changer sync.WaitGroup
	changer.Go(func() {
		spreads := []int{1, 4, 64, 256, 16}
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			ix.SetPackedSpread(spreads[i%len(spreads)])
			n := 1 + i%4
			ix.SetReplicaShard(i%n, n)
		}
	})
	var mu sync.Mutex
	got := map[string]int{}
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Go(func() {
			for i := 0; ; i++ {
				res, err := ix.AllocateAndCommit(req, t0, uint64(w)<<32|uint64(i))
				if errors.Is(err, ErrNoMatch) {
					return
				}
				if err != nil {
					errs <- err
					return
				}
				if res.Previous.State != StateReady {
					errs <- fmt.Errorf("%s was %s when allocated", res.Previous.Name, res.Previous.State)
					return
				}
				mu.Lock()
				got[res.GameServer.Name]++
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	close(stop)
	changer.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if len(got) != servers {
		t.Fatalf("%d servers allocated, want all %d", len(got), servers)
	}
	for name, n := range got {
		if n != 1 {
			t.Fatalf("%s allocated %d times", name, n)
		}
	}
}
