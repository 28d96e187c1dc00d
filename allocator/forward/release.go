package forward

import (
	"context"
	"fmt"
	"strings"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/quartermaster-dev/quartermaster/allocator/pb/allocation"
	qmv1 "github.com/quartermaster-dev/quartermaster/allocator/pb/quartermaster/v1"
	"github.com/quartermaster-dev/quartermaster/core"
)

// Releasing a forwarded allocation. The remote allocator made it for this
// allocator's connection identity (the Secret's certificate), which is
// the same for every caller of this allocator: the remote cannot tell its
// callers apart by owner. So a forwarded request carries, as an
// annotation the remote puts on the game server, the identity it was
// forwarded for, and a forwarded Release names, in gRPC metadata, the
// identity it releases for; the remote releases only a server whose
// annotation matches (allocator.Service checks it). The metadata only
// narrows what the connection identity may release anyway, so the remote
// need not trust it.
const (
	// ForwardedForAnnotation is set on a forwarded request's metadata
	// (and so on the game server the remote allocates) to the identity of
	// the caller the request was forwarded for.
	ForwardedForAnnotation = "quartermaster.dev/forwarded-for"
	// OnBehalfOfKey is the gRPC metadata key of a forwarded Release: the
	// identity whose allocation it gives back.
	OnBehalfOfKey = "quartermaster-on-behalf-of"
)

// forwardedFor sets the ForwardedForAnnotation of req, ForwardRequest's,
// to identity. Its MetaPatch messages are its own, but their maps are the
// caller's, so annotations are copied; a request without annotations (the
// usual one) gets a map per identity made once and only ever read.
func (f *Forwarder) forwardedFor(req *allocation.AllocationRequest, identity string) {
	if identity == "" {
		return
	}
	old := req.GetMetadata().GetAnnotations()
	var ann map[string]string
	if len(old) == 0 {
		if m, ok := f.forwardedForMaps.Load(identity); ok {
			ann = m.(map[string]string)
		} else {
			ann = map[string]string{ForwardedForAnnotation: identity}
			if f.forwardedForMapsN.Add(1) <= maxForwardedForMaps {
				f.forwardedForMaps.Store(identity, ann)
			}
		}
	} else {
		ann = make(map[string]string, len(old)+1)
		for k, v := range old {
			ann[k] = v
		}
		ann[ForwardedForAnnotation] = identity
	}
	req.Metadata.Annotations = ann
	req.MetaPatch.Annotations = ann //nolint:staticcheck // SA1019: the double write Agones does.
}

// maxForwardedForMaps bounds the cached annotation maps (one per caller
// identity seen).
const maxForwardedForMaps = 10000

// ReleasedFor reports whether a Release may give back gs: true unless
// the call is a forwarded Release (OnBehalfOfKey in ctx's metadata) for
// an identity gs was not allocated for.
func ReleasedFor(ctx context.Context, gs *core.GameServer) bool {
	v := metadata.ValueFromIncomingContext(ctx, OnBehalfOfKey)
	if len(v) == 0 {
		return true
	}
	return v[0] != "" && gs.Annotations[ForwardedForAnnotation] == v[0]
}

