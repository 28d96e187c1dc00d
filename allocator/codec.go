package allocator

import (
	"google.golang.org/grpc/encoding"
	protocodec "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"

	"github.com/quartermaster-dev/quartermaster/allocator/pb/allocation"
	"github.com/quartermaster-dev/quartermaster/allocator/wire"
)

// codec is the gRPC server's codec: grpc-go's own protobuf codec, except
// that AllocationResponses, the one message sent per allocation, are
// written by wire.AppendResponse. The proto library encodes their label and
// annotation maps through reflection, with heap allocations per entry; on
// the memory backend that was most of the allocations a request made
// outside gRPC itself, and the garbage collector's work grows with them.
type codec struct {
	proto encoding.CodecV2
}

func newCodec() *codec { return &codec{proto: encoding.GetCodecV2(protocodec.Name)} }

func (c *codec) Marshal(v any) (mem.BufferSlice, error) {
	m, ok := v.(*allocation.AllocationResponse)
	if !ok || !wire.ResponseFastPath(m) {
		return c.proto.Marshal(v)
	}
	size := wire.ResponseSize(m)
	if mem.IsBelowBufferPoolingThreshold(size) {
		return mem.BufferSlice{mem.SliceBuffer(wire.AppendResponse(make([]byte, 0, size), m))}, nil
	}
	pool := mem.DefaultBufferPool()
	buf := pool.Get(size)
	*buf = wire.AppendResponse((*buf)[:0], m)
	return mem.BufferSlice{mem.NewBuffer(buf, pool)}, nil
}

func (c *codec) Unmarshal(data mem.BufferSlice, v any) error { return c.proto.Unmarshal(data, v) }

// Name is the proto codec's: the content-subtype is unchanged on the wire.
func (c *codec) Name() string { return protocodec.Name }
