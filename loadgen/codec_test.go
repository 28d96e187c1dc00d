package loadgen

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"

	"github.com/quartermaster-dev/quartermaster/allocator/pb/allocation"
	"github.com/quartermaster-dev/quartermaster/allocator/wire"
)

// TestLeanCodecReadsWhatTheLibraryReads decodes random full answers, split
// into random buffers as gRPC may hand them over, and compares the session
// fields with the protobuf library's reading.
func TestLeanCodecReadsWhatTheLibraryReads(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for i := range 500 {
		resp := &allocation.AllocationResponse{
			GameServerName: fmt.Sprintf("gs-%d", r.IntN(1e6)),
			Address:        "10.0.0.1",
			NodeName:       "node-1",
			Ports:          []*allocation.AllocationResponse_GameServerStatusPort{{Name: "game", Port: int32(7000 + i)}},
			Metadata: &allocation.AllocationResponse_GameServerMetadata{
				Labels:      map[string]string{"agones.dev/fleet": "f", "gameServerName": "not-this-one"},
				Annotations: map[string]string{"source": "not-this-either"},
			},
		}
		if r.IntN(2) == 0 {
			resp.Source = fmt.Sprintf("cluster-%d:443", r.IntN(9))
		}
		if r.IntN(3) == 0 {
			resp.GameServerName = ""
		}
		b, err := proto.Marshal(resp)
		if err != nil {
			t.Fatal(err)
		}
		var got allocAnswer
		if err := (leanCodec{}).Unmarshal(split(b, r), &got); err != nil {
			t.Fatalf("answer %d: %v", i, err)
		}
		if got.name != resp.GameServerName || got.source != resp.Source {
			t.Fatalf("answer %d: read %q from %q, want %q from %q", i, got.name, got.source, resp.GameServerName, resp.Source)
		}
		if err := (leanCodec{}).Unmarshal(split(b, r), &ignoredAnswer{}); err != nil {
			t.Fatalf("answer %d, ignored: %v", i, err)
		}
	}
}

// split cuts b into up to three buffers.
func split(b []byte, r *rand.Rand) mem.BufferSlice {
	var out mem.BufferSlice
	for len(b) > 0 && len(out) < 2 {
		n := r.IntN(len(b) + 1)
		out = append(out, mem.SliceBuffer(b[:n]))
		b = b[n:]
	}
	return append(out, mem.SliceBuffer(b))
}

func TestLeanCodecRefusesMalformedAnswers(t *testing.T) {
	b, err := proto.Marshal(&allocation.AllocationResponse{GameServerName: "gs-1", Source: "local", Address: "10.0.0.1"})
	if err != nil {
		t.Fatal(err)
	}
	for n := 1; n < len(b); n++ {
		// Every strict prefix ends inside a field here (the fields
		// are all strings of several bytes).
		if err := (leanCodec{}).Unmarshal(mem.BufferSlice{mem.SliceBuffer(b[:n])}, &allocAnswer{}); err == nil && !fieldBoundary(b, n) {
			t.Errorf("the answer cut at %d of %d bytes was accepted", n, len(b))
		}
	}
	if err := (leanCodec{}).Unmarshal(mem.BufferSlice{mem.SliceBuffer([]byte{0x12, 0x7f, 'x'})}, &ignoredAnswer{}); err == nil {
		t.Error("a string longer than its message was accepted")
	}
	if err := (leanCodec{}).Unmarshal(nil, &allocation.AllocationResponse{}); err == nil {
		t.Error("an unknown destination type was accepted")
	}
}

// fieldBoundary reports whether b[:n] ends exactly after a whole field.
func fieldBoundary(b []byte, n int) bool {
	for i := 0; i < len(b); {
		l := int(b[i+1]) // one-byte tags and lengths in this message
		i += 2 + l
		if i == n {
			return true
		}
	}
	return false
}

func TestLeanCodecSendsTheLibrarysBytes(t *testing.T) {
	req := &allocation.AllocationRequest{
		Namespace: "default",
		GameServerSelectors: []*allocation.GameServerSelector{
			{MatchLabels: map[string]string{"b": "2", "a": "1", "c": "3"}},
		},
	}
	enc, err := encodeRequest(req)
	if err != nil {
		t.Fatal(err)
	}
	got, err := (leanCodec{}).Marshal(enc)
	if err != nil {
		t.Fatal(err)
	}
	var back allocation.AllocationRequest
	if err := proto.Unmarshal(got.Materialize(), &back); err != nil {
		t.Fatal(err)
	}
	if !proto.Equal(&back, req) {
		t.Fatalf("sent %v, want %v", &back, req)
	}
	again, _ := (leanCodec{}).Marshal(enc)
	if !bytes.Equal(again.Materialize(), got.Materialize()) {
		t.Fatal("two calls sent different bytes")
	}
	if _, err := (leanCodec{}).Marshal(req); err == nil {
		t.Fatal("a message not encoded up front was accepted")
	}
}

// TestUniqueAnnotation checks that a request with a unique annotation
// decodes, with the protobuf library and with the allocator's own decoder,
// to the request with that annotation added to its metadata, with or
// without metadata of its own.
func TestUniqueAnnotation(t *testing.T) {
	for _, md := range []*allocation.MetaPatch{nil, {Labels: map[string]string{"l": "1"}, Annotations: map[string]string{"a": "x"}}} {
		req := &allocation.AllocationRequest{
			Namespace:           "default",
			GameServerSelectors: []*allocation.GameServerSelector{{MatchLabels: map[string]string{"mode": "a"}}},
			Metadata:            md,
		}
		enc, err := encodeRequest(req)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range []uint64{1, 9, 10, 1 << 40} {
			got := enc.withAnnotation("example.com/match", n)
			var back allocation.AllocationRequest
			if err := proto.Unmarshal(got.b, &back); err != nil {
				t.Fatal(err)
			}
			want := proto.Clone(req).(*allocation.AllocationRequest)
			if want.Metadata == nil {
				want.Metadata = &allocation.MetaPatch{}
			}
			if want.Metadata.Annotations == nil {
				want.Metadata.Annotations = map[string]string{}
			}
			want.Metadata.Annotations["example.com/match"] = fmt.Sprint(n)
			if !proto.Equal(&back, want) {
				t.Fatalf("n=%d: decodes to %v, want %v", n, &back, want)
			}
			sent, err := wire.DecodeRequest(got.b)
			if err != nil {
				t.Fatal(err)
			}
			core, err := wire.RequestToCore(sent)
			if err != nil {
				t.Fatal(err)
			}
			if core.Metadata.Annotations["example.com/match"] != fmt.Sprint(n) || (md != nil && (core.Metadata.Annotations["a"] != "x" || core.Metadata.Labels["l"] != "1")) {
				t.Fatalf("n=%d: the allocator reads metadata %+v", n, core.Metadata)
			}
		}
		if bytes.Equal(enc.withAnnotation("k", 1).b, enc.withAnnotation("k", 2).b) {
			t.Fatal("two numbers, the same bytes")
		}
	}
}
