package wire

import (
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/quartermaster-dev/quartermaster/allocator/pb/allocation"
	qmv1 "github.com/quartermaster-dev/quartermaster/allocator/pb/quartermaster/v1"
	"github.com/quartermaster-dev/quartermaster/core"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

func i64(v int64) *int64 { return &v }

func TestRequestToCore(t *testing.T) {
	cases := []struct {
		name string
		in   *allocation.AllocationRequest
		want core.Request
	}{
		{name: "nil request reads as empty", in: nil, want: core.Request{}},
		{name: "empty request", in: &allocation.AllocationRequest{}, want: core.Request{}},
		{
			name: "selectors with every part",
			in: &allocation.AllocationRequest{
				Namespace:  "games",
				Scheduling: allocation.AllocationRequest_Distributed,
				GameServerSelectors: []*allocation.GameServerSelector{{
					MatchLabels:     map[string]string{"agones.dev/fleet": "a"},
					GameServerState: allocation.GameServerSelector_ALLOCATED,
					Counters:        map[string]*allocation.CounterSelector{"rooms": {MinCount: 1, MaxCount: 2, MinAvailable: 3, MaxAvailable: 4}},
					Lists:           map[string]*allocation.ListSelector{"players": {ContainsValue: "x", MinAvailable: 5, MaxAvailable: 6}},
					MatchExpressions: []*allocation.LabelMatchExpressions{
						{Key: "k", Operator: allocation.LabelMatchExpressions_In, Values: []string{"v"}},
						{Key: "k", Operator: allocation.LabelMatchExpressions_NotIn, Values: []string{"w"}},
						{Key: "e", Operator: allocation.LabelMatchExpressions_Exists},
						{Key: "d", Operator: allocation.LabelMatchExpressions_DoesNotExist},
					},
				}, {}},
				Priorities: []*allocation.Priority{
					{Type: allocation.Priority_Counter, Key: "rooms", Order: allocation.Priority_Ascending},
					{Type: allocation.Priority_List, Key: "players", Order: allocation.Priority_Descending},
				},
			},
			want: core.Request{
				Namespace:  "games",
				Scheduling: core.Distributed,
				Selectors: []core.Selector{{
					MatchLabels: map[string]string{"agones.dev/fleet": "a"},
					State:       core.StateAllocated,
					Counters:    map[string]core.CounterSelector{"rooms": {MinCount: 1, MaxCount: 2, MinAvailable: 3, MaxAvailable: 4}},
					Lists:       map[string]core.ListSelector{"players": {ContainsValue: "x", MinAvailable: 5, MaxAvailable: 6}},
					MatchExpressions: []core.LabelExpression{
						{Key: "k", Operator: core.OpIn, Values: []string{"v"}},
						{Key: "k", Operator: core.OpNotIn, Values: []string{"w"}},
						{Key: "e", Operator: core.OpExists},
						{Key: "d", Operator: core.OpDoesNotExist},
					},
				}, {State: core.StateReady}},
				Priorities: []core.Priority{
					{Type: core.PriorityCounter, Key: "rooms", Order: core.Ascending},
					{Type: core.PriorityList, Key: "players", Order: core.Descending},
				},
			},
		},
		{
			name: "deprecated required and preferred",
			in: &allocation.AllocationRequest{
				RequiredGameServerSelector: &allocation.GameServerSelector{MatchLabels: map[string]string{"r": "1"}},
				PreferredGameServerSelectors: []*allocation.GameServerSelector{
					{MatchLabels: map[string]string{"p": "1"}},
					{GameServerState: allocation.GameServerSelector_ALLOCATED},
				},
			},
			want: core.Request{
				Required: &core.Selector{MatchLabels: map[string]string{"r": "1"}, State: core.StateReady},
				Preferred: []core.Selector{
					{MatchLabels: map[string]string{"p": "1"}, State: core.StateReady},
					{State: core.StateAllocated},
				},
			},
		},
		{
			name: "metaPatch used when metadata is absent",
			in:   &allocation.AllocationRequest{MetaPatch: &allocation.MetaPatch{Labels: map[string]string{"old": "1"}}},
			want: core.Request{Metadata: core.MetaPatch{Labels: map[string]string{"old": "1"}}},
		},
		{
			name: "metadata wins over metaPatch",
			in: &allocation.AllocationRequest{
				MetaPatch: &allocation.MetaPatch{Labels: map[string]string{"old": "1"}},
				Metadata:  &allocation.MetaPatch{Annotations: map[string]string{"new": "2"}},
			},
			want: core.Request{Metadata: core.MetaPatch{Annotations: map[string]string{"new": "2"}}},
		},
		{
			name: "empty metadata still wins over metaPatch",
			in: &allocation.AllocationRequest{
				MetaPatch: &allocation.MetaPatch{Labels: map[string]string{"old": "1"}},
				Metadata:  &allocation.MetaPatch{},
			},
			want: core.Request{},
		},
		{
			name: "counter and list actions, unset wrappers stay nil",
			in: &allocation.AllocationRequest{
				Counters: map[string]*allocation.CounterAction{
					"rooms": {Action: wrapperspb.String("Increment"), Amount: wrapperspb.Int64(2), Capacity: wrapperspb.Int64(math.MaxInt64)},
					"cap":   {Capacity: wrapperspb.Int64(0)},
					"nil":   nil,
				},
				Lists: map[string]*allocation.ListAction{
					"players": {AddValues: []string{"a", "b"}, DeleteValues: []string{"c"}, Capacity: wrapperspb.Int64(10)},
					"nil":     nil,
				},
			},
			want: core.Request{
				Counters: map[string]core.CounterAction{
					"rooms": {Action: core.ActionIncrement, Amount: i64(2), Capacity: i64(math.MaxInt64)},
					"cap":   {Capacity: i64(0)},
					"nil":   {},
				},
				Lists: map[string]core.ListAction{
					"players": {AddValues: []string{"a", "b"}, DeleteValues: []string{"c"}, Capacity: i64(10)},
					"nil":     {},
				},
			},
		},
		{
			name: "multi-cluster",
			in: &allocation.AllocationRequest{MultiClusterSetting: &allocation.MultiClusterSetting{
				Enabled: true, PolicySelector: &allocation.LabelSelector{MatchLabels: map[string]string{"tier": "cloud"}},
			}},
			want: core.Request{MultiCluster: core.MultiClusterSetting{Enabled: true, PolicySelector: map[string]string{"tier": "cloud"}}},
		},
		{
			name: "nil entries read as empty messages",
			in: &allocation.AllocationRequest{
				MultiClusterSetting: &allocation.MultiClusterSetting{Enabled: true},
				GameServerSelectors: []*allocation.GameServerSelector{nil, {
					Counters:         map[string]*allocation.CounterSelector{"c": nil},
					Lists:            map[string]*allocation.ListSelector{"l": nil},
					MatchExpressions: []*allocation.LabelMatchExpressions{nil},
				}},
				Priorities: []*allocation.Priority{nil},
			},
			want: core.Request{
				MultiCluster: core.MultiClusterSetting{Enabled: true},
				Selectors: []core.Selector{{State: core.StateReady}, {
					State:            core.StateReady,
					Counters:         map[string]core.CounterSelector{"c": {}},
					Lists:            map[string]core.ListSelector{"l": {}},
					MatchExpressions: []core.LabelExpression{{Operator: core.OpIn}},
				}},
				Priorities: []core.Priority{{}},
			},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got, err := RequestToCore(c.in)
			if err != nil {
				t.Fatalf("RequestToCore: %v", err)
			}
			if !reflect.DeepEqual(got, c.want) {
				t.Errorf("got\n  %+v\nwant\n  %+v", got, c.want)
			}
		})
	}
}

