package wire

import (
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/quartermaster-dev/quartermaster/allocator/pb/allocation"
	"github.com/quartermaster-dev/quartermaster/core"
)

// sameAsProto fails t unless DecodeRequest(b) answers what proto.Unmarshal
// does: both reject b (DecodeRequest's error wrapping ErrMalformed), or
// both decode it to equal messages.
func sameAsProto(t *testing.T, b []byte) {
	t.Helper()
	got, err := DecodeRequest(b)
	want := &allocation.AllocationRequest{}
	if refErr := proto.Unmarshal(b, want); refErr != nil {
		if !errors.Is(err, ErrMalformed) {
			t.Fatalf("%x: proto.Unmarshal says %v; DecodeRequest gave %v, %v", b, refErr, got, err)
		}
		return
	}
	if err != nil {
		t.Fatalf("%x: proto.Unmarshal accepts it (%v); DecodeRequest says %v", b, want, err)
	}
	if !proto.Equal(got, want) {
		t.Fatalf("%x:\nDecodeRequest  %v\nproto.Unmarshal %v", b, got, want)
	}
}

// fGroup is a group field (wire types 3 and 4) around parts.
func fGroup(num protowire.Number, parts ...[]byte) []byte {
	b := protowire.AppendTag(nil, num, protowire.StartGroupType)
	b = append(b, cat(parts...)...)
	return protowire.AppendTag(b, num, protowire.EndGroupType)
}

func fFixed32(num protowire.Number) []byte {
	return protowire.AppendFixed32(protowire.AppendTag(nil, num, protowire.Fixed32Type), 7)
}

