package allocator

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	qmv1 "github.com/quartermaster-dev/quartermaster/allocator/pb/quartermaster/v1"
	"github.com/quartermaster-dev/quartermaster/allocator/wire"
	"github.com/quartermaster-dev/quartermaster/core"
)

// Creator is implemented by backends that can make game servers on demand
// (the AllocationAdmin API's Create and Destroy). It is separate from
// Backend so that a backend without it still serves allocations.
type Creator interface {
	// Create makes the GameServer order.Object, waits until it is Ready,
	// and allocates it: state Allocated, CreatingAnnotation removed and
	// core.LastAllocatedAnnotation set from order.Now. Until then nobody
	// else may allocate it. When ctx ends first, or anything fails, it
	// deletes whatever it made and returns a *CreateError saying so.
	Create(ctx context.Context, order *CreateOrder) (*core.GameServer, error)
	// Destroy deletes a server for good (a fleet may replace its own, a
	// created one is gone). With owner set, the server must still carry it
	// in OwnerAnnotation. ErrNotFound when there is no such server (or not
	// the owner's). It returns the server as it was.
	Destroy(ctx context.Context, key core.Key, owner string) (*core.GameServer, error)
	// FleetTemplate returns the named fleet's template as a
	// GameServerTemplateSpec (FleetTemplateSpec), and how long the backend
	// takes to start a server of it when it decides that (0 otherwise).
	// ErrFleetNotFound when there is no such fleet.
	FleetTemplate(ctx context.Context, namespace, name string) (map[string]any, time.Duration, error)
}

// CreateOrder is one server for Creator.Create to make.
type CreateOrder struct {
	Key core.Key
	// Object is the expanded GameServer (ExpandTemplate).
	Object map[string]any
	// Startup is how long a backend that simulates servers takes to bring
	// this one to Ready.
	Startup time.Duration
	// Now stamps the allocation.
	Now func() time.Time
}

// Create errors.
var (
	// ErrAlreadyExists: a game server of the requested name exists.
	ErrAlreadyExists = errors.New("a game server of that name already exists")
	// ErrServerFailed: the server went to Error, Unhealthy or Shutdown, or
	// was deleted, before it became Ready.
	ErrServerFailed = errors.New("the game server failed before it became Ready")
	// ErrFleetNotFound: a template names a fleet that does not exist.
	ErrFleetNotFound = errors.New("no such fleet")
)

// CreateError is a Create that failed: why, and what became of anything
// it made, so the caller is told whether something was left behind.
type CreateError struct {
	Key core.Key
	Err error
	// Made: the server was created before the failure.
	Made bool
	// Deleted: what was made is gone again. CleanupErr says why not.
	Deleted    bool
	CleanupErr error
}

func (e *CreateError) Error() string {
	return fmt.Sprintf("creating game server %s/%s: %v; %s", e.Key.Namespace, e.Key.Name, e.Err, e.aftermath())
}

// aftermath says what became of the server.
func (e *CreateError) aftermath() string {
	switch {
	case !e.Made:
		return "nothing was created"
	case e.Deleted:
		return "it was deleted, nothing is left behind"
	}
	return fmt.Sprintf("deleting it failed too (%v): destroy it with qm destroy --namespace %s --name %s", e.CleanupErr, e.Key.Namespace, e.Key.Name)
}

func (e *CreateError) Unwrap() error { return e.Err }

// SetTemplates replaces the templates Create may use (nil: none) for the
// requests that start from now on.
func (s *Service) SetTemplates(c *TemplatesConfig) { s.templates.Store(c) }

// Templates returns the templates in force (nil when none).
func (s *Service) Templates() *TemplatesConfig { return s.templates.Load() }

// Create makes a game server for identity from a template and allocates
// it to identity.
func (s *Service) Create(ctx context.Context, identity string, in *qmv1.CreateRequest) (*qmv1.CreateResponse, error) {
	start := time.Now()
	resp, err := s.create(ctx, identity, in)
	s.metrics.AdminCalls.WithLabelValues("Create", status.Code(err).String()).Inc()
	if err != nil {
		s.log.LogAttrs(ctx, slog.LevelWarn, "create failed",
			slog.String("identity", identity),
			slog.String("template", in.GetTemplate()),
			slog.String("code", status.Code(err).String()),
			slog.String("reason", status.Convert(err).Message()),
			slog.Duration("elapsed", time.Since(start)))
	}
	return resp, err
}