// TestRequestToCoreIsolation checks the core request shares no maps or
// slices with the message, so a caller reusing the message cannot change a
// request the core is working on.
func TestRequestToCoreIsolation(t *testing.T) {
	in := &allocation.AllocationRequest{
		Metadata:            &allocation.MetaPatch{Labels: map[string]string{"a": "1"}},
		GameServerSelectors: []*allocation.GameServerSelector{{MatchLabels: map[string]string{"b": "2"}}},
		Lists:               map[string]*allocation.ListAction{"l": {AddValues: []string{"x"}}},
	}
	got, err := RequestToCore(in)
	if err != nil {
		t.Fatal(err)
	}
	in.Metadata.Labels["a"] = "changed"
	in.GameServerSelectors[0].MatchLabels["b"] = "changed"
	in.Lists["l"].AddValues[0] = "changed"
	if got.Metadata.Labels["a"] != "1" || got.Selectors[0].MatchLabels["b"] != "2" || got.Lists["l"].AddValues[0] != "x" {
		t.Errorf("core request aliases the message: %+v", got)
	}
}

func TestRequestToCoreErrors(t *testing.T) {
	cases := []struct {
		name   string
		in     *allocation.AllocationRequest
		fields []string // every field the error must name, in order
	}{
		{
			name:   "scheduling out of range",
			in:     &allocation.AllocationRequest{Scheduling: 2},
			fields: []string{"scheduling"},
		},
		{
			name:   "negative scheduling",
			in:     &allocation.AllocationRequest{Scheduling: -1},
			fields: []string{"scheduling"},
		},
		{
			name: "selector state",
			in: &allocation.AllocationRequest{GameServerSelectors: []*allocation.GameServerSelector{
				{}, {GameServerState: 7},
			}},
			fields: []string{"gameServerSelectors[1].gameServerState"},
		},
		{
			name:   "deprecated selectors are checked too",
			in:     &allocation.AllocationRequest{RequiredGameServerSelector: &allocation.GameServerSelector{GameServerState: 2}, PreferredGameServerSelectors: []*allocation.GameServerSelector{{GameServerState: math.MaxInt32}}},
			fields: []string{"preferredGameServerSelectors[0].gameServerState", "requiredGameServerSelector.gameServerState"},
		},
		{
			name: "operator",
			in: &allocation.AllocationRequest{GameServerSelectors: []*allocation.GameServerSelector{{
				MatchExpressions: []*allocation.LabelMatchExpressions{{Key: "k"}, {Key: "k", Operator: 4}},
			}}},
			fields: []string{"gameServerSelectors[0].matchExpressions[1].operator"},
		},
		{
			name:   "priority type and order",
			in:     &allocation.AllocationRequest{Priorities: []*allocation.Priority{{Type: 2, Order: math.MinInt32}}},
			fields: []string{"priorities[0].order", "priorities[0].type"},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := RequestToCore(c.in)
			var ire *core.InvalidRequestError
			if !errors.As(err, &ire) {
				t.Fatalf("error %v is not a *core.InvalidRequestError", err)
			}
			var got []string
			for _, fe := range ire.Errors {
				got = append(got, fe.Field)
				if !strings.Contains(fe.Reason, "unknown value") {
					t.Errorf("%s: reason %q does not say what was wrong", fe.Field, fe.Reason)
				}
			}
			if !reflect.DeepEqual(got, c.fields) {
				t.Errorf("fields %q, want %q (error: %v)", got, c.fields, err)
			}
		})
	}
}