// decodeCases are encodings chosen for the ways protobuf's rules could be
// got wrong: repeated occurrences (last wins for scalars, merge for
// messages, append for repeated fields, replace for map entries), unknown
// fields of every wire type, known numbers with the wrong wire type (read as
// unknown), enum values outside the API and overwritten ones, and malformed
// bytes of every kind.
var decodeCases = []struct {
	name string
	wire []byte
}{
	{"empty", nil},
	{"namespace twice: the last wins", cat(fStr(reqNamespace, "a"), fStr(reqNamespace, "b"))},
	{"the load test's request", fMsg(reqSelectors, fStrEntry(selMatchLabels, "mode", "load"))},
	{"a selector with everything", fMsg(reqSelectors,
		fStrEntry(selMatchLabels, "k", "v"), fStrEntry(selMatchLabels, "k2", ""),
		fVarint(selState, 1),
		fEntry(selCounters, "rooms", fVarint(csMinCount, 1), fVarint(csMaxCount, 1<<63), fVarint(csMinAvailable, 3), fVarint(csMaxAvailable, 4)),
		fEntry(selLists, "players", fStr(lsContainsValue, "x"), fVarint(lsMinAvailable, 2), fVarint(lsMaxAvailable, 9)),
		fMsg(selMatchExpressions, fStr(exprKey, "tier"), fVarint(exprOperator, 1), fStr(exprValues, "a"), fStr(exprValues, "b")),
		fMsg(selMatchExpressions, fStr(exprKey, "x"), fVarint(exprOperator, 2)),
		fMsg(selMatchExpressions, fVarint(exprOperator, 3)),
	)},
	{"the required selector twice merges", cat(
		fMsg(reqRequired, fStrEntry(selMatchLabels, "a", "1"), fVarint(selState, 1), fMsg(selMatchExpressions, fStr(exprKey, "e"))),
		fMsg(reqRequired, fStrEntry(selMatchLabels, "b", "2"), fMsg(selMatchExpressions, fStr(exprKey, "f"))))},
	{"an empty required selector is present", fMsg(reqRequired)},
	{"preferred selectors append", cat(fMsg(reqPreferred), fMsg(reqPreferred, fStrEntry(selMatchLabels, "a", "b")), fMsg(reqPreferred))},
	{"selectors and preferred interleaved", cat(fMsg(reqSelectors, fStrEntry(selMatchLabels, "s", "0")),
		fMsg(reqPreferred, fStrEntry(selMatchLabels, "p", "0")), fMsg(reqSelectors, fStrEntry(selMatchLabels, "s", "1")))},
	{"a map key twice: the later entry wins", fMsg(reqSelectors, fStrEntry(selMatchLabels, "k", "1"), fStrEntry(selMatchLabels, "k", "2"))},
	{"a map entry without key or value", fMsg(reqSelectors, fMsg(selMatchLabels), fMsg(selMatchLabels, fStr(mapValue, "v")))},
	{"a map entry's key and value twice", fMsg(reqSelectors, fMsg(selMatchLabels, fStr(mapKey, "a"), fStr(mapValue, "1"), fStr(mapKey, "b"), fStr(mapValue, "2")))},
	{"a map entry with unknown fields and a key of the wrong type", fMsg(reqSelectors,
		fMsg(selMatchLabels, fVarint(mapKey, 5), fStr(mapValue, "v"), fVarint(9, 1), fFixed32(3)))},
	{"a counter selector's value twice in one entry merges", fMsg(reqSelectors,
		fMsg(selCounters, fStr(mapKey, "c"), fMsg(mapValue, fVarint(csMinCount, 1)), fMsg(mapValue, fVarint(csMaxCount, 2))))},
	{"a counter selector entry twice replaces", fMsg(reqSelectors,
		fEntry(selCounters, "c", fVarint(csMinCount, 1)), fEntry(selCounters, "c", fVarint(csMaxCount, 2)))},
	{"a map value of the wrong type is skipped", fMsg(reqSelectors, fMsg(selLists, fStr(mapKey, "l"), fVarint(mapValue, 3)))},
	{"scheduling Distributed", fVarint(reqScheduling, 1)},
	{"scheduling's 64-bit varint is cut to 32 bits", fVarint(reqScheduling, 1<<32|1)},
	{"an unknown scheduling, then a known one", cat(fVarint(reqScheduling, 9), fVarint(reqScheduling, 0))},
	{"an unknown scheduling", fVarint(reqScheduling, 9)},
	{"a negative scheduling", fVarint(reqScheduling, uint64(1<<64-1))},
	{"unknown enums everywhere", cat(
		fMsg(reqRequired, fVarint(selState, 2), fMsg(selMatchExpressions, fVarint(exprOperator, 4))),
		fMsg(reqPreferred, fVarint(selState, 1<<31)),
		fMsg(reqSelectors), fMsg(reqSelectors, fMsg(selMatchExpressions), fMsg(selMatchExpressions, fVarint(exprOperator, 1<<40|7))),
		fMsg(reqPriorities, fVarint(prioType, 2), fVarint(prioOrder, 3)), fMsg(reqPriorities, fVarint(prioOrder, 1)),
		fVarint(reqScheduling, 2), fStr(reqNamespace, "ns"))},
	{"an unknown state overwritten in a merged selector", cat(fMsg(reqRequired, fVarint(selState, 5)), fMsg(reqRequired, fVarint(selState, 0)))},
	{"priorities", cat(fMsg(reqPriorities, fVarint(prioType, 1), fStr(prioKey, "players"), fVarint(prioOrder, 1)), fMsg(reqPriorities, fStr(prioKey, "rooms")))},
	{"metadata", fMsg(reqMetadata, fStrEntry(metaLabels, "l", "1"), fStrEntry(metaAnnotations, "a", "2"))},
	{"metaPatch alone", fMsg(reqMetaPatch, fStrEntry(metaLabels, "l", "1"))},
	{"empty metadata wins over metaPatch", cat(fMsg(reqMetaPatch, fStrEntry(metaLabels, "l", "1")), fMsg(reqMetadata))},
	{"metadata twice merges", cat(fMsg(reqMetadata, fStrEntry(metaLabels, "a", "1")), fMsg(reqMetaPatch), fMsg(reqMetadata, fStrEntry(metaAnnotations, "b", "2")))},
	{"multi-cluster", fMsg(reqMultiClusterSetting, fVarint(mcEnabled, 1), fMsg(mcPolicySelector, fStrEntry(labelSelectorMatchLabels, "cluster", "eu")))},
	{"multi-cluster merged, enabled by a large varint", cat(
		fMsg(reqMultiClusterSetting, fMsg(mcPolicySelector, fStrEntry(labelSelectorMatchLabels, "a", "1"))),
		fMsg(reqMultiClusterSetting, fVarint(mcEnabled, 1<<40), fMsg(mcPolicySelector, fStrEntry(labelSelectorMatchLabels, "b", "2"))))},
	{"multi-cluster present but off", fMsg(reqMultiClusterSetting)},
	{"counter actions", cat(
		fEntry(reqCounters, "rooms", fMsg(caAction, fStr(wrapperValue, "Increment")), fMsg(caAmount, fVarint(wrapperValue, 1)), fMsg(caCapacity, fVarint(wrapperValue, 10))),
		fEntry(reqCounters, "empty"),
		fEntry(reqCounters, "wrappers present, values not", fMsg(caAction), fMsg(caAmount), fMsg(caCapacity)))},
	{"a counter action's wrappers merge", fEntry(reqCounters, "c",
		fMsg(caAmount, fVarint(wrapperValue, 5)), fMsg(caAmount), fMsg(caAction, fStr(wrapperValue, "Decrement")), fMsg(caAction, fStr(wrapperValue, "")))},
	{"a counter action entry twice replaces", cat(fEntry(reqCounters, "c", fMsg(caAmount, fVarint(wrapperValue, 5))), fEntry(reqCounters, "c", fMsg(caCapacity)))},
	{"list actions", cat(
		fEntry(reqLists, "players", fStr(laAddValues, "a"), fStr(laAddValues, "b"), fMsg(laCapacity, fVarint(wrapperValue, 3)), fStr(laDeleteValues, "c")),
		fEntry(reqLists, "", fMsg(laCapacity)))},
	{"a list action's value twice in one entry merges", fMsg(reqLists, fStr(mapKey, "l"),
		fMsg(mapValue, fStr(laAddValues, "a")), fMsg(mapValue, fStr(laAddValues, "b"), fMsg(laCapacity, fVarint(wrapperValue, 1))))},
	{"unknown fields of every type, top level and nested", cat(
		fVarint(99, 1), fStr(100, "x"), fFixed32(101), protowire.AppendFixed64(protowire.AppendTag(nil, 102, protowire.Fixed64Type), 1),
		fGroup(103, fVarint(1, 2), fGroup(104, fStr(5, "y"))),
		fMsg(reqSelectors, fVarint(3, 1), fStr(77, "reserved and unknown"), fGroup(9)),
		fStr(protowire.MaxValidNumber, "highest number"))},
	{"known numbers with the wrong wire type are unknown", cat(
		fVarint(reqNamespace, 1), fVarint(reqRequired, 1), fStr(reqScheduling, "Distributed"), fFixed32(reqSelectors),
		fMsg(reqSelectors, fStr(selState, "x"), fVarint(selMatchLabels, 1)),
		fMsg(reqPriorities, fStr(prioType, "List"), fVarint(prioKey, 1)),
		fVarint(reqCounters, 1), fGroup(reqLists))},

	// Malformed: every one is an error for both.
	{"truncated tag", []byte{0x80}},
	{"field number 0", fVarint(0, 1)},
	{"field number past 2^29-1", fVarint(protowire.MaxValidNumber+1, 1)},
	{"wire type 6", protowire.AppendTag(nil, 200, 6)},
	{"wire type 7 inside a selector", fMsg(reqSelectors, protowire.AppendTag(nil, 1, 7))},
	{"a length past the end", []byte{0x0a, 0x05, 'a'}},
	{"a varint of eleven bytes", append([]byte{0x28}, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01)},
	{"a ten-byte varint that overflows", append([]byte{0x28}, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02)},
	{"a truncated varint", []byte{0x28, 0x80}},
	{"a group without its end", protowire.AppendTag(nil, 50, protowire.StartGroupType)},
	{"a group closed by another number", cat(protowire.AppendTag(nil, 50, protowire.StartGroupType), protowire.AppendTag(nil, 51, protowire.EndGroupType))},
	{"an end group alone", protowire.AppendTag(nil, 50, protowire.EndGroupType)},
	{"invalid UTF-8 in the namespace", fStr(reqNamespace, "\xff")},
	{"invalid UTF-8 in a label value", fMsg(reqSelectors, fStrEntry(selMatchLabels, "k", "a\xc0"))},
	{"invalid UTF-8 in a map key", fMsg(reqMetadata, fStrEntry(metaAnnotations, "\xed\xa0\x80", "v"))},
	{"invalid UTF-8 in a counter action", fEntry(reqCounters, "c", fMsg(caAction, fStr(wrapperValue, "In\xffcrement")))},
	{"invalid UTF-8 in an unknown field is fine", fStr(100, "\xff")},
	{"a malformed map entry", fMsg(reqSelectors, fMsg(selMatchLabels, []byte{0x0a, 0x09}))},
	{"a malformed counter action wrapper", fEntry(reqCounters, "c", fMsg(caAmount, []byte{0x08}))},
	{"a malformed unknown field inside a known message", fMsg(reqPriorities, []byte{0x7a, 0x03})},
}

