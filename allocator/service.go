package allocator

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/quartermaster-dev/quartermaster/allocator/forward"
	"github.com/quartermaster-dev/quartermaster/allocator/mtls"
	qmv1 "github.com/quartermaster-dev/quartermaster/allocator/pb/quartermaster/v1"
	"github.com/quartermaster-dev/quartermaster/allocator/wire"
	"github.com/quartermaster-dev/quartermaster/core"
)

// OwnerAnnotation records on an allocated game server which identity holds
// it. Ownership lives on the server itself, so every replica of the
// allocator, and a restarted one, agrees on it. The service sets it after
// the caller's own metadata, so a caller cannot claim to be someone else.
const OwnerAnnotation = "quartermaster.dev/owner"

// Defaults for Options.
const (
	DefaultTimeout         = 30 * time.Second
	DefaultMaxRequestBytes = 256 << 10
	DefaultMaxRetries      = 5
)

// Options configure a Service.
type Options struct {
	Backend Backend
	// Limits, nil for none: everyone may allocate anywhere, without
	// limits, and nobody is an admin.
	Limits *LimitsConfig
	Logger *slog.Logger
	// Metrics to record into; a fresh unregistered set when nil.
	Metrics *Metrics
	// Now is the clock that stamps allocations; time.Now when nil.
	Now func() time.Time
	// Seed starts the per-request seeds (see Service.seed).
	Seed uint64
	// UnallocatedCode answers "nothing matches" (Agones' UnAllocated);
	// ResourceExhausted when zero, as Agones does by default.
	UnallocatedCode codes.Code
	// Timeout bounds a request whose caller set no deadline.
	Timeout time.Duration
	// MultiCluster serves requests with multiClusterSetting.enabled
	// (forward.Forwarder); they are refused when nil.
	MultiCluster MultiCluster
	// Templates the AllocationAdmin API's Create may use; nil for none.
	Templates *TemplatesConfig
	// KeyWindow is how long an idempotency key is remembered after its
	// allocation or release (DefaultKeyWindow when zero); MaxKeys bounds
	// the keys remembered (DefaultMaxKeys when zero), the oldest
	// forgotten first.
	KeyWindow time.Duration
	MaxKeys   int
}

// Service is the allocator's request handling, shared by the gRPC and REST
// front ends so that both answer the same request the same way.
type Service struct {
	backend     Backend
	limits      atomic.Pointer[limiter] // nil: no limits
	log         *slog.Logger
	metrics     *Metrics
	now         func() time.Time
	seedBase    uint64
	seq         atomic.Uint64
	unallocated codes.Code
	timeout     time.Duration
	multi       MultiCluster
	// instant: the backend never waits (InstantBackend), so a request
	// without a deadline needs no timer armed to bound it.
	instant bool
	// tracer records answered requests (SetTracer); nil: none.
	tracer atomic.Pointer[Tracer]

	templates atomic.Pointer[TemplatesConfig] // create.go; nil: none

	keys *keyTable // idempotency.go

	ownerMaps  sync.Map // identity → map[string]string{OwnerAnnotation: identity}
	ownerMapsN atomic.Int64
}

// InstantBackend is implemented by backends whose Allocate never blocks
// (the memory backend). For them the service does not arm its default
// deadline, a timer per request that would bound nothing.
type InstantBackend interface {
	Instant() bool
}

