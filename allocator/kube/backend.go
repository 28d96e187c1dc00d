package kube

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	coordinationv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/quartermaster-dev/quartermaster/allocator"
	"github.com/quartermaster-dev/quartermaster/core"
)

// Config configures a Backend.
type Config struct {
	// REST is the API server connection. Its QPS and Burst are raised to
	// QPS and Burst below: client-go's defaults (5 and 10) once capped Agones
	// at a handful of allocations per second.
	REST *rest.Config
	// QPS and Burst for the client; 0 means DefaultQPS / DefaultBurst.
	QPS   float32
	Burst int
	// Namespace to watch; "" watches every namespace.
	Namespace string
	// MaxConflictRetries bounds how often one allocation may lose a race
	// and choose again before answering Contention.
	MaxConflictRetries int
	// StaleRetries bounds the extra attempts made when nothing matches but
	// the cache may be behind (a conflict just happened, or our own writes
	// are newer than anything the informer has delivered); StaleWait is the
	// first wait, doubled each time.
	StaleRetries int
	StaleWait    time.Duration
	// PackedSpread: Packed allocations choose at random among this many of
	// the best matches (core.Index.SetPackedSpread), so that several
	// replicas stop racing for the same server. It is the narrowest spread:
	// conflicts widen it (adaptive.go). 0: exact Packed for a lone replica,
	// 64 with replica shards.
	PackedSpread int
	// ReplicaShard of Replicas: this replica's preferred share of the best
	// PackedSpread matches (core.Index.SetReplicaShard). Give each replica
	// a different shard (a StatefulSet ordinal) so they rarely race.
	ReplicaShard, Replicas int
	// SyncTimeout bounds Start's wait for the first list: past it Start gives up
	// with a *SyncError naming the reason. 0 waits until the context ends.
	SyncTimeout time.Duration
	// ProgressInterval is how often WaitForSync logs that it still waits;
	// 0 means DefaultProgressInterval.
	ProgressInterval time.Duration
	// KeyNamespace holds the idempotency keys' records (Leases, keys.go):
	// the allocator's own namespace, shared by its replicas; "" means
	// DefaultLeaseNamespace().
	KeyNamespace string
	// KeyWindow is how long a key is remembered after its allocation;
	// 0 means DefaultKeyWindow.
	KeyWindow time.Duration
	// KeyClaimTimeout bounds a keyed allocation once its key is claimed; a
	// claim unrecorded after twice this is taken over by another replica.
	// 0 means DefaultKeyClaimTimeout.
	KeyClaimTimeout time.Duration
	Logger          *slog.Logger
}

// Defaults for Config.
const (
	DefaultQPS                = 2000
	DefaultBurst              = 4000
	DefaultMaxConflictRetries = 8
	DefaultStaleRetries       = 3
	DefaultStaleWait          = 10 * time.Millisecond
)

// Backend allocates Agones GameServers in a Kubernetes cluster. It
// implements allocator.Backend.
type Backend struct {
	cfg      Config
	client   *rest.RESTClient
	informer cache.SharedIndexInformer
	// handler's HasSynced: the index has received every object of the
	// informer's first list (the informer's own HasSynced says only that
	// the list is in its store; handlers are notified after).
	handler cache.ResourceEventHandlerRegistration
	ix      *core.Index
	log     *slog.Logger

	mu  sync.Mutex
	raw map[core.Key]*gameServer // newest object known per key

	runOnce  sync.Once
	listErrs listErrors // the informer's newest list or watch failure

	lastConflict atomic.Int64  // unix nanoseconds of the last write conflict
	writtenRV    atomic.Uint64 // newest resourceVersion our writes produced
	seenRV       atomic.Uint64 // newest resourceVersion the informer delivered
	synced       atomic.Bool
	conflicts    atomic.Int64

	spread  *spreadControl  // adaptive.go
	metrics *replicaMetrics // replicametrics.go

	// Idempotency keys' records (keys.go).
	leases     coordinationv1client.LeasesGetter
	id         string // this replica's name as a claimant
	keyGroup   string // KeyRecordLabel's value for this backend's records
	keyMetrics *prometheus.CounterVec
	lastKeyed  atomic.Int64 // unix nanoseconds of the last keyed request
	// afterKeyedCommit, set by tests only, runs between a keyed
	// allocation's commit and its record; true stops there, as a replica
	// killed at that moment would.
	afterKeyedCommit func() bool
}

var _ allocator.Backend = (*Backend)(nil)

