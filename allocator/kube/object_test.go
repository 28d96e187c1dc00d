package kube

import (
	"encoding/json"
	"io"
	"reflect"
	"strings"
	"testing"
	"testing/iotest"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"

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

func decode(t *testing.T, s string) *gameServer {
	t.Helper()
	g, err := decodeGameServer([]byte(s))
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func tree(t *testing.T, raw []byte) map[string]any {
	t.Helper()
	obj, err := decodeTree(raw)
	if err != nil {
		t.Fatal(err)
	}
	return obj
}

func TestDecodeGameServer(t *testing.T) {
	g := decode(t, agonesObject)
	if g.Name != "gs-1" || g.Namespace != "default" || g.UID != "u-1" || g.ResourceVersion != "41" || string(g.raw) != agonesObject {
		t.Fatalf("metadata or raw bytes not kept: %+v", g.ObjectMeta)
	}
	gs, err := toCore(g)
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

func TestDecodeMarksBadStatusUnreadable(t *testing.T) {
	for _, s := range []string{
		`{"metadata":{"name":"x","namespace":"d"},"status":{"counters":{"rooms":{"count":"many"}}}}`,
		`{"metadata":{"name":"x","namespace":"d"},"status":"Ready"}`,
	} {
		g := decode(t, s) // the watch must not break on one bad object
		if _, err := toCore(g); err == nil || !strings.Contains(err.Error(), "d/x: status") {
			t.Errorf("%s: want an unreadable status naming the server, got %v", s, err)
		}
	}
	if _, err := decodeGameServer([]byte(`{"metadata":"x"}`)); err == nil {
		t.Error("metadata that is not an object must be an error")
	}
	// No status at all is a server that is not Ready yet, not an error.
	if gs, err := toCore(decode(t, `{"metadata":{"name":"x","namespace":"d"}}`)); err != nil || gs.State != "" {
		t.Errorf("no status: %+v, %v", gs, err)
	}
}

// TestAllocationTouchesOnlyWhatItChanges allocates the Agones object through
// the core and checks that the object to write differs from the original
// exactly in the fields the allocation changed.
func TestAllocationTouchesOnlyWhatItChanges(t *testing.T) {
	g := decode(t, agonesObject)
	before, err := toCore(g)
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
	out, err := withAllocation(g.raw, before, after)
	if err != nil {
		t.Fatal(err)
	}

	// Undo exactly the intended changes on the result; what is left must
	// equal the original, byte for byte once both are written the same way.
	undo, orig := tree(t, out), tree(t, g.raw)
	meta, status := undo["metadata"].(map[string]any), undo["status"].(map[string]any)
	meta["labels"] = orig["metadata"].(map[string]any)["labels"]
	meta["annotations"] = orig["metadata"].(map[string]any)["annotations"]
	status["state"] = "Ready"
	status["counters"].(map[string]any)["rooms"].(map[string]any)["count"] = json.Number("1")
	status["lists"].(map[string]any)["players"] = map[string]any{"capacity": json.Number("3"), "values": []any{"a"}}
	a, _ := encodeTree(undo)
	b, _ := encodeTree(orig)
	if string(a) != string(b) {
		t.Fatalf("allocation changed more than it should:\n%s\nvs original\n%s", a, b)
	}

	// And the intended changes are there.
	back, err := toCore(decode(t, string(out)))
	if err != nil {
		t.Fatal(err)
	}
	if back.State != core.StateAllocated || back.Labels["mode"] != "duel" || back.Annotations["map"] != "dust" ||
		back.LastAllocated() != "2026-11-22T01:02:03.000000004Z" ||
		back.Counters["rooms"] != (core.Counter{Count: 2, Capacity: 4}) ||
		!reflect.DeepEqual(back.Lists["players"], core.List{Values: []string{"a", "b"}, Capacity: 5}) {
		t.Fatalf("allocated object: %+v", back)
	}
	// The cached object is untouched.
	if string(g.raw) != agonesObject {
		t.Fatal("withAllocation modified the cached object")
	}
}

// TestEditsKeepNumbersAndText: fields the allocator does not model come back
// exactly, including integers beyond float64's precision and characters
// that encoding/json would escape for HTML.
func TestEditsKeepNumbersAndText(t *testing.T) {
	raw := `{"metadata":{"name":"x","namespace":"d","resourceVersion":"3"},` +
		`"spec":{"big":9007199254740993,"ratio":0.1,"exp":1e+300,"cmd":"a<b && c>d"},"status":{"state":"Ready"}}`
	g := decode(t, raw)
	out, err := withState(g.raw, core.StateShutdown)
	if err != nil {
		t.Fatal(err)
	}
	want := `{"metadata":{"name":"x","namespace":"d","resourceVersion":"3"},` +
		`"spec":{"big":9007199254740993,"cmd":"a<b && c>d","exp":1e+300,"ratio":0.1},"status":{"state":"Shutdown"}}`
	if string(out) != want {
		t.Fatalf("got  %s\nwant %s", out, want)
	}
	if _, err := withState([]byte(`{"status":"Ready"}`), core.StateShutdown); err == nil {
		t.Fatal("a status that is not an object must be an error, not overwritten")
	}
}

func TestWatchDecoder(t *testing.T) {
	stream := `{"type":"ADDED","object":` + agonesObject + `}
{"type":"MODIFIED","object":{"metadata":{"name":"gs-2","namespace":"default","resourceVersion":"42"},"status":{"state":"Allocated"}}}
{"type":"BOOKMARK","object":{"kind":"GameServer","apiVersion":"agones.dev/v1","metadata":{"resourceVersion":"50","annotations":{"k8s.io/initial-events-end":"true"}}}}
{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","status":"Failure","message":"too old resource version","reason":"Expired","code":410}}
{"type":"SURPRISE","object":{}}
`
	// Whole, and a byte at a time: events straddle reads on a connection.
	for _, r := range []io.Reader{strings.NewReader(stream), iotest.OneByteReader(strings.NewReader(stream))} {
		checkWatchStream(t, newWatchDecoder(io.NopCloser(r)))
	}
	if _, _, err := newWatchDecoder(io.NopCloser(strings.NewReader(`{"type":"ADDED","object":{"meta`))).Decode(); err != io.ErrUnexpectedEOF {
		t.Fatalf("a stream cut inside an event: %v", err)
	}
	if _, _, err := newWatchDecoder(io.NopCloser(strings.NewReader(`["not an event"]`))).Decode(); err == nil {
		t.Fatal("a stream of something else must be an error")
	}
}

func checkWatchStream(t *testing.T, d *watchDecoder) {
	t.Helper()
	typ, obj, err := d.Decode()
	if err != nil || typ != watch.Added || obj.(*gameServer).gs.Address != "10.1.2.3" {
		t.Fatalf("ADDED: %v %v %v", typ, obj, err)
	}
	typ, obj, err = d.Decode()
	if err != nil || typ != watch.Modified || obj.(*gameServer).gs.State != core.StateAllocated || obj.(*gameServer).ResourceVersion != "42" {
		t.Fatalf("MODIFIED: %v %v %v", typ, obj, err)
	}
	typ, obj, err = d.Decode()
	if err != nil || typ != watch.Bookmark || obj.(*gameServer).ResourceVersion != "50" ||
		obj.(*gameServer).Annotations["k8s.io/initial-events-end"] != "true" {
		t.Fatalf("BOOKMARK: %v %v %v", typ, obj, err)
	}
	typ, obj, err = d.Decode()
	if err != nil || typ != watch.Error || !apierrors.IsResourceExpired(apierrors.FromObject(obj)) {
		t.Fatalf("ERROR: %v %v %v", typ, obj, err)
	}
	if _, _, err = d.Decode(); err == nil || !strings.Contains(err.Error(), "SURPRISE") {
		t.Fatalf("unknown event type: %v", err)
	}
	if _, _, err = d.Decode(); err != io.EOF {
		t.Fatalf("end of stream: %v", err)
	}
}

func TestDecodeList(t *testing.T) {
	l, err := decodeGameServerList([]byte(`{"kind":"GameServerList","metadata":{"resourceVersion":"77","continue":"c1"},"items":[` +
		agonesObject + `,{"metadata":{"name":"gs-2","namespace":"default"}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if l.ResourceVersion != "77" || l.Continue != "c1" || len(l.Items) != 2 || l.Items[0].Name != "gs-1" ||
		string(l.Items[0].raw) != agonesObject || l.Items[1].Name != "gs-2" {
		t.Fatalf("list: %+v", l)
	}
	items, err := meta.ExtractList(l)
	if err != nil || len(items) != 2 {
		t.Fatalf("the reflector cannot read the list: %v %d", err, len(items))
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

// managedAgonesEvent is a watch event for a GameServer as an API server
// sends it after Agones' controller and the allocator have written it:
// agonesObject plus managedFields.
func managedAgonesEvent(b *testing.B) []byte {
	obj := map[string]any{}
	if err := json.Unmarshal([]byte(agonesObject), &obj); err != nil {
		b.Fatal(err)
	}
	var fields []any
	for _, m := range []string{"agones-controller", "quartermaster", "agones-sdk"} {
		fields = append(fields, map[string]any{
			"manager": m, "operation": "Update", "apiVersion": "agones.dev/v1", "time": "2026-11-22T01:02:03Z",
			"fieldsType": "FieldsV1", "fieldsV1": map[string]any{
				"f:metadata": map[string]any{"f:annotations": map[string]any{".": map[string]any{}, "f:agones.dev/last-allocated": map[string]any{}}},
				"f:status":   map[string]any{"f:state": map[string]any{}, "f:address": map[string]any{}, "f:ports": map[string]any{}},
			},
		})
	}
	obj["metadata"].(map[string]any)["managedFields"] = fields
	ev, err := json.Marshal(map[string]any{"type": "MODIFIED", "object": obj})
	if err != nil {
		b.Fatal(err)
	}
	return ev
}

// BenchmarkDecodeWatchEvent compares the backend's decoding of one watch
// event with client-go's dynamic informer path (the event envelope, then
// the object into unstructured, then its status converted to the core's
// type), which it replaced:
//
//	go test -run '^$' -bench DecodeWatchEvent -benchmem ./allocator/kube/
func BenchmarkDecodeWatchEvent(b *testing.B) {
	ev := managedAgonesEvent(b)
	b.Run("lean", func(b *testing.B) {
		b.SetBytes(int64(len(ev)))
		d := newWatchDecoder(io.NopCloser(&repeatReader{event: append(ev, '\n')}))
		for b.Loop() {
			if _, obj, err := d.Decode(); err != nil || obj.(*gameServer).gs == nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("client-go-unstructured", func(b *testing.B) {
		b.SetBytes(int64(len(ev)))
		for b.Loop() {
			var we metav1.WatchEvent
			if err := json.Unmarshal(ev, &we); err != nil {
				b.Fatal(err)
			}
			obj, err := runtime.Decode(unstructured.UnstructuredJSONScheme, we.Object.Raw)
			if err != nil {
				b.Fatal(err)
			}
			u := obj.(*unstructured.Unstructured)
			st, _, _ := unstructured.NestedMap(u.Object, "status")
			var s status
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(st, &s); err != nil {
				b.Fatal(err)
			}
			gs := &core.GameServer{Namespace: u.GetNamespace(), Name: u.GetName(), Labels: u.GetLabels(), Annotations: u.GetAnnotations()}
			fillStatus(gs, &s)
		}
	})
}

// repeatReader is an endless watch stream of one event, read in pieces of
// up to 1000 bytes (so events straddle reads as they do on a connection).
type repeatReader struct {
	event []byte
	off   int
}

func (r *repeatReader) Read(p []byte) (int, error) {
	n := copy(p[:min(len(p), 1000)], r.event[r.off:])
	r.off = (r.off + n) % len(r.event)
	return n, nil
}
