package loadgen

import (
	"fmt"
	"strconv"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// The gRPC caller encodes its one request once, before the run, and reads
// from each answer only the fields a session needs. With the protobuf
// library, decoding an AllocationResponse (ports, metadata maps, counters)
// and encoding the request again for every call is a large share of the
// generator's CPU, which on a machine shared with the server is taken from
// the server and shows in its throughput. The echo goes through the same
// codec, so the two targets' clients do comparable work.
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

// AllocationRequest.metadata and MetaPatch.annotations (Agones'
// allocation.proto), and a map entry's key and value.
const (
	fieldRequestMetadata  protowire.Number = 7
	fieldPatchAnnotations protowire.Number = 2
	fieldEntryKey         protowire.Number = 1
	fieldEntryValue       protowire.Number = 2
)

// withAnnotation returns the request with annotation key=n (decimal) added:
// the bytes as they are, then a second metadata field holding that one
// entry, which a decoder merges into the first (protobuf merges repeated
// occurrences of a message field, and of a map's entries).
func (r *encodedRequest) withAnnotation(key string, n uint64) *encodedRequest {
	var num [20]byte
	value := strconv.AppendUint(num[:0], n, 10)
	entry := protowire.SizeTag(fieldEntryKey) + protowire.SizeBytes(len(key)) +
		protowire.SizeTag(fieldEntryValue) + protowire.SizeBytes(len(value))
	patch := protowire.SizeTag(fieldPatchAnnotations) + protowire.SizeBytes(entry)
	b := make([]byte, 0, len(r.b)+protowire.SizeTag(fieldRequestMetadata)+protowire.SizeBytes(patch))
	b = append(b, r.b...)
	b = protowire.AppendTag(b, fieldRequestMetadata, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(patch))
	b = protowire.AppendTag(b, fieldPatchAnnotations, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(entry))
	b = protowire.AppendTag(b, fieldEntryKey, protowire.BytesType)
	b = protowire.AppendString(b, key)
	b = protowire.AppendTag(b, fieldEntryValue, protowire.BytesType)
	b = protowire.AppendBytes(b, value)
	return &encodedRequest{b: b}
}

// allocAnswer is what Call keeps of an AllocationResponse.
type allocAnswer struct{ name, source string }

// ignoredAnswer is an answer whose content does not matter (the health
// check's); it is still checked to be a well-formed message.
type ignoredAnswer struct{}

// AllocationResponse field numbers (Agones' allocation.proto).
const (
	fieldGameServerName protowire.Number = 2
	fieldSource         protowire.Number = 6
)

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
	var b []byte
	if len(data) == 1 {
		b = data[0].ReadOnlyData()
	} else {
		b = data.Materialize()
	}
	switch a := v.(type) {
	case *allocAnswer:
		return scanAnswer(b, a)
	case *ignoredAnswer:
		return scanAnswer(b, nil)
	}
	return fmt.Errorf("loadgen codec: cannot receive into a %T", v)
}

// scanAnswer walks a message's top-level fields, copying gameServerName and
// source into a (when not nil); a malformed message is an error, which the
// call reports as Internal.
func scanAnswer(b []byte, a *allocAnswer) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return fmt.Errorf("malformed answer: %w", protowire.ParseError(n))
		}
		b = b[n:]
		if a != nil && typ == protowire.BytesType && (num == fieldGameServerName || num == fieldSource) {
			s, m := protowire.ConsumeBytes(b)
			if m < 0 {
				return fmt.Errorf("malformed answer: %w", protowire.ParseError(m))
			}
			if num == fieldGameServerName {
				a.name = string(s)
			} else {
				a.source = string(s)
			}
			b = b[m:]
			continue
		}
		m := protowire.ConsumeFieldValue(num, typ, b)
		if m < 0 {
			return fmt.Errorf("malformed answer: %w", protowire.ParseError(m))
		}
		b = b[m:]
	}
	return nil
}