func TestDecodeRequestMatchesProto(t *testing.T) {
	for _, tc := range decodeCases {
		t.Run(tc.name, func(t *testing.T) { sameAsProto(t, tc.wire) })
	}
}

// decodeToCore is DecodeRequest followed by RequestToCore.
func decodeToCore(b []byte) (core.Request, error) {
	m, err := DecodeRequest(b)
	if err != nil {
		return core.Request{}, err
	}
	return RequestToCore(m)
}

// TestDecodeRequestGolden pins a few answers by value, besides matching the
// proto library: the deprecated form kept as sent, merges, and the errors'
// wording.
func TestDecodeRequestGolden(t *testing.T) {
	got, err := decodeToCore(cat(
		fStr(reqNamespace, "games"),
		fMsg(reqRequired, fStrEntry(selMatchLabels, "a", "1")),
		fMsg(reqRequired, fVarint(selState, 1)),
		fMsg(reqPreferred, fMsg(selMatchExpressions, fStr(exprKey, "k"), fVarint(exprOperator, 2))),
		fVarint(reqScheduling, 1),
		fMsg(reqMetaPatch, fStrEntry(metaLabels, "ignored", "x")),
		fMsg(reqMetadata, fStrEntry(metaAnnotations, "note", "n")),
		fEntry(reqCounters, "rooms", fMsg(caAction, fStr(wrapperValue, "Increment")), fMsg(caAmount, fVarint(wrapperValue, 2))),
		fVarint(4242, 1),
	))
	if err != nil {
		t.Fatal(err)
	}
	two := int64(2)
	want := core.Request{
		Namespace:  "games",
		Required:   &core.Selector{MatchLabels: map[string]string{"a": "1"}, State: core.StateAllocated},
		Preferred:  []core.Selector{{State: core.StateReady, MatchExpressions: []core.LabelExpression{{Key: "k", Operator: core.OpExists}}}},
		Scheduling: core.Distributed,
		Metadata:   core.MetaPatch{Annotations: map[string]string{"note": "n"}},
		Counters:   map[string]core.CounterAction{"rooms": {Action: "Increment", Amount: &two}},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %#v\nwant %#v", got, want)
	}

	_, err = decodeToCore(cat(fStr(reqNamespace, "ns"), fVarint(reqScheduling, 3),
		fMsg(reqSelectors), fMsg(reqSelectors, fVarint(selState, 7))))
	const msg = "gameServerSelectors[1].gameServerState: unknown value 7 (want READY or ALLOCATED); scheduling: unknown value 3 (want Packed or Distributed)"
	if err == nil || !strings.Contains(err.Error(), msg) {
		t.Fatalf("got %v, want an error containing %q", err, msg)
	}
	if _, err := DecodeRequest([]byte{0x0a, 0x05}); !errors.Is(err, ErrMalformed) {
		t.Fatalf("truncated: %v, want ErrMalformed", err)
	}
}

