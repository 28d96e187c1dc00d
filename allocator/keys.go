package allocator

import (
	"context"
	"errors"
	"maps"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	qmv1 "github.com/quartermaster-dev/quartermaster/allocator/pb/quartermaster/v1"
	"github.com/quartermaster-dev/quartermaster/core"
)

// The service's side of idempotency keys: where a request's key is read,
// a key's allocation, and its release. The table of keys is
// idempotency.go's.

// keyIntake reads req's idempotency key, the one place it is read: the
// annotation in its metadata, or header (the AllocationKeyHeader's value,
// "" for none), which it puts into the annotations so that the key lands
// on the allocated server either way. Both, with different keys, are
// refused: a client that sets two keys has a bug, and neither guess would
// be safe. It returns the key ("" for none) and whether req's annotations
// are its own (own says whether they were).
func keyIntake(req *core.Request, header string, own bool) (key string, _ bool, _ error) {
	ann := req.Metadata.Annotations
	if len(ann) > 0 {
		key = ann[AllocationKeyAnnotation]
	}
	if header != "" {
		switch {
		case key == "":
			m := make(map[string]string, len(ann)+2) // and the owner's
			maps.Copy(m, ann)
			m[AllocationKeyAnnotation] = header
			req.Metadata.Annotations, own, key = m, true, header
		case key != header:
			return "", own, status.Errorf(codes.InvalidArgument,
				"two idempotency keys: annotation %s is %s, header %s is %s: send the key one way, or the same key both ways",
				AllocationKeyAnnotation, quoteKey(key), AllocationKeyHeader, quoteKey(header))
		}
	}
	if key == "" {
		return "", own, nil
	}
	return key, own, checkKey(key)
}

// allocateKeyed is step 4: req (of fingerprint fp) carries key, and is
// allocated at most once per key and caller while the key is remembered.
// The first request with the key allocates (steps 5 and 6); one arriving
// meanwhile waits for it and gets its answer; one arriving later gets the
// allocation as it stands now, or a refusal when it was released. A key
// first used with another request is refused.
func (s *Service) allocateKeyed(ctx context.Context, identity string, r request, req *core.Request, key, fp string, limits *limiter, o outcome) outcome {
	s.metrics.Keys.Inc()
	o.key = key
	scope := KeyScope(identity, key)
	for {
		e, leader := s.keys.claim(scope, fp, s.now())
		if leader {
			return s.allocateFirst(ctx, identity, r, req, limits, o, e)
		}
		if e.fingerprint != "" && e.fingerprint != fp {
			s.metrics.KeyConflicts.Inc()
			o.err = keyConflictError(key)
			return o
		}
		s.keys.waits.Add(1)
		select {
		case <-e.done:
		case <-ctx.Done():
			o.err = contextStatus(ctx.Err())
			return o
		}
		switch v := s.keys.view(e); {
		case v.state == keyReleased:
			s.metrics.KeyReleased.Inc()
			o.err = keyReleasedError(key)
			return o
		case v.state == keyAllocated:
			return s.replay(ctx, identity, key, scope, v, o)
		case !v.retry:
			// The first request's failure is this one's answer too.
			o.err = v.err
			return o
		}
		// The first request's caller went away before it was
		// allocated: this one tries itself.
	}
}

// allocateFirst allocates the first request with a key, whose entry e it
// settles: with the allocation, or as failed (the entry goes, and a retry
// tries afresh).
func (s *Service) allocateFirst(ctx context.Context, identity string, r request, req *core.Request, limits *limiter, o outcome, e *keyEntry) outcome {
	settled := false
	defer func() {
		if !settled {
			// A panic on the way: waiters try themselves.
			s.keys.failed(e, status.Error(codes.Internal, "internal error"), true)
		}
	}()
	o = s.dispatch(ctx, identity, r, req, limits, o)
	switch {
	case o.err != nil:
		s.keys.failed(e, o.err, ctx.Err() != nil)
	case o.gs != nil:
		s.keys.allocated(e, o.gs.Key(), nil, s.now())
	default:
		s.keys.allocated(e, core.Key{}, o.resp, s.now())
	}
	settled = true
	if o.replayed {
		// The backend knew the key (another replica's allocation).
		s.metrics.KeyReplays.Inc()
	}
	return o
}

// replay answers a request whose key's allocation v was made before: the
// server as it is now, if the allocation stands; a forwarded request's
// answer as the other cluster gave it.
func (s *Service) replay(ctx context.Context, identity, key, scope string, v keyView, o outcome) outcome {
	if v.resp != nil {
		s.metrics.KeyReplays.Inc()
		o.resp, o.replayed = v.resp, true
		o.fleet = v.resp.GetMetadata().GetLabels()[core.FleetLabel]
		return o
	}
	gs := s.keyServer(ctx, identity, key, v.server)
	if gs == nil {
		s.keys.released(scope, s.now())
		s.metrics.KeyReleased.Inc()
		o.err = keyReleasedError(key)
		return o
	}
	s.metrics.KeyReplays.Inc()
	o.gs, o.fleet, o.replayed = gs, gs.Labels[core.FleetLabel], true
	return o
}

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
			gs = s.keyServer(ctx, identity, key, v.server)
		}
	}
	if gs == nil {
		gs = s.findKeyed(identity, key, ns)
	}
	if kr, ok := s.backend.(KeyReader); ok && gs == nil {
		// Made on another replica, and not yet in this one's cache.
		var err error
		if gs, err = kr.ReadKeyed(ctx, identity, key); err != nil {
			return nil, s.allocateStatus(err, &core.Request{Namespace: ns})
		}
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
// re-allocation of it by its owner under the same key). A backend whose
// cache may lag its store (StoreReader) is read through: another replica
// may have released the server a moment ago, and a replay of a released
// server would send the caller to one that is shutting down. Only
// repeated keys pay for that read; when the store cannot be reached the
// cache answers.
func (s *Service) keyServer(ctx context.Context, identity, key string, server core.Key) *core.GameServer {
	gs, ok := s.backend.Get(server)
	if sr, isReader := s.backend.(StoreReader); isReader {
		switch fresh, err := sr.ReadThrough(ctx, server); {
		case err == nil:
			gs, ok = fresh, true
		case errors.Is(err, ErrNotFound):
			return nil
		}
	}
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
