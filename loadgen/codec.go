package loadgen

import (
	"fmt"
	"strconv"

	"google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"

	"github.com/quartermaster-dev/quartermaster/allocator/pb/allocation"
	"github.com/quartermaster-dev/quartermaster/allocator/wire"
)

// leanCodec is the gRPC caller's codec: its one request is encoded once,
// before the run, and sent as those bytes on every call; answers are
// decoded with the generated (reflection-free) unmarshalers. The echo goes
// through the same codec, so the two targets' clients do comparable work.
type leanCodec struct{}

// encodedRequest is a request message already in its wire form.
type encodedRequest struct{ b []byte }

func encodeRequest(m proto.Message) (*encodedRequest, error) {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		return nil, err
	}
	return &encodedRequest{b: b}, nil
}

// withAnnotation returns the request with annotation key=n (decimal) added:
// the bytes as they are, then those of a request holding only that
// annotation, which a decoder merges into the first (protobuf merges
// repeated occurrences of a message field, and of a map's entries).
func (r *encodedRequest) withAnnotation(key string, n uint64) *encodedRequest {
	return r.withAnnotationValue(key, strconv.FormatUint(n, 10))
}

// withKey returns the request carrying the idempotency key k, in the
// annotation an Agones client would send it in.
func (r *encodedRequest) withKey(k string) *encodedRequest {
	return r.withAnnotationValue(wire.AllocationKeyAnnotation, k)
}

func (r *encodedRequest) withAnnotationValue(key, value string) *encodedRequest {
	extra := &allocation.AllocationRequest{Metadata: &allocation.MetaPatch{
		Annotations: map[string]string{key: value},
	}}
	b := make([]byte, len(r.b)+extra.SizeVT())
	copy(b, r.b)
	// A message of strings and maps always encodes: no error to report.
	_, _ = extra.MarshalToSizedBufferVT(b[len(r.b):])
	return &encodedRequest{b: b}
}

// allocAnswer is what Call keeps of an AllocationResponse.
type allocAnswer struct{ name, source string }

// ignoredAnswer is an answer whose content does not matter (the health
// check's); it is still checked to be a well-formed message.
type ignoredAnswer struct{}

// Name is the content subtype: the server sees application/grpc+proto, as
// from any protobuf client.
func (leanCodec) Name() string { return "proto" }

func (leanCodec) Marshal(v any) (mem.BufferSlice, error) {
	r, ok := v.(*encodedRequest)
	if !ok {
		return nil, fmt.Errorf("loadgen codec: cannot send a %T", v)
	}
	// A SliceBuffer is not pooled: gRPC's Free of it is a no-op, so the
	// shared bytes are never recycled under another call.
	return mem.BufferSlice{mem.SliceBuffer(r.b)}, nil
}

func (leanCodec) Unmarshal(data mem.BufferSlice, v any) error {
	buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
	defer buf.Free()
	b := buf.ReadOnlyData()
	switch a := v.(type) {
	case *allocAnswer:
		var m allocation.AllocationResponse
		if err := m.UnmarshalVT(b); err != nil {
			return fmt.Errorf("malformed answer: %w", err)
		}
		a.name, a.source = m.GameServerName, m.Source
		return nil
	case *ignoredAnswer:
		var m grpc_health_v1.HealthCheckResponse
		if err := proto.Unmarshal(b, &m); err != nil {
			return fmt.Errorf("malformed answer: %w", err)
		}
		return nil
	}
	return fmt.Errorf("loadgen codec: cannot receive into a %T", v)
}