// TestRequestRoundTrip sends core requests through the wire form (binary
// and JSON) and back: nothing may be lost or changed.
func TestRequestRoundTrip(t *testing.T) {
	cases := []core.Request{
		{},
		{Namespace: "games", Scheduling: core.Distributed},
		{
			Namespace: "default",
			Selectors: []core.Selector{
				{
					MatchLabels: map[string]string{"agones.dev/fleet": "x"},
					MatchExpressions: []core.LabelExpression{
						{Key: "region", Operator: core.OpNotIn, Values: []string{"eu"}},
						{Key: "beta", Operator: core.OpDoesNotExist},
					},
					State:    core.StateAllocated,
					Counters: map[string]core.CounterSelector{"rooms": {MinCount: math.MinInt64, MaxCount: math.MaxInt64, MinAvailable: 1, MaxAvailable: 2}},
					Lists:    map[string]core.ListSelector{"players": {ContainsValue: "p", MinAvailable: 1, MaxAvailable: 9}},
				},
				{State: core.StateReady},
			},
			Metadata:   core.MetaPatch{Labels: map[string]string{"l": "1"}, Annotations: map[string]string{"a": "b"}},
			Priorities: []core.Priority{{Type: core.PriorityList, Key: "players", Order: core.Descending}},
			Counters: map[string]core.CounterAction{
				"rooms": {Action: core.ActionDecrement, Amount: i64(math.MaxInt64), Capacity: i64(0)},
				"cap":   {Capacity: i64(3)},
			},
			Lists:        map[string]core.ListAction{"players": {AddValues: []string{"a"}, DeleteValues: []string{"b"}, Capacity: i64(1000)}},
			MultiCluster: core.MultiClusterSetting{Enabled: true, PolicySelector: map[string]string{"p": "q"}},
		},
		{
			Required:  &core.Selector{MatchLabels: map[string]string{"r": "1"}, State: core.StateReady},
			Preferred: []core.Selector{{State: core.StateAllocated}, {State: core.StateReady}},
		},
	}
	for i, want := range cases {
		msg, err := RequestFromCore(&want)
		if err != nil {
			t.Fatalf("case %d: RequestFromCore: %v", i, err)
		}

		bin, err := proto.Marshal(msg)
		if err != nil {
			t.Fatalf("case %d: marshal: %v", i, err)
		}
		fromBin := &allocation.AllocationRequest{}
		if err := proto.Unmarshal(bin, fromBin); err != nil {
			t.Fatalf("case %d: unmarshal: %v", i, err)
		}
		js, err := MarshalJSON(msg)
		if err != nil {
			t.Fatalf("case %d: MarshalJSON: %v", i, err)
		}
		fromJSON, err := DecodeJSONRequest(js)
		if err != nil {
			t.Fatalf("case %d: DecodeJSONRequest(%s): %v", i, js, err)
		}

		for via, m := range map[string]*allocation.AllocationRequest{"message": msg, "binary": fromBin, "JSON": fromJSON} {
			got, err := RequestToCore(m)
			if err != nil {
				t.Fatalf("case %d via %s: RequestToCore: %v", i, via, err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("case %d via %s:\n got  %+v\n want %+v", i, via, got, want)
			}
		}
	}
}

func TestRequestFromCoreErrors(t *testing.T) {
	cases := []struct {
		name  string
		in    *core.Request
		field string
	}{
		{"nil", nil, "request"},
		{"strategy", &core.Request{Scheduling: 9}, "scheduling"},
		{"state", &core.Request{Selectors: []core.Selector{{State: core.StateShutdown}}}, "gameServerSelectors[0].gameServerState"},
		{"required state", &core.Request{Required: &core.Selector{State: core.StateReserved}}, "requiredGameServerSelector.gameServerState"},
		{"operator", &core.Request{Selectors: []core.Selector{{MatchExpressions: []core.LabelExpression{{Key: "k", Operator: "Gt"}}}}}, "gameServerSelectors[0].matchExpressions[0].operator"},
		{"priority type", &core.Request{Priorities: []core.Priority{{Type: 5}}}, "priorities[0].type"},
		{"priority order", &core.Request{Priorities: []core.Priority{{Order: -1}}}, "priorities[0].order"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := RequestFromCore(c.in)
			var ire *core.InvalidRequestError
			if !errors.As(err, &ire) || len(ire.Errors) != 1 || ire.Errors[0].Field != c.field {
				t.Errorf("error %v, want one naming %s", err, c.field)
			}
		})
	}
}

