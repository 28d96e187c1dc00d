package allocator

import (
	"context"
	"errors"
	"log/slog"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/quartermaster-dev/quartermaster/allocator/forward"
	"github.com/quartermaster-dev/quartermaster/allocator/pb/allocation"
	"github.com/quartermaster-dev/quartermaster/allocator/wire"
	"github.com/quartermaster-dev/quartermaster/core"
)

// The allocation request pipeline, in the order a request goes through it:
//
//  1. decode: the front end turns bytes into a request (the gRPC codec,
//     codec.go, or the REST handler, rest.go); the gRPC front end also
//     finds the prepared request of bytes it has seen before (prepared.go).
//     After decoding, a request has one form (see request).
//  2. identify: the front end names the caller from its certificate, and
//     reads the idempotency key's header (AllocationKeyHeader), if any.
//  3. normalize, once: the request in the core's form for this caller
//     (its owner annotation, the re-allocation restriction, its
//     idempotency key: keyIntake) and checked.
//  4. a request with an idempotency key is allocated once per key and
//     caller (allocateKeyed, keys.go): a key seen before is answered with
//     its allocation as it stands, and goes no further.
//  5. admit: the caller's limits (namespace, rate, allocations held).
//  6. allocate here (allocateHere) or forward across clusters (forward,
//     whose local entries come back to allocateHere with the request
//     normalized in step 3). An allocation without a key that committed
//     after its caller went away is given back (giveBack).
//  7. encode: the answer is an AllocationResponse (wire.ResponseFromCore);
//     the front end writes it (the gRPC codec in protobuf, straight from
//     the server for an allocation made here; the REST handler in JSON).
//
// Every allocation is counted and logged (observe) and traced (trace) in
// serve, whichever front end it came through.

// request is an allocation request after decoding, in one of two forms:
// the message as sent, or, for a request the gRPC codec read that is not
// forwarded, the core's form it read the bytes into (the message would be
// garbage the moment it was converted). The pipeline reads either through
// namespace, coreForm and message. A prepared request's forms are shared
// by every call that sent the same bytes, and only read.
type request struct {
	sent *allocation.AllocationRequest
	// decoded says conv holds the request (sent may then be nil).
	decoded bool
	conv    core.Request
	prep    *preparedRequest
	// sel is conv.Selectors' storage for the usual one selector.
	sel [1]core.Selector
	// headerKey is the idempotency key the request's header carried
	// (AllocationKeyHeader); keyIntake puts it into the annotations.
	headerKey string
}

// namespace is the namespace as sent.
func (r *request) namespace() string {
	if r.decoded {
		return r.conv.Namespace
	}
	return r.sent.GetNamespace()
}

// coreForm is the request in the core's form, before normalization, and
// whether its maps are this call's own (its annotations may take the
// owner's); its selectors are always its own.
func (r *request) coreForm() (core.Request, bool, error) {
	if !r.decoded {
		req, err := wire.RequestToCore(r.sent)
		return req, true, err
	}
	req := r.conv
	if r.prep == nil {
		return req, true, nil
	}
	req.Selectors = append([]core.Selector(nil), req.Selectors...)
	req.Preferred = append([]core.Selector(nil), req.Preferred...)
	return req, false, nil
}

// message is the request as an AllocationRequest: as sent, or made back
// from the core's form (wire.RequestFromCore, its inverse).
func (r *request) message() *allocation.AllocationRequest {
	if r.sent != nil || !r.decoded {
		return r.sent
	}
	m, _ := wire.RequestFromCore(&r.conv)
	return m
}

// outcome is what serving a request came to, for the caller, the metrics
// and the trace.
type outcome struct {
	ns    string // the namespace asked for (defaulted)
	fleet string // the allocated server's fleet, or the one every selector names
	resp  *allocation.AllocationResponse
	// gs is the server allocated here; its response is made only when
	// asked for (response): the gRPC codec writes it straight from gs.
	gs      *core.GameServer
	retries int
	err     error // a gRPC status error
	// key is the request's idempotency key, "" for none; replayed says
	// the answer is the key's allocation made before.
	key      string
	replayed bool
}

