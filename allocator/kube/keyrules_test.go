package kube_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/quartermaster-dev/quartermaster/allocator"
	"github.com/quartermaster-dev/quartermaster/allocator/allocatortest"
	"github.com/quartermaster-dev/quartermaster/allocator/kube"
	"github.com/quartermaster-dev/quartermaster/allocator/pb/allocation"
	"github.com/quartermaster-dev/quartermaster/core"
	"github.com/quartermaster-dev/quartermaster/kindcluster/kubetest"
)

// The allocator's rules of idempotency keys (allocatortest.KeyRules), each
// request going through a Service, over three replicas of the kubernetes
// backend on one real API server: each replica's Service holds its own
// table of keys, so every rule that crosses replicas rests on the
// backend's key records (keys.go).
func TestKeyRulesKube(t *testing.T) {
	api := kubetest.Start(t, "kube-key-rules")
	c := api.Cluster
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const ns = "key-rules"
	api.Namespace(t, ctx, ns)
	api.CreateFleet(t, ctx, ns, "green", 0, 12)
	var backends []*kube.Backend
	var services []*allocator.Service
	for range 3 {
		b, err := kube.New(kube.Config{REST: c.RESTConfig(), Namespace: ns, KeyNamespace: ns})
		if err != nil {
			t.Fatal(err)
		}
		if err := b.Start(ctx); err != nil {
			t.Fatal(err)
		}
		svc, err := allocator.NewService(allocator.Options{Backend: b})
		if err != nil {
			t.Fatal(err)
		}
		backends, services = append(backends, b), append(services, svc)
	}
	stored := func(ctx context.Context) ([]*core.GameServer, error) { return backends[0].StoredAllocated(ctx, ns) }
	allocatortest.KeyRules(t, allocatortest.KeyEnv{
		Replicas: services,
		Request: func() *allocation.AllocationRequest {
			return &allocation.AllocationRequest{Namespace: ns,
				GameServerSelectors: []*allocation.GameServerSelector{{MatchLabels: map[string]string{core.FleetLabel: "green"}}}}
		},
		Counter: "rooms",
		Stored:  stored,
		// Every replica's cache holds every Allocated server at the
		// version the API server has.
		Settle: func(ctx context.Context) error {
			for {
				want, err := stored(ctx)
				if err != nil {
					return err
				}
				settled := true
				for _, b := range backends {
					for _, gs := range want {
						if got, ok := b.Get(gs.Key()); !ok || got.Version != gs.Version {
							settled = false
						}
					}
				}
				if settled {
					return nil
				}
				select {
				case <-ctx.Done():
					return fmt.Errorf("the replicas' caches did not catch up: %w", ctx.Err())
				case <-time.After(20 * time.Millisecond):
				}
			}
		},
	})
}
