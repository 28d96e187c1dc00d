package wire

import (
	"bytes"
	"testing"

	"github.com/quartermaster-dev/quartermaster/allocator/pb/allocation"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// These tests pin the wire format to docs/agones-compat.md. Every field number
// below is typed in from the table in that document, never read from the
// generated code, so a wrong number in allocation.proto fails here.

// Field numbers from docs/agones-compat.md's wire table.
const (
	reqNamespace           = 1
	reqMultiClusterSetting = 2
	reqRequired            = 3
	reqPreferred           = 4
	reqScheduling          = 5
	reqMetaPatch           = 6
	reqMetadata            = 7
	reqSelectors           = 8
	reqPriorities          = 9
	reqCounters            = 10
	reqLists               = 11

	respGameServerName = 2
	respPorts          = 3
	respAddress        = 4
	respNodeName       = 5
	respSource         = 6
	respMetadata       = 7
	respAddresses      = 8
	respCounters       = 9
	respLists          = 10

	portName = 1
	portPort = 2

	gsMetaLabels      = 1
	gsMetaAnnotations = 2

	addrType    = 1
	addrAddress = 2

	counterStatusCount    = 1
	counterStatusCapacity = 2

	listStatusValues   = 1
	listStatusCapacity = 2

	mcEnabled        = 1
	mcPolicySelector = 2

	labelSelectorMatchLabels = 1

	metaLabels      = 1
	metaAnnotations = 2

	selMatchLabels      = 1
	selState            = 2
	selCounters         = 4
	selLists            = 5
	selMatchExpressions = 6

	exprKey      = 1
	exprOperator = 2
	exprValues   = 3

	csMinCount     = 1
	csMaxCount     = 2
	csMinAvailable = 3
	csMaxAvailable = 4

	lsContainsValue = 1
	lsMinAvailable  = 2
	lsMaxAvailable  = 3

	prioType  = 1
	prioKey   = 2
	prioOrder = 3

	caAction   = 1
	caAmount   = 2
	caCapacity = 3

	laAddValues    = 1
	laCapacity     = 2
	laDeleteValues = 3

	// Map entries and wrappers are protobuf's own: key 1, value 2; value 1.
	mapKey       = 1
	mapValue     = 2
	wrapperValue = 1
)

// Tiny encoders, one per wire type. Fields are appended in ascending number
// order and map entries in key order, which is what deterministic
// marshalling produces, so re-encoding can be compared byte for byte.
func fStr(num protowire.Number, s string) []byte {
	b := protowire.AppendTag(nil, num, protowire.BytesType)
	return protowire.AppendString(b, s)
}

func fVarint(num protowire.Number, v uint64) []byte {
	b := protowire.AppendTag(nil, num, protowire.VarintType)
	return protowire.AppendVarint(b, v)
}

func fMsg(num protowire.Number, parts ...[]byte) []byte {
	b := protowire.AppendTag(nil, num, protowire.BytesType)
	return protowire.AppendBytes(b, bytes.Join(parts, nil))
}

func fEntry(num protowire.Number, key string, value ...[]byte) []byte {
	return fMsg(num, fStr(mapKey, key), fMsg(mapValue, value...))
}

func fStrEntry(num protowire.Number, key, value string) []byte {
	return fMsg(num, fStr(mapKey, key), fStr(mapValue, value))
}

func cat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

func TestProtowireAllocationRequest(t *testing.T) {
	cases := []struct {
		name string
		wire []byte
		want *allocation.AllocationRequest
	}{
		{
			name: "namespace",
			wire: fStr(reqNamespace, "games"),
			want: &allocation.AllocationRequest{Namespace: "games"},
		},
		{
			name: "multiClusterSetting",
			wire: fMsg(reqMultiClusterSetting,
				fVarint(mcEnabled, 1),
				fMsg(mcPolicySelector, fStrEntry(labelSelectorMatchLabels, "cluster", "eu"))),
			want: &allocation.AllocationRequest{MultiClusterSetting: &allocation.MultiClusterSetting{
				Enabled:        true,
				PolicySelector: &allocation.LabelSelector{MatchLabels: map[string]string{"cluster": "eu"}},
			}},
		},
		{
			name: "requiredGameServerSelector",
			wire: fMsg(reqRequired, fStrEntry(selMatchLabels, "mode", "ranked")),
			want: &allocation.AllocationRequest{
				RequiredGameServerSelector: &allocation.GameServerSelector{MatchLabels: map[string]string{"mode": "ranked"}},
			},
		},
		{
			name: "preferredGameServerSelectors",
			wire: cat(
				fMsg(reqPreferred, fStrEntry(selMatchLabels, "a", "1")),
				fMsg(reqPreferred, fVarint(selState, 1)),
			),
			want: &allocation.AllocationRequest{PreferredGameServerSelectors: []*allocation.GameServerSelector{
				{MatchLabels: map[string]string{"a": "1"}},
				{GameServerState: allocation.GameServerSelector_ALLOCATED},
			}},
		},
		{
			name: "scheduling Distributed=1",
			wire: fVarint(reqScheduling, 1),
			want: &allocation.AllocationRequest{Scheduling: allocation.AllocationRequest_Distributed},
		},
		{
			name: "metaPatch",
			wire: fMsg(reqMetaPatch, fStrEntry(metaLabels, "l", "1"), fStrEntry(metaAnnotations, "a", "2")),
			want: &allocation.AllocationRequest{MetaPatch: &allocation.MetaPatch{
				Labels: map[string]string{"l": "1"}, Annotations: map[string]string{"a": "2"},
			}},
		},
		{
			name: "metadata",
			wire: fMsg(reqMetadata, fStrEntry(metaLabels, "l", "1"), fStrEntry(metaAnnotations, "a", "2")),
			want: &allocation.AllocationRequest{Metadata: &allocation.MetaPatch{
				Labels: map[string]string{"l": "1"}, Annotations: map[string]string{"a": "2"},
			}},
		},
		{
			name: "gameServerSelectors, every selector field",
			wire: fMsg(reqSelectors,
				fStrEntry(selMatchLabels, "agones.dev/fleet", "simple"),
				fVarint(selState, 1),
				fEntry(selCounters, "rooms",
					fVarint(csMinCount, 1), fVarint(csMaxCount, 2), fVarint(csMinAvailable, 3), fVarint(csMaxAvailable, 4)),
				fEntry(selLists, "players",
					fStr(lsContainsValue, "p1"), fVarint(lsMinAvailable, 5), fVarint(lsMaxAvailable, 6)),
				fMsg(selMatchExpressions, fStr(exprKey, "region"), fVarint(exprOperator, 1), fStr(exprValues, "eu"), fStr(exprValues, "us")),
				fMsg(selMatchExpressions, fStr(exprKey, "beta"), fVarint(exprOperator, 3)),
			),
			want: &allocation.AllocationRequest{GameServerSelectors: []*allocation.GameServerSelector{{
				MatchLabels:     map[string]string{"agones.dev/fleet": "simple"},
				GameServerState: allocation.GameServerSelector_ALLOCATED,
				Counters: map[string]*allocation.CounterSelector{
					"rooms": {MinCount: 1, MaxCount: 2, MinAvailable: 3, MaxAvailable: 4},
				},
				Lists: map[string]*allocation.ListSelector{
					"players": {ContainsValue: "p1", MinAvailable: 5, MaxAvailable: 6},
				},
				MatchExpressions: []*allocation.LabelMatchExpressions{
					{Key: "region", Operator: allocation.LabelMatchExpressions_NotIn, Values: []string{"eu", "us"}},
					{Key: "beta", Operator: allocation.LabelMatchExpressions_DoesNotExist},
				},
			}}},
		},
		{
			name: "priorities",
			wire: fMsg(reqPriorities, fVarint(prioType, 1), fStr(prioKey, "players"), fVarint(prioOrder, 1)),
			want: &allocation.AllocationRequest{Priorities: []*allocation.Priority{
				{Type: allocation.Priority_List, Key: "players", Order: allocation.Priority_Descending},
			}},
		},
		{
			name: "counters",
			wire: fEntry(reqCounters, "rooms",
				fMsg(caAction, fStr(wrapperValue, "Increment")),
				fMsg(caAmount, fVarint(wrapperValue, 2)),
				fMsg(caCapacity, fVarint(wrapperValue, 10))),
			want: &allocation.AllocationRequest{Counters: map[string]*allocation.CounterAction{
				"rooms": {Action: wrapperspb.String("Increment"), Amount: wrapperspb.Int64(2), Capacity: wrapperspb.Int64(10)},
			}},
		},
		{
			name: "lists",
			wire: fEntry(reqLists, "players",
				fStr(laAddValues, "p1"), fStr(laAddValues, "p2"),
				fMsg(laCapacity, fVarint(wrapperValue, 8)),
				fStr(laDeleteValues, "p0")),
			want: &allocation.AllocationRequest{Lists: map[string]*allocation.ListAction{
				"players": {AddValues: []string{"p1", "p2"}, Capacity: wrapperspb.Int64(8), DeleteValues: []string{"p0"}},
			}},
		},
	}

	// All of the fields at once, in field-number order.
	var all []byte
	want := &allocation.AllocationRequest{}
	for _, c := range cases {
		all = append(all, c.wire...)
		proto.Merge(want, c.want)
	}
	cases = append(cases, struct {
		name string
		wire []byte
		want *allocation.AllocationRequest
	}{"every field", all, want})

	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			checkDecodesAndEncodes(t, c.wire, &allocation.AllocationRequest{}, c.want)
		})
	}
}

