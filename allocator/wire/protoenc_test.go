package wire

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/quartermaster-dev/quartermaster/allocator/pb/allocation"
	"github.com/quartermaster-dev/quartermaster/core"
)

// randomResponse builds a response with every field the message has, each
// present or not, empty strings, zero and negative numbers, nil list
// elements and nil map values included: the corners where proto3 leaves a
// field out or writes an empty message.
func randomResponse(r *rand.Rand, maxEntries int) *allocation.AllocationResponse {
	str := func() string {
		switch r.IntN(4) {
		case 0:
			return ""
		case 1:
			return "é\x00" + fmt.Sprint(r.Int64())
		}
		return fmt.Sprintf("s%d", r.IntN(1000))
	}
	i64 := func() *wrapperspb.Int64Value {
		switch r.IntN(4) {
		case 0:
			return nil
		case 1:
			return wrapperspb.Int64(0)
		case 2:
			return wrapperspb.Int64(-r.Int64())
		}
		return wrapperspb.Int64(r.Int64N(1 << 40))
	}
	n := func() int { return r.IntN(maxEntries + 1) }
	m := &allocation.AllocationResponse{GameServerName: str(), Address: str(), NodeName: str(), Source: str()}
	for range n() {
		if r.IntN(8) == 0 {
			m.Ports = append(m.Ports, nil)
			continue
		}
		port := []int32{0, 7000, -1, 1 << 30}[r.IntN(4)]
		m.Ports = append(m.Ports, &allocation.AllocationResponse_GameServerStatusPort{Name: str(), Port: port})
	}
	for range n() {
		if r.IntN(8) == 0 {
			m.Addresses = append(m.Addresses, nil)
			continue
		}
		m.Addresses = append(m.Addresses, &allocation.AllocationResponse_GameServerStatusAddress{Type: str(), Address: str()})
	}
	if r.IntN(4) > 0 {
		m.Metadata = &allocation.AllocationResponse_GameServerMetadata{}
		for range n() {
			if m.Metadata.Labels == nil {
				m.Metadata.Labels = map[string]string{}
			}
			m.Metadata.Labels[str()] = str()
		}
		for range n() {
			if m.Metadata.Annotations == nil {
				m.Metadata.Annotations = map[string]string{}
			}
			m.Metadata.Annotations[str()] = str()
		}
	}
	for range n() {
		if m.Counters == nil {
			m.Counters = map[string]*allocation.AllocationResponse_CounterStatus{}
		}
		var c *allocation.AllocationResponse_CounterStatus
		if r.IntN(8) > 0 {
			c = &allocation.AllocationResponse_CounterStatus{Count: i64(), Capacity: i64()}
		}
		m.Counters[str()] = c
	}
	for range n() {
		if m.Lists == nil {
			m.Lists = map[string]*allocation.AllocationResponse_ListStatus{}
		}
		var l *allocation.AllocationResponse_ListStatus
		if r.IntN(8) > 0 {
			l = &allocation.AllocationResponse_ListStatus{Capacity: i64()}
			for range n() {
				l.Values = append(l.Values, str())
			}
		}
		m.Lists[str()] = l
	}
	return m
}

// TestAppendResponseMatchesProto checks the hand-written encoder against
// the proto library on random responses: the same size, bytes that decode
// to an equal message, and, where no map has two entries (so there is no
// order to differ in), the very same bytes.
func TestAppendResponseMatchesProto(t *testing.T) {
	r := rand.New(rand.NewPCG(17, 1))
	for i := range 5000 {
		maxEntries := 1
		if i%2 == 1 {
			maxEntries = 4
		}
		m := randomResponse(r, maxEntries)
		if !ResponseFastPath(m) {
			t.Fatalf("case %d: a response without unknown fields should take the fast path", i)
		}
		want, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		got := AppendResponse(nil, m)
		if n := ResponseSize(m); n != len(got) || n != len(want) {
			t.Fatalf("case %d: ResponseSize %d, AppendResponse wrote %d bytes, proto.Marshal %d", i, n, len(got), len(want))
		}
		if maxEntries == 1 && !bytes.Equal(got, want) {
			t.Fatalf("case %d: bytes differ\n got %x\nwant %x", i, got, want)
		}
		var back allocation.AllocationResponse
		if err := proto.Unmarshal(got, &back); err != nil {
			t.Fatalf("case %d: our encoding does not decode: %v", i, err)
		}
		var ref allocation.AllocationResponse
		if err := proto.Unmarshal(want, &ref); err != nil {
			t.Fatal(err)
		}
		if !proto.Equal(&back, &ref) {
			t.Fatalf("case %d: decodes to\n%v\nwant\n%v", i, &back, &ref)
		}
	}
}

