// Package kubetest is the setup that tests against a real API server
// share: a cluster's clients, namespaces of their own, GameServers as
// Agones writes them (one, or a fleet of them written by several writers
// at once), manifests applied with kubectl, and waiting for a condition.
//
// The API server is kindcluster's local one: kindcluster.NewForTest (or
// Start, below) for a test of its own, kindcluster.Start for a Ginkgo
// suite's. Every helper fails the test it is given, so a Ginkgo spec
// passes GinkgoTB().
package kubetest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/quartermaster-dev/quartermaster/allocator/kube"
	"github.com/quartermaster-dev/quartermaster/core"
	"github.com/quartermaster-dev/quartermaster/fleetagent"
	"github.com/quartermaster-dev/quartermaster/kindcluster"
)

// API is one cluster's clients, made once for a test.
type API struct {
	Cluster *kindcluster.Cluster
	Core    kubernetes.Interface
	Dynamic dynamic.Interface
}

// Start starts a cluster of the test's own, named name, with etcd's fsync
// off (nobody keeps a test's data), and returns its clients. It is
// kindcluster.NewForTest: skipped under -short, stopped when the test ends.
// A benchmark that measures the API server's writes starts its cluster
// with kindcluster.NewForTest and fsync on, then takes Clients.
func Start(tb testing.TB, name string) *API {
	tb.Helper()
	return Clients(tb, kindcluster.NewForTest(tb, kindcluster.Options{Name: name, EtcdUnsafeNoFsync: true}))
}

// Clients makes c's clients.
func Clients(tb testing.TB, c *kindcluster.Cluster) *API {
	tb.Helper()
	cs, err := c.Clientset()
	if err != nil {
		tb.Fatalf("clients of cluster %s: %v", c.Name(), err)
	}
	dc, err := c.Dynamic()
	if err != nil {
		tb.Fatalf("clients of cluster %s: %v", c.Name(), err)
	}
	return &API{Cluster: c, Core: cs, Dynamic: dc}
}

// Namespace creates the namespace name and returns it.
func (a *API) Namespace(tb testing.TB, ctx context.Context, name string) string {
	tb.Helper()
	if _, err := a.Core.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		tb.Fatalf("create namespace %s: %v", name, err)
	}
	return name
}

// GameServers is the GameServers of namespace ns.
func (a *API) GameServers(ns string) dynamic.ResourceInterface {
	return a.Dynamic.Resource(kube.GameServerResource).Namespace(ns)
}

// Fleets is the Fleets of namespace ns.
func (a *API) Fleets(ns string) dynamic.ResourceInterface {
	return a.Dynamic.Resource(fleetagent.FleetResource).Namespace(ns)
}

// Create creates u, a GameServer, in its namespace, and returns it as the
// API server stored it.
func (a *API) Create(tb testing.TB, ctx context.Context, u *unstructured.Unstructured) *unstructured.Unstructured {
	tb.Helper()
	got, err := a.GameServers(u.GetNamespace()).Create(ctx, u, metav1.CreateOptions{})
	if err != nil {
		tb.Fatalf("create GameServer %s/%s: %v", u.GetNamespace(), u.GetName(), err)
	}
	return got
}

// CreateFleet creates n Ready GameServers of fleet in ns, as
// FleetGameServer(ns, fleet, i) for i from from to from+n-1, with
// several writers at once (thousands take too long one by one).
func (a *API) CreateFleet(tb testing.TB, ctx context.Context, ns, fleet string, from, n int) {
	tb.Helper()
	if err := CreateFleet(ctx, a.GameServers(ns), ns, fleet, from, n); err != nil {
		tb.Fatal(err)
	}
}

// CreateFleet is API.CreateFleet for a caller that handles the error
// itself; gss is ns's GameServers.
func CreateFleet(ctx context.Context, gss dynamic.ResourceInterface, ns, fleet string, from, n int) error {
	const writers = 16
	next := make(chan int)
	var wg sync.WaitGroup
	var once sync.Once
	var first error
	for range writers {
		wg.Go(func() {
			for i := range next {
				if _, err := gss.Create(ctx, FleetGameServer(ns, fleet, i), metav1.CreateOptions{}); err != nil {
					once.Do(func() { first = fmt.Errorf("create GameServer %s/%s: %w", ns, FleetServerName(fleet, i), err) })
				}
			}
		})
	}
	for i := from; i < from+n; i++ {
		next <- i
	}
	close(next)
	wg.Wait()
	return first
}

