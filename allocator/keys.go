package allocator

import (
	"context"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	qmv1 "github.com/quartermaster-dev/quartermaster/allocator/pb/quartermaster/v1"
	"github.com/quartermaster-dev/quartermaster/core"
)

// The service's side of idempotency keys: a key's allocation and its
// release. The table of keys is idempotency.go's.

// releaseByKey gives back the allocation identity made with
// in.AllocationKey in in.Namespace. The key is released from then on,
// also when no allocation with it is found: a request with it that
// arrives late (a forwarded one the forwarder gave up on, say) is refused
// rather than allocated.
func (s *Service) releaseByKey(ctx context.Context, identity string, in *qmv1.ReleaseRequest) (*qmv1.ReleaseResponse, error) {
	key := in.GetAllocationKey()
	if in.GetGameServerName() != "" {
		return nil, status.Errorf(codes.InvalidArgument,
			"gameServerName %q and allocationKey %s both given: a Release names one allocation, by its server or by the idempotency key it was made with",
			in.GetGameServerName(), quoteKey(key))
	}
	if err := checkKey(key); err != nil {
		return nil, err
	}
	ns := in.GetNamespace()
	if ns == "" {
		ns = core.DefaultNamespace
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	if resp, elsewhere, err := s.releaseElsewhere(ctx, identity, in); elsewhere {
		return resp, err
	}
	scope := KeyScope(identity, key)
	notHeld := status.Errorf(codes.NotFound, "you hold no allocation made with idempotency key %s in namespace %q", quoteKey(key), ns)
	var gs *core.GameServer
	if e := s.keys.find(scope, s.now()); e != nil {
		// An allocation with the key under way is released once made.
		select {
		case <-e.done:
		case <-ctx.Done():
			return nil, contextStatus(ctx.Err())
		}
		switch v := s.keys.view(e); {
		case v.state == keyReleased:
			return nil, status.Errorf(codes.NotFound, "the allocation made with idempotency key %s was released already", quoteKey(key))
		case v.state == keyAllocated && v.resp != nil:
			// Forwarded: the cluster that answered holds it.
			resp, err := s.releaseElsewhereOrNot(ctx, identity, &qmv1.ReleaseRequest{
				Namespace: ns, GameServerName: v.resp.GetGameServerName(), Source: v.resp.GetSource(),
			})
			if err == nil || status.Code(err) == codes.NotFound {
				s.keys.released(scope, s.now())
			}
			return resp, err
		case v.state == keyAllocated:
			gs = s.keyServer(identity, key, v.server)
		}
	}
	if gs == nil {
		gs = s.findKeyed(identity, key, ns)
	}
	if gs == nil {
		s.keys.released(scope, s.now())
		return nil, notHeld
	}
	if gs.Namespace != ns {
		return nil, notHeld
	}
	resp, err := s.releaseServer(ctx, gs, notHeld)
	if err == nil {
		s.keys.released(scope, s.now())
	}
	return resp, err
}

// releaseElsewhereOrNot releases a server named by in at the allocator in
// its source (another cluster's, or this one).
func (s *Service) releaseElsewhereOrNot(ctx context.Context, identity string, in *qmv1.ReleaseRequest) (*qmv1.ReleaseResponse, error) {
	if resp, elsewhere, err := s.releaseElsewhere(ctx, identity, in); elsewhere {
		return resp, err
	}
	return s.release(ctx, identity, in)
}

// keyServer is server if it still holds identity's allocation made with
// key: Allocated, owned by identity and carrying key. A released server
// is shut down, never Allocated again, so this is that allocation (or a
// re-allocation of it by its owner under the same key).
func (s *Service) keyServer(identity, key string, server core.Key) *core.GameServer {
	gs, ok := s.backend.Get(server)
	if !ok || !holdsKey(gs, identity, key) {
		return nil
	}
	return gs
}

// findKeyed looks for identity's allocation made with key among the
// servers identity holds, preferring one in namespace ns: the key is no
// longer (or never was) in this process's table.
func (s *Service) findKeyed(identity, key, ns string) *core.GameServer {
	var found *core.GameServer
	for _, gs := range s.backend.AllocatedTo(identity) {
		if holdsKey(gs, identity, key) && (found == nil || gs.Namespace == ns) {
			found = gs
		}
	}
	return found
}

func holdsKey(gs *core.GameServer, identity, key string) bool {
	return gs.State == core.StateAllocated && gs.Annotations[OwnerAnnotation] == identity && gs.Annotations[AllocationKeyAnnotation] == key
}