// NewService builds a Service.
func NewService(o Options) (*Service, error) {
	if o.Backend == nil {
		return nil, errors.New("allocator: no backend")
	}
	s := &Service{
		backend:     o.Backend,
		log:         o.Logger,
		metrics:     o.Metrics,
		now:         o.Now,
		seedBase:    o.Seed,
		unallocated: o.UnallocatedCode,
		timeout:     o.Timeout,
		multi:       o.MultiCluster,
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if ib, ok := o.Backend.(InstantBackend); ok {
		s.instant = ib.Instant()
	}
	if s.metrics == nil {
		s.metrics = NewMetrics()
	}
	if s.now == nil {
		s.now = time.Now
	}
	if s.unallocated == codes.OK {
		s.unallocated = codes.ResourceExhausted
	}
	if s.timeout <= 0 {
		s.timeout = DefaultTimeout
	}
	s.limits.Store(newLimiter(o.Limits))
	s.templates.Store(o.Templates)
	s.keys = newKeyTable(o.KeyWindow, o.MaxKeys, s.metrics.KeyEvictions.Inc)
	return s, nil
}

// Metrics returns the metrics the service records into.
func (s *Service) Metrics() *Metrics { return s.metrics }

// SetLimits replaces the identity limits (nil: none) for the requests that
// start from now on; requests under way finish under the old ones. Request
// rates start afresh, and allocations held are counted from the backend
// either way.
func (s *Service) SetLimits(cfg *LimitsConfig) { s.limits.Store(newLimiter(cfg)) }

// Backend returns the service's backend.
func (s *Service) Backend() Backend { return s.backend }

// seed derives request n's seed from the service's start value (splitmix64
// of their sum), so that a run's decisions can be replayed from the start
// value and the order of requests.
func (s *Service) seed() uint64 {
	z := s.seedBase + s.seq.Add(1)*0x9e3779b97f4a7c15
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// bound gives ctx the service's default deadline when the caller set none:
// work must always end.
func (s *Service) bound(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return ctx, func() {}
	}
	return context.WithTimeout(ctx, s.timeout)
}

func contextStatus(err error) error {
	if errors.Is(err, context.Canceled) {
		return status.Error(codes.Canceled, "the caller cancelled the request")
	}
	return status.Error(codes.DeadlineExceeded, "the caller's deadline passed before the allocation was made")
}

// List returns identity's allocations (another's, or everyone's, for an
// admin), oldest first.
func (s *Service) List(ctx context.Context, identity string, in *qmv1.ListRequest) (*qmv1.ListResponse, error) {
	resp, err := s.list(ctx, identity, in)
	s.metrics.AdminCalls.WithLabelValues("List", status.Code(err).String()).Inc()
	return resp, err
}

func (s *Service) list(ctx context.Context, identity string, in *qmv1.ListRequest) (*qmv1.ListResponse, error) {
	if err := ctx.Err(); err != nil {
		return nil, contextStatus(err)
	}
	owner, all := identity, false
	if in.GetOwner() != "" || in.GetAllOwners() {
		if !s.limits.Load().isAdmin(identity) {
			return nil, status.Errorf(codes.PermissionDenied, "identity %q is not an admin: it may list only its own allocations (leave owner and allOwners unset)", identity)
		}
		owner, all = in.GetOwner(), in.GetAllOwners()
	}
	type rec struct {
		gs    *core.GameServer
		owner string
		at    time.Time
	}
	var recs []rec
	servers := s.backend.AllocatedTo(owner) // only the owner's: what a caller's List costs
	if all {
		servers = s.backend.Allocated()
	}
	for _, gs := range servers {
		o := gs.Annotations[OwnerAnnotation]
		if (!all && o != owner) || (in.GetNamespace() != "" && gs.Namespace != in.GetNamespace()) {
			continue
		}
		at, _ := wire.AllocatedAt(gs)
		recs = append(recs, rec{gs, o, at})
	}
	sort.Slice(recs, func(i, j int) bool {
		if !recs[i].at.Equal(recs[j].at) {
			return recs[i].at.Before(recs[j].at)
		}
		if recs[i].gs.Namespace != recs[j].gs.Namespace {
			return recs[i].gs.Namespace < recs[j].gs.Namespace
		}
		return recs[i].gs.Name < recs[j].gs.Name
	})
	out := &qmv1.ListResponse{Allocations: make([]*qmv1.Allocation, 0, len(recs))}
	for _, r := range recs {
		out.Allocations = append(out.Allocations, wire.AllocationRecord(r.gs, r.owner, r.at))
	}
	return out, nil
}

// Release gives back one allocation identity holds (any, for an admin).
func (s *Service) Release(ctx context.Context, identity string, in *qmv1.ReleaseRequest) (*qmv1.ReleaseResponse, error) {
	start := time.Now()
	resp, err := s.release(ctx, identity, in)
	s.traceRelease(start, in, err)
	s.metrics.AdminCalls.WithLabelValues("Release", status.Code(err).String()).Inc()
	if err != nil {
		s.log.LogAttrs(ctx, slog.LevelWarn, "release failed",
			slog.String("identity", identity),
			slog.String("namespace", in.GetNamespace()),
			slog.String("gameServer", in.GetGameServerName()),
			slog.String("code", status.Code(err).String()),
			slog.String("reason", status.Convert(err).Message()))
	}
	return resp, err
}

func (s *Service) release(ctx context.Context, identity string, in *qmv1.ReleaseRequest) (*qmv1.ReleaseResponse, error) {
	if in.GetAllocationKey() != "" {
		return s.releaseByKey(ctx, identity, in)
	}
	key, err := wire.ReleaseKey(in)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	if resp, elsewhere, err := s.releaseElsewhere(ctx, identity, in); elsewhere {
		return resp, err
	}
	// The same answer for "no such server" and "someone else's", so that a
	// caller cannot probe for others' allocations.
	notYours := status.Errorf(codes.NotFound, "you hold no allocation of game server %s/%s", key.Namespace, key.Name)
	gs, err := s.releasable(ctx, identity, key)
	if err != nil {
		return nil, err
	}
	if gs == nil {
		return nil, notYours
	}
	owner := gs.Annotations[OwnerAnnotation]
	resp, err := s.releaseServer(ctx, gs, notYours)
	if err == nil {
		if k, ok := gs.Annotations[AllocationKeyAnnotation]; ok && k != "" {
			s.keys.released(KeyScope(owner, k), s.now())
		}
	}
	return resp, err
}

// releasable is the server key names if identity may release it (it is
// Allocated, and the caller's or the caller is an admin), else nil. The
// backend's cache answers first; a backend whose cache may lag its store
// (StoreReader: another replica's allocation not yet seen) is asked again
// from the store before the caller is told it holds nothing, since that
// answer would leave the server Allocated for good.
func (s *Service) releasable(ctx context.Context, identity string, key core.Key) (*core.GameServer, error) {
	mayRelease := func(gs *core.GameServer) bool {
		return gs.State == core.StateAllocated &&
			(gs.Annotations[OwnerAnnotation] == identity || s.limits.Load().isAdmin(identity))
	}
	if gs, ok := s.backend.Get(key); ok && mayRelease(gs) {
		return gs, nil
	}
	sr, ok := s.backend.(StoreReader)
	if !ok {
		return nil, nil
	}
	gs, err := sr.ReadThrough(ctx, key)
	switch {
	case errors.Is(err, ErrNotFound):
		return nil, nil
	case err != nil:
		return nil, s.allocateStatus(err, &core.Request{Namespace: key.Namespace})
	case mayRelease(gs):
		return gs, nil
	}
	return nil, nil
}

// releaseServer gives back gs, allocated as it is now; notYours is the
// answer when it is not (or not for the caller a forwarded Release is
// for).
func (s *Service) releaseServer(ctx context.Context, gs *core.GameServer, notYours error) (*qmv1.ReleaseResponse, error) {
	// A Release another allocator forwarded gives back only what was
	// allocated for the caller it forwards for (forward.ReleasedFor).
	if !forward.ReleasedFor(ctx, gs) {
		return nil, notYours
	}
	owner := gs.Annotations[OwnerAnnotation]
	stamp := gs.LastAllocated()
	at, _ := wire.AllocatedAt(gs)
	_, err := s.backend.Release(ctx, gs.Key(), stamp)
	switch {
	case errors.Is(err, ErrNotFound), errors.Is(err, ErrNotAllocated):
		return nil, notYours
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return nil, contextStatus(err)
	case errors.Is(err, ErrContention):
		// As for allocations: lost too many races; the caller may retry.
		return nil, status.Error(codes.Aborted, err.Error())
	case errors.Is(err, ErrStoreUnavailable):
		return nil, status.Error(codes.Unavailable, err.Error())
	case err != nil:
		return nil, status.Error(codes.Internal, err.Error())
	}
	return &qmv1.ReleaseResponse{Allocation: wire.AllocationRecord(gs, owner, at)}, nil
}

// identify returns the caller's identity for a gRPC call.
func identify(t *mtls.Server, ctx context.Context) (string, error) {
	id, err := t.Identify(ctx)
	if err != nil {
		return "", status.Errorf(codes.Unauthenticated, "no caller identity: %v", err)
	}
	return id, nil
}

// HTTPStatus maps a gRPC code to the HTTP status the REST API answers
// with, as grpc-gateway (and so Agones' REST endpoint) does.
func HTTPStatus(c codes.Code) int {
	switch c {
	case codes.OK:
		return http.StatusOK
	case codes.Canceled:
		return 499
	case codes.InvalidArgument, codes.FailedPrecondition, codes.OutOfRange:
		return http.StatusBadRequest
	case codes.DeadlineExceeded:
		return http.StatusGatewayTimeout
	case codes.NotFound:
		return http.StatusNotFound
	case codes.AlreadyExists, codes.Aborted:
		return http.StatusConflict
	case codes.PermissionDenied:
		return http.StatusForbidden
	case codes.Unauthenticated:
		return http.StatusUnauthorized
	case codes.ResourceExhausted:
		return http.StatusTooManyRequests
	case codes.Unimplemented:
		return http.StatusNotImplemented
	case codes.Unavailable:
		return http.StatusServiceUnavailable
	}
	return http.StatusInternalServerError
}