// New builds a Backend; Start begins watching.
func New(cfg Config) (*Backend, error) {
	if cfg.REST == nil {
		return nil, errors.New("kube: Config.REST is required")
	}
	if cfg.QPS == 0 {
		cfg.QPS = DefaultQPS
	}
	if cfg.Burst == 0 {
		cfg.Burst = DefaultBurst
	}
	if cfg.MaxConflictRetries == 0 {
		cfg.MaxConflictRetries = DefaultMaxConflictRetries
	}
	if cfg.StaleRetries == 0 {
		cfg.StaleRetries = DefaultStaleRetries
	}
	if cfg.StaleWait == 0 {
		cfg.StaleWait = DefaultStaleWait
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.ProgressInterval <= 0 {
		cfg.ProgressInterval = DefaultProgressInterval
	}
	if cfg.KeyNamespace == "" {
		cfg.KeyNamespace = DefaultLeaseNamespace()
	}
	if cfg.KeyWindow <= 0 {
		cfg.KeyWindow = DefaultKeyWindow
	}
	if cfg.KeyClaimTimeout <= 0 {
		cfg.KeyClaimTimeout = DefaultKeyClaimTimeout
	}
	rc := rest.CopyConfig(cfg.REST)
	rc.QPS, rc.Burst = cfg.QPS, cfg.Burst
	client, err := newRESTClient(rc)
	if err != nil {
		return nil, fmt.Errorf("kube: client: %w", err)
	}
	leases, err := coordinationv1client.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("kube: key records client: %w", err)
	}
	hostname, _ := os.Hostname()
	id, err := leaseName(hostname)
	if err != nil {
		return nil, err
	}
	b := &Backend{
		cfg:        cfg,
		client:     client,
		ix:         core.NewIndex(),
		log:        cfg.Logger,
		raw:        map[core.Key]*gameServer{},
		leases:     leases,
		id:         id,
		keyGroup:   keyGroup(cfg.Namespace),
		keyMetrics: newKeyMetrics(),
	}
	b.spread = newSpreadControl(cfg.PackedSpread, b.ix.SetPackedSpread)
	b.metrics = newReplicaMetrics(func() float64 { return float64(b.spread.current()) })
	if cfg.Replicas > 1 {
		b.setReplicas(cfg.ReplicaShard, cfg.Replicas)
	}
	b.ix.SetCountedAnnotation(allocator.OwnerAnnotation)
	b.informer = cache.NewSharedIndexInformer(b.recorded(listWatch(client, cfg.Namespace)), &gameServer{}, 0, cache.Indexers{})
	if err := b.informer.SetWatchErrorHandlerWithContext(b.onWatchError); err != nil {
		return nil, fmt.Errorf("kube: informer: %w", err)
	}
	b.handler, err = b.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    b.onUpsert,
		UpdateFunc: func(_, obj any) { b.onUpsert(obj) },
		DeleteFunc: b.onDelete,
	})
	if err != nil {
		return nil, fmt.Errorf("kube: informer: %w", err)
	}
	return b, nil
}

// Ready reports whether the cache has synced.
func (b *Backend) Ready() bool { return b.synced.Load() }

// Index exposes the backend's index (for metrics and tests).
func (b *Backend) Index() *core.Index { return b.ix }

// Conflicts is how many writes lost a race since start.
func (b *Backend) Conflicts() int64 { return b.conflicts.Load() }

// KeptBytes is how many bytes of GameServer JSON the backend keeps for its
// writes (the objects without their managedFields).
func (b *Backend) KeptBytes() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	n := 0
	for _, g := range b.raw {
		n += len(g.raw)
	}
	return n
}

func (b *Backend) onUpsert(obj any) {
	g, ok := obj.(*gameServer)
	if !ok {
		return
	}
	b.noteRV(&b.seenRV, g.ResourceVersion)
	b.remember(g, true)
}

// remember stores g as the newest known state of its server unless the
// backend already knows a newer one of the same object (an informer event
// that trails our own write). It reports whether u was taken.
//
// From the informer (index true) a new object is welcome. From our own
// writes (index false, and Release) only a server the backend still knows
// is updated: the informer may already have delivered its deletion, and a
// write's answer must not bring it back.
func (b *Backend) remember(g *gameServer, index bool) bool {
	return b.rememberFrom(g, index, true)
}

func (b *Backend) rememberWritten(g *gameServer, index bool) bool {
	return b.rememberFrom(g, index, false)
}

func (b *Backend) rememberFrom(g *gameServer, index, fromInformer bool) bool {
	k := g.key()
	b.mu.Lock()
	defer b.mu.Unlock()
	old := b.raw[k]
	if !fromInformer && (old == nil || old.UID != g.UID) {
		return false
	}
	if old != nil && old.UID == g.UID && !newer(g.ResourceVersion, old.ResourceVersion) {
		return false
	}
	gs, err := toCore(g)
	if err != nil {
		// A server we cannot read must not be handed out.
		b.log.Warn("ignoring unreadable gameserver", "namespace", k.Namespace, "name", k.Name, "err", err)
		delete(b.raw, k)
		b.ix.Remove(k)
		return false
	}
	b.raw[k] = g
	if index {
		b.ix.Upsert(gs)
	}
	return true
}

