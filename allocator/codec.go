package allocator

import (
	"context"
	"errors"
	"time"

	"google.golang.org/grpc/encoding"
	protocodec "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"

	"github.com/quartermaster-dev/quartermaster/allocator/pb/allocation"
	"github.com/quartermaster-dev/quartermaster/allocator/wire"
	"github.com/quartermaster-dev/quartermaster/core"
)

// codec is the gRPC server's codec: grpc-go's own protobuf codec, except
// that allocation requests are read by hand (Unmarshal) and allocation
// answers, the one message sent per allocation, are written by hand: a local allocation's straight from the game server
// (wire.AppendGameServerResponse, see localAnswer), a forwarded one's by
// wire.AppendResponse. The proto library encodes their label and
// annotation maps through reflection, with heap allocations per entry; on
// the memory backend that was most of the allocations a request made
// outside gRPC itself, and the garbage collector's work grows with them.
type codec struct {
	proto encoding.CodecV2
	// requests are the allocation requests seen before (prepared.go).
	requests *requestCache
}

func newCodec() *codec {
	return &codec{proto: encoding.GetCodecV2(protocodec.Name), requests: newRequestCache()}
}

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
// away from the collector. The buffer asked for is larger than the answer:
// mem.NewBuffer does not pool a buffer whose capacity is at most 1 KiB
// (mem.IsBelowBufferPoolingThreshold), and the pool's tier for a few
// hundred bytes is 256 bytes, so a small answer would come from a fresh
// allocation every time and never go back.
func encoded(size int, appendTo func([]byte) []byte) mem.BufferSlice {
	pool := mem.DefaultBufferPool()
	buf := pool.Get(max(size, minPooled))
	*buf = appendTo((*buf)[:0])
	return mem.BufferSlice{mem.NewBuffer(buf, pool)}
}

// Unmarshal decodes an allocation request into a *decodedRequest by hand
// (wire.DecodeRequest: straight into the core's Request, without the
// AllocationRequest and its maps), and everything else with the proto
// library. Bytes that are not an AllocationRequest are an error here, as
// the proto library's would be (gRPC answers Internal); a request the
// conversion refuses is not: the service answers it with InvalidArgument.
func (c *codec) Unmarshal(data mem.BufferSlice, v any) error {
	d, ok := v.(*decodedRequest)
	if !ok {
		return c.proto.Unmarshal(data, v)
	}
	buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
	defer buf.Free()
	b := buf.ReadOnlyData()
	if p := c.requests.get(b); p != nil {
		// Seen before: a copy of the decoded request, with selector
		// storage of its own (the service may restrict its selectors).
		d.req, d.prep, d.in = p.req, p, p.in
		d.req.Selectors = append(d.sel[:0], p.req.Selectors...)
		if len(p.req.Preferred) > 0 {
			d.req.Preferred = append([]core.Selector(nil), p.req.Preferred...)
		}
		return nil
	}
	d.req, d.err = wire.DecodeRequestInto(b, d.sel[:0])
	if errors.Is(d.err, wire.ErrMalformed) {
		return d.err
	}
	if d.err == nil && d.req.MultiCluster.Enabled {
		// Forwarding sends the request on as it came.
		d.in = new(allocation.AllocationRequest)
		if err := proto.Unmarshal(b, d.in); err != nil {
			return err
		}
	}
	if d.err == nil {
		d.prep = c.requests.put(b, &d.req, d.in)
	}
	return nil
}

// minPooled is the least capacity mem.NewBuffer pools.
const minPooled = 1<<10 + 1

// decodedRequest is an allocation request as the codec decodes it for
// allocateDirect: the core's Request (or the conversion's error, with only
// the namespace in req), and the request as sent only when it is a
// multi-cluster one.
type decodedRequest struct {
	req core.Request
	sel [1]core.Selector // req.Selectors' storage for the usual one
	err error
	in  *allocation.AllocationRequest
	g   *grpcAllocation // the service it is for (see serveDecoded)
	// prep is the cached request these bytes decode to (nil when not
	// kept: seen for the first time, too large, or refused).
	prep *preparedRequest
}

// Name is the proto codec's: the content-subtype is unchanged on the wire.
func (c *codec) Name() string { return protocodec.Name }

// allocateDecoded is allocateAnswer for a request the codec decoded (see
// decodedRequest). It is not traced: allocateDirect takes allocateAnswer's
// way while a tracer is set.
func (s *Service) allocateDecoded(ctx context.Context, identity string, d *decodedRequest) (any, error) {
	start := time.Now()
	s.metrics.InFlight.Inc()
	defer s.metrics.InFlight.Dec()

	// The maps of a request decoded for this call alone (not prepared,
	// which shares them) are its own to add the owner to.
	ns, fleet, gs, resp, retries, err := s.allocateRequest(ctx, identity, d.req.Namespace, d.in, d.req, d.err, d.prep, d.prep == nil)
	s.observe(ctx, identity, start, ns, fleet, s.source(resp), retries, err)
	switch {
	case err != nil:
		return nil, err
	case gs != nil:
		return &localAnswer{gs: gs}, nil
	}
	return resp, nil
}