func TestResponseFromCore(t *testing.T) {
	gs := &core.GameServer{
		Namespace:   "games",
		Name:        "gs-1",
		Labels:      map[string]string{"agones.dev/fleet": "f"},
		Annotations: map[string]string{core.LastAllocatedAnnotation: "2026-01-02T03:04:05.000000006Z"},
		State:       core.StateAllocated,
		NodeName:    "node-a",
		Address:     "10.0.0.1",
		Addresses:   []core.Address{{Type: "InternalIP", Address: "10.0.0.1"}, {Type: "Hostname", Address: "node-a"}},
		Ports:       []core.Port{{Name: "game", Port: 7777}},
		Counters:    map[string]core.Counter{"rooms": {Count: 2, Capacity: math.MaxInt64}, "zero": {}},
		Lists:       map[string]core.List{"players": {Values: []string{"a", "b"}, Capacity: 4}, "empty": {}},
		Version:     "123",
	}
	got := ResponseFromCore(gs, SourceLocal)
	want := &allocation.AllocationResponse{
		GameServerName: "gs-1",
		Ports:          []*allocation.AllocationResponse_GameServerStatusPort{{Name: "game", Port: 7777}},
		Address:        "10.0.0.1",
		NodeName:       "node-a",
		Source:         "local",
		Metadata: &allocation.AllocationResponse_GameServerMetadata{
			Labels:      map[string]string{"agones.dev/fleet": "f"},
			Annotations: map[string]string{core.LastAllocatedAnnotation: "2026-01-02T03:04:05.000000006Z"},
		},
		Addresses: []*allocation.AllocationResponse_GameServerStatusAddress{
			{Type: "InternalIP", Address: "10.0.0.1"}, {Type: "Hostname", Address: "node-a"},
		},
		Counters: map[string]*allocation.AllocationResponse_CounterStatus{
			"rooms": {Count: wrapperspb.Int64(2), Capacity: wrapperspb.Int64(math.MaxInt64)},
			"zero":  {Count: wrapperspb.Int64(0), Capacity: wrapperspb.Int64(0)},
		},
		Lists: map[string]*allocation.AllocationResponse_ListStatus{
			"players": {Values: []string{"a", "b"}, Capacity: wrapperspb.Int64(4)},
			"empty":   {Capacity: wrapperspb.Int64(0)},
		},
	}
	if !proto.Equal(got, want) {
		t.Errorf("got\n  %v\nwant\n  %v", got, want)
	}

	// Back again: everything but the version (not on the wire) survives.
	back := GameServerFromResponse(got, "games")
	wantBack := gs.Clone()
	wantBack.Version = ""
	wantBack.Lists["empty"] = core.List{}
	if !reflect.DeepEqual(back, wantBack) {
		t.Errorf("round trip:\n got  %+v\n want %+v", back, wantBack)
	}
}

