package fleetagent

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic/fake"
	clienttesting "k8s.io/client-go/testing"
)

// fakeClock is stepped by the test.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) Step(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

func fleet(name string, replicas int64) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "agones.dev/v1", "kind": "Fleet",
		"metadata": map[string]any{"name": name, "namespace": "ns", "uid": "uid-" + name},
		"spec": map[string]any{
			"replicas": replicas, "scheduling": "Packed",
			"template": map[string]any{
				"metadata": map[string]any{"labels": map[string]any{"mode": "duel"}},
				"spec": map[string]any{
					"ports":    []any{map[string]any{"name": "game", "containerPort": int64(7654)}},
					"counters": map[string]any{"rooms": map[string]any{"count": int64(0), "capacity": int64(4)}},
					"lists":    map[string]any{"players": map[string]any{"capacity": int64(8)}},
					"template": map[string]any{"spec": map[string]any{"containers": []any{map[string]any{"name": "gs", "image": "example/gs"}}}},
				},
			},
		},
	}}
}

type rig struct {
	t     *testing.T
	ctx   context.Context
	clock *fakeClock
	dc    *fake.FakeDynamicClient
	agent *Agent
}

func newRig(t *testing.T, objs ...runtime.Object) *rig {
	t.Helper()
	dc := fake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{
		FleetResource: "FleetList", GameServerResource: "GameServerList",
	}, objs...)
	clock := &fakeClock{t: time.Date(2026, 11, 22, 3, 0, 0, 0, time.UTC)}
	a, err := New(Config{Client: dc, Namespace: "ns", Nodes: 4, MaxPerNode: 2, Startup: 2 * time.Second, Session: time.Minute, Clock: clock, Seed: 7})
	if err != nil {
		t.Fatal(err)
	}
	return &rig{t: t, ctx: context.Background(), clock: clock, dc: dc, agent: a}
}

func (r *rig) sync() {
	r.t.Helper()
	if err := r.agent.Sync(r.ctx); err != nil {
		r.t.Fatalf("sync: %v", err)
	}
}

func (r *rig) servers() []unstructured.Unstructured {
	r.t.Helper()
	l, err := r.dc.Resource(GameServerResource).Namespace("ns").List(r.ctx, metav1.ListOptions{})
	if err != nil {
		r.t.Fatal(err)
	}
	return l.Items
}

func (r *rig) byState() map[string]int {
	out := map[string]int{}
	for _, gs := range r.servers() {
		out[state(&gs)]++
	}
	return out
}

func (r *rig) fleetStatus(name string) map[string]any {
	r.t.Helper()
	f, err := r.dc.Resource(FleetResource).Namespace("ns").Get(r.ctx, name, metav1.GetOptions{})
	if err != nil {
		r.t.Fatal(err)
	}
	st, _, _ := unstructured.NestedMap(f.Object, "status")
	return st
}

// setState writes a state (and annotations) as an allocator would.
func (r *rig) setState(name, st string, ann map[string]string) {
	r.t.Helper()
	c := r.dc.Resource(GameServerResource).Namespace("ns")
	gs, err := c.Get(r.ctx, name, metav1.GetOptions{})
	if err != nil {
		r.t.Fatal(err)
	}
	_ = unstructured.SetNestedField(gs.Object, st, "status", "state")
	a := gs.GetAnnotations()
	for k, v := range ann {
		a[k] = v
	}
	gs.SetAnnotations(a)
	if _, err := c.Update(r.ctx, gs, metav1.UpdateOptions{}); err != nil {
		r.t.Fatal(err)
	}
}