func TestProtowireAllocationResponse(t *testing.T) {
	cases := []struct {
		name string
		wire []byte
		want *allocation.AllocationResponse
	}{
		{
			name: "gameServerName",
			wire: fStr(respGameServerName, "gs-1"),
			want: &allocation.AllocationResponse{GameServerName: "gs-1"},
		},
		{
			name: "ports",
			wire: cat(
				fMsg(respPorts, fStr(portName, "game"), fVarint(portPort, 7777)),
				fMsg(respPorts, fStr(portName, "query"), fVarint(portPort, 7778)),
			),
			want: &allocation.AllocationResponse{Ports: []*allocation.AllocationResponse_GameServerStatusPort{
				{Name: "game", Port: 7777}, {Name: "query", Port: 7778},
			}},
		},
		{
			name: "address",
			wire: fStr(respAddress, "10.0.0.1"),
			want: &allocation.AllocationResponse{Address: "10.0.0.1"},
		},
		{
			name: "nodeName",
			wire: fStr(respNodeName, "node-a"),
			want: &allocation.AllocationResponse{NodeName: "node-a"},
		},
		{
			name: "source",
			wire: fStr(respSource, "local"),
			want: &allocation.AllocationResponse{Source: "local"},
		},
		{
			name: "metadata",
			wire: fMsg(respMetadata, fStrEntry(gsMetaLabels, "l", "1"), fStrEntry(gsMetaAnnotations, "a", "2")),
			want: &allocation.AllocationResponse{Metadata: &allocation.AllocationResponse_GameServerMetadata{
				Labels: map[string]string{"l": "1"}, Annotations: map[string]string{"a": "2"},
			}},
		},
		{
			name: "addresses",
			wire: fMsg(respAddresses, fStr(addrType, "InternalIP"), fStr(addrAddress, "10.0.0.1")),
			want: &allocation.AllocationResponse{Addresses: []*allocation.AllocationResponse_GameServerStatusAddress{
				{Type: "InternalIP", Address: "10.0.0.1"},
			}},
		},
		{
			name: "counters",
			wire: fEntry(respCounters, "rooms",
				fMsg(counterStatusCount, fVarint(wrapperValue, 3)),
				fMsg(counterStatusCapacity, fVarint(wrapperValue, 10))),
			want: &allocation.AllocationResponse{Counters: map[string]*allocation.AllocationResponse_CounterStatus{
				"rooms": {Count: wrapperspb.Int64(3), Capacity: wrapperspb.Int64(10)},
			}},
		},
		{
			name: "lists",
			wire: fEntry(respLists, "players",
				fStr(listStatusValues, "p1"), fStr(listStatusValues, "p2"),
				fMsg(listStatusCapacity, fVarint(wrapperValue, 4))),
			want: &allocation.AllocationResponse{Lists: map[string]*allocation.AllocationResponse_ListStatus{
				"players": {Values: []string{"p1", "p2"}, Capacity: wrapperspb.Int64(4)},
			}},
		},
	}
	var all []byte
	want := &allocation.AllocationResponse{}
	for _, c := range cases {
		all = append(all, c.wire...)
		proto.Merge(want, c.want)
	}
	cases = append(cases, struct {
		name string
		wire []byte
		want *allocation.AllocationResponse
	}{"every field", all, want})

	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			checkDecodesAndEncodes(t, c.wire, &allocation.AllocationResponse{}, c.want)
		})
	}
}