// response is the answer as an AllocationResponse, made from the server
// allocated here if that is the answer.
func (o *outcome) response() *allocation.AllocationResponse {
	if o.resp == nil && o.gs != nil {
		o.resp = wire.ResponseFromCore(o.gs, wire.SourceLocal)
	}
	return o.resp
}

// localAnswer is the gRPC answer to an allocation made here: the codec
// writes the AllocationResponse describing gs (wire.AppendGameServerResponse)
// without building it.
type localAnswer struct {
	gs *core.GameServer
}

// Allocate serves one AllocationRequest for identity. Errors are gRPC
// status errors with the codes of docs/agones-compat.md.
func (s *Service) Allocate(ctx context.Context, identity string, in *allocation.AllocationRequest) (*allocation.AllocationResponse, error) {
	return s.serve(ctx, identity, request{sent: in})
}

// serve runs the pipeline from step 3 for a decoded request of an
// identified caller.
func (s *Service) serve(ctx context.Context, identity string, r request) (*allocation.AllocationResponse, error) {
	o := s.serveOutcome(ctx, identity, r)
	return o.response(), o.err
}

// serveAnswer is serve for the gRPC codec: a *localAnswer for an
// allocation made here, else the AllocationResponse.
func (s *Service) serveAnswer(ctx context.Context, identity string, r request) (any, error) {
	o := s.serveOutcome(ctx, identity, r)
	switch {
	case o.err != nil:
		return nil, o.err
	case o.gs != nil:
		return &localAnswer{gs: o.gs}, nil
	}
	return o.resp, nil
}

func (s *Service) serveOutcome(ctx context.Context, identity string, r request) outcome {
	start := time.Now()
	s.metrics.InFlight.Inc()
	defer s.metrics.InFlight.Dec()

	o := s.allocate(ctx, identity, r)
	s.observe(ctx, identity, start, o)
	s.trace(start, &r, o)
	return o
}

// allocate is steps 3 to 6.
func (s *Service) allocate(ctx context.Context, identity string, r request) outcome {
	o := outcome{ns: r.namespace()}
	if o.ns == "" {
		o.ns = core.DefaultNamespace
	}
	if err := ctx.Err(); err != nil {
		o.err = contextStatus(err)
		return o
	}
	if s.multi != nil {
		// A call that already passed through this allocator (a
		// forwarding loop) is refused, whatever it asks for.
		if o.err = s.multi.Crossed(ctx); o.err != nil {
			return o
		}
	}
	limits := s.limits.Load()
	req, key, fp, err := s.normalize(identity, o.ns, r, limits)
	if err != nil {
		o.err = err
		return o
	}
	if key != "" {
		return s.allocateKeyed(ctx, identity, r, req, key, fp, limits, o)
	}
	return s.dispatch(ctx, identity, r, req, limits, o)
}

// dispatch is steps 5 and 6: req allocated here, or forwarded.
func (s *Service) dispatch(ctx context.Context, identity string, r request, req *core.Request, limits *limiter, o outcome) outcome {
	if req.MultiCluster.Enabled {
		return s.forward(ctx, identity, r, req, limits, o)
	}
	return s.allocateHere(ctx, identity, r, req, limits, o)
}

// normalize is step 3: the request in the core's form for identity under
// limits, checked, with its idempotency key ("" for none) and, for a key,
// the request's KeyFingerprint. A prepared request keeps the result for
// the next call of the same caller under the same limits (one whose key
// came in a header is not the prepared request's bytes alone: it is
// neither kept nor taken from there).
func (s *Service) normalize(identity, ns string, r request, limits *limiter) (_ *core.Request, key, fp string, _ error) {
	prepared := r.prep != nil && r.headerKey == ""
	if prepared {
		if n := r.prep.normalized(identity, limits); n != nil {
			return n.req, n.key, n.fingerprint, nil
		}
	}
	req, own, err := r.coreForm()
	if err != nil {
		return nil, "", "", status.Error(codes.InvalidArgument, err.Error())
	}
	req.Namespace = ns
	if key, own, err = keyIntake(&req, r.headerKey, own); err != nil {
		return nil, "", "", err
	}
	// Re-allocating a live server (selector state Allocated) would make
	// the caller its owner: a non-admin may only re-allocate its own.
	if !limits.isAdmin(identity) {
		ownedOnly(&req, identity)
	}
	norm, err := s.owned(&req, identity, own)
	if err != nil {
		return nil, "", "", err
	}
	if key != "" {
		if fp, err = KeyFingerprint(norm); err != nil {
			return nil, "", "", status.Error(codes.InvalidArgument, err.Error())
		}
	}
	if prepared {
		r.prep.keep(identity, limits, norm, key, fp)
	}
	return norm, key, fp, nil
}