func TestResponseEdgeCases(t *testing.T) {
	if got := ResponseFromCore(nil, SourceLocal); got != nil {
		t.Errorf("ResponseFromCore(nil) = %v, want nil", got)
	}
	minimal := ResponseFromCore(&core.GameServer{Name: "x"}, "remote:443")
	if minimal.GetMetadata() == nil || minimal.GetSource() != "remote:443" {
		t.Errorf("minimal response %v: want metadata present and the given source", minimal)
	}

	// Responses from elsewhere may hold nil entries; they must not panic.
	gs := GameServerFromResponse(&allocation.AllocationResponse{
		GameServerName: "x",
		Ports:          []*allocation.AllocationResponse_GameServerStatusPort{nil},
		Addresses:      []*allocation.AllocationResponse_GameServerStatusAddress{nil},
		Counters:       map[string]*allocation.AllocationResponse_CounterStatus{"c": nil, "d": {}},
		Lists:          map[string]*allocation.AllocationResponse_ListStatus{"l": nil},
	}, "ns")
	want := &core.GameServer{
		Namespace: "ns", Name: "x", State: core.StateAllocated,
		Counters: map[string]core.Counter{"c": {}, "d": {}},
		Lists:    map[string]core.List{"l": {}},
	}
	if !reflect.DeepEqual(gs, want) {
		t.Errorf("got %+v, want %+v", gs, want)
	}
	if got := GameServerFromResponse(nil, "ns"); got.Name != "" || got.Namespace != "ns" {
		t.Errorf("GameServerFromResponse(nil) = %+v", got)
	}
}