// checkDecodesAndEncodes decodes wire into got and compares it with want
// (proto.Equal also compares unknown fields, so a field sent with a number
// the message does not declare fails), then re-encodes want and expects the
// same bytes back.
func checkDecodesAndEncodes(t *testing.T, wire []byte, got, want proto.Message) {
	t.Helper()
	if err := proto.Unmarshal(wire, got); err != nil {
		t.Fatalf("unmarshal: %v", err)
	}
	if !proto.Equal(got, want) {
		t.Errorf("decoded\n  %v\nwant\n  %v", got, want)
	}
	assertNoUnknown(t, got.ProtoReflect())
	enc, err := proto.MarshalOptions{Deterministic: true}.Marshal(want)
	if err != nil {
		t.Fatalf("marshal: %v", err)
	}
	if !bytes.Equal(enc, wire) {
		t.Errorf("re-encoded\n  %x\nwant\n  %x", enc, wire)
	}
}

// assertNoUnknown fails if any message in the tree kept bytes it did not
// recognise: the symptom of a field number that differs from the table.
func assertNoUnknown(t *testing.T, m protoreflect.Message) {
	t.Helper()
	if len(m.GetUnknown()) > 0 {
		t.Errorf("%s has unknown fields %x", m.Descriptor().FullName(), m.GetUnknown())
	}
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.IsMap():
			if fd.MapValue().Message() != nil {
				v.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool {
					assertNoUnknown(t, mv.Message())
					return true
				})
			}
		case fd.IsList():
			if fd.Message() != nil {
				for i := 0; i < v.List().Len(); i++ {
					assertNoUnknown(t, v.List().Get(i).Message())
				}
			}
		case fd.Message() != nil:
			assertNoUnknown(t, v.Message())
		}
		return true
	})
}