// owned normalizes req with identity's ownership on what it allocates: the
// owner annotation goes after the caller's own annotations, so that it
// cannot be forged. own says req's annotations are its own to add to.
func (s *Service) owned(req *core.Request, identity string, own bool) (*core.Request, error) {
	req.Metadata.Annotations = s.withOwner(req.Metadata.Annotations, identity, own)
	norm, err := core.Normalize(req)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	return norm, nil
}

// reallocationOnly is the request a caller at its limit of allocations
// may still make: only its selectors that re-allocate a server it holds
// (a counter or list action on its own session adds nothing to what it
// holds). ok is false when it has none.
func (s *Service) reallocationOnly(identity, ns string, r request) (_ *core.Request, ok bool) {
	req, own, err := r.coreForm()
	if err != nil || !keepReallocations(&req) {
		return nil, false
	}
	if _, own, err = keyIntake(&req, r.headerKey, own); err != nil {
		return nil, false
	}
	req.Namespace = ns
	req.MultiCluster.Enabled = false
	ownedOnly(&req, identity)
	norm, err := s.owned(&req, identity, own)
	return norm, err == nil
}

// allocateHere is steps 5 and 6 in this cluster: req is r normalized for
// the caller, in namespace o.ns.
func (s *Service) allocateHere(ctx context.Context, identity string, r request, req *core.Request, limits *limiter, o outcome) outcome {
	caller := ctx
	h, err := limits.admit(identity, o.ns, s.now(), s.backend)
	var atLimit *limitError
	if le := (*limitError)(nil); err != nil && errors.As(err, &le) && le.reason == "max_allocations" {
		if cut, ok := s.reallocationOnly(identity, o.ns, r); ok {
			atLimit, req, err = le, cut, nil
		}
	}
	if err != nil {
		o.err = s.refusal(err)
		return o
	}
	defer h.done()
	if fl, ok := selectorFleet(req); ok {
		o.fleet = fl
	}
	if !s.instant {
		var cancel context.CancelFunc
		ctx, cancel = s.bound(ctx)
		defer cancel()
	}
	a, err := s.backend.Allocate(ctx, req, s.now(), s.seed())
	if a != nil {
		o.retries = a.Retries
	}
	switch {
	case err != nil && atLimit != nil && errors.Is(err, core.ErrNoMatch):
		s.metrics.Rejections.WithLabelValues(atLimit.reason).Inc()
		o.err = status.Error(codes.ResourceExhausted, atLimit.msg)
	case err != nil:
		o.err = s.allocateStatus(err, req)
	case caller.Err() != nil && o.key == "":
		// The caller went away while the allocation committed: nobody
		// knows of it. With a key it stays, for the caller's retry.
		s.giveBack(caller, a.GameServer)
		o.err = contextStatus(caller.Err())
	default:
		o.fleet = a.GameServer.Labels[core.FleetLabel]
		o.gs = a.GameServer
		o.replayed = a.Replayed
	}
	return o
}

// giveBack releases gs, allocated for a caller that has gone, on a context
// of its own (the caller's has ended), and counts it.
func (s *Service) giveBack(caller context.Context, gs *core.GameServer) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(caller), giveBackTimeout)
	defer cancel()
	if _, err := s.backend.Release(ctx, gs.Key(), gs.LastAllocated()); err != nil {
		s.log.LogAttrs(ctx, slog.LevelWarn, "could not give back an allocation whose caller went away",
			slog.String("namespace", gs.Namespace),
			slog.String("gameServer", gs.Name),
			slog.String("reason", err.Error()))
		return
	}
	s.metrics.AbandonedGiven.Inc()
}

// giveBackTimeout bounds giveBack's Release.
const giveBackTimeout = 5 * time.Second

