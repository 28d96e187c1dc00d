package allocator

import (
	"context"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/quartermaster-dev/quartermaster/allocator/mtls"
	"github.com/quartermaster-dev/quartermaster/allocator/pb/allocation"
	qmv1 "github.com/quartermaster-dev/quartermaster/allocator/pb/quartermaster/v1"
)

// RegisterGRPC registers the allocation and admin services of svc on a
// grpc.Server of the caller's own (Server does this for its listeners),
// identifying callers through t.
func RegisterGRPC(s *grpc.Server, svc *Service, t *mtls.Server) {
	allocation.RegisterAllocationServiceServer(s, &grpcAllocation{svc: svc, tls: t})
	qmv1.RegisterAllocationAdminServer(s, &grpcAdmin{svc: svc, tls: t})
}

// registerGRPCDirect is RegisterGRPC for a grpc.Server that uses codec
// (Server's own): Allocate answers a local allocation with a *localAnswer,
// which only that codec knows how to write. The service is the same
// allocation.AllocationService, method for method.
func registerGRPCDirect(s *grpc.Server, svc *Service, t *mtls.Server) {
	desc := allocation.AllocationService_ServiceDesc
	desc.Methods = []grpc.MethodDesc{{MethodName: "Allocate", Handler: allocateDirect}}
	g := &grpcAllocation{svc: svc, tls: t}
	g.info = &grpc.UnaryServerInfo{Server: g, FullMethod: allocation.AllocationService_Allocate_FullMethodName}
	s.RegisterService(&desc, g)
	qmv1.RegisterAllocationAdminServer(s, &grpcAdmin{svc: svc, tls: t})
}

// allocateDirect is the generated Allocate handler with the request read
// by the codec straight into the core's form (see decodedRequest) and the
// answer left to the codec (see localAnswer). While a tracer records
// requests as sent, they are decoded as AllocationRequests instead. The
// handler handed to the interceptors is a plain function and their info
// is made once: a closure or an info per call would be heap allocations
// per request.
func allocateDirect(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
	g := srv.(*grpcAllocation)
	if g.svc.tracer.Load() == nil {
		return serveFromPool(ctx, g, dec, interceptor)
	}
	in := new(allocation.AllocationRequest)
	call := func(ctx context.Context, req any) (any, error) {
		id, err := identify(g.tls, ctx)
		if err != nil {
			return nil, err
		}
		return g.svc.allocateAnswer(ctx, id, req.(*allocation.AllocationRequest))
	}
	if err := dec(in); err != nil {
		return nil, err
	}
	if interceptor == nil {
		return call(ctx, in)
	}
	return interceptor(ctx, in, g.info, call)
}

// decodedPool keeps decodedRequests between calls: one is a few hundred
// bytes, about a tenth of what an allocation leaves to the collector.
var decodedPool = sync.Pool{New: func() any { return new(decodedRequest) }}

// serveFromPool is allocateDirect for a request decoded into a pooled
// decodedRequest. It goes back to the pool once its handler has returned,
// unless it holds a multi-cluster request: forwarding reads the request as
// sent (d.in). Nothing else keeps the struct: Normalize copies it, and the
// answer is the allocated server's own. Only the struct is reused; the maps
// it held (which an allocated server may go on sharing) are dropped with
// it, never refilled.
func serveFromPool(ctx context.Context, g *grpcAllocation, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
	d := decodedPool.Get().(*decodedRequest)
	d.g = g
	var out any
	err := dec(d)
	if err == nil {
		if interceptor == nil {
			out, err = serveDecoded(ctx, d)
		} else {
			out, err = interceptor(ctx, d, g.info, serveDecoded)
		}
	}
	if d.in == nil {
		*d = decodedRequest{}
		decodedPool.Put(d)
	}
	return out, err
}

// serveDecoded is allocateDirect's handler for a *decodedRequest.
func serveDecoded(ctx context.Context, req any) (any, error) {
	d := req.(*decodedRequest)
	id, err := identify(d.g.tls, ctx)
	if err != nil {
		return nil, err
	}
	return d.g.svc.allocateDecoded(ctx, id, d)
}

// grpcAllocation is allocation.AllocationService, exactly Agones' API.
type grpcAllocation struct {
	allocation.UnimplementedAllocationServiceServer
	svc  *Service
	tls  *mtls.Server
	info *grpc.UnaryServerInfo // registerGRPCDirect's, for allocateDirect
}

func (g *grpcAllocation) Allocate(ctx context.Context, in *allocation.AllocationRequest) (*allocation.AllocationResponse, error) {
	id, err := identify(g.tls, ctx)
	if err != nil {
		return nil, err
	}
	return g.svc.Allocate(ctx, id, in)
}

// grpcAdmin is Quartermaster's own quartermaster.v1.AllocationAdmin.
type grpcAdmin struct {
	qmv1.UnimplementedAllocationAdminServer
	svc *Service
	tls *mtls.Server
}

func (g *grpcAdmin) List(ctx context.Context, in *qmv1.ListRequest) (*qmv1.ListResponse, error) {
	id, err := identify(g.tls, ctx)
	if err != nil {
		return nil, err
	}
	return g.svc.List(ctx, id, in)
}

func (g *grpcAdmin) Release(ctx context.Context, in *qmv1.ReleaseRequest) (*qmv1.ReleaseResponse, error) {
	id, err := identify(g.tls, ctx)
	if err != nil {
		return nil, err
	}
	return g.svc.Release(ctx, id, in)
}

// recoverUnary turns a panic in a handler into Internal for that call
// instead of a crashed allocator. No input should cause one; this is the
// backstop if one does.
func recoverUnary(log *slog.Logger) grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, info *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (resp any, err error) {
		defer func() {
			if p := recover(); p != nil {
				log.Error("panic in gRPC handler", "method", info.FullMethod, "panic", fmt.Sprint(p), "stack", string(debug.Stack()))
				resp, err = nil, status.Error(codes.Internal, "internal error")
			}
		}()
		return handler(ctx, req)
	}
}