// randomRequest builds an AllocationRequest with every field drawn at
// random, enum values outside the API included now and then.
func randomRequest(r *rand.Rand) *allocation.AllocationRequest {
	str := func() string {
		return []string{"", "a", "mode", "lobby", "agones.dev/fleet", "ü✓", strings.Repeat("x", 130)}[r.IntN(7)]
	}
	strs := func() []string {
		var out []string
		for range r.IntN(3) {
			out = append(out, str())
		}
		return out
	}
	labels := func() map[string]string {
		if r.IntN(3) == 0 {
			return nil
		}
		m := map[string]string{}
		for range r.IntN(4) {
			m[str()] = str()
		}
		return m
	}
	enum := func(n int32) int32 {
		if r.IntN(20) == 0 {
			return int32(r.Uint32())
		}
		return r.Int32N(n)
	}
	i64 := func() int64 { return []int64{0, 1, -1, 1 << 62, -1 << 63}[r.IntN(5)] }
	wi64 := func() *wrapperspb.Int64Value {
		if r.IntN(2) == 0 {
			return nil
		}
		return wrapperspb.Int64(i64())
	}
	selector := func() *allocation.GameServerSelector {
		s := &allocation.GameServerSelector{MatchLabels: labels(), GameServerState: allocation.GameServerSelector_GameServerState(enum(2))}
		for range r.IntN(3) {
			s.MatchExpressions = append(s.MatchExpressions, &allocation.LabelMatchExpressions{
				Key: str(), Operator: allocation.LabelMatchExpressions_Operator(enum(4)), Values: strs()})
		}
		if r.IntN(2) == 0 {
			s.Counters = map[string]*allocation.CounterSelector{str(): {MinCount: i64(), MaxCount: i64(), MinAvailable: i64(), MaxAvailable: i64()}}
		}
		if r.IntN(2) == 0 {
			s.Lists = map[string]*allocation.ListSelector{str(): {ContainsValue: str(), MinAvailable: i64(), MaxAvailable: i64()}}
		}
		return s
	}
	m := &allocation.AllocationRequest{Namespace: str(), Scheduling: allocation.AllocationRequest_SchedulingStrategy(enum(2))}
	if r.IntN(3) == 0 {
		m.MultiClusterSetting = &allocation.MultiClusterSetting{Enabled: r.IntN(2) == 0}
		if r.IntN(2) == 0 {
			m.MultiClusterSetting.PolicySelector = &allocation.LabelSelector{MatchLabels: labels()}
		}
	}
	if r.IntN(4) == 0 {
		m.RequiredGameServerSelector = selector() //nolint:staticcheck // SA1019: the deprecated form is decoded too.
	}
	for range r.IntN(2) {
		m.PreferredGameServerSelectors = append(m.PreferredGameServerSelectors, selector()) //nolint:staticcheck // SA1019: as above.
	}
	for range r.IntN(4) {
		m.GameServerSelectors = append(m.GameServerSelectors, selector())
	}
	if r.IntN(3) == 0 {
		m.MetaPatch = &allocation.MetaPatch{Labels: labels(), Annotations: labels()} //nolint:staticcheck // SA1019: as above.
	}
	if r.IntN(2) == 0 {
		m.Metadata = &allocation.MetaPatch{Labels: labels(), Annotations: labels()}
	}
	for range r.IntN(3) {
		m.Priorities = append(m.Priorities, &allocation.Priority{Type: allocation.Priority_Type(enum(2)), Key: str(), Order: allocation.Priority_Order(enum(2))})
	}
	if r.IntN(2) == 0 {
		m.Counters = map[string]*allocation.CounterAction{}
		for range r.IntN(3) {
			a := &allocation.CounterAction{Amount: wi64(), Capacity: wi64()}
			if r.IntN(2) == 0 {
				a.Action = wrapperspb.String(str())
			}
			m.Counters[str()] = a
		}
	}
	if r.IntN(2) == 0 {
		m.Lists = map[string]*allocation.ListAction{str(): {AddValues: strs(), DeleteValues: strs(), Capacity: wi64()}}
	}
	return m
}