// TestAppendResponseAppends checks that the encoding goes after what the
// buffer holds.
func TestAppendResponseAppends(t *testing.T) {
	m := &allocation.AllocationResponse{GameServerName: "gs-1", Metadata: &allocation.AllocationResponse_GameServerMetadata{}}
	got := AppendResponse([]byte("prefix"), m)
	want, _ := proto.Marshal(m)
	if !bytes.Equal(got, append([]byte("prefix"), want...)) {
		t.Fatalf("got %x, want prefix then %x", got, want)
	}
}

// TestResponseFastPathUnknownFields: a decoded response that carries
// fields this build does not know (from a newer peer, forwarded) is left to
// the proto library, which keeps them.
func TestResponseFastPathUnknownFields(t *testing.T) {
	unknown := protowire.AppendTag(nil, 99, protowire.VarintType)
	unknown = protowire.AppendVarint(unknown, 7)
	cases := map[string]func(m *allocation.AllocationResponse){
		"top level": func(m *allocation.AllocationResponse) { m.ProtoReflect().SetUnknown(unknown) },
		"metadata":  func(m *allocation.AllocationResponse) { m.Metadata.ProtoReflect().SetUnknown(unknown) },
		"port":      func(m *allocation.AllocationResponse) { m.Ports[0].ProtoReflect().SetUnknown(unknown) },
		"address":   func(m *allocation.AllocationResponse) { m.Addresses[0].ProtoReflect().SetUnknown(unknown) },
		"counter":   func(m *allocation.AllocationResponse) { m.Counters["rooms"].ProtoReflect().SetUnknown(unknown) },
		"counter value": func(m *allocation.AllocationResponse) {
			m.Counters["rooms"].Count.ProtoReflect().SetUnknown(unknown)
		},
		"list": func(m *allocation.AllocationResponse) { m.Lists["players"].ProtoReflect().SetUnknown(unknown) },
		"list capacity": func(m *allocation.AllocationResponse) {
			m.Lists["players"].Capacity.ProtoReflect().SetUnknown(unknown)
		},
	}
	for name, mutate := range cases {
		t.Run(name, func(t *testing.T) {
			m := &allocation.AllocationResponse{
				Metadata:  &allocation.AllocationResponse_GameServerMetadata{},
				Ports:     []*allocation.AllocationResponse_GameServerStatusPort{{Name: "game", Port: 7000}},
				Addresses: []*allocation.AllocationResponse_GameServerStatusAddress{{Type: "InternalIP", Address: "10.0.0.1"}},
				Counters:  map[string]*allocation.AllocationResponse_CounterStatus{"rooms": {Count: wrapperspb.Int64(1)}},
				Lists:     map[string]*allocation.AllocationResponse_ListStatus{"players": {Capacity: wrapperspb.Int64(8)}},
			}
			if !ResponseFastPath(m) {
				t.Fatal("fast path refused before any unknown field was set")
			}
			mutate(m)
			if ResponseFastPath(m) {
				t.Fatal("fast path taken for a message with unknown fields")
			}
		})
	}
	if ResponseFastPath(nil) {
		t.Fatal("fast path taken for nil")
	}
}

func BenchmarkEncodeResponse(b *testing.B) {
	m := &allocation.AllocationResponse{
		GameServerName: "load-7k2xq", Address: "10.0.3.7", NodeName: "node-0003", Source: SourceLocal,
		Ports:     []*allocation.AllocationResponse_GameServerStatusPort{{Name: "default", Port: 7003}},
		Addresses: []*allocation.AllocationResponse_GameServerStatusAddress{{Type: "InternalIP", Address: "10.0.3.7"}},
		Metadata: &allocation.AllocationResponse_GameServerMetadata{
			Labels:      map[string]string{"agones.dev/fleet": "load", "mode": "load"},
			Annotations: map[string]string{"quartermaster.dev/owner": "dev", "agones.dev/last-allocated": "2026-11-22T19:46:23.123456789Z"},
		},
	}
	b.Run("proto", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := proto.Marshal(m); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("append", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if !ResponseFastPath(m) {
				b.Fatal("no fast path")
			}
			_ = AppendResponse(make([]byte, 0, ResponseSize(m)), m)
		}
	})
}