func TestFleetComesUpScheduledThenReady(t *testing.T) {
	r := newRig(t, fleet("green", 3))
	r.sync()
	gss := r.servers()
	if len(gss) != 3 {
		t.Fatalf("want 3 servers, got %d", len(gss))
	}
	nodes := map[string]int{}
	for _, gs := range gss {
		if s := state(&gs); s != stateScheduled {
			t.Errorf("%s: state %q, want Scheduled", gs.GetName(), s)
		}
		l := gs.GetLabels()
		if l[FleetLabel] != "green" || l[GameServerSetLabel] == "" || l["mode"] != "duel" {
			t.Errorf("%s: labels %v", gs.GetName(), l)
		}
		if uid, ok := fleetOwner(&gs); !ok || uid != "uid-green" {
			t.Errorf("%s: owner %v", gs.GetName(), gs.GetOwnerReferences())
		}
		node, _, _ := unstructured.NestedString(gs.Object, "status", "nodeName")
		nodes[node]++
		ports, _, _ := unstructured.NestedSlice(gs.Object, "status", "ports")
		if len(ports) != 1 || ports[0].(map[string]any)["name"] != "game" {
			t.Errorf("%s: ports %v", gs.GetName(), ports)
		}
		if c, _, _ := unstructured.NestedInt64(gs.Object, "status", "counters", "rooms", "capacity"); c != 4 {
			t.Errorf("%s: counters not copied from the template", gs.GetName())
		}
		if img, _, _ := unstructured.NestedSlice(gs.Object, "spec", "template", "spec", "containers"); len(img) != 1 {
			t.Errorf("%s: spec not copied from the template", gs.GetName())
		}
	}
	// Packed with 2 per node: node-000 full first, then node-001.
	if nodes["node-000"] != 2 || nodes["node-001"] != 1 {
		t.Errorf("packed placement: %v", nodes)
	}
	if st := r.fleetStatus("green"); st["replicas"] != int64(3) || st["readyReplicas"] != int64(0) {
		t.Errorf("fleet status %v", st)
	}

	r.clock.Step(time.Second)
	r.sync()
	if got := r.byState(); got[stateScheduled] != 3 {
		t.Fatalf("Ready before the start-up delay: %v", got)
	}
	r.clock.Step(time.Second)
	r.sync()
	if got := r.byState(); got[stateReady] != 3 {
		t.Fatalf("want 3 Ready, got %v", got)
	}
	for _, gs := range r.servers() {
		if a, _, _ := unstructured.NestedString(gs.Object, "status", "address"); a == "" {
			t.Errorf("%s: no address", gs.GetName())
		}
	}
	if st := r.fleetStatus("green"); st["readyReplicas"] != int64(3) || st["labelSelector"] != "agones.dev/fleet=green" {
		t.Errorf("fleet status %v", st)
	}
}

func readyFleet(t *testing.T, replicas int64) *rig {
	r := newRig(t, fleet("green", replicas))
	r.sync()
	r.clock.Step(2 * time.Second)
	r.sync()
	if got := r.byState(); got[stateReady] != int(replicas) {
		t.Fatalf("want %d Ready, got %v", replicas, got)
	}
	return r
}

func TestSessionEndReplacesAllocated(t *testing.T) {
	r := readyFleet(t, 3)
	victim := r.servers()[0].GetName()
	r.setState(victim, stateAllocated, map[string]string{LastAllocatedAnnotation: r.clock.Now().Format(time.RFC3339Nano)})
	r.sync()
	if st := r.fleetStatus("green"); st["allocatedReplicas"] != int64(1) || st["readyReplicas"] != int64(2) {
		t.Errorf("fleet status %v", st)
	}
	r.clock.Step(59 * time.Second)
	r.sync()
	if got := r.byState(); got[stateAllocated] != 1 {
		t.Fatalf("session ended early: %v", got)
	}
	r.clock.Step(time.Second)
	r.sync()
	for _, gs := range r.servers() {
		if gs.GetName() == victim {
			t.Fatalf("allocated server %s still there after its session", victim)
		}
	}
	if got := r.byState(); got[stateReady] != 2 || got[stateScheduled] != 1 {
		t.Fatalf("want 2 Ready + 1 replacement, got %v", got)
	}
	if s := r.agent.Stats(); s.SessionsEnded != 1 {
		t.Errorf("stats %+v", s)
	}
}

func TestShutdownIsDeletedAndReplaced(t *testing.T) {
	r := readyFleet(t, 2)
	victim := r.servers()[1].GetName()
	r.setState(victim, stateShutdown, nil)
	r.sync()
	names := map[string]bool{}
	for _, gs := range r.servers() {
		names[gs.GetName()] = true
	}
	if names[victim] || len(names) != 2 {
		t.Fatalf("want the Shutdown server replaced, have %v", names)
	}
}

