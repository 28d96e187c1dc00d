package kube

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/quartermaster-dev/quartermaster/core"
)

// agonesObject is a GameServer as Agones writes it, with fields this
// package does not model (a pod template, health, sdkServer, players, an
// unknown future status field).
const agonesObject = `{
  "apiVersion": "agones.dev/v1", "kind": "GameServer",
  "metadata": {"name": "gs-1", "namespace": "default", "resourceVersion": "41", "uid": "u-1",
    "labels": {"agones.dev/fleet": "green"}, "annotations": {"agones.dev/sdk-version": "1.60.0"},
    "ownerReferences": [{"apiVersion": "agones.dev/v1", "kind": "GameServerSet", "name": "green-x", "uid": "s-1", "controller": true}],
    "finalizers": ["agones.dev"]},
  "spec": {"container": "gs", "ports": [{"name": "default", "portPolicy": "Dynamic", "containerPort": 7654, "protocol": "UDP"}],
    "health": {"disabled": false, "initialDelaySeconds": 5, "periodSeconds": 5, "failureThreshold": 3},
    "sdkServer": {"logLevel": "Info", "grpcPort": 9357, "httpPort": 9358},
    "counters": {"rooms": {"count": 1, "capacity": 4}}, "lists": {"players": {"capacity": 3, "values": ["a"]}},
    "template": {"metadata": {"creationTimestamp": null}, "spec": {"containers": [{"name": "gs", "image": "example/gs:0.1",
      "resources": {"requests": {"cpu": "20m", "memory": "64Mi"}, "limits": {"cpu": "20m", "memory": "64Mi"}}}]}}},
  "status": {"state": "Ready", "address": "10.1.2.3", "nodeName": "node-7",
    "addresses": [{"type": "InternalIP", "address": "10.1.2.3"}, {"type": "Hostname", "address": "node-7"}],
    "ports": [{"name": "default", "port": 7123}],
    "players": {"count": 0, "capacity": 0, "ids": null},
    "counters": {"rooms": {"count": 1, "capacity": 4}, "untouched": {"count": 2, "capacity": 2}},
    "lists": {"players": {"capacity": 3, "values": ["a"]}},
    "eviction": {"safe": "Never"}, "immersionLevel": 11}
}`

func parse(t *testing.T, s string) *unstructured.Unstructured {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		t.Fatal(err)
	}
	return &unstructured.Unstructured{Object: m}
}

func TestToCore(t *testing.T) {
	gs, err := toCore(parse(t, agonesObject))
	if err != nil {
		t.Fatal(err)
	}
	want := &core.GameServer{
		Namespace: "default", Name: "gs-1", Version: "41",
		Labels:      map[string]string{"agones.dev/fleet": "green"},
		Annotations: map[string]string{"agones.dev/sdk-version": "1.60.0"},
		State:       core.StateReady, Address: "10.1.2.3", NodeName: "node-7",
		Addresses: []core.Address{{Type: "InternalIP", Address: "10.1.2.3"}, {Type: "Hostname", Address: "node-7"}},
		Ports:     []core.Port{{Name: "default", Port: 7123}},
		Counters:  map[string]core.Counter{"rooms": {Count: 1, Capacity: 4}, "untouched": {Count: 2, Capacity: 2}},
		Lists:     map[string]core.List{"players": {Values: []string{"a"}, Capacity: 3}},
	}
	if !reflect.DeepEqual(gs, want) {
		t.Fatalf("toCore:\n got %+v\nwant %+v", gs, want)
	}
}

func TestToCoreRejectsBadStatus(t *testing.T) {
	u := parse(t, `{"metadata":{"name":"x","namespace":"d"},"status":{"counters":{"rooms":{"count":"many"}}}}`)
	if _, err := toCore(u); err == nil {
		t.Fatal("a counter that is not a number must be an error")
	}
	u = parse(t, `{"metadata":{"name":"x","namespace":"d"},"status":"Ready"}`)
	if _, err := toCore(u); err == nil {
		t.Fatal("a status that is not an object must be an error")
	}
}

// TestAllocationTouchesOnlyWhatItChanges allocates the Agones object through
// the core and checks that the object to write differs from the original
// exactly in the fields the allocation changed.
func TestAllocationTouchesOnlyWhatItChanges(t *testing.T) {
	raw := parse(t, agonesObject)
	before, err := toCore(raw)
	if err != nil {
		t.Fatal(err)
	}
	one, cap5 := int64(1), int64(5)
	req, err := core.Normalize(&core.Request{
		Metadata: core.MetaPatch{Labels: map[string]string{"mode": "duel"}, Annotations: map[string]string{"map": "dust"}},
		Counters: map[string]core.CounterAction{"rooms": {Action: core.ActionIncrement, Amount: &one}},
		Lists:    map[string]core.ListAction{"players": {AddValues: []string{"b"}, Capacity: &cap5}},
	})
	if err != nil {
		t.Fatal(err)
	}
	after := core.Apply(before, req, time.Date(2026, 11, 22, 1, 2, 3, 4, time.UTC))
	out, err := withAllocation(raw, before, after)
	if err != nil {
		t.Fatal(err)
	}

	// Undo exactly the intended changes on a copy of the result; what is
	// left must equal the original, byte for byte.
	undo := out.DeepCopy()
	undo.SetLabels(raw.GetLabels())
	undo.SetAnnotations(raw.GetAnnotations())
	_ = unstructured.SetNestedField(undo.Object, "Ready", "status", "state")
	_ = unstructured.SetNestedField(undo.Object, int64(1), "status", "counters", "rooms", "count")
	_ = unstructured.SetNestedField(undo.Object, []any{"a"}, "status", "lists", "players", "values")
	_ = unstructured.SetNestedField(undo.Object, int64(3), "status", "lists", "players", "capacity")
	a, _ := json.Marshal(undo.Object)
	b, _ := json.Marshal(raw.Object)
	if string(a) != string(b) {
		t.Fatalf("allocation changed more than it should:\n%s\nvs original\n%s", a, b)
	}

	// And the intended changes are there.
	back, err := toCore(out)
	if err != nil {
		t.Fatal(err)
	}
	if back.State != core.StateAllocated || back.Labels["mode"] != "duel" || back.Annotations["map"] != "dust" ||
		back.Annotations[core.LastAllocatedAnnotation] != "2026-11-22T01:02:03.000000004Z" ||
		back.Counters["rooms"] != (core.Counter{Count: 2, Capacity: 4}) ||
		!reflect.DeepEqual(back.Lists["players"], core.List{Values: []string{"a", "b"}, Capacity: 5}) {
		t.Fatalf("allocated object: %+v", back)
	}
	// The original is untouched.
	if st, _, _ := unstructured.NestedString(raw.Object, "status", "state"); st != "Ready" {
		t.Fatal("withAllocation modified the cached object")
	}
}

func TestNewer(t *testing.T) {
	cases := []struct {
		a, b string
		want bool
	}{
		{"10", "9", true}, {"9", "10", false}, {"7", "7", false},
		{"x", "7", true}, {"7", "x", true}, {"x", "x", false},
	}
	for _, c := range cases {
		if got := newer(c.a, c.b); got != c.want {
			t.Errorf("newer(%q, %q) = %v", c.a, c.b, got)
		}
	}
}
