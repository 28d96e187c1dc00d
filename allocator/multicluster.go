package allocator

import (
	"context"
	"fmt"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/quartermaster-dev/quartermaster/allocator/forward"
	"github.com/quartermaster-dev/quartermaster/allocator/pb/allocation"
	qmv1 "github.com/quartermaster-dev/quartermaster/allocator/pb/quartermaster/v1"
	"github.com/quartermaster-dev/quartermaster/allocator/wire"
)

// MultiCluster routes requests with multiClusterSetting.enabled across
// clusters by their GameServerAllocationPolicies; forward.Forwarder is the
// one implementation.
type MultiCluster interface {
	// Forward serves a request, as sent and as normalized (forward.Call),
	// calling local for entries of this cluster.
	Forward(ctx context.Context, c forward.Call, local forward.Local) (*allocation.AllocationResponse, error)
	// Release gives back, for identity, a server a request was forwarded
	// for: at the remote allocator in.Source names.
	Release(ctx context.Context, identity string, in *qmv1.ReleaseRequest) (*qmv1.ReleaseResponse, error)
	// Crossed refuses a call that already passed through this allocator
	// (a forwarding loop), whether or not it asks for multi-cluster.
	Crossed(ctx context.Context) error
	// ClusterOf names the cluster of a remote endpoint that answered (a
	// response's source), for the allocation metrics; empty when it
	// knows none.
	ClusterOf(endpoint string) string
}

// source is the allocation metrics' source label of a response: local
// for no response (a failure), or one this allocator made, else the name
// of the cluster whose allocator made it.
func (s *Service) source(resp *allocation.AllocationResponse) string {
	src := resp.GetSource()
	if src == "" || src == wire.SourceLocal || s.multi == nil {
		return wire.SourceLocal
	}
	if c := s.multi.ClusterOf(src); c != "" {
		return c
	}
	return OtherLabel
}

// namespaceAllowed reports, as PermissionDenied, an identity the limits
// keep out of namespace.
func namespaceAllowed(l *limiter, identity, ns string) error {
	if l == nil {
		return nil
	}
	h := l.holderFor(identity)
	if h == nil {
		return status.Errorf(codes.PermissionDenied, "identity %q may not allocate: it is not listed in the allocator's limits and there is no default", identity)
	}
	if !h.anyNS && !h.ns[ns] {
		return status.Error(codes.PermissionDenied, fmt.Sprintf("identity %q may not allocate in namespace %q (allowed: %s)", identity, ns, strings.Join(h.limits.Namespaces, ", ")))
	}
	return nil
}

// releaseElsewhere serves a Release whose source names another cluster's
// allocator (a server a multi-cluster request was forwarded for): the
// forwarder passes it on there. ok is false for a Release of a server of
// this allocator's own (no source, or local).
func (s *Service) releaseElsewhere(ctx context.Context, identity string, in *qmv1.ReleaseRequest) (_ *qmv1.ReleaseResponse, ok bool, _ error) {
	src := in.GetSource()
	if src == "" || src == wire.SourceLocal {
		return nil, false, nil
	}
	if s.multi == nil {
		return nil, true, status.Errorf(codes.InvalidArgument,
			"source %q names another allocator, but this one forwards to none (it has no multi-cluster policies): release the server at the allocator that made it, or leave source empty", src)
	}
	resp, err := s.multi.Release(ctx, identity, in)
	return resp, true, err
}
