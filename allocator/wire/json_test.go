package wire

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/quartermaster-dev/quartermaster/allocator/pb/allocation"
	qmv1 "github.com/quartermaster-dev/quartermaster/allocator/pb/quartermaster/v1"
	"github.com/quartermaster-dev/quartermaster/core"
	"google.golang.org/protobuf/proto"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// golden compares got with testdata/name, or rewrites the file with -update.
// Re-record only after reading the diff: these files are the REST contract.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the golden file (go test -update rewrites it):\n got:\n%s\nwant:\n%s", path, got, want)
	}
}

func indent(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return append(b, '\n')
}

// TestJSONRequestGolden decodes each testdata/request-*.in.json body as the
// REST endpoint does and records both the decoded message (re-encoded) and
// the core request it converts to.
func TestJSONRequestGolden(t *testing.T) {
	inputs, err := filepath.Glob(filepath.Join("testdata", "request-*.in.json"))
	if err != nil || len(inputs) == 0 {
		t.Fatalf("no request inputs in testdata (%v)", err)
	}
	for _, in := range inputs {
		name := strings.TrimSuffix(filepath.Base(in), ".in.json")
		t.Run(name, func(t *testing.T) {
			body, err := os.ReadFile(in)
			if err != nil {
				t.Fatal(err)
			}
			req, err := DecodeJSONRequest(body)
			if err != nil {
				t.Fatalf("DecodeJSONRequest: %v", err)
			}
			msg, err := MarshalJSON(req)
			if err != nil {
				t.Fatal(err)
			}
			cr, err := RequestToCore(req)
			if err != nil {
				t.Fatalf("RequestToCore: %v", err)
			}
			golden(t, name+".golden.json", indent(t, map[string]any{
				"message": json.RawMessage(msg),
				"core":    cr,
			}))
		})
	}
}