func TestAdmin(t *testing.T) {
	at := time.Date(2026, 3, 4, 5, 6, 7, 8, time.UTC)
	gs := &core.GameServer{
		Namespace: "games", Name: "gs-1", Address: "10.0.0.1", NodeName: "n",
		Addresses:   []core.Address{{Type: "ExternalIP", Address: "1.2.3.4"}},
		Ports:       []core.Port{{Name: "game", Port: 7000}},
		Annotations: map[string]string{core.LastAllocatedAnnotation: at.Format(time.RFC3339Nano)},
	}
	rec := AllocationRecord(gs, "spiffe://example/player-1", at)
	want := &qmv1.Allocation{
		Namespace: "games", GameServerName: "gs-1", Address: "10.0.0.1", NodeName: "n",
		Addresses: []*qmv1.Address{{Type: "ExternalIP", Address: "1.2.3.4"}},
		Ports:     []*qmv1.Port{{Name: "game", Port: 7000}},
		Owner:     "spiffe://example/player-1",
	}
	if rec.GetAllocatedAt().AsTime() != at {
		t.Errorf("allocatedAt = %v, want %v", rec.GetAllocatedAt().AsTime(), at)
	}
	rec.AllocatedAt = nil
	if !proto.Equal(rec, want) {
		t.Errorf("got %v, want %v", rec, want)
	}
	if r := AllocationRecord(nil, "o", time.Time{}); r.GetOwner() != "o" || r.AllocatedAt != nil {
		t.Errorf("AllocationRecord(nil) = %v", r)
	}

	if got, ok := AllocatedAt(gs); !ok || !got.Equal(at) {
		t.Errorf("AllocatedAt = %v, %v", got, ok)
	}
	for _, bad := range []*core.GameServer{nil, {}, {Annotations: map[string]string{core.LastAllocatedAnnotation: "yesterday"}}} {
		if _, ok := AllocatedAt(bad); ok {
			t.Errorf("AllocatedAt(%+v) ok", bad)
		}
	}

	keys := []struct {
		in   *qmv1.ReleaseRequest
		want core.Key
		ok   bool
	}{
		{&qmv1.ReleaseRequest{Namespace: "games", GameServerName: "gs-1"}, core.Key{Namespace: "games", Name: "gs-1"}, true},
		{&qmv1.ReleaseRequest{GameServerName: "gs-1"}, core.Key{Namespace: "default", Name: "gs-1"}, true},
		{&qmv1.ReleaseRequest{Namespace: "games"}, core.Key{}, false},
		{nil, core.Key{}, false},
	}
	for _, k := range keys {
		got, err := ReleaseKey(k.in)
		if (err == nil) != k.ok || got != k.want {
			t.Errorf("ReleaseKey(%v) = %v, %v", k.in, got, err)
		}
		var ire *core.InvalidRequestError
		if err != nil && (!errors.As(err, &ire) || ire.Errors[0].Field != "gameServerName") {
			t.Errorf("ReleaseKey(%v) error %v should name gameServerName", k.in, err)
		}
	}
}
