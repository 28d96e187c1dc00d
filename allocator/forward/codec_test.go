package forward

import (
	"math/rand/v2"
	"strconv"
	"testing"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/quartermaster-dev/quartermaster/allocator/pb/allocation"
)

// randomResponse fills every field of an AllocationResponse, or leaves it
// empty, at random.
func randomResponse(r *rand.Rand) *allocation.AllocationResponse {
	str := func() string {
		if r.IntN(4) == 0 {
			return ""
		}
		return "v" + strconv.Itoa(r.IntN(1e6))
	}
	m := &allocation.AllocationResponse{GameServerName: str(), Address: str(), NodeName: str(), Source: str()}
	for range r.IntN(3) {
		m.Ports = append(m.Ports, &allocation.AllocationResponse_GameServerStatusPort{Name: str(), Port: r.Int32N(65536)})
	}
	for range r.IntN(3) {
		m.Addresses = append(m.Addresses, &allocation.AllocationResponse_GameServerStatusAddress{Type: str(), Address: str()})
	}
	if r.IntN(3) > 0 {
		m.Metadata = &allocation.AllocationResponse_GameServerMetadata{}
		for range r.IntN(5) {
			if m.Metadata.Labels == nil {
				m.Metadata.Labels = map[string]string{}
			}
			m.Metadata.Labels[str()] = str()
		}
		for range r.IntN(5) {
			if m.Metadata.Annotations == nil {
				m.Metadata.Annotations = map[string]string{}
			}
			m.Metadata.Annotations[str()] = str()
		}
	}
	for range r.IntN(3) {
		if m.Counters == nil {
			m.Counters = map[string]*allocation.AllocationResponse_CounterStatus{}
		}
		cs := &allocation.AllocationResponse_CounterStatus{}
		if r.IntN(2) == 0 {
			cs.Count = wrapperspb.Int64(r.Int64N(100) - 5)
		}
		if r.IntN(2) == 0 {
			cs.Capacity = wrapperspb.Int64(r.Int64N(100))
		}
		m.Counters[str()] = cs
	}
	for range r.IntN(3) {
		if m.Lists == nil {
			m.Lists = map[string]*allocation.AllocationResponse_ListStatus{}
		}
		ls := &allocation.AllocationResponse_ListStatus{}
		for range r.IntN(3) {
			ls.Values = append(ls.Values, str())
		}
		if r.IntN(2) == 0 {
			ls.Capacity = wrapperspb.Int64(r.Int64N(100))
		}
		m.Lists[str()] = ls
	}
	return m
}

// TestClientCodecMatchesProto checks the hand decoder against the proto
// library on random responses (the naive reference), in a buffer with
// spare capacity as gRPC's pool hands them out, and that what it does not
// know (an unknown field) goes to the proto library, unknown field kept.
func TestClientCodecMatchesProto(t *testing.T) {
	c := newClientCodec()
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 2000 {
		want := randomResponse(r)
		b, err := proto.Marshal(want)
		if err != nil {
			t.Fatal(err)
		}
		padded := append(make([]byte, 0, len(b)+64), b...)
		got := &allocation.AllocationResponse{}
		if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(padded)}, got); err != nil {
			t.Fatalf("response %d: %v", i, err)
		}
		if !proto.Equal(got, want) {
			t.Fatalf("response %d:\ngot  %v\nwant %v", i, got, want)
		}
		if i%10 == 0 {
			// The hand decoder must have done it: no fallback for a
			// message it knows.
			var direct allocation.AllocationResponse
			if err := decodeResponse(b, &direct); err != nil || !proto.Equal(&direct, want) {
				t.Fatalf("response %d: hand decoder: %v", i, err)
			}
		}
	}
	// An unknown field: decoded by the proto library, field kept.
	b, _ := proto.Marshal(&allocation.AllocationResponse{GameServerName: "gs-1", Source: "local"})
	b = protowire.AppendTag(b, 99, protowire.BytesType)
	b = protowire.AppendString(b, "later")
	var direct allocation.AllocationResponse
	if decodeResponse(b, &direct) == nil {
		t.Fatal("the hand decoder accepted an unknown field")
	}
	got := &allocation.AllocationResponse{}
	if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(b)}, got); err != nil {
		t.Fatal(err)
	}
	if got.GetGameServerName() != "gs-1" || len(got.ProtoReflect().GetUnknown()) == 0 {
		t.Fatalf("fallback lost fields: %v, unknown %d bytes", got, len(got.ProtoReflect().GetUnknown()))
	}
	// Bytes that are no message are an error, as the proto library's.
	if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer([]byte{0x12, 0x7f})}, &allocation.AllocationResponse{}); err == nil {
		t.Fatal("truncated bytes decoded")
	}
}

func BenchmarkDecodeResponse(b *testing.B) {
	want := randomResponse(rand.New(rand.NewPCG(3, 4)))
	want.Metadata = &allocation.AllocationResponse_GameServerMetadata{
		Labels:      map[string]string{"agones.dev/fleet": "bench", "mode": "bench", "agones.dev/gameserverset": "bench-x"},
		Annotations: map[string]string{"quartermaster.dev/owner": "entry", "agones.dev/last-allocated": "2026-11-22T21:00:00.123456789Z"},
	}
	raw, _ := proto.Marshal(want)
	b.Run("hand", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			var m allocation.AllocationResponse
			if err := decodeResponse(raw, &m); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("proto", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			var m allocation.AllocationResponse
			if err := proto.Unmarshal(raw, &m); err != nil {
				b.Fatal(err)
			}
		}
	})
}