// TestDecodeRequestRandom compares DecodeRequest with proto.Unmarshal on random requests as
// proto.Marshal writes them, and on the same bytes cut short or with a byte
// changed.
func TestDecodeRequestRandom(t *testing.T) {
	r := rand.New(rand.NewPCG(17, 1))
	for range 3000 {
		b, err := proto.Marshal(randomRequest(r))
		if err != nil {
			t.Fatal(err)
		}
		sameAsProto(t, b)
		if len(b) > 0 {
			sameAsProto(t, b[:r.IntN(len(b))])
			c := append([]byte(nil), b...)
			c[r.IntN(len(c))] = byte(r.Uint32())
			sameAsProto(t, c)
		}
	}
}

// FuzzDecodeRequest holds DecodeRequest to proto.Unmarshal on arbitrary
// bytes (sameAsProto).
//
//	go test -run '^$' -fuzz FuzzDecodeRequest -fuzztime 60s ./allocator/wire/
func FuzzDecodeRequest(f *testing.F) {
	for _, tc := range decodeCases {
		f.Add(tc.wire)
	}
	inputs, _ := filepath.Glob(filepath.Join("testdata", "request-*.in.json"))
	for _, in := range inputs {
		body, err := os.ReadFile(in)
		if err != nil {
			f.Fatal(err)
		}
		m, err := DecodeJSONRequest(body)
		if err != nil {
			continue
		}
		b, err := proto.Marshal(m)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	r := rand.New(rand.NewPCG(5, 5))
	for range 20 {
		b, _ := proto.Marshal(randomRequest(r))
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) { sameAsProto(t, b) })
}

