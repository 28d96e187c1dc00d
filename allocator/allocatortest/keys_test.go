package allocatortest_test

import (
	"context"
	"testing"
	"time"

	"github.com/quartermaster-dev/quartermaster/allocator"
	"github.com/quartermaster-dev/quartermaster/allocator/allocatortest"
	"github.com/quartermaster-dev/quartermaster/allocator/memory"
	"github.com/quartermaster-dev/quartermaster/allocator/pb/allocation"
	"github.com/quartermaster-dev/quartermaster/core"
)

const fleets = `
apiVersion: quartermaster.dev/v1alpha1
kind: Fleets
nodes: 2
fleets:
- name: rooms
  replicas: 8
  counters: {rooms: {capacity: 5}}
`

// The memory backend, one process: the rules hold through the service's
// own table of keys.
func TestKeyRulesMemory(t *testing.T) {
	cfg, err := memory.ParseConfig([]byte(fleets))
	if err != nil {
		t.Fatal(err)
	}
	b := memory.New(cfg, memory.Options{Seed: 1, Clock: memory.NewFakeClock(time.Unix(1_800_000_000, 0))})
	svc, err := allocator.NewService(allocator.Options{Backend: b})
	if err != nil {
		t.Fatal(err)
	}
	allocatortest.KeyRules(t, allocatortest.KeyEnv{
		Replicas: []*allocator.Service{svc},
		Request: func() *allocation.AllocationRequest {
			return &allocation.AllocationRequest{
				Namespace:           "default",
				GameServerSelectors: []*allocation.GameServerSelector{{MatchLabels: map[string]string{core.FleetLabel: "rooms"}}},
			}
		},
		Counter: "rooms",
		Stored:  func(context.Context) ([]*core.GameServer, error) { return b.Allocated(), nil },
	})
}
