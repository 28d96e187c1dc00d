package kube

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/quartermaster-dev/quartermaster/core"
)

// GameServerResource is Agones' GameServer resource.
var GameServerResource = schema.GroupVersionResource{Group: "agones.dev", Version: "v1", Resource: "gameservers"}

// gameServer is one GameServer as the backend holds it: the object's JSON
// exactly as the API server sent it, and what the allocator reads from it,
// decoded once when it arrives.
//
// Every replica's informer sees every write in the cluster, so decoding
// watch events is the allocator's biggest cost besides its own writes.
// Decoding into unstructured maps built a map for every field of the pod
// template only to throw it away; here the decoder skips what it does not
// need, and the raw bytes are kept so that a write can change exactly the
// fields it means to and leave everything else as Agones wrote it.
//
// A gameServer is never modified once decoded; DeepCopyObject shares it.
type gameServer struct {
	metav1.TypeMeta
	// ObjectMeta carries only name, namespace, uid, resourceVersion, labels
	// and annotations: what the informer's store and the backend use.
	metav1.ObjectMeta

	raw []byte
	// gs is the core's view; nil when the status cannot be read, with
	// unreadable saying why (such a server must never be handed out).
	gs         *core.GameServer
	unreadable error
}

func (g *gameServer) DeepCopyObject() runtime.Object { return g }

func (g *gameServer) key() core.Key { return core.Key{Namespace: g.Namespace, Name: g.Name} }

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

// decodeGameServer decodes one GameServer and keeps a copy of raw without
// metadata.managedFields (raw itself is not kept, so the caller may reuse
// its buffer). An object whose metadata cannot be read is an error; one
// whose status cannot be read decodes with unreadable set, so that the
// backend drops it instead of the watch breaking on it.
//
// managedFields are often the largest part of an Agones GameServer (one
// entry per writer: the controller, the SDK sidecar, allocators), and the
// allocator never reads them. Writing the object back without them leaves
// them as they are: the API server keeps an object's managedFields when an
// update carries none, so that clients unaware of the field cannot erase
// it (checked against a real API server in the backend's tests).
func decodeGameServer(raw []byte) (*gameServer, error) {
	g := &gameServer{TypeMeta: metav1.TypeMeta{APIVersion: "agones.dev/v1", Kind: "GameServer"}}
	var statusJSON []byte
	metaStart, metaEnd := -1, -1
	end, err := scanMembers(raw, func(key string, _, valStart, valEnd int) error {
		switch key {
		case "metadata":
			metaStart, metaEnd = valStart, valEnd
			return decodeMeta(raw[valStart:valEnd], &g.ObjectMeta)
		case "status":
			statusJSON = raw[valStart:valEnd]
		}
		return nil
	})
	if err == nil && skipSpace(raw, end) != len(raw) {
		err = errors.New("data after the JSON object")
	}
	if err != nil {
		return nil, fmt.Errorf("decoding gameserver: %w", err)
	}
	if metaStart < 0 {
		g.raw = bytes.Clone(raw)
	} else {
		meta, err := withoutMember(raw[metaStart:metaEnd], "managedFields")
		if err != nil {
			return nil, fmt.Errorf("decoding gameserver: metadata: %w", err)
		}
		g.raw = make([]byte, 0, len(raw)-(metaEnd-metaStart)+len(meta))
		g.raw = append(append(append(g.raw, raw[:metaStart]...), meta...), raw[metaEnd:]...)
	}
	m := &g.ObjectMeta
	gs := &core.GameServer{
		Namespace: m.Namespace, Name: m.Name, Version: m.ResourceVersion,
		Labels: m.Labels, Annotations: m.Annotations,
	}
	if len(statusJSON) > 0 && !bytes.Equal(statusJSON, []byte("null")) {
		var st status
		if err := json.Unmarshal(statusJSON, &st); err != nil {
			g.unreadable = fmt.Errorf("gameserver %s/%s: status: %w", m.Namespace, m.Name, err)
			return g, nil
		}
		fillStatus(gs, &st)
		holdWhileCreating(gs) // create.go
	}
	g.gs = gs
	return g, nil
}

// decodeMeta reads the object's identity, labels and annotations, and skips
// the rest of metadata (managedFields above all, often its largest part).
func decodeMeta(v []byte, m *metav1.ObjectMeta) error {
	return objectFields(v, func(key string, v []byte) error {
		var err error
		switch key {
		case "name":
			m.Name, err = unquote(v)
		case "namespace":
			m.Namespace, err = unquote(v)
		case "uid":
			var uid string
			uid, err = unquote(v)
			m.UID = types.UID(uid)
		case "resourceVersion":
			m.ResourceVersion, err = unquote(v)
		case "labels":
			err = json.Unmarshal(v, &m.Labels)
		case "annotations":
			err = json.Unmarshal(v, &m.Annotations)
		}
		if err != nil {
			return fmt.Errorf("metadata.%s: %w", key, err)
		}
		return nil
	})
}

