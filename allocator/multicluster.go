package allocator

import (
	"context"
	"fmt"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/quartermaster-dev/quartermaster/allocator/forward"
	"github.com/quartermaster-dev/quartermaster/allocator/pb/allocation"
	"github.com/quartermaster-dev/quartermaster/allocator/wire"
	"github.com/quartermaster-dev/quartermaster/core"
)

// MultiCluster routes requests with multiClusterSetting.enabled across
// clusters by their GameServerAllocationPolicies; forward.Forwarder is the
// one implementation.
type MultiCluster interface {
	// Allocate serves the request, calling local for entries of this
	// cluster; seed orders clusters of equal priority.
	Allocate(ctx context.Context, in *allocation.AllocationRequest, seed uint64, local forward.Local) (*allocation.AllocationResponse, error)
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

// multiCluster is the service's side of a multi-cluster request: checks
// that hold whatever the policies say, then the forwarder, whose local
// entries come back through allocate with multi-cluster disabled (so
// limits, ownership and metrics apply to them as to any request here).
func (s *Service) multiCluster(ctx context.Context, identity, ns string, in *allocation.AllocationRequest, req core.Request) (_, fleet string, _ *allocation.AllocationResponse, retries int, _ error) {
	// A bad request fails here once, not once per cluster.
	if _, err := core.Normalize(&req); err != nil {
		return ns, "", nil, 0, status.Error(codes.InvalidArgument, err.Error())
	}
	// The namespace's policies are the namespace's: an identity that may
	// not allocate there may not use them to reach other clusters either.
	if err := namespaceAllowed(s.limits.Load(), identity, ns); err != nil {
		s.metrics.Rejections.WithLabelValues("namespace").Inc()
		return ns, "", nil, 0, err
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	local := func(ctx context.Context, r *allocation.AllocationRequest) (*allocation.AllocationResponse, error) {
		_, fl, resp, n, err := s.allocate(ctx, identity, r)
		retries += n
		if err == nil {
			fleet = fl
		}
		return resp, err
	}
	resp, err := s.multi.Allocate(ctx, in, s.seed(), local)
	if err != nil {
		return ns, "", nil, retries, err
	}
	if fleet == "" {
		fleet = resp.GetMetadata().GetLabels()[core.FleetLabel]
	}
	return ns, fleet, resp, retries, nil
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