// TestEnumNumbers checks each enum's names and numbers against the table.
func TestEnumNumbers(t *testing.T) {
	cases := []struct {
		enum   protoreflect.FullName
		values map[string]protoreflect.EnumNumber
	}{
		{"allocation.AllocationRequest.SchedulingStrategy", map[string]protoreflect.EnumNumber{"Packed": 0, "Distributed": 1}},
		{"allocation.GameServerSelector.GameServerState", map[string]protoreflect.EnumNumber{"READY": 0, "ALLOCATED": 1}},
		{"allocation.LabelMatchExpressions.Operator", map[string]protoreflect.EnumNumber{"In": 0, "NotIn": 1, "Exists": 2, "DoesNotExist": 3}},
		{"allocation.Priority.Type", map[string]protoreflect.EnumNumber{"Counter": 0, "List": 1}},
		{"allocation.Priority.Order", map[string]protoreflect.EnumNumber{"Ascending": 0, "Descending": 1}},
	}
	for _, c := range cases {
		t.Run(string(c.enum), func(t *testing.T) {
			et, err := protoregistry.GlobalTypes.FindEnumByName(c.enum)
			if err != nil {
				t.Fatalf("enum not registered: %v", err)
			}
			vals := et.Descriptor().Values()
			if vals.Len() != len(c.values) {
				t.Errorf("%d values, want %d", vals.Len(), len(c.values))
			}
			for name, num := range c.values {
				v := vals.ByName(protoreflect.Name(name))
				if v == nil {
					t.Errorf("no value %s", name)
					continue
				}
				if v.Number() != num {
					t.Errorf("%s = %d, want %d", name, v.Number(), num)
				}
			}
		})
	}
}