func randomGameServer(r *rand.Rand, maxEntries int) *core.GameServer {
	str := func() string {
		switch r.IntN(4) {
		case 0:
			return ""
		case 1:
			return "ü" + fmt.Sprint(r.Int64())
		}
		return fmt.Sprintf("s%d", r.IntN(1000))
	}
	i64 := func() int64 { return []int64{0, 1, -5, r.Int64()}[r.IntN(4)] }
	n := func() int { return r.IntN(maxEntries + 1) }
	gs := &core.GameServer{Namespace: str(), Name: str(), NodeName: str(), Address: str(), State: core.StateAllocated}
	for range n() {
		gs.Ports = append(gs.Ports, core.Port{Name: str(), Port: []int32{0, 7000, -1}[r.IntN(3)]})
	}
	for range n() {
		gs.Addresses = append(gs.Addresses, core.Address{Type: str(), Address: str()})
	}
	if r.IntN(3) > 0 {
		gs.Labels = map[string]string{}
		for range n() {
			gs.Labels[str()] = str()
		}
	}
	if r.IntN(3) > 0 {
		gs.Annotations = map[string]string{}
		for range n() {
			gs.Annotations[str()] = str()
		}
	}
	switch r.IntN(4) {
	case 0:
		// Allocated by the core: the stamp is AllocatedAt.
		gs.AllocatedAt = time.Date(2026, 11, 25, 0, 0, 0, 0, time.UTC).UnixNano() + r.Int64N(1e15)
	case 1:
		// Allocated again after a stamp came in with the annotations
		// (read back from Kubernetes): the new one wins.
		gs.AllocatedAt = time.Date(2026, 11, 25, 0, 0, 0, 0, time.UTC).UnixNano() + r.Int64N(1e15)
		if gs.Annotations == nil {
			gs.Annotations = map[string]string{}
		}
		gs.Annotations[core.LastAllocatedAnnotation] = "2020-01-01T00:00:00Z"
	}
	if r.IntN(3) > 0 {
		gs.Counters = map[string]core.Counter{}
		for range n() {
			gs.Counters[str()] = core.Counter{Count: i64(), Capacity: i64()}
		}
	}
	if r.IntN(3) > 0 {
		gs.Lists = map[string]core.List{}
		for range n() {
			l := core.List{Capacity: i64()}
			for range n() {
				l.Values = append(l.Values, str())
			}
			gs.Lists[str()] = l
		}
	}
	return gs
}

// TestAppendGameServerResponseMatchesWire: encoding a server directly gives
// what proto.Marshal gives for ResponseFromCore's message (the same bytes
// when no map has two entries; an equal message when decoded otherwise).
func TestAppendGameServerResponseMatchesWire(t *testing.T) {
	r := rand.New(rand.NewPCG(17, 2))
	for i := range 5000 {
		maxEntries := 1
		if i%2 == 1 {
			maxEntries = 4
		}
		gs := randomGameServer(r, maxEntries)
		source := []string{SourceLocal, "", "https://peer:443"}[i%3]
		msg, err := ResponseFromCore(gs, source)
		if err != nil {
			t.Fatal(err)
		}
		want, err := proto.Marshal(msg)
		if err != nil {
			t.Fatal(err)
		}
		got := AppendGameServerResponse(nil, gs, source)
		if n := GameServerResponseSize(gs, source); n != len(got) || n != len(want) {
			t.Fatalf("case %d: size %d, wrote %d bytes, proto.Marshal %d", i, n, len(got), len(want))
		}
		if maxEntries == 1 && len(msg.GetMetadata().GetAnnotations()) <= 1 && !bytes.Equal(got, want) {
			t.Fatalf("case %d: bytes differ\n got %x\nwant %x", i, got, want)
		}
		var back allocation.AllocationResponse
		if err := proto.Unmarshal(got, &back); err != nil {
			t.Fatalf("case %d: does not decode: %v", i, err)
		}
		var ref allocation.AllocationResponse
		if err := proto.Unmarshal(want, &ref); err != nil {
			t.Fatal(err)
		}
		if !proto.Equal(&back, &ref) {
			t.Fatalf("case %d: decodes to\n%v\nwant\n%v", i, &back, &ref)
		}
	}
}

// TestStampSize checks the stamp's length as computed against the
// formatted stamp, fractions with trailing zeros and none included.
func TestStampSize(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 9))
	base := time.Date(2026, 11, 25, 0, 0, 0, 0, time.UTC).UnixNano()
	cases := []int64{base, base + 1, base + 10, base + 500_000_000, base + 123_456_789, base + 100, -1, -1_000_000_000, 1}
	for range 2000 {
		// A fraction with 0 to 9 trailing zeros.
		ns, unit := r.Int64N(1e9), int64(1)
		for range r.IntN(10) {
			unit *= 10
		}
		ns -= ns % unit
		cases = append(cases, base+r.Int64N(1e7)*1e9+ns)
	}
	for _, at := range cases {
		gs := &core.GameServer{AllocatedAt: at}
		if want := len(gs.LastAllocated()); stampSize(at) != want {
			t.Fatalf("stampSize(%d) = %d, want %d (%s)", at, stampSize(at), want, gs.LastAllocated())
		}
	}
}
