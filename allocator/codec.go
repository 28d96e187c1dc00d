package allocator

import (
	"google.golang.org/grpc/encoding"
	protocodec "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"

	"github.com/quartermaster-dev/quartermaster/allocator/wire"
)

// codec is the gRPC server's codec, the first and last steps of the
// request pipeline (pipeline.go) for gRPC: it decodes an allocation
// request into a *request, finding the prepared request of bytes it has
// seen before (prepared.go), and writes every message with the methods
// vtprotobuf generates (allocation_vtproto.pb.go), into a buffer from
// gRPC's pool. Its name and the bytes on the wire are grpc-go's protobuf
// codec's.
type codec struct {
	proto encoding.CodecV2
	// requests are the allocation requests seen before (prepared.go).
	requests *requestCache
}

func newCodec() *codec {
	return &codec{proto: encoding.GetCodecV2(protocodec.Name), requests: newRequestCache()}
}

// vtMessage is a message with vtprotobuf's generated encoder.
type vtMessage interface {
	SizeVT() int
	MarshalToSizedBufferVT([]byte) (int, error)
}

// Marshal encodes v in a buffer from gRPC's pool, which gRPC gives back
// once the message is written. grpc-go's proto codec pools only messages
// of 1 KiB and more, and an allocation's answer is a few hundred bytes,
// one per request: the buffer asked for is larger than the answer, as
// mem.NewBuffer pools nothing of 1 KiB or less
// (mem.IsBelowBufferPoolingThreshold).
func (c *codec) Marshal(v any) (mem.BufferSlice, error) {
	m, ok := v.(vtMessage)
	if !ok {
		return c.proto.Marshal(v)
	}
	size := m.SizeVT()
	pool := mem.DefaultBufferPool()
	buf := pool.Get(max(size, minPooled))
	*buf = (*buf)[:size]
	if _, err := m.MarshalToSizedBufferVT(*buf); err != nil {
		pool.Put(buf)
		return nil, err
	}
	return mem.BufferSlice{mem.NewBuffer(buf, pool)}, nil
}

// minPooled is the least capacity mem.NewBuffer pools.
const minPooled = 1<<10 + 1

// Unmarshal decodes an allocation request into a *request: the prepared
// request of the same bytes when there is one, else a new message
// (wire.DecodeRequest: vtprotobuf's generated decoder, answering as the
// proto library does). Everything else is grpc-go's codec's. Bytes that
// are not an AllocationRequest are an error here (gRPC answers Internal).
func (c *codec) Unmarshal(data mem.BufferSlice, v any) error {
	r, ok := v.(*request)
	if !ok {
		return c.proto.Unmarshal(data, v)
	}
	buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
	defer buf.Free()
	b := buf.ReadOnlyData()
	if p := c.requests.get(b); p != nil {
		r.sent, r.prep = p.sent, p
		return nil
	}
	sent, err := wire.DecodeRequest(b)
	if err != nil {
		return err
	}
	r.sent, r.prep = sent, c.requests.put(b, sent)
	return nil
}

// Name is the proto codec's: the content-subtype is unchanged on the wire.
func (c *codec) Name() string { return protocodec.Name }