func (s *Service) create(ctx context.Context, identity string, in *qmv1.CreateRequest) (*qmv1.CreateResponse, error) {
	if err := ctx.Err(); err != nil {
		return nil, contextStatus(err)
	}
	cr, ok := s.backend.(Creator)
	if !ok {
		return nil, status.Error(codes.Unimplemented, "this allocator's backend cannot create game servers")
	}
	if in.GetTemplate() == "" {
		return nil, status.Error(codes.InvalidArgument, "template: must not be empty (name one of the allocator's templates)")
	}
	if in.GetName() != "" {
		if err := ValidServerName(in.GetName()); err != nil {
			return nil, status.Errorf(codes.InvalidArgument, "name: %v", err)
		}
	}
	templates := s.templates.Load()
	t, ok := templates.Lookup(in.GetTemplate())
	if !ok {
		have := "none: start the allocator with --templates"
		if names := templates.Names(); len(names) > 0 {
			have = strings.Join(names, ", ")
		}
		return nil, status.Errorf(codes.NotFound, "no template %q (have: %s)", in.GetTemplate(), have)
	}
	lim := s.limits.Load()
	if err := lim.mayCreate(identity, t.Name); err != nil {
		s.metrics.Rejections.WithLabelValues(err.reason).Inc()
		return nil, status.Error(codes.PermissionDenied, err.msg)
	}
	h, err := lim.admit(identity, t.Namespace, s.now(), s.backend)
	if err != nil {
		var le *limitError
		if errors.As(err, &le) {
			s.metrics.Rejections.WithLabelValues(le.reason).Inc()
			if le.permission {
				return nil, status.Error(codes.PermissionDenied, le.msg)
			}
			return nil, status.Error(codes.ResourceExhausted, le.msg)
		}
		return nil, status.Error(codes.Internal, err.Error())
	}
	defer h.done()

	ctx, cancel := s.bound(ctx)
	defer cancel()
	// Stop waiting a little before the caller does, so that the answer
	// saying what became of the server reaches it in time.
	if d, ok := ctx.Deadline(); ok {
		margin := min(time.Until(d)/10, answerMargin)
		var cancelWait context.CancelFunc
		ctx, cancelWait = context.WithDeadline(ctx, d.Add(-margin))
		defer cancelWait()
	}
	spec, startup := t.Template, t.Startup()
	if t.Fleet != "" {
		var fleetStartup time.Duration
		spec, fleetStartup, err = cr.FleetTemplate(ctx, t.Namespace, t.Fleet)
		switch {
		case errors.Is(err, ErrFleetNotFound):
			return nil, status.Errorf(codes.FailedPrecondition, "template %q names fleet %s/%s, which does not exist", t.Name, t.Namespace, t.Fleet)
		case err != nil:
			return nil, s.createStatus(fmt.Errorf("reading template %q's fleet %s/%s: %w", t.Name, t.Namespace, t.Fleet, err))
		}
		if t.StartupDuration == "" {
			startup = fleetStartup
		}
	}
	name := in.GetName()
	if name == "" {
		name = t.Name + "-" + nameSuffix(s.seed())
	}
	now := s.now()
	obj, err := ExpandTemplate(spec, Expansion{Template: t.Name, Namespace: t.Namespace, Name: name, Identity: identity, CreatedAt: now})
	if err != nil {
		return nil, status.Error(codes.FailedPrecondition, err.Error())
	}
	key := core.Key{Namespace: t.Namespace, Name: name}
	gs, err := cr.Create(ctx, &CreateOrder{Key: key, Object: obj, Startup: startup, Now: s.now})
	if err != nil {
		return nil, s.createStatus(err)
	}
	at, _ := wire.AllocatedAt(gs)
	return &qmv1.CreateResponse{Allocation: wire.AllocationRecord(gs, identity, at)}, nil
}

// answerMargin is the most of the caller's deadline Create keeps back for
// cleaning up and answering.
const answerMargin = time.Second

// createStatus maps a Create failure to its status; the message keeps
// saying what became of the server.
func (s *Service) createStatus(err error) error {
	msg := err.Error()
	var ce *CreateError
	if errors.As(err, &ce) && errors.Is(err, context.DeadlineExceeded) {
		msg = fmt.Sprintf("game server %s/%s did not become Ready within the caller's deadline; %s",
			ce.Key.Namespace, ce.Key.Name, ce.aftermath())
	}
	switch {
	case errors.Is(err, ErrAlreadyExists):
		return status.Error(codes.AlreadyExists, msg)
	case errors.Is(err, context.DeadlineExceeded):
		return status.Error(codes.DeadlineExceeded, msg)
	case errors.Is(err, context.Canceled):
		return status.Error(codes.Canceled, msg)
	case errors.Is(err, ErrServerFailed), errors.Is(err, ErrStoreUnavailable):
		return status.Error(codes.Unavailable, msg)
	}
	var inv *core.InvalidRequestError
	if errors.As(err, &inv) {
		return status.Error(codes.InvalidArgument, msg)
	}
	return status.Error(codes.Internal, msg)
}