// TestJSONRequestFacts states the REST facts of docs/agones-compat.md outright,
// so that they hold even if a golden file were re-recorded carelessly.
func TestJSONRequestFacts(t *testing.T) {
	body := []byte(`{
		"namespace": "games",
		"gameServerSelectors": [{"gameServerState": "ALLOCATED",
			"matchExpressions": [{"key": "region", "operator": "NotIn", "values": ["eu"]}],
			"counters": {"rooms": {"minCount": "1", "maxAvailable": 9223372036854775807}}}],
		"multiClusterSetting": {"enabled": true},
		"scheduling": "Distributed",
		"priorities": [{"type": "List", "key": "players", "order": "Descending"}],
		"counters": {"rooms": {"action": "Increment", "amount": "2", "capacity": 10}},
		"lists": {"players": {"addValues": ["p1"], "capacity": "5"}},
		"someFutureField": {"nested": [1, 2, 3]},
		"metadata": {"labels": {"a": "b"}, "unknownInside": true}
	}`)
	req, err := DecodeJSONRequest(body)
	if err != nil {
		t.Fatalf("DecodeJSONRequest: %v", err)
	}
	got, err := RequestToCore(req)
	if err != nil {
		t.Fatal(err)
	}
	want := core.Request{
		Namespace: "games",
		Selectors: []core.Selector{{
			State:            core.StateAllocated,
			MatchExpressions: []core.LabelExpression{{Key: "region", Operator: core.OpNotIn, Values: []string{"eu"}}},
			Counters:         map[string]core.CounterSelector{"rooms": {MinCount: 1, MaxAvailable: math.MaxInt64}},
		}},
		MultiCluster: core.MultiClusterSetting{Enabled: true},
		Scheduling:   core.Distributed,
		Priorities:   []core.Priority{{Type: core.PriorityList, Key: "players", Order: core.Descending}},
		Counters:     map[string]core.CounterAction{"rooms": {Action: "Increment", Amount: i64(2), Capacity: i64(10)}},
		Lists:        map[string]core.ListAction{"players": {AddValues: []string{"p1"}, Capacity: i64(5)}},
		Metadata:     core.MetaPatch{Labels: map[string]string{"a": "b"}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("got\n  %+v\nwant\n  %+v", got, want)
	}

	// Re-encoded, enums are names and int64 values are strings.
	out, err := MarshalJSON(req)
	if err != nil {
		t.Fatal(err)
	}
	for _, frag := range []string{
		`"scheduling":"Distributed"`, `"gameServerState":"ALLOCATED"`, `"operator":"NotIn"`,
		`"type":"List"`, `"order":"Descending"`,
		`"minCount":"1"`, `"maxAvailable":"9223372036854775807"`, `"amount":"2"`, `"capacity":"10"`,
		`"gameServerSelectors":[`, `"multiClusterSetting":{`,
	} {
		if !bytes.Contains(out, []byte(frag)) {
			t.Errorf("encoded request lacks %s:\n%s", frag, out)
		}
	}
	if bytes.Contains(out, []byte("someFutureField")) || bytes.Contains(out, []byte("unknownInside")) {
		t.Errorf("unknown fields survived decoding:\n%s", out)
	}
}

// TestJSONFieldNames checks that each field decodes under both its proto
// name and its JSON name (the same strings for this API), and that keys in
// another style are unknown fields, ignored rather than misread.
func TestJSONFieldNames(t *testing.T) {
	cases := []struct {
		body string
		want *allocation.AllocationRequest
	}{
		{`{"gameServerSelectors":[{"matchLabels":{"a":"b"}}]}`, &allocation.AllocationRequest{
			GameServerSelectors: []*allocation.GameServerSelector{{MatchLabels: map[string]string{"a": "b"}}},
		}},
		{`{"multiClusterSetting":{"enabled":true,"policySelector":{"matchLabels":{"x":"y"}}}}`, &allocation.AllocationRequest{
			MultiClusterSetting: &allocation.MultiClusterSetting{Enabled: true, PolicySelector: &allocation.LabelSelector{MatchLabels: map[string]string{"x": "y"}}},
		}},
		{`{"game_server_selectors":[{"match_labels":{"a":"b"}}],"multi_cluster_setting":{"enabled":true}}`, &allocation.AllocationRequest{}},
		{`{"scheduling":1}`, &allocation.AllocationRequest{Scheduling: allocation.AllocationRequest_Distributed}},
		{`{"scheduling":null,"metadata":null,"gameServerSelectors":null}`, &allocation.AllocationRequest{}},
		{``, &allocation.AllocationRequest{}},
		{" \n", &allocation.AllocationRequest{}},
	}
	for _, c := range cases {
		got, err := DecodeJSONRequest([]byte(c.body))
		if err != nil {
			t.Errorf("DecodeJSONRequest(%s): %v", c.body, err)
			continue
		}
		if !proto.Equal(got, c.want) {
			t.Errorf("DecodeJSONRequest(%s) = %v, want %v", c.body, got, c.want)
		}
	}
}

func TestJSONRequestErrors(t *testing.T) {
	cases := []struct {
		name  string
		body  string
		field string // the field the error must name
		says  string // and a part of its reason
	}{
		{"unknown scheduling name", `{"scheduling":"Spread"}`, "scheduling", `unknown value "Spread" (want Packed or Distributed)`},
		{"enum names are case-sensitive", `{"gameServerSelectors":[{},{"gameServerState":"Allocated"}]}`, "gameServerSelectors[1].gameServerState", `"Allocated"`},
		{"operator", `{"gameServerSelectors":[{"matchExpressions":[{"key":"k","operator":"Gt"}]}]}`, "gameServerSelectors[0].matchExpressions[0].operator", "In, NotIn, Exists or DoesNotExist"},
		{"priority", `{"priorities":[{"type":"Gauge"}]}`, "priorities[0].type", `"Gauge"`},
		{"unknown name beside unknown field", `{"extra":1,"priorities":[{"order":"Up"}]}`, "priorities[0].order", `"Up"`},
		{"deprecated selector", `{"requiredGameServerSelector":{"gameServerState":"RESERVED"}}`, "requiredGameServerSelector.gameServerState", "READY or ALLOCATED"},
		{"malformed", `{"namespace":`, "body", "AllocationRequest"},
		{"wrong type", `{"namespace":5}`, "body", "namespace"},
		{"int64 out of range", `{"counters":{"c":{"amount":"9223372036854775808"}}}`, "body", ""},
		{"not an object", `[1,2]`, "body", ""},
		{"trailing data", `{} {}`, "body", ""},
		{"duplicate field", `{"namespace":"a","namespace":"b"}`, "body", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			req, err := DecodeJSONRequest([]byte(c.body))
			var ire *core.InvalidRequestError
			if !errors.As(err, &ire) {
				t.Fatalf("got %v, %v; want a *core.InvalidRequestError", req, err)
			}
			if len(ire.Errors) != 1 || ire.Errors[0].Field != c.field || !strings.Contains(ire.Errors[0].Reason, c.says) {
				t.Errorf("error %q; want one naming %s and saying %q", err, c.field, c.says)
			}
		})
	}

	// A number outside the enum decodes (proto3 enums are open) and is
	// refused by the conversion, naming the field.
	req, err := DecodeJSONRequest([]byte(`{"scheduling":7}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := RequestToCore(req); err == nil || !strings.Contains(err.Error(), "scheduling: unknown value 7") {
		t.Errorf("RequestToCore: %v, want an error about scheduling", err)
	}
}

// responseFixtures are the servers whose responses are recorded in
// testdata/response-*.golden.json.
var responseFixtures = map[string]*core.GameServer{
	"full": {
		Namespace:   "games",
		Name:        "simple-fleet-x7k2p",
		Labels:      map[string]string{"agones.dev/fleet": "simple-fleet", "mode": "ranked"},
		Annotations: map[string]string{core.LastAllocatedAnnotation: "2026-08-01T12:00:00.123456789Z"},
		State:       core.StateAllocated,
		NodeName:    "node-1",
		Address:     "203.0.113.7",
		Addresses:   []core.Address{{Type: "ExternalIP", Address: "203.0.113.7"}, {Type: "InternalIP", Address: "10.0.0.7"}},
		Ports:       []core.Port{{Name: "default", Port: 7654}, {Name: "query", Port: 7655}},
		Counters:    map[string]core.Counter{"rooms": {Count: 2, Capacity: 10}, "huge": {Count: math.MaxInt64, Capacity: math.MaxInt64}},
		Lists:       map[string]core.List{"players": {Values: []string{"alice", "bob"}, Capacity: 8}, "empty": {Capacity: 3}},
	},
	"minimal": {Namespace: "default", Name: "gs-1", State: core.StateAllocated},
}

func TestJSONResponseGolden(t *testing.T) {
	for name, gs := range responseFixtures {
		t.Run(name, func(t *testing.T) {
			resp := ResponseFromCore(gs, SourceLocal)
			body, err := EncodeJSONResponse(resp)
			if err != nil {
				t.Fatal(err)
			}
			// The body itself is compact; the golden file is indented so
			// that a diff is readable.
			var pretty bytes.Buffer
			if err := json.Indent(&pretty, body, "", "  "); err != nil {
				t.Fatalf("response is not JSON: %v\n%s", err, body)
			}
			pretty.WriteByte('\n')
			golden(t, "response-"+name+".golden.json", pretty.Bytes())

			// Decoding the body gives back the same message (what the client does).
			back := &allocation.AllocationResponse{}
			if err := UnmarshalJSON(body, back); err != nil {
				t.Fatalf("UnmarshalJSON: %v", err)
			}
			if !proto.Equal(back, resp) {
				t.Errorf("response did not survive JSON:\n got  %v\n want %v", back, resp)
			}
		})
	}
}

func TestJSONResponseFacts(t *testing.T) {
	resp := ResponseFromCore(responseFixtures["full"], SourceLocal)
	body, err := EncodeJSONResponse(resp)
	if err != nil {
		t.Fatal(err)
	}
	for _, frag := range []string{
		`"gameServerName":"simple-fleet-x7k2p"`, `"nodeName":"node-1"`, `"source":"local"`,
		`"rooms":{"count":"2","capacity":"10"}`, `"count":"9223372036854775807"`,
		`"players":{"values":["alice","bob"],"capacity":"8"}`, `"empty":{"values":[],"capacity":"3"}`,
		`"ports":[{"name":"default","port":7654}`,
	} {
		if !bytes.Contains(body, []byte(frag)) {
			t.Errorf("response lacks %s:\n%s", frag, body)
		}
	}

	// Unpopulated fields are still emitted.
	resp = ResponseFromCore(responseFixtures["minimal"], SourceLocal)
	body, err = EncodeJSONResponse(resp)
	if err != nil {
		t.Fatal(err)
	}
	var keys map[string]json.RawMessage
	if err := json.Unmarshal(body, &keys); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"gameServerName", "ports", "address", "nodeName", "source", "metadata", "addresses", "counters", "lists"} {
		if _, ok := keys[k]; !ok {
			t.Errorf("minimal response lacks %q: %s", k, body)
		}
	}
	if string(keys["ports"]) != "[]" || string(keys["counters"]) != "{}" || string(keys["address"]) != `""` {
		t.Errorf("empty fields should be [] / {} / \"\": %s", body)
	}

	// Encoding is stable: the same message gives the same bytes.
	again, _ := EncodeJSONResponse(resp)
	if !bytes.Equal(body, again) {
		t.Errorf("encoding is not stable:\n%s\n%s", body, again)
	}
	if b, err := EncodeJSONResponse(nil); err != nil || !bytes.HasPrefix(b, []byte(`{"gameServerName":""`)) {
		t.Errorf("EncodeJSONResponse(nil) = %s, %v", b, err)
	}
}

// TestJSONAdmin covers the codec on Quartermaster's own messages.
func TestJSONAdmin(t *testing.T) {
	req := &qmv1.ReleaseRequest{}
	if err := UnmarshalJSON([]byte(`{"namespace":"games","gameServerName":"gs-1","future":1}`), req); err != nil {
		t.Fatal(err)
	}
	if req.GetNamespace() != "games" || req.GetGameServerName() != "gs-1" {
		t.Errorf("decoded %v", req)
	}
	b, err := MarshalJSON(&qmv1.ListResponse{Allocations: []*qmv1.Allocation{{Namespace: "games", GameServerName: "gs-1"}}})
	if err != nil {
		t.Fatal(err)
	}
	for _, frag := range []string{`"gameServerName":"gs-1"`, `"allocatedAt":null`, `"ports":[]`, `"owner":""`} {
		if !bytes.Contains(b, []byte(frag)) {
			t.Errorf("list response lacks %s: %s", frag, b)
		}
	}
}