// refusal is the status of a request the limits refused.
func (s *Service) refusal(err error) error {
	var le *limitError
	if !errors.As(err, &le) {
		return status.Error(codes.Internal, err.Error())
	}
	s.metrics.Rejections.WithLabelValues(le.reason).Inc()
	if le.permission {
		return status.Error(codes.PermissionDenied, le.msg)
	}
	return status.Error(codes.ResourceExhausted, le.msg)
}

// forward is step 5 for a multi-cluster request: the forwarder tries the
// clusters its policies name, and serves an entry of this cluster through
// allocateHere with req (normalized once, for every entry) in the entry's
// namespace, so that limits, ownership and metrics apply to it as to any
// request here.
func (s *Service) forward(ctx context.Context, identity string, r request, req *core.Request, limits *limiter, o outcome) outcome {
	if s.multi == nil {
		// This allocator has no multi-cluster policies (no forwarder is
		// configured). Agones answers 500 here; the caller's request is
		// what cannot be served, so say so.
		o.err = status.Errorf(codes.InvalidArgument,
			"multiClusterSetting.enabled is true but no GameServerAllocationPolicy in namespace %q matches the policySelector: this allocator has no multi-cluster policies", o.ns)
		return o
	}
	// The namespace's policies are the namespace's: an identity that may
	// not allocate there may not use them to reach other clusters either.
	if err := namespaceAllowed(limits, identity, o.ns); err != nil {
		s.metrics.Rejections.WithLabelValues("namespace").Inc()
		o.err = err
		return o
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	// here is the answer of the local entry that allocated, if one did.
	var here outcome
	local := func(ctx context.Context, entry *allocation.AllocationRequest) (*allocation.AllocationResponse, error) {
		in := *req
		in.Namespace = entry.GetNamespace()
		in.MultiCluster.Enabled = false
		l := s.allocateHere(ctx, identity, r, &in, limits, outcome{ns: in.Namespace, key: o.key})
		o.retries += l.retries
		resp := l.response()
		if l.err == nil {
			o.fleet = l.fleet
			here = l
		}
		return resp, l.err
	}
	var memo *forward.Memo
	if r.prep != nil {
		memo = &r.prep.memo
	}
	// The forwarder reads the namespace, the policy selector and the key
	// (from its annotation or header alike) from req; it sends the key
	// after the request's bytes, so that a Memo's encoding serves any key.
	resp, err := s.multi.Forward(ctx, forward.Call{Identity: identity, Sent: r.sent, Decoded: req, Memo: memo, Seed: s.seed()}, local)
	if err != nil {
		o.fleet, o.err = "", err
		return o
	}
	if o.fleet == "" {
		o.fleet = resp.GetMetadata().GetLabels()[core.FleetLabel]
	}
	o.resp = resp
	if here.gs != nil && here.resp == resp {
		o.gs, o.replayed = here.gs, here.replayed
	}
	return o
}

// refuse records a request that failed before it could be decoded (a REST
// body that is not an AllocationRequest) and returns err.
func (s *Service) refuse(ctx context.Context, identity string, err error) error {
	s.observe(ctx, identity, time.Now(), outcome{ns: core.DefaultNamespace, err: err})
	return err
}

// observe counts and, when it failed, logs one served request.
func (s *Service) observe(ctx context.Context, identity string, start time.Time, o outcome) {
	code := codes.OK
	if o.err != nil {
		code = status.Code(o.err)
	}
	ser := s.metrics.series(o.ns, o.fleet, s.source(o.resp), code)
	ser.latency.Observe(time.Since(start).Seconds())
	ser.outcome.Inc()
	if o.retries > 0 {
		ser.retries.Add(float64(o.retries))
	}
	if o.err != nil {
		s.log.LogAttrs(ctx, slog.LevelWarn, "allocation failed",
			slog.String("identity", identity),
			slog.String("namespace", o.ns),
			slog.String("code", code.String()),
			slog.String("reason", status.Convert(o.err).Message()),
			slog.Duration("elapsed", time.Since(start)))
	}
}

// withOwner returns annotations plus the owner's. The common request sets
// no annotations of its own; it gets a map per identity made once (never
// modified: the core copies it into, or shares it with, the server it
// allocates). own says annotations is the request's alone (decoded or
// converted for this call, kept nowhere else): the owner then goes into
// it, instead of into a copy.
func (s *Service) withOwner(annotations map[string]string, identity string, own bool) map[string]string {
	if len(annotations) == 0 {
		if m, ok := s.ownerMaps.Load(identity); ok {
			return m.(map[string]string)
		}
		m := map[string]string{OwnerAnnotation: identity}
		if s.ownerMapsN.Add(1) <= maxOwnerMaps {
			s.ownerMaps.Store(identity, m)
		}
		return m
	}
	if own {
		annotations[OwnerAnnotation] = identity
		return annotations
	}
	ann := make(map[string]string, len(annotations)+1)
	for k, v := range annotations {
		ann[k] = v
	}
	ann[OwnerAnnotation] = identity
	return ann
}

// maxOwnerMaps bounds the cached owner maps (one per identity seen).
const maxOwnerMaps = 10000

// selectorFleet is the fleet a request names when every selector pins one
// (for the metrics of requests that allocate nothing).
func selectorFleet(r *core.Request) (string, bool) {
	fleet := ""
	for i, sel := range r.Selectors {
		f, ok := sel.MatchLabels[core.FleetLabel]
		if !ok || (i > 0 && f != fleet) {
			return "", false
		}
		fleet = f
	}
	return fleet, fleet != ""
}

// allocateStatus is the status of the backend's refusal of r.
func (s *Service) allocateStatus(err error, r *core.Request) error {
	var inv *core.InvalidRequestError
	switch {
	case errors.Is(err, core.ErrNoMatch):
		return status.Errorf(s.unallocated, "no game server available: none in namespace %q that is not already taken matches any of the request's %d selector(s)",
			r.Namespace, len(r.Selectors))
	case errors.Is(err, ErrContention):
		return status.Error(codes.Aborted, err.Error())
	case errors.Is(err, ErrStoreUnavailable) && !errors.Is(err, context.DeadlineExceeded) && !errors.Is(err, context.Canceled):
		return status.Error(codes.Unavailable, err.Error())
	case errors.Is(err, core.ErrScanBudget):
		return status.Errorf(codes.ResourceExhausted, "%v (%d selector(s) in namespace %q): narrow them with labels the servers carry, or use fewer",
			err, len(r.Selectors), r.Namespace)
	case errors.As(err, &inv):
		return status.Error(codes.InvalidArgument, err.Error())
	case errors.As(err, new(*KeyConflictError)):
		s.metrics.KeyConflicts.Inc()
		return status.Error(codes.InvalidArgument, err.Error())
	case errors.Is(err, ErrKeyReleased):
		s.metrics.KeyReleased.Inc()
		key, _ := KeyOf(r)
		return keyReleasedError(key)
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return contextStatus(err)
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	return status.Error(codes.Internal, err.Error())
}

// keepReallocations keeps only req's selectors of state Allocated (in their
// order, the deprecated preferred and required ones included) and reports
// whether any remain.
func keepReallocations(req *core.Request) bool {
	var keep []core.Selector
	all := req.Selectors
	if len(all) == 0 {
		all = append(append(all, req.Preferred...), core.Selector{})
		if req.Required != nil {
			all[len(all)-1] = *req.Required
		}
	}
	for _, s := range all {
		if s.State == core.StateAllocated {
			keep = append(keep, s)
		}
	}
	req.Selectors, req.Preferred, req.Required = keep, nil, nil
	return len(keep) > 0
}

// ownedOnly restricts every Allocated-state selector of req to servers the
// identity owns, so that one caller cannot take over (and then release)
// another's live allocation.
func ownedOnly(req *core.Request, identity string) {
	restrict := func(s *core.Selector) {
		if s.State == core.StateAllocated {
			s.MatchAnnotations = map[string]string{OwnerAnnotation: identity}
		}
	}
	for i := range req.Selectors {
		restrict(&req.Selectors[i])
	}
	for i := range req.Preferred {
		restrict(&req.Preferred[i])
	}
	if req.Required != nil {
		r := *req.Required
		restrict(&r)
		req.Required = &r
	}
}