func (b *Backend) onDelete(obj any) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	g, ok := obj.(*gameServer)
	if !ok {
		return
	}
	k := g.key()
	b.mu.Lock()
	defer b.mu.Unlock()
	if old := b.raw[k]; old != nil && old.UID != g.UID {
		return // a newer object of the same name already replaced it
	}
	delete(b.raw, k)
	b.ix.Remove(k)
}

func (b *Backend) noteRV(to *atomic.Uint64, rv string) {
	v, err := strconv.ParseUint(rv, 10, 64)
	if err != nil {
		return
	}
	for {
		cur := to.Load()
		if v <= cur || to.CompareAndSwap(cur, v) {
			return
		}
	}
}

// allocateOnce is one round of Allocate (adaptive.go): CommitLoop, and
// again after a short wait when nothing matched but the cache may be behind.
// On Contention it returns the Allocation carrying the retry count.
func (b *Backend) allocateOnce(ctx context.Context, req *core.Request, now time.Time, seed uint64) (*allocator.Allocation, error) {
	wait := b.cfg.StaleWait
	for try := 0; ; try++ {
		a, err := allocator.CommitLoop(ctx, b.ix, b, req, now, seed, b.cfg.MaxConflictRetries)
		if err == nil {
			b.reconcile(a.GameServer.Key())
			return a, nil
		}
		if !errors.Is(err, core.ErrNoMatch) || try >= b.cfg.StaleRetries || !b.cacheMayBeBehind() {
			if errors.Is(err, allocator.ErrContention) {
				return a, err
			}
			return nil, err
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
		}
		wait *= 2
	}
}

// cacheMayBeBehind says whether "nothing matches" may be the cache's fault:
// a write just lost a race (so others are writing what we have not seen), or
// our own writes are newer than anything the informer has delivered.
func (b *Backend) cacheMayBeBehind() bool {
	if !b.synced.Load() {
		return true
	}
	if time.Since(time.Unix(0, b.lastConflict.Load())) < time.Second {
		return true
	}
	return b.seenRV.Load() < b.writtenRV.Load()
}

// reconcile puts the newest known object back into the index if an informer
// event overtook our commit while the server was held.
func (b *Backend) reconcile(k core.Key) {
	b.mu.Lock()
	defer b.mu.Unlock()
	g := b.raw[k]
	gs, ok := b.ix.Get(k)
	if g == nil || !ok || g.ResourceVersion == gs.Version || !newer(g.ResourceVersion, gs.Version) {
		return
	}
	if fresh, err := toCore(g); err == nil {
		b.ix.Upsert(fresh)
	}
}

// Commit implements allocator.Committer: an Update of the chosen object as
// it was when chosen, so the API server refuses it if anything changed.
func (b *Backend) Commit(ctx context.Context, res *core.Result) (*core.GameServer, error) {
	k := res.Previous.Key()
	reconciled := &allocator.ConflictError{Key: k, Reconciled: true}
	b.mu.Lock()
	raw := b.raw[k]
	b.mu.Unlock()
	if raw == nil || raw.ResourceVersion != res.Previous.Version {
		// The informer deleted or updated the server after the choice,
		// and put that into the index: choose again on what it has.
		return nil, reconciled
	}
	obj, err := withAllocation(raw.raw, res.Previous, res.GameServer)
	if err != nil {
		return nil, fmt.Errorf("building allocated %s/%s: %w", k.Namespace, k.Name, err)
	}
	// The write is not cancelled with its caller: a cancelled request may
	// still be applied by the API server, and then nobody would know the
	// server is Allocated. Carried to its end, its answer tells the service,
	// which gives back what a caller who went away cannot use. The API
	// server's own request timeout bounds it, and client-go's connection
	// health checks a connection that stopped answering; a timer of our
	// own would cost every allocation.
	updated, err := b.put(context.WithoutCancel(ctx), k, obj)
	switch {
	case err == nil:
	case apierrors.IsConflict(err):
		b.conflicts.Add(1)
		b.lastConflict.Store(time.Now().UnixNano())
		return nil, b.refresh(ctx, k, raw)
	case apierrors.IsNotFound(err):
		b.forget(k, raw)
		return nil, reconciled
	default:
		return nil, storeError("updating", k, err)
	}
	b.noteRV(&b.writtenRV, updated.ResourceVersion)
	b.rememberWritten(updated, false)
	return toCore(updated)
}

