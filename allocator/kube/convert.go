package kube

import (
	"fmt"
	"strconv"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/quartermaster-dev/quartermaster/core"
)

// GameServerResource is Agones' GameServer resource.
var GameServerResource = schema.GroupVersionResource{Group: "agones.dev", Version: "v1", Resource: "gameservers"}

// status is the part of a GameServer's status the allocator reads.
type status struct {
	State     string `json:"state"`
	Address   string `json:"address"`
	NodeName  string `json:"nodeName"`
	Addresses []struct {
		Type    string `json:"type"`
		Address string `json:"address"`
	} `json:"addresses"`
	Ports []struct {
		Name string `json:"name"`
		Port int32  `json:"port"`
	} `json:"ports"`
	Counters map[string]struct {
		Count    int64 `json:"count"`
		Capacity int64 `json:"capacity"`
	} `json:"counters"`
	Lists map[string]struct {
		Capacity int64    `json:"capacity"`
		Values   []string `json:"values"`
	} `json:"lists"`
}

// toCore converts a raw GameServer to the core's type. The core's Version
// is the object's resourceVersion.
func toCore(u *unstructured.Unstructured) (*core.GameServer, error) {
	gs := &core.GameServer{
		Namespace:   u.GetNamespace(),
		Name:        u.GetName(),
		Labels:      u.GetLabels(),
		Annotations: u.GetAnnotations(),
		Version:     u.GetResourceVersion(),
	}
	raw, found, err := unstructured.NestedMap(u.Object, "status")
	if err != nil {
		return nil, fmt.Errorf("gameserver %s/%s: status: %w", gs.Namespace, gs.Name, err)
	}
	if !found {
		return gs, nil
	}
	var st status
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(raw, &st); err != nil {
		return nil, fmt.Errorf("gameserver %s/%s: status: %w", gs.Namespace, gs.Name, err)
	}
	gs.State = core.State(st.State)
	gs.Address = st.Address
	gs.NodeName = st.NodeName
	for _, a := range st.Addresses {
		gs.Addresses = append(gs.Addresses, core.Address{Type: a.Type, Address: a.Address})
	}
	for _, p := range st.Ports {
		gs.Ports = append(gs.Ports, core.Port{Name: p.Name, Port: p.Port})
	}
	if len(st.Counters) > 0 {
		gs.Counters = make(map[string]core.Counter, len(st.Counters))
		for k, c := range st.Counters {
			gs.Counters[k] = core.Counter{Count: c.Count, Capacity: c.Capacity}
		}
	}
	if len(st.Lists) > 0 {
		gs.Lists = make(map[string]core.List, len(st.Lists))
		for k, l := range st.Lists {
			gs.Lists[k] = core.List{Values: l.Values, Capacity: l.Capacity}
		}
	}
	return gs, nil
}

// withAllocation returns a copy of raw changed the way the core changed
// before into after: labels, annotations, status.state, and the counters and
// lists whose values differ. Nothing else in the object is touched.
func withAllocation(raw *unstructured.Unstructured, before, after *core.GameServer) (*unstructured.Unstructured, error) {
	u := raw.DeepCopy()
	u.SetLabels(after.Labels)
	u.SetAnnotations(after.Annotations)
	if err := unstructured.SetNestedField(u.Object, string(after.State), "status", "state"); err != nil {
		return nil, err
	}
	for k, c := range after.Counters {
		if old, ok := before.Counters[k]; ok && old == c {
			continue
		}
		if err := unstructured.SetNestedField(u.Object, c.Count, "status", "counters", k, "count"); err != nil {
			return nil, err
		}
		if err := unstructured.SetNestedField(u.Object, c.Capacity, "status", "counters", k, "capacity"); err != nil {
			return nil, err
		}
	}
	for k, l := range after.Lists {
		if old, ok := before.Lists[k]; ok && old.Capacity == l.Capacity && equalStrings(old.Values, l.Values) {
			continue
		}
		vals := make([]any, len(l.Values))
		for i, v := range l.Values {
			vals[i] = v
		}
		if err := unstructured.SetNestedField(u.Object, vals, "status", "lists", k, "values"); err != nil {
			return nil, err
		}
		if err := unstructured.SetNestedField(u.Object, l.Capacity, "status", "lists", k, "capacity"); err != nil {
			return nil, err
		}
	}
	return u, nil
}

// withState returns a copy of raw in state st.
func withState(raw *unstructured.Unstructured, st core.State) (*unstructured.Unstructured, error) {
	u := raw.DeepCopy()
	if err := unstructured.SetNestedField(u.Object, string(st), "status", "state"); err != nil {
		return nil, err
	}
	return u, nil
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// newer reports whether resourceVersion a is newer than b. Kubernetes calls
// resourceVersions opaque; on etcd they are the modification revision, a
// growing integer, and comparing them is the only way to tell a stale
// informer event from our own newer write. Anything unparsable counts as
// newer, so an unusual store can only cost a conflict, never a lost update.
func newer(a, b string) bool {
	x, errA := strconv.ParseUint(a, 10, 64)
	y, errB := strconv.ParseUint(b, 10, 64)
	if errA != nil || errB != nil {
		return a != b
	}
	return x > y
}
