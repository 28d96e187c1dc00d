package allocator

import (
	"errors"

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
	// wantsMessage, if set, says whether requests are wanted as messages
	// (a tracer records them as sent).
	wantsMessage func() bool
}

func newCodec() *codec {
	return &codec{proto: encoding.GetCodecV2(protocodec.Name), requests: newRequestCache()}
}

// newServerCodec is svc's gRPC server's codec: requests come as messages
// while svc's tracer records them.
func newServerCodec(svc *Service) *codec {
	c := newCodec()
	if svc != nil {
		c.wantsMessage = func() bool { return svc.tracer.Load() != nil }
	}
	return c
}

// vtMessage is a message with vtprotobuf's generated encoder.
type vtMessage interface {
	SizeVT() int
	MarshalToSizedBufferVT([]byte) (int, error)
}

// Marshal encodes v, a local answer straight from its server
// (wire.AppendGameServerResponse) and other messages with vtprotobuf's
// generated encoder, in a buffer from gRPC's pool, which gRPC gives back
// once the message is written. grpc-go's proto codec pools only messages
// of 1 KiB and more, and an allocation's answer is a few hundred bytes,
// one per request: the buffer asked for is larger than the answer, as
// mem.NewBuffer pools nothing of 1 KiB or less
// (mem.IsBelowBufferPoolingThreshold).
func (c *codec) Marshal(v any) (mem.BufferSlice, error) {
	if a, ok := v.(*localAnswer); ok {
		size := wire.GameServerResponseSize(a.gs, wire.SourceLocal)
		pool := mem.DefaultBufferPool()
		buf := pool.Get(max(size, minPooled))
		*buf = wire.AppendGameServerResponse((*buf)[:0], a.gs, wire.SourceLocal)
		return mem.BufferSlice{mem.NewBuffer(buf, pool)}, nil
	}
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
// request of the same bytes when there is one; else, for a request that
// is not forwarded (and while no tracer wants the message), its core form
// read straight from the bytes (wire.DecodeRequestToCore); else the
// message (wire.DecodeRequest, vtprotobuf's generated decoder answering
// as the proto library does). Everything else is grpc-go's codec's. Bytes
// that are not an AllocationRequest are an error here (gRPC answers
// Internal); a request the conversion refuses is not: it is decoded as a
// message, and the pipeline answers InvalidArgument.
func (c *codec) Unmarshal(data mem.BufferSlice, v any) error {
	r, ok := v.(*request)
	if !ok {
		return c.proto.Unmarshal(data, v)
	}
	buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
	defer buf.Free()
	b := buf.ReadOnlyData()
	if p := c.requests.get(b); p != nil {
		r.sent, r.decoded, r.conv, r.prep = p.sent, p.decoded, p.conv, p
		return nil
	}
	if c.wantsMessage == nil || !c.wantsMessage() {
		conv, err := wire.DecodeRequestToCore(b, r.sel[:0])
		if errors.Is(err, wire.ErrMalformed) {
			return err
		}
		if err == nil && !conv.MultiCluster.Enabled {
			r.conv, r.decoded = conv, true
			r.prep = c.requests.put(b, nil, &r.conv)
			return nil
		}
	}
	sent, err := wire.DecodeRequest(b)
	if err != nil {
		return err
	}
	r.sent, r.prep = sent, c.requests.put(b, sent, nil)
	return nil
}

// Name is the proto codec's: the content-subtype is unchanged on the wire.
func (c *codec) Name() string { return protocodec.Name }