// get reads one GameServer from the API server.
func (b *Backend) get(ctx context.Context, k core.Key) (*gameServer, error) {
	raw, err := b.client.Get().Namespace(k.Namespace).Resource(GameServerResource.Resource).Name(k.Name).Do(ctx).Raw()
	if err != nil {
		return nil, err
	}
	return decodeGameServer(raw)
}

// put writes one GameServer; obj carries the resourceVersion it was read
// at, so the API server refuses the write (409) if the object changed since.
func (b *Backend) put(ctx context.Context, k core.Key, obj []byte) (*gameServer, error) {
	raw, err := b.client.Put().Namespace(k.Namespace).Resource(GameServerResource.Resource).Name(k.Name).Body(obj).Do(ctx).Raw()
	if err != nil {
		return nil, err
	}
	return decodeGameServer(raw)
}

// refresh reads the server after a lost race, so the next choice is made on
// its real state without waiting for the informer. It updates the index
// under the backend's lock, like the informer, and only for the object the
// backend still knows: a deletion the informer delivered meanwhile stands.
func (b *Backend) refresh(ctx context.Context, k core.Key, tried *gameServer) error {
	cur, err := b.get(ctx, k)
	if apierrors.IsNotFound(err) {
		b.forget(k, tried)
		return &allocator.ConflictError{Key: k, Reconciled: true}
	}
	if err != nil {
		return fmt.Errorf("re-reading gameserver %s/%s after a conflict: %w", k.Namespace, k.Name, err)
	}
	b.noteRV(&b.writtenRV, cur.ResourceVersion)
	b.rememberWritten(cur, true)
	return &allocator.ConflictError{Key: k, Reconciled: true}
}

// forget drops a server the API server says is gone, unless the informer
// has replaced the object meanwhile (a new one of the same name).
func (b *Backend) forget(k core.Key, gone *gameServer) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if cur := b.raw[k]; cur != nil && cur.UID == gone.UID {
		delete(b.raw, k)
		b.ix.Remove(k)
	}
}

// Get implements allocator.Backend.
func (b *Backend) Get(k core.Key) (*core.GameServer, bool) { return b.ix.Get(k) }

// Allocated implements allocator.Backend.
func (b *Backend) Allocated() []*core.GameServer { return b.ix.ListState(core.StateAllocated) }

// AllocatedTo implements allocator.Backend.
func (b *Backend) AllocatedTo(owner string) []*core.GameServer { return b.ix.ListAllocated(owner) }

// CountAllocatedTo implements allocator.Backend.
func (b *Backend) CountAllocatedTo(owner string) int { return b.ix.CountAllocated(owner) }

// Release implements allocator.Backend: the server goes to Shutdown, from
// which Agones' controller (or qm agent) deletes and replaces it.
func (b *Backend) Release(ctx context.Context, k core.Key, ifAllocatedAt string) (*core.GameServer, error) {
	for range b.cfg.MaxConflictRetries {
		cur, err := b.get(ctx, k)
		if apierrors.IsNotFound(err) {
			return nil, allocator.ErrNotFound
		}
		if err != nil {
			return nil, storeError("reading", k, err)
		}
		gs, err := toCore(cur)
		if err != nil {
			return nil, err
		}
		if gs.State != core.StateAllocated {
			return nil, allocator.ErrNotAllocated
		}
		if ifAllocatedAt != "" && gs.LastAllocated() != ifAllocatedAt {
			return nil, allocator.ErrNotAllocated
		}
		obj, err := withState(cur.raw, core.StateShutdown)
		if err != nil {
			return nil, err
		}
		updated, err := b.put(ctx, k, obj)
		if apierrors.IsConflict(err) {
			continue
		}
		if err != nil {
			return nil, storeError("releasing", k, err)
		}
		b.noteRV(&b.writtenRV, updated.ResourceVersion)
		b.rememberWritten(updated, true)
		return toCore(updated)
	}
	return nil, allocator.ErrContention
}

// storeError describes a failed API call on a GameServer. An API server
// that cannot be reached (no answer, not a status from it) or answers that
// it is overloaded or unavailable is allocator.ErrStoreUnavailable, which
// callers see as Unavailable and may retry; any other answer stays as it is.
func storeError(what string, k core.Key, err error) error {
	var status apierrors.APIStatus
	transient := !errors.As(err, &status) || apierrors.IsServiceUnavailable(err) || apierrors.IsTimeout(err) ||
		apierrors.IsServerTimeout(err) || apierrors.IsTooManyRequests(err)
	if transient {
		return fmt.Errorf("%s gameserver %s/%s: %w: %w", what, k.Namespace, k.Name, allocator.ErrStoreUnavailable, err)
	}
	return fmt.Errorf("%s gameserver %s/%s: %w", what, k.Namespace, k.Name, err)
}