func fillStatus(gs *core.GameServer, st *status) {
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
}

// toCore is the core's view of g, or why it has none.
func toCore(g *gameServer) (*core.GameServer, error) {
	if g.gs == nil {
		return nil, g.unreadable
	}
	return g.gs, nil
}

// gameServerList is one page of a List.
type gameServerList struct {
	metav1.TypeMeta
	metav1.ListMeta
	Items []gameServer
}

func (l *gameServerList) DeepCopyObject() runtime.Object { return l }

func decodeGameServerList(raw []byte) (*gameServerList, error) {
	var w struct {
		Metadata metav1.ListMeta   `json:"metadata"`
		Items    []json.RawMessage `json:"items"`
	}
	if err := json.Unmarshal(raw, &w); err != nil {
		return nil, fmt.Errorf("decoding gameserver list: %w", err)
	}
	l := &gameServerList{ListMeta: w.Metadata, Items: make([]gameServer, len(w.Items))}
	for i, item := range w.Items {
		g, err := decodeGameServer(item)
		if err != nil {
			return nil, err
		}
		l.Items[i] = *g
	}
	return l, nil
}

// The edits below work on a generic tree of the object in which numbers
// stay json.Number, so every field the allocation does not touch is
// written back with exactly the value it had.

func decodeTree(raw []byte) (map[string]any, error) {
	d := json.NewDecoder(bytes.NewReader(raw))
	d.UseNumber()
	var obj map[string]any
	if err := d.Decode(&obj); err != nil {
		return nil, err
	}
	if obj == nil {
		return nil, fmt.Errorf("not an object")
	}
	return obj, nil
}

func encodeTree(obj map[string]any) ([]byte, error) {
	var buf bytes.Buffer
	e := json.NewEncoder(&buf)
	e.SetEscapeHTML(false)
	if err := e.Encode(obj); err != nil {
		return nil, err
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// child returns m[key] as an object, creating it when absent; a field of
// another type there is an error rather than something to overwrite.
func child(m map[string]any, key string) (map[string]any, error) {
	switch v := m[key].(type) {
	case map[string]any:
		return v, nil
	case nil:
		c := map[string]any{}
		m[key] = c
		return c, nil
	default:
		return nil, fmt.Errorf("field %q is a %T, not an object", key, v)
	}
}

// childPath is child applied down a path of keys.
func childPath(m map[string]any, keys ...string) (map[string]any, error) {
	for _, k := range keys {
		var err error
		if m, err = child(m, k); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func setStringMap(m map[string]any, key string, v map[string]string) {
	if v == nil {
		delete(m, key)
		return
	}
	m[key] = v
}

// withAllocation returns raw changed the way the core changed before into
// after: labels, annotations, status.state, and the counters and lists whose
// values differ. Nothing else in the object is touched.
func withAllocation(raw []byte, before, after *core.GameServer) ([]byte, error) {
	obj, err := decodeTree(raw)
	if err != nil {
		return nil, err
	}
	meta, err := child(obj, "metadata")
	if err != nil {
		return nil, err
	}
	setStringMap(meta, "labels", after.Labels)
	setStringMap(meta, "annotations", after.AllAnnotations())
	st, err := child(obj, "status")
	if err != nil {
		return nil, err
	}
	st["state"] = string(after.State)
	for k, c := range after.Counters {
		if old, ok := before.Counters[k]; ok && old == c {
			continue
		}
		one, err := childPath(st, "counters", k)
		if err != nil {
			return nil, err
		}
		one["count"] = json.Number(strconv.FormatInt(c.Count, 10))
		one["capacity"] = json.Number(strconv.FormatInt(c.Capacity, 10))
	}
	for k, l := range after.Lists {
		if old, ok := before.Lists[k]; ok && old.Capacity == l.Capacity && equalStrings(old.Values, l.Values) {
			continue
		}
		one, err := childPath(st, "lists", k)
		if err != nil {
			return nil, err
		}
		values := l.Values
		if values == nil {
			values = []string{} // Agones writes an empty list as [], not null
		}
		one["values"] = values
		one["capacity"] = json.Number(strconv.FormatInt(l.Capacity, 10))
	}
	return encodeTree(obj)
}

// withState returns raw in state s.
func withState(raw []byte, s core.State) ([]byte, error) {
	obj, err := decodeTree(raw)
	if err != nil {
		return nil, err
	}
	st, err := child(obj, "status")
	if err != nil {
		return nil, err
	}
	st["state"] = string(s)
	return encodeTree(obj)
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
