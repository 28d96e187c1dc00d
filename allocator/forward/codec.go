package forward

import (
	"google.golang.org/grpc/encoding"
	protocodec "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
)

// clientCodec is the codec of the forwarder's connections: grpc-go's
// protobuf codec, except that a request a Memo encoded already is sent as
// it is, and a message with a generated decoder (the remote's answer) is
// decoded by it.
type clientCodec struct {
	proto encoding.CodecV2
}

func newClientCodec() *clientCodec {
	return &clientCodec{proto: encoding.GetCodecV2(protocodec.Name)}
}

func (c *clientCodec) Marshal(v any) (mem.BufferSlice, error) {
	if e, ok := v.(*encodedRequest); ok {
		// grpc-go only reads the slice and its buffer (a SliceBuffer's
		// Free does nothing), so one serves every call.
		e.encodings.Add(1)
		return e.data, nil
	}
	return c.proto.Marshal(v)
}

// vtUnmarshaler is a message with a generated reflection-free decoder
// (vtprotobuf's), as the AllocationResponse a forward receives has.
type vtUnmarshaler interface{ UnmarshalVT([]byte) error }

func (c *clientCodec) Unmarshal(data mem.BufferSlice, v any) error {
	m, ok := v.(vtUnmarshaler)
	if !ok {
		return c.proto.Unmarshal(data, v)
	}
	buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
	defer buf.Free()
	return m.UnmarshalVT(buf.ReadOnlyData())
}

// Name is the proto codec's: the content-subtype is unchanged on the wire.
func (c *clientCodec) Name() string { return protocodec.Name }
