package allocator

import (
	"google.golang.org/grpc/encoding"
	protocodec "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"

	"github.com/quartermaster-dev/quartermaster/allocator/pb/allocation"
	"github.com/quartermaster-dev/quartermaster/allocator/wire"
)

// codec is the gRPC server's codec: grpc-go's own protobuf codec, except
// that allocation answers, the one message sent per allocation, are
// written by hand: a local allocation's straight from the game server
// (wire.AppendGameServerResponse, see localAnswer), a forwarded one's by
// wire.AppendResponse. The proto library encodes their label and
// annotation maps through reflection, with heap allocations per entry; on
// the memory backend that was most of the allocations a request made
// outside gRPC itself, and the garbage collector's work grows with them.
type codec struct {
	proto encoding.CodecV2
}

func newCodec() *codec { return &codec{proto: encoding.GetCodecV2(protocodec.Name)} }

func (c *codec) Marshal(v any) (mem.BufferSlice, error) {
	switch m := v.(type) {
	case *localAnswer:
		// The AllocationResponse describing m.gs (responseFor's), written
		// without building it.
		return encoded(wire.GameServerResponseSize(m.gs, wire.SourceLocal), func(b []byte) []byte {
			return wire.AppendGameServerResponse(b, m.gs, wire.SourceLocal)
		}), nil
	case *allocation.AllocationResponse:
		if wire.ResponseFastPath(m) {
			return encoded(wire.ResponseSize(m), func(b []byte) []byte { return wire.AppendResponse(b, m) }), nil
		}
	}
	return c.proto.Marshal(v)
}

// encoded returns size bytes written by appendTo, in a buffer from gRPC's
// pool, which gRPC gives back once the message is written. Its proto codec
// pools only messages of 1 KiB and more; an allocation's answer is a few
// hundred bytes, one per request, and pooling it keeps that much garbage
// away from the collector.
func encoded(size int, appendTo func([]byte) []byte) mem.BufferSlice {
	pool := mem.DefaultBufferPool()
	buf := pool.Get(size)
	*buf = appendTo((*buf)[:0])
	return mem.BufferSlice{mem.NewBuffer(buf, pool)}
}

func (c *codec) Unmarshal(data mem.BufferSlice, v any) error { return c.proto.Unmarshal(data, v) }

// Name is the proto codec's: the content-subtype is unchanged on the wire.
func (c *codec) Name() string { return protocodec.Name }