func TestScaleDownSparesAllocated(t *testing.T) {
	r := readyFleet(t, 4)
	keep := r.servers()[0].GetName()
	r.setState(keep, stateAllocated, nil)
	f, _ := r.dc.Resource(FleetResource).Namespace("ns").Get(r.ctx, "green", metav1.GetOptions{})
	_ = unstructured.SetNestedField(f.Object, int64(1), "spec", "replicas")
	if _, err := r.dc.Resource(FleetResource).Namespace("ns").Update(r.ctx, f, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	r.sync()
	gss := r.servers()
	if len(gss) != 1 || gss[0].GetName() != keep {
		t.Fatalf("want only the Allocated %s left, got %d servers", keep, len(gss))
	}
	// And up again.
	_ = unstructured.SetNestedField(f.Object, int64(3), "spec", "replicas")
	f, _ = r.dc.Resource(FleetResource).Namespace("ns").Get(r.ctx, "green", metav1.GetOptions{})
	_ = unstructured.SetNestedField(f.Object, int64(3), "spec", "replicas")
	if _, err := r.dc.Resource(FleetResource).Namespace("ns").Update(r.ctx, f, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	r.sync()
	if got := r.byState(); got[stateAllocated] != 1 || got[stateScheduled] != 2 {
		t.Fatalf("scale up: %v", got)
	}
}

// A conflicting Update (an allocator wrote first) is left alone: the agent
// neither retries blindly nor deletes the server.
func TestConflictNeverClobbers(t *testing.T) {
	r := readyFleet(t, 2)
	victim := r.servers()[0].GetName()
	r.setState(victim, stateAllocated, map[string]string{LastAllocatedAnnotation: r.clock.Now().Format(time.RFC3339Nano)})
	var mu sync.Mutex
	conflicts := 0
	r.dc.PrependReactor("update", "gameservers", func(clienttesting.Action) (bool, runtime.Object, error) {
		mu.Lock()
		defer mu.Unlock()
		conflicts++
		return true, nil, apierrors.NewConflict(GameServerResource.GroupResource(), victim, errors.New("someone else wrote"))
	})
	r.dc.PrependReactor("delete", "gameservers", func(clienttesting.Action) (bool, runtime.Object, error) {
		t.Error("deleted a server whose shutdown lost a race")
		return true, nil, nil
	})
	r.clock.Step(time.Hour)
	r.sync()
	if conflicts == 0 {
		t.Fatal("the agent never tried to end the session")
	}
	if got := r.byState(); got[stateAllocated] != 1 {
		t.Fatalf("allocated server touched: %v", got)
	}
	if s := r.agent.Stats(); s.Conflicts == 0 {
		t.Errorf("conflict not counted: %+v", s)
	}
}

func TestOrphansGoHandMadeServersStay(t *testing.T) {
	handMade := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "agones.dev/v1", "kind": "GameServer",
		"metadata": map[string]any{"name": "by-hand", "namespace": "ns", "labels": map[string]any{FleetLabel: "green"}},
		"status":   map[string]any{"state": "Shutdown"},
	}}
	r := newRig(t, fleet("green", 2), handMade)
	r.sync()
	if n := len(r.servers()); n != 3 {
		t.Fatalf("want 2 servers + the hand-made one, got %d", n)
	}
	if err := r.dc.Resource(FleetResource).Namespace("ns").Delete(r.ctx, "green", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	r.sync()
	gss := r.servers()
	if len(gss) != 1 || gss[0].GetName() != "by-hand" {
		t.Fatalf("want only the hand-made server left, got %d", len(gss))
	}
}

func TestConfigRefusesNonsense(t *testing.T) {
	dc := fake.NewSimpleDynamicClient(runtime.NewScheme())
	for _, cfg := range []Config{{}, {Client: dc, Nodes: -1}, {Client: dc, Session: -time.Second}} {
		if _, err := New(cfg); err == nil {
			t.Errorf("New(%+v) accepted", cfg)
		}
	}
}

func TestNodeAddressAndPorts(t *testing.T) {
	if got := nodeAddress("node-251"); got != "10.1.1.2" {
		t.Errorf("nodeAddress = %s", got)
	}
	l := newNodeLoad(2)
	if a, b := l.port("node-000"), l.port("node-000"); a != minPort || b != minPort+1 {
		t.Errorf("ports %d %d", a, b)
	}
	if got := l.pick(true, 10); got != "node-000" {
		t.Errorf("distributed pick on empty pool = %s", got)
	}
}