// TestMessageShapes checks that each message declares exactly the fields
// of the table (numbers, names, cardinality), so an extra or renamed field
// fails as well as a renumbered one, and that the JSON name of every field
// is its proto name, so REST keys do not depend on the encoder's options.
func TestMessageShapes(t *testing.T) {
	type field struct {
		name string
		kind string // scalar kind, message/enum full name, or "map<K,V>"
		rep  bool
	}
	cases := []struct {
		msg    protoreflect.FullName
		fields map[protowire.Number]field
	}{
		{"allocation.AllocationRequest", map[protowire.Number]field{
			1:  {"namespace", "string", false},
			2:  {"multiClusterSetting", "allocation.MultiClusterSetting", false},
			3:  {"requiredGameServerSelector", "allocation.GameServerSelector", false},
			4:  {"preferredGameServerSelectors", "allocation.GameServerSelector", true},
			5:  {"scheduling", "allocation.AllocationRequest.SchedulingStrategy", false},
			6:  {"metaPatch", "allocation.MetaPatch", false},
			7:  {"metadata", "allocation.MetaPatch", false},
			8:  {"gameServerSelectors", "allocation.GameServerSelector", true},
			9:  {"priorities", "allocation.Priority", true},
			10: {"counters", "map<string,allocation.CounterAction>", false},
			11: {"lists", "map<string,allocation.ListAction>", false},
		}},
		{"allocation.AllocationResponse", map[protowire.Number]field{
			2:  {"gameServerName", "string", false},
			3:  {"ports", "allocation.AllocationResponse.GameServerStatusPort", true},
			4:  {"address", "string", false},
			5:  {"nodeName", "string", false},
			6:  {"source", "string", false},
			7:  {"metadata", "allocation.AllocationResponse.GameServerMetadata", false},
			8:  {"addresses", "allocation.AllocationResponse.GameServerStatusAddress", true},
			9:  {"counters", "map<string,allocation.AllocationResponse.CounterStatus>", false},
			10: {"lists", "map<string,allocation.AllocationResponse.ListStatus>", false},
		}},
		{"allocation.AllocationResponse.GameServerStatusPort", map[protowire.Number]field{
			1: {"name", "string", false}, 2: {"port", "int32", false},
		}},
		{"allocation.AllocationResponse.GameServerMetadata", map[protowire.Number]field{
			1: {"labels", "map<string,string>", false}, 2: {"annotations", "map<string,string>", false},
		}},
		{"allocation.AllocationResponse.GameServerStatusAddress", map[protowire.Number]field{
			1: {"type", "string", false}, 2: {"address", "string", false},
		}},
		{"allocation.AllocationResponse.CounterStatus", map[protowire.Number]field{
			1: {"count", "google.protobuf.Int64Value", false}, 2: {"capacity", "google.protobuf.Int64Value", false},
		}},
		{"allocation.AllocationResponse.ListStatus", map[protowire.Number]field{
			1: {"values", "string", true}, 2: {"capacity", "google.protobuf.Int64Value", false},
		}},
		{"allocation.MultiClusterSetting", map[protowire.Number]field{
			1: {"enabled", "bool", false}, 2: {"policySelector", "allocation.LabelSelector", false},
		}},
		{"allocation.LabelSelector", map[protowire.Number]field{
			1: {"matchLabels", "map<string,string>", false},
		}},
		{"allocation.MetaPatch", map[protowire.Number]field{
			1: {"labels", "map<string,string>", false}, 2: {"annotations", "map<string,string>", false},
		}},
		{"allocation.GameServerSelector", map[protowire.Number]field{
			1: {"matchLabels", "map<string,string>", false},
			2: {"gameServerState", "allocation.GameServerSelector.GameServerState", false},
			4: {"counters", "map<string,allocation.CounterSelector>", false},
			5: {"lists", "map<string,allocation.ListSelector>", false},
			6: {"matchExpressions", "allocation.LabelMatchExpressions", true},
		}},
		{"allocation.LabelMatchExpressions", map[protowire.Number]field{
			1: {"key", "string", false},
			2: {"operator", "allocation.LabelMatchExpressions.Operator", false},
			3: {"values", "string", true},
		}},
		{"allocation.CounterSelector", map[protowire.Number]field{
			1: {"minCount", "int64", false}, 2: {"maxCount", "int64", false},
			3: {"minAvailable", "int64", false}, 4: {"maxAvailable", "int64", false},
		}},
		{"allocation.ListSelector", map[protowire.Number]field{
			1: {"containsValue", "string", false}, 2: {"minAvailable", "int64", false}, 3: {"maxAvailable", "int64", false},
		}},
		{"allocation.Priority", map[protowire.Number]field{
			1: {"type", "allocation.Priority.Type", false},
			2: {"key", "string", false},
			3: {"order", "allocation.Priority.Order", false},
		}},
		{"allocation.CounterAction", map[protowire.Number]field{
			1: {"action", "google.protobuf.StringValue", false},
			2: {"amount", "google.protobuf.Int64Value", false},
			3: {"capacity", "google.protobuf.Int64Value", false},
		}},
		{"allocation.ListAction", map[protowire.Number]field{
			1: {"addValues", "string", true},
			2: {"capacity", "google.protobuf.Int64Value", false},
			3: {"deleteValues", "string", true},
		}},
	}
	kindOf := func(fd protoreflect.FieldDescriptor) string {
		switch {
		case fd.IsMap():
			k, v := fd.MapKey(), fd.MapValue()
			vk := v.Kind().String()
			if v.Message() != nil {
				vk = string(v.Message().FullName())
			}
			return "map<" + k.Kind().String() + "," + vk + ">"
		case fd.Message() != nil:
			return string(fd.Message().FullName())
		case fd.Enum() != nil:
			return string(fd.Enum().FullName())
		}
		return fd.Kind().String()
	}
	for _, c := range cases {
		t.Run(string(c.msg), func(t *testing.T) {
			mt, err := protoregistry.GlobalTypes.FindMessageByName(c.msg)
			if err != nil {
				t.Fatalf("message not registered: %v", err)
			}
			fds := mt.Descriptor().Fields()
			if fds.Len() != len(c.fields) {
				t.Errorf("%d fields, want %d", fds.Len(), len(c.fields))
			}
			for num, want := range c.fields {
				fd := fds.ByNumber(num)
				if fd == nil {
					t.Errorf("no field %d (%s)", num, want.name)
					continue
				}
				got := field{string(fd.Name()), kindOf(fd), fd.IsList()}
				if got != want {
					t.Errorf("field %d = %+v, want %+v", num, got, want)
				}
				if fd.JSONName() != string(fd.Name()) {
					t.Errorf("field %d: JSON name %q differs from proto name %q", num, fd.JSONName(), fd.Name())
				}
			}
		})
	}

	sel := (&allocation.GameServerSelector{}).ProtoReflect().Descriptor()
	if !sel.ReservedRanges().Has(3) {
		t.Error("GameServerSelector does not reserve field 3")
	}
	if allocation.AllocationService_Allocate_FullMethodName != "/allocation.AllocationService/Allocate" {
		t.Errorf("Allocate's full method name is %q", allocation.AllocationService_Allocate_FullMethodName)
	}
	if imp := allocation.File_allocator_pb_allocation_allocation_proto.Imports(); imp.Len() != 1 || imp.Get(0).Path() != "google/protobuf/wrappers.proto" {
		t.Errorf("allocation.proto should import only google/protobuf/wrappers.proto")
	}
}

// TestDeprecatedFields checks the fields the table marks deprecated carry
// the option, so generated clients warn their users too.
func TestDeprecatedFields(t *testing.T) {
	fds := (&allocation.AllocationRequest{}).ProtoReflect().Descriptor().Fields()
	for num := protowire.Number(1); num <= 11; num++ {
		fd := fds.ByNumber(num)
		want := num == reqRequired || num == reqPreferred || num == reqMetaPatch
		got := fd.Options().(*descriptorpb.FieldOptions).GetDeprecated()
		if got != want {
			t.Errorf("field %d (%s): deprecated = %v, want %v", num, fd.Name(), got, want)
		}
	}
}