// FleetNodes is how many nodes a fleet's GameServers are spread over.
const FleetNodes = 75

// FleetServerName is the name of fleet's i-th GameServer: the fleet's name
// and i, five digits.
func FleetServerName(fleet string, i int) string { return fmt.Sprintf("%s-%05d", fleet, i) }

// FleetGameServer is fleet's i-th GameServer in ns: GameServer named
// FleetServerName(fleet, i), on node i mod FleetNodes.
func FleetGameServer(ns, fleet string, i int) *unstructured.Unstructured {
	return GameServer(ns, FleetServerName(fleet, i), fleet, fmt.Sprintf("node-%02d", i%FleetNodes))
}

// GameServer is a Ready GameServer named name in ns, of fleet (no fleet
// label when fleet is ""), on node, as Agones writes one: with the fields
// the allocator does not model (its pod template, ports, addresses,
// players, eviction, an SDK annotation) beside those it does: a "rooms"
// counter of capacity 4 and a "players" list of capacity 8, both empty.
func GameServer(ns, name, fleet, node string) *unstructured.Unstructured {
	labels := map[string]any{}
	if fleet != "" {
		labels[core.FleetLabel] = fleet
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "agones.dev/v1",
		"kind":       "GameServer",
		"metadata": map[string]any{
			"name": name, "namespace": ns, "labels": labels,
			"annotations": map[string]any{"agones.dev/sdk-version": "1.60.0"},
		},
		"spec": map[string]any{
			"container": "gs",
			"ports": []any{map[string]any{
				"name": "default", "portPolicy": "Dynamic", "containerPort": int64(7654), "protocol": "UDP",
			}},
			"template": map[string]any{
				"metadata": map[string]any{"creationTimestamp": nil},
				"spec": map[string]any{"containers": []any{map[string]any{
					"name": "gs", "image": "example/gs:0.1",
					"resources": map[string]any{"requests": map[string]any{"cpu": "20m"}},
				}}},
			},
		},
		"status": map[string]any{
			"state":     "Ready",
			"address":   "10.0.0.7",
			"nodeName":  node,
			"addresses": []any{map[string]any{"type": "InternalIP", "address": "10.0.0.7"}},
			"ports":     []any{map[string]any{"name": "default", "port": int64(7001)}},
			"players":   map[string]any{"count": int64(0), "capacity": int64(0)},
			"counters":  map[string]any{"rooms": map[string]any{"count": int64(0), "capacity": int64(4)}},
			"lists":     map[string]any{"players": map[string]any{"capacity": int64(8), "values": []any{}}},
			"eviction":  map[string]any{"safe": "Never"},
		},
	}}
}

// Apply applies the manifest files with kubectl.
func (a *API) Apply(tb testing.TB, ctx context.Context, files ...string) {
	tb.Helper()
	for _, f := range files {
		if out, err := a.Cluster.Kubectl(ctx, "apply", "-f", f); err != nil {
			tb.Fatalf("kubectl apply -f %s: %v\n%s", f, err, out)
		}
	}
}

// Eventually polls cond until it holds, and fails the test if it does not
// within the time given or before ctx ends. cond says, besides, what it
// saw, for the failure's message.
func Eventually(tb testing.TB, ctx context.Context, within time.Duration, what string, cond func() (bool, string)) {
	tb.Helper()
	deadline := time.Now().Add(within)
	var last string
	for {
		ok, saw := cond()
		if ok {
			return
		}
		last = saw
		if time.Now().After(deadline) || ctx.Err() != nil {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if ctx.Err() != nil {
		tb.Fatalf("%s: not reached before the test's context ended (last: %s)", what, last)
	}
	tb.Fatalf("%s: not reached within %s (last: %s)", what, within, last)
}
