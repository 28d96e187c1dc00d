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

// The client codec sends a Memo's encoding as it is, and reads answers as
// the proto library does (random responses, the naive reference, and an
// unknown field, kept).
func TestClientCodec(t *testing.T) {
	c := newClientCodec()
	memo := new(Memo)
	enc := memo.encode("caller", "default", &allocation.AllocationRequest{Namespace: "default"})
	out, err := c.Marshal(enc)
	if err != nil || len(out) != 1 || &out[0].ReadOnlyData()[0] != &enc.data[0].ReadOnlyData()[0] {
		t.Fatalf("a Memo's encoding was not sent as it is: %v", err)
	}
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 500 {
		want := randomResponse(r)
		raw, err := proto.Marshal(want)
		if err != nil {
			t.Fatal(err)
		}
		if i%7 == 0 {
			raw = protowire.AppendTag(raw, 99, protowire.VarintType)
			raw = protowire.AppendVarint(raw, 5)
		}
		var got allocation.AllocationResponse
		if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(raw)}, &got); err != nil {
			t.Fatalf("response %d: %v", i, err)
		}
		var ref allocation.AllocationResponse
		if err := proto.Unmarshal(raw, &ref); err != nil {
			t.Fatal(err)
		}
		if !proto.Equal(&got, &ref) || !proto.Equal(&got, want) && i%7 != 0 {
			t.Fatalf("response %d decoded as %v, want %v", i, &got, &ref)
		}
		if i%7 == 0 && len(got.ProtoReflect().GetUnknown()) == 0 {
			t.Fatalf("response %d: the unknown field was dropped", i)
		}
	}
	// Bytes that are no message are an error.
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
	c := newClientCodec()
	b.Run("codec", func(b *testing.B) {
		b.ReportAllocs()
		for range b.N {
			var m allocation.AllocationResponse
			if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(raw)}, &m); err != nil {
				b.Fatal(err)
			}
		}
	})
}
