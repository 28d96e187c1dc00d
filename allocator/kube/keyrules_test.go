package kube_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/quartermaster-dev/quartermaster/allocator"
	"github.com/quartermaster-dev/quartermaster/allocator/allocatortest"
	"github.com/quartermaster-dev/quartermaster/allocator/kube"
	"github.com/quartermaster-dev/quartermaster/allocator/pb/allocation"
	"github.com/quartermaster-dev/quartermaster/core"
	"github.com/quartermaster-dev/quartermaster/kindcluster"
)

// The allocator's rules of idempotency keys (allocatortest.KeyRules), each
// request going through a Service, over three replicas of the kubernetes
// backend on one real API server: each replica's Service holds its own
// table of keys, so every rule that crosses replicas rests on the
// backend's key records (keys.go).
func TestKeyRulesKube(t *testing.T) {
	c := kindcluster.NewForTest(t, kindcluster.Options{Name: "kube-key-rules", EtcdUnsafeNoFsync: true})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const ns = "key-rules"
	readyGameServers(ctx, t, c, ns, "green", 12)
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

// readyGameServers creates namespace ns on c's API server and n Ready
// GameServers of fleet in it (gs-00, gs-01, ...), each with a "rooms"
// counter of capacity 4, spread over three nodes.
func readyGameServers(ctx context.Context, t *testing.T, c *kindcluster.Cluster, ns, fleet string, n int) {
	t.Helper()
	cs, err := c.Clientset()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	dc, err := c.Dynamic()
	if err != nil {
		t.Fatal(err)
	}
	gss := dc.Resource(kube.GameServerResource).Namespace(ns)
	for i := range n {
		var obj map[string]any
		if err := json.Unmarshal(fmt.Appendf(nil, `{
		  "apiVersion": "agones.dev/v1", "kind": "GameServer",
		  "metadata": {"name": "gs-%02d", "namespace": %q, "labels": {%q: %q}},
		  "spec": {"container": "gs", "ports": [{"name": "default", "portPolicy": "Dynamic", "containerPort": 7654, "protocol": "UDP"}],
		    "template": {"spec": {"containers": [{"name": "gs", "image": "example/gs:0.1"}]}}},
		  "status": {"state": "Ready", "address": "10.0.0.%d", "nodeName": "node-%d", "ports": [{"name": "default", "port": 7001}],
		    "counters": {"rooms": {"count": 0, "capacity": 4}}}}`, i, ns, core.FleetLabel, fleet, i+1, i%3), &obj); err != nil {
			t.Fatal(err)
		}
		if _, err := gss.Create(ctx, &unstructured.Unstructured{Object: obj}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}