// Release gives back, for identity, a game server a multi-cluster request
// was forwarded for: in.Source is the endpoint that allocated it (the
// AllocationResponse's source), and in names the server, or the
// idempotency key the caller made the request with. The Release goes to that endpoint with the
// credentials of the namespace's policies naming it (all of them, whatever
// their labels: the allocation may have been made under a selector since
// changed), into each such policy's namespace until one holds the server.
// Errors are gRPC status errors.
func (f *Forwarder) Release(ctx context.Context, identity string, in *qmv1.ReleaseRequest) (*qmv1.ReleaseResponse, error) {
	if err := f.Crossed(ctx); err != nil {
		return nil, err
	}
	if r, ok := f.src.(ReadySource); ok {
		if err := r.Ready(); err != nil {
			return nil, status.Errorf(codes.Unavailable, "multi-cluster policies are not available yet: %v", err)
		}
	}
	ns := in.GetNamespace()
	if ns == "" {
		ns = core.DefaultNamespace
	}
	name, key := in.GetGameServerName(), in.GetAllocationKey()
	switch {
	case name == "" && key == "":
		return nil, status.Error(codes.InvalidArgument, "gameServerName or allocationKey: one must be given")
	case name != "" && key != "":
		return nil, status.Errorf(codes.InvalidArgument, "gameServerName %q and allocationKey %q both given: a Release names one allocation", name, key)
	}
	ep, err := Endpoint(in.GetSource())
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "source: %v", err)
	}
	var pols []core.Policy
	for _, p := range f.src.Policies(ns) {
		for _, e := range p.Connection.Endpoints {
			if n, err := Endpoint(e); err == nil && n == ep {
				pols = append(pols, p)
				break
			}
		}
	}
	if len(pols) == 0 {
		return nil, status.Errorf(codes.FailedPrecondition,
			"source %q is not an endpoint of any GameServerAllocationPolicy in namespace %q: this allocator releases only at the allocators its policies name", in.GetSource(), ns)
	}
	hops := strings.Join(append(hopsOf(ctx), f.self), ",")
	octx := metadata.AppendToOutgoingContext(ctx, HopsKey, hops, OnBehalfOfKey, identity)

	notFound := status.Errorf(codes.NotFound, "you hold no allocation of game server %s/%s at %s", ns, name, ep)
	if key != "" {
		// The remote knows the key as this allocator forwarded it.
		notFound = status.Errorf(codes.NotFound, "you hold no allocation made with idempotency key %q in namespace %s at %s", key, ns, ep)
		key = derivedKey(identity, key)
	}
	var lastErr error
	tried := map[string]bool{}
	for _, p := range pols {
		target := ns
		if p.Connection.Namespace != "" {
			target = p.Connection.Namespace
		}
		sec, ok := f.src.Secret(ns, p.Connection.SecretName)
		if !ok {
			lastErr = status.Errorf(codes.FailedPrecondition, "policy %s/%s: Secret %s/%s (spec.connectionInfo.secretName) not found",
				ns, p.Name, ns, p.Connection.SecretName)
			continue
		}
		k := sec.Name + "\x00" + target
		if tried[k] {
			continue
		}
		tried[k] = true
		br := f.breaker(ep)
		if !br.allow() {
			return nil, status.Errorf(codes.Unavailable, "%s: breaker open (recent transport failures): the allocator there is not answering; try again later", ep)
		}
		c, err := f.clients.get(ep, sec, p.Connection.ServerCA, false)
		if err != nil {
			lastErr = status.Errorf(codes.FailedPrecondition, "policy %s/%s: %v", ns, p.Name, err)
			continue
		}
		tctx, cancel := context.WithTimeout(octx, f.tryTimeout)
		resp, err := qmv1.NewAllocationAdminClient(c.cc).Release(tctx, &qmv1.ReleaseRequest{Namespace: target, GameServerName: name, AllocationKey: key})
		cancel()
		f.clients.put(c)
		st := status.Convert(err)
		switch st.Code() {
		case codes.OK:
			br.success()
			if a := resp.GetAllocation(); a != nil {
				// The remote's owner is this allocator's connection
				// identity; the caller's is what it allocated under.
				a.Owner = identity
			}
			return resp, nil
		case codes.NotFound:
			br.success()
			lastErr = notFound
			continue
		case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled:
			if ctx.Err() != nil {
				return nil, status.Errorf(codes.DeadlineExceeded, "%s: the caller's deadline passed during the forwarded Release", ep)
			}
			br.failure(f.clock.Now(), probeCreds{sec: sec, serverCA: p.Connection.ServerCA})
			return nil, status.Errorf(codes.Unavailable, "forwarded Release to %s: %s", ep, st.Message())
		}
		br.success()
		return nil, status.Error(st.Code(), fmt.Sprintf("forwarded Release to %s: %s", ep, st.Message()))
	}
	return nil, lastErr
}
