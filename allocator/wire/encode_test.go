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

// TestMarshalVTMatchesProto checks the generated encoder the gRPC codec
// writes answers with against the proto library on random responses: the
// same size, bytes that decode to an equal message, and, where no map has
// two entries (so there is no order to differ in), the very same bytes.
// Unknown fields (a forwarded answer from a newer peer) are kept.
func TestMarshalVTMatchesProto(t *testing.T) {
	r := rand.New(rand.NewPCG(17, 1))
	unknown := protowire.AppendVarint(protowire.AppendTag(nil, 99, protowire.VarintType), 7)
	for i := range 5000 {
		maxEntries := 1
		if i%2 == 1 {
			maxEntries = 4
		}
		m := randomResponse(r, maxEntries)
		if i%5 == 0 {
			m.ProtoReflect().SetUnknown(unknown)
		}
		want, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		got, err := m.MarshalVT()
		if err != nil {
			t.Fatal(err)
		}
		if n := m.SizeVT(); n != len(got) || n != len(want) {
			t.Fatalf("case %d: SizeVT %d, MarshalVT wrote %d bytes, proto.Marshal %d", i, n, len(got), len(want))
		}
		if maxEntries == 1 && !bytes.Equal(got, want) {
			t.Fatalf("case %d: bytes differ\n got %x\nwant %x", i, got, want)
		}
		var back allocation.AllocationResponse
		if err := proto.Unmarshal(got, &back); err != nil {
			t.Fatalf("case %d: the encoding does not decode: %v", i, err)
		}
		if !proto.Equal(&back, m) {
			t.Fatalf("case %d: decodes to\n%v\nwant\n%v", i, &back, m)
		}
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
	b.Run("vtproto", func(b *testing.B) {
		b.ReportAllocs()
		for b.Loop() {
			if _, err := m.MarshalToSizedBufferVT(make([]byte, m.SizeVT())); err != nil {
				b.Fatal(err)
			}
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

// TestResponseFromCoreRandom: the answer built from a random server
// describes it (GameServerFromResponse reads the server back) and encodes
// as the proto library encodes it.
func TestResponseFromCoreRandom(t *testing.T) {
	r := rand.New(rand.NewPCG(17, 2))
	for i := range 2000 {
		gs := randomGameServer(r, 1+i%4)
		msg := ResponseFromCore(gs, SourceLocal)
		back := GameServerFromResponse(msg, gs.Namespace)
		if back.Name != gs.Name || back.Address != gs.Address || len(back.Ports) != len(gs.Ports) ||
			len(back.Counters) != len(gs.Counters) || len(back.Lists) != len(gs.Lists) || len(back.Labels) != len(gs.Labels) {
			t.Fatalf("case %d: %v read back as %v", i, gs, back)
		}
		if stamp, _ := gs.Annotation(core.LastAllocatedAnnotation); gs.AllocatedAt != 0 && back.Annotations[core.LastAllocatedAnnotation] != stamp {
			t.Fatalf("case %d: the allocation stamp %q read back as %q", i, stamp, back.Annotations[core.LastAllocatedAnnotation])
		}
		got, err := msg.MarshalVT()
		if err != nil {
			t.Fatal(err)
		}
		var dec allocation.AllocationResponse
		if err := proto.Unmarshal(got, &dec); err != nil || !proto.Equal(&dec, msg) {
			t.Fatalf("case %d: %v encodes to %v (%v)", i, msg, &dec, err)
		}
	}
}
