package allocator

import (
	"context"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
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

// registerGRPCServer is RegisterGRPC for Server's own grpc.Server, whose
// codec (codec.go) decodes Allocate's request into a *request: the same
// allocation.AllocationService, method for method, with the pipeline's
// steps 1 and 2 in allocateHandler.
func registerGRPCServer(s *grpc.Server, svc *Service, t *mtls.Server) {
	desc := allocation.AllocationService_ServiceDesc
	desc.Methods = []grpc.MethodDesc{{MethodName: "Allocate", Handler: allocateHandler}}
	g := &grpcAllocation{svc: svc, tls: t}
	g.info = &grpc.UnaryServerInfo{Server: g, FullMethod: allocation.AllocationService_Allocate_FullMethodName}
	g.handle = g.serve
	s.RegisterService(&desc, g)
	qmv1.RegisterAllocationAdminServer(s, &grpcAdmin{svc: svc, tls: t})
}

// requestPool keeps the *request structs the codec decodes into; serve
// keeps none once it has returned.
var requestPool = sync.Pool{New: func() any { return new(request) }}

// allocateHandler is the generated Allocate handler with the request
// decoded by the codec into a *request. The handler handed to the
// interceptors and their info are made once, at registration: a closure
// or an info per call would be heap allocations per request.
func allocateHandler(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
	g := srv.(*grpcAllocation)
	r := requestPool.Get().(*request)
	defer func() {
		*r = request{}
		requestPool.Put(r)
	}()
	if err := dec(r); err != nil {
		return nil, err
	}
	if interceptor == nil {
		return g.serve(ctx, r)
	}
	return interceptor(ctx, r, g.info, g.handle)
}

// serve identifies the caller of a decoded request and serves it.
func (g *grpcAllocation) serve(ctx context.Context, r any) (any, error) {
	id, err := identify(g.tls, ctx)
	if err != nil {
		return nil, err
	}
	req := *r.(*request)
	req.headerKey = headerKey(ctx)
	return g.svc.serveAnswer(ctx, id, req)
}

// headerKey is the idempotency key's header in ctx's incoming metadata
// ("" for none). ValueFromIncomingContext reads the transport's map of
// headers as it is: a request without the header costs a lookup and a
// look at each header's first letter, and no copy (a tap on the stream's
// headers would cost an allocation per stream, and FromIncomingContext
// copies them all).
func headerKey(ctx context.Context) string {
	if v := metadata.ValueFromIncomingContext(ctx, AllocationKeyHeader); len(v) > 0 {
		return v[0]
	}
	return ""
}

// grpcAllocation is allocation.AllocationService, exactly Agones' API.
type grpcAllocation struct {
	allocation.UnimplementedAllocationServiceServer
	svc *Service
	tls *mtls.Server
	// info and handle are registerGRPCServer's, for allocateHandler.
	info   *grpc.UnaryServerInfo
	handle grpc.UnaryHandler
}

func (g *grpcAllocation) Allocate(ctx context.Context, in *allocation.AllocationRequest) (*allocation.AllocationResponse, error) {
	id, err := identify(g.tls, ctx)
	if err != nil {
		return nil, err
	}
	return g.svc.serve(ctx, id, request{sent: in, headerKey: headerKey(ctx)})
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
