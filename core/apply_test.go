package core

import (
	"reflect"
	"testing"
	"time"
)

func TestApplyCounters(t *testing.T) {
	cases := []struct {
		name   string
		start  Counter
		action CounterAction
		want   Counter
	}{
		{"increment", Counter{2, 10}, CounterAction{Action: ActionIncrement, Amount: i64(3)}, Counter{5, 10}},
		{"increment clamps at capacity", Counter{8, 10}, CounterAction{Action: ActionIncrement, Amount: i64(5)}, Counter{10, 10}},
		{"increment huge amount saturates", Counter{8, 10}, CounterAction{Action: ActionIncrement, Amount: i64(1<<63 - 1)}, Counter{10, 10}},
		{"decrement", Counter{5, 10}, CounterAction{Action: ActionDecrement, Amount: i64(2)}, Counter{3, 10}},
		{"decrement clamps at zero", Counter{1, 10}, CounterAction{Action: ActionDecrement, Amount: i64(4)}, Counter{0, 10}},
		{"capacity only", Counter{1, 10}, CounterAction{Capacity: i64(20)}, Counter{1, 20}},
		{"capacity below count clamps count (Agones v1.60: 3 -> 1)", Counter{3, 10}, CounterAction{Capacity: i64(1)}, Counter{1, 1}},
		{"capacity first, then increment", Counter{3, 3}, CounterAction{Action: ActionIncrement, Amount: i64(2), Capacity: i64(10)}, Counter{5, 10}},
		{"capacity zero", Counter{3, 5}, CounterAction{Action: ActionIncrement, Amount: i64(1), Capacity: i64(0)}, Counter{0, 0}},
		{"action without amount is no change", Counter{3, 5}, CounterAction{Action: ActionIncrement}, Counter{3, 5}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			gs := &GameServer{Counters: map[string]Counter{"rooms": tc.start}}
			out := Apply(gs, &Request{Counters: map[string]CounterAction{"rooms": tc.action}}, time.Time{})
			if got := out.Counters["rooms"]; got != tc.want {
				t.Fatalf("counter = %+v, want %+v", got, tc.want)
			}
			if gs.Counters["rooms"] != tc.start {
				t.Fatal("Apply modified its input")
			}
		})
	}
}

func TestApplyLists(t *testing.T) {
	cases := []struct {
		name   string
		start  List
		action ListAction
		want   List
	}{
		{"add", List{[]string{"a"}, 5}, ListAction{AddValues: []string{"b", "c"}}, List{[]string{"a", "b", "c"}, 5}},
		{"add skips duplicates", List{[]string{"a"}, 5}, ListAction{AddValues: []string{"a", "b", "b"}}, List{[]string{"a", "b"}, 5}},
		{"add truncated at capacity", List{[]string{"a"}, 2}, ListAction{AddValues: []string{"b", "c", "d"}}, List{[]string{"a", "b"}, 2}},
		{"delete ignores missing", List{[]string{"a", "b", "c"}, 5}, ListAction{DeleteValues: []string{"b", "zz"}}, List{[]string{"a", "c"}, 5}},
		{"capacity below length keeps the first values (Agones v1.60: 5 -> 3, adds nothing)", List{[]string{"a", "b", "c", "d", "e"}, 10}, ListAction{Capacity: i64(3), AddValues: []string{"f"}}, List{[]string{"a", "b", "c"}, 3}},
		{"capacity raised then add", List{[]string{"a"}, 1}, ListAction{Capacity: i64(3), AddValues: []string{"b"}}, List{[]string{"a", "b"}, 3}},
		{"add then delete", List{nil, 5}, ListAction{AddValues: []string{"x", "y"}, DeleteValues: []string{"x"}}, List{[]string{"y"}, 5}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			orig := append([]string(nil), tc.start.Values...)
			gs := &GameServer{Lists: map[string]List{"players": tc.start}}
			out := Apply(gs, &Request{Lists: map[string]ListAction{"players": tc.action}}, time.Time{})
			got := out.Lists["players"]
			if !reflect.DeepEqual(got.Values, tc.want.Values) && !(len(got.Values) == 0 && len(tc.want.Values) == 0) || got.Capacity != tc.want.Capacity {
				t.Fatalf("list = %+v, want %+v", got, tc.want)
			}
			if !reflect.DeepEqual(gs.Lists["players"].Values, orig) && len(orig) > 0 {
				t.Fatal("Apply modified its input")
			}
		})
	}
}

