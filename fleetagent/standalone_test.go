package fleetagent

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

func onDemand(name string, labels map[string]any) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "agones.dev/v1", "kind": "GameServer",
		"metadata": map[string]any{"name": name, "namespace": "ns", "uid": "uid-" + name, "labels": labels},
		"spec": map[string]any{
			"ports":    []any{map[string]any{"name": "game"}, map[string]any{"name": "query"}},
			"counters": map[string]any{"rooms": map[string]any{"count": int64(0), "capacity": int64(2)}},
		},
	}}
}

// An on-demand server (TemplateLabel, no Fleet) is scheduled, made Ready
// after the start-up delay and deleted once Shutdown, as Agones' controller
// does for a standalone GameServer; one made by hand without the label is
// left exactly as it is.
func TestStandaloneServers(t *testing.T) {
	r := newRig(t,
		onDemand("made", map[string]any{TemplateLabel: "private-match"}),
		onDemand("by-hand", map[string]any{"mode": "test"}))
	get := func(name string) *unstructured.Unstructured {
		u, err := r.dc.Resource(GameServerResource).Namespace("ns").Get(r.ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("get %s: %v", name, err)
		}
		return u
	}
	r.sync()
	made := get("made")
	if state(made) != stateScheduled {
		t.Fatalf("after one pass: %q", state(made))
	}
	node, _, _ := unstructured.NestedString(made.Object, "status", "nodeName")
	ports, _, _ := unstructured.NestedSlice(made.Object, "status", "ports")
	rooms, _, _ := unstructured.NestedInt64(made.Object, "status", "counters", "rooms", "capacity")
	if node == "" || len(ports) != 2 || rooms != 2 {
		t.Fatalf("scheduled as node %q ports %v rooms %d", node, ports, rooms)
	}
	if p0, p1 := ports[0].(map[string]any)["port"], ports[1].(map[string]any)["port"]; p0 == p1 {
		t.Fatalf("both ports are %v", p0)
	}
	r.sync()
	if s := state(get("made")); s != stateScheduled {
		t.Fatalf("Ready before the start-up delay: %q", s)
	}
	r.clock.Step(2 * time.Second)
	r.sync()
	if s := state(get("made")); s != stateReady {
		t.Fatalf("after the start-up delay: %q", s)
	}
	if _, found, _ := unstructured.NestedFieldNoCopy(get("by-hand").Object, "status"); found {
		t.Fatal("the agent touched a GameServer made by hand")
	}

	u := get("made")
	if err := unstructured.SetNestedField(u.Object, stateShutdown, "status", "state"); err != nil {
		t.Fatal(err)
	}
	if _, err := r.dc.Resource(GameServerResource).Namespace("ns").Update(r.ctx, u, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	r.sync()
	if _, err := r.dc.Resource(GameServerResource).Namespace("ns").Get(r.ctx, "made", metav1.GetOptions{}); err == nil {
		t.Fatal("a Shutdown on-demand server was not deleted")
	}
}