// nameSuffix is five characters from Kubernetes' generateName alphabet,
// from the request's seed so that a replayed run names alike.
func nameSuffix(seed uint64) string {
	const alphabet = "bcdfghjklmnpqrstvwxz2456789"
	var b [5]byte
	for i := range b {
		b[i] = alphabet[seed%uint64(len(alphabet))]
		seed /= uint64(len(alphabet))
	}
	return string(b[:])
}

// Destroy deletes a game server identity holds (any, for an admin).
func (s *Service) Destroy(ctx context.Context, identity string, in *qmv1.DestroyRequest) (*qmv1.DestroyResponse, error) {
	resp, err := s.destroy(ctx, identity, in)
	s.metrics.AdminCalls.WithLabelValues("Destroy", status.Code(err).String()).Inc()
	if err != nil {
		s.log.LogAttrs(ctx, slog.LevelWarn, "destroy failed",
			slog.String("identity", identity),
			slog.String("namespace", in.GetNamespace()),
			slog.String("gameServer", in.GetGameServerName()),
			slog.String("code", status.Code(err).String()),
			slog.String("reason", status.Convert(err).Message()))
	}
	return resp, err
}

func (s *Service) destroy(ctx context.Context, identity string, in *qmv1.DestroyRequest) (*qmv1.DestroyResponse, error) {
	key, err := wire.DestroyKey(in)
	if err != nil {
		return nil, status.Error(codes.InvalidArgument, err.Error())
	}
	cr, ok := s.backend.(Creator)
	if !ok {
		return nil, status.Error(codes.Unimplemented, "this allocator's backend cannot destroy game servers")
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	// As Release: one answer for "no such server" and "someone else's".
	notYours := status.Errorf(codes.NotFound, "you hold no game server %s/%s", key.Namespace, key.Name)
	gs, ok := s.backend.Get(key)
	if !ok {
		return nil, notYours
	}
	owner := gs.Annotations[OwnerAnnotation]
	ifOwner := identity
	if owner != identity {
		if !s.limits.Load().isAdmin(identity) || owner == "" {
			return nil, notYours
		}
		ifOwner = owner
	}
	at, _ := wire.AllocatedAt(gs)
	gone, err := cr.Destroy(ctx, key, ifOwner)
	switch {
	case errors.Is(err, ErrNotFound):
		return nil, notYours
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return nil, contextStatus(err)
	case errors.Is(err, ErrContention):
		return nil, status.Error(codes.Aborted, err.Error())
	case errors.Is(err, ErrStoreUnavailable):
		return nil, status.Error(codes.Unavailable, err.Error())
	case err != nil:
		return nil, status.Error(codes.Internal, err.Error())
	}
	return &qmv1.DestroyResponse{Allocation: wire.AllocationRecord(gone, owner, at)}, nil
}

// mayCreate says whether identity may create from template: without
// limits anyone may; with them, the identity's (or the default's)
// templates must list it or "*".
func (l *limiter) mayCreate(identity, template string) *limitError {
	if l == nil {
		return nil
	}
	lim, ok := l.cfg.Identities[identity]
	if !ok {
		if l.cfg.Default == nil {
			return &limitError{permission: true, reason: "unknown_identity",
				msg: fmt.Sprintf("identity %q may not create game servers: it is not listed in the allocator's limits and there is no default", identity)}
		}
		lim = *l.cfg.Default
	}
	for _, t := range lim.Templates {
		if t == "*" || t == template {
			return nil
		}
	}
	return &limitError{permission: true, reason: "template",
		msg: fmt.Sprintf("identity %q may not create from template %q (its limits allow: %s)", identity, template, orNone(lim.Templates))}
}

func orNone(s []string) string {
	if len(s) == 0 {
		return "none"
	}
	return strings.Join(s, ", ")
}

// Create and Destroy for gRPC.

func (g *grpcAdmin) Create(ctx context.Context, in *qmv1.CreateRequest) (*qmv1.CreateResponse, error) {
	id, err := identify(g.tls, ctx)
	if err != nil {
		return nil, err
	}
	return g.svc.Create(ctx, id, in)
}

func (g *grpcAdmin) Destroy(ctx context.Context, in *qmv1.DestroyRequest) (*qmv1.DestroyResponse, error) {
	id, err := identify(g.tls, ctx)
	if err != nil {
		return nil, err
	}
	return g.svc.Destroy(ctx, id, in)
}