func TestApplyMetadataStateAndSharing(t *testing.T) {
	now := time.Date(2026, 11, 22, 10, 30, 0, 123456789, time.FixedZone("X", 3600))
	gs := &GameServer{
		Name: "gs-1", State: StateReady,
		Labels:      map[string]string{"keep": "1", "mode": "old"},
		Annotations: map[string]string{"a": "1"},
		Counters:    map[string]Counter{"rooms": {1, 4}},
		Ports:       []Port{{"default", 7777}},
	}
	req := &Request{
		Metadata: MetaPatch{Labels: map[string]string{"mode": "deathmatch"}, Annotations: map[string]string{"map": "garden22"}},
		Counters: map[string]CounterAction{"missing": {Action: ActionIncrement, Amount: i64(1)}},
		Lists:    map[string]ListAction{"missing": {AddValues: []string{"x"}}},
	}
	out := Apply(gs, req, now)
	if out.State != StateAllocated {
		t.Fatalf("state = %s", out.State)
	}
	wantLabels := map[string]string{"keep": "1", "mode": "deathmatch"}
	if !reflect.DeepEqual(out.Labels, wantLabels) {
		t.Fatalf("labels = %v", out.Labels)
	}
	wantAnn := map[string]string{"a": "1", "map": "garden22", LastAllocatedAnnotation: "2026-11-22T09:30:00.123456789Z"}
	if got := out.AllAnnotations(); !reflect.DeepEqual(got, wantAnn) {
		t.Fatalf("annotations = %v", got)
	}
	if v, ok := out.Annotation(LastAllocatedAnnotation); !ok || v != wantAnn[LastAllocatedAnnotation] || out.LastAllocated() != v {
		t.Fatalf("last-allocated = %q, %v; LastAllocated() = %q", v, ok, out.LastAllocated())
	}
	if _, ok := out.Annotations[LastAllocatedAnnotation]; ok {
		t.Fatal("the stamp is AllocatedAt, not a map entry")
	}
	if _, ok := out.Counters["missing"]; ok {
		t.Fatal("an action on a missing counter must not create it")
	}
	if _, ok := out.Lists["missing"]; ok {
		t.Fatal("an action on a missing list must not create it")
	}
	if gs.State != StateReady || gs.Labels["mode"] != "old" || len(gs.Annotations) != 1 {
		t.Fatal("Apply modified its input")
	}
	if &out.Ports[0] != &gs.Ports[0] {
		t.Fatal("unchanged parts should be shared, not copied")
	}
}

// TestApplyStampWithoutAMap checks that an allocation without annotations
// of its own shares the server's map, and that the new stamp wins over one
// the map carries from before (a server read back from Kubernetes).
func TestApplyStampWithoutAMap(t *testing.T) {
	gs := &GameServer{Name: "gs-1", State: StateAllocated,
		Annotations: map[string]string{"a": "1", LastAllocatedAnnotation: "2020-01-01T00:00:00Z"}}
	if gs.LastAllocated() != "2020-01-01T00:00:00Z" {
		t.Fatalf("before: %q, want the map's stamp", gs.LastAllocated())
	}
	out := Apply(gs, &Request{}, time.Date(2026, 11, 25, 14, 0, 0, 500, time.UTC))
	if reflect.ValueOf(out.Annotations).UnsafePointer() != reflect.ValueOf(gs.Annotations).UnsafePointer() {
		t.Fatal("no annotations in the request: the map should be shared")
	}
	const want = "2026-11-25T14:00:00.0000005Z"
	if v, _ := out.Annotation(LastAllocatedAnnotation); v != want || out.LastAllocated() != want {
		t.Fatalf("stamp %q / %q, want %q", v, out.LastAllocated(), want)
	}
	all := out.AllAnnotations()
	if len(all) != 2 || all["a"] != "1" || all[LastAllocatedAnnotation] != want {
		t.Fatalf("AllAnnotations = %v", all)
	}
	if gs.Annotations[LastAllocatedAnnotation] != "2020-01-01T00:00:00Z" {
		t.Fatal("AllAnnotations modified the shared map")
	}
	if v, ok := out.Annotation("a"); !ok || v != "1" {
		t.Fatalf("Annotation(a) = %q, %v", v, ok)
	}
	if _, ok := out.Annotation("missing"); ok {
		t.Fatal("Annotation(missing) found")
	}
}