// loadRequest is what `qm load --selector mode=load` sends.
var loadRequest = fMsg(reqSelectors, fStrEntry(selMatchLabels, "mode", "load"))

// BenchmarkDecodeRequest compares DecodeRequest with proto.Unmarshal, each
// followed by RequestToCore, on the load test's request and on a large
// one.
//
//	go test -run '^$' -bench DecodeRequest -benchmem ./allocator/wire/
func BenchmarkDecodeRequest(b *testing.B) {
	big, err := proto.Marshal(randomRequest(rand.New(rand.NewPCG(3, 3))))
	if err != nil {
		b.Fatal(err)
	}
	for _, in := range []struct {
		name string
		wire []byte
	}{{"load", loadRequest}, {"random", big}} {
		b.Run(in.name+"/vtproto", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if m, err := DecodeRequest(in.wire); err == nil {
					_, _ = RequestToCore(m)
				}
			}
		})
		b.Run(in.name+"/proto", func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				m := &allocation.AllocationRequest{}
				if proto.Unmarshal(in.wire, m) == nil {
					_, _ = RequestToCore(m)
				}
			}
		})
	}
}

// sameAsDecodeRequest fails t unless DecodeRequestToCore(b) answers what
// DecodeRequest followed by RequestToCore does: both reject b as malformed,
// or both give the same error for it, or the same Request.
func sameAsDecodeRequest(t *testing.T, b []byte) {
	t.Helper()
	got, err := DecodeRequestToCore(b, nil)
	m, refErr := DecodeRequest(b)
	if refErr != nil {
		if !errors.Is(err, ErrMalformed) {
			t.Fatalf("%x: DecodeRequest says %v; DecodeRequestToCore gave %+v, %v", b, refErr, got, err)
		}
		return
	}
	if errors.Is(err, ErrMalformed) {
		t.Fatalf("%x: DecodeRequest accepts it (%v); DecodeRequestToCore says %v", b, m, err)
	}
	want, wantErr := RequestToCore(m)
	if wantErr != nil {
		var ire *core.InvalidRequestError
		if err == nil || !errors.As(err, &ire) || err.Error() != wantErr.Error() {
			t.Fatalf("%x (%v): RequestToCore says %v; DecodeRequestToCore %v", b, m, wantErr, err)
		}
		if got.Namespace != m.GetNamespace() {
			t.Fatalf("%x: namespace %q beside the error, want %q", b, got.Namespace, m.GetNamespace())
		}
		return
	}
	if err != nil {
		t.Fatalf("%x (%v): DecodeRequestToCore says %v; RequestToCore accepts it", b, m, err)
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("%x (%v):\nDecodeRequestToCore %#v\nRequestToCore       %#v", b, m, got, want)
	}
}

func TestDecodeRequestToCoreMatches(t *testing.T) {
	for _, tc := range decodeCases {
		t.Run(tc.name, func(t *testing.T) { sameAsDecodeRequest(t, tc.wire) })
	}
	r := rand.New(rand.NewPCG(17, 3))
	for range 3000 {
		b, err := proto.Marshal(randomRequest(r))
		if err != nil {
			t.Fatal(err)
		}
		sameAsDecodeRequest(t, b)
		if len(b) > 0 {
			sameAsDecodeRequest(t, b[:r.IntN(len(b))])
			c := append([]byte(nil), b...)
			c[r.IntN(len(c))] = byte(r.Uint32())
			sameAsDecodeRequest(t, c)
		}
	}
}

// FuzzDecodeRequestToCore holds the hand decoder to DecodeRequest and
// RequestToCore on arbitrary bytes (sameAsDecodeRequest).
//
//	go test -run '^$' -fuzz FuzzDecodeRequestToCore -fuzztime 60s ./allocator/wire/
func FuzzDecodeRequestToCore(f *testing.F) {
	for _, tc := range decodeCases {
		f.Add(tc.wire)
	}
	f.Fuzz(func(t *testing.T, b []byte) { sameAsDecodeRequest(t, b) })
}
