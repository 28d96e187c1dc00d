package forward

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/quartermaster-dev/quartermaster/allocator/pb/allocation"
	"github.com/quartermaster-dev/quartermaster/core"
)

// HopsKey is the gRPC metadata key of a forwarded call: the hop names of
// the allocators it crossed, in order. Agones ignores it; Quartermaster
// refuses a request whose hops name itself.
const HopsKey = "quartermaster-hops"

// maxHops bounds the hops a request may carry: a longer path is a loop
// among allocators that do not know each other's names, or abuse.
const maxHops = 8

// Defaults for Options.
const (
	// DefaultTryTimeout bounds one call to a remote allocator, as Agones'
	// 10 s per remote call.
	DefaultTryTimeout = 10 * time.Second
	// DefaultRetries is how many more rounds over a cluster's endpoints
	// follow a round in which every endpoint failed to answer.
	DefaultRetries = 2
	// DefaultBackoff is the wait before the first such round (Agones'
	// 100 ms); it doubles each round, with jitter.
	DefaultBackoff = 100 * time.Millisecond
	// DefaultLostAnswerRetries is how many more times a request whose
	// answer was lost is sent to the same endpoint, with the same key,
	// before the forwarder moves on.
	DefaultLostAnswerRetries = 2
)

// Local allocates in this cluster: the service's own path, given the
// request with multi-cluster disabled and the policy's namespace.
type Local = func(ctx context.Context, in *allocation.AllocationRequest) (*allocation.AllocationResponse, error)

// Options configure a Forwarder.
type Options struct {
	// Source of the policies and Secrets.
	Source Source
	// Self is this allocator's hop name (a cluster name); a random one
	// when empty. Replicas of one cluster that share a name refuse each
	// other's forwards too.
	Self string
	// TryTimeout bounds one call to a remote endpoint (DefaultTryTimeout).
	TryTimeout time.Duration
	// Retries and Backoff: see DefaultRetries and DefaultBackoff. Retries
	// of -1 means none.
	Retries int
	Backoff time.Duration
	// LostAnswerRetries: see DefaultLostAnswerRetries; -1 means none.
	LostAnswerRetries int
	// OwnKeys gives a request that came without an idempotency key one of
	// the forwarder's own, so that a lost answer to it is retried and
	// given back as a keyed request's is (package doc). Off, such a
	// request is forwarded as it came and pays nothing for keys.
	OwnKeys bool
	// ReconcileBackoff, ReconcileMaxBackoff, ReconcileFor and
	// ReconcileQueue tune the releases of allocations whose answers were
	// lost (reconcile.go; the Default values when zero).
	ReconcileBackoff, ReconcileMaxBackoff, ReconcileFor time.Duration
	ReconcileQueue                                      int
	Breaker                                             BreakerOptions
	// UnallocatedCode answers when every cluster tried answered "no game
	// server" (ResourceExhausted when zero, as the service does).
	UnallocatedCode codes.Code
	Clock           Clock
	Logger          *slog.Logger
	// Registerer takes the forwarder's metrics; none are registered when
	// nil.
	Registerer prometheus.Registerer
	// DialOptions are added to every connection to a remote (tests).
	DialOptions []grpc.DialOption
	// Placements record where requests with the caller's idempotency
	// key are sent (placements.go), shared by every replica of this
	// allocator; this process's own when nil, which keeps a record for
	// KeyWindow after its last change and at most MaxKeys records (the
	// service's defaults when zero).
	Placements Placements
	KeyWindow  time.Duration
	MaxKeys    int
}

// Forwarder routes multi-cluster requests. It is safe for concurrent use.
type Forwarder struct {
	src         Source
	self        string
	tryTimeout  time.Duration
	retries     int
	backoff     time.Duration
	lostRetries int
	ownKeys     bool
	bopts       BreakerOptions
	unallocated codes.Code
	clock       Clock
	log         *slog.Logger
	m           *metrics
	clients     *clients
	windows     *windows // the policies in force now (window.go)
	keys        *requestKeys
	rec         *reconciler
	places      Placements

	mu       sync.Mutex
	breakers map[string]*breaker

	// selfMD is the outgoing metadata of a request that crossed no other
	// allocator: only this one in the hops. Read-only.
	selfMD metadata.MD
	// forwardedFor caches, per caller identity, the annotations of a
	// forwarded request that has none of its own (release.go). Read-only
	// maps, as the service's owner maps are.
	forwardedForMaps  sync.Map // identity → map[string]string
	forwardedForMapsN atomic.Int64

	// Background probes of open breakers stop when probeCtx ends (Close).
	probeCtx   context.Context
	stopProbes context.CancelFunc
	probers    sync.WaitGroup
	closeOnce  sync.Once

	// clusterOf maps an endpoint that allocated to its policy's cluster
	// name (string → string), for the service's source label. Endpoints
	// come from policies, so it is as bounded as they are.
	clusterOf sync.Map
}

// New builds a Forwarder.
func New(o Options) (*Forwarder, error) {
	if o.Source == nil {
		return nil, errors.New("forward: no policy source")
	}
	self := o.Self
	if self == "" {
		var b [6]byte
		_, _ = rand.Read(b[:])
		self = "qm-" + hex.EncodeToString(b[:])
	}
	if strings.ContainsAny(self, ", \t\r\n") {
		return nil, fmt.Errorf("forward: hop name %q may not contain commas or spaces", self)
	}
	f := &Forwarder{
		src: o.Source, self: self,
		tryTimeout: o.TryTimeout, retries: o.Retries, backoff: o.Backoff,
		bopts: o.Breaker.withDefaults(), unallocated: o.UnallocatedCode,
		clock: o.Clock, log: o.Logger, m: newMetrics(),
		breakers: map[string]*breaker{},
	}
	if f.tryTimeout <= 0 {
		f.tryTimeout = DefaultTryTimeout
	}
	switch {
	case f.retries < 0:
		f.retries = 0
	case f.retries == 0:
		f.retries = DefaultRetries
	}
	if f.backoff <= 0 {
		f.backoff = DefaultBackoff
	}
	switch {
	case o.LostAnswerRetries < 0:
		f.lostRetries = 0
	case o.LostAnswerRetries == 0:
		f.lostRetries = DefaultLostAnswerRetries
	default:
		f.lostRetries = o.LostAnswerRetries
	}
	f.keys = newRequestKeys()
	f.ownKeys = o.OwnKeys
	f.rec = newReconciler(f, o)
	if f.unallocated == codes.OK {
		f.unallocated = codes.ResourceExhausted
	}
	if f.clock == nil {
		f.clock = RealClock{}
	}
	f.places = o.Placements
	if f.places == nil {
		f.places = newMemPlacements(o.KeyWindow, o.MaxKeys, f.clock.Now)
	}
	if f.log == nil {
		f.log = slog.New(slog.DiscardHandler)
	}
	if o.Registerer != nil {
		if err := f.m.register(o.Registerer); err != nil {
			return nil, err
		}
	}
	f.clients = newClients(f.tryTimeout, o.DialOptions)
	f.probeCtx, f.stopProbes = context.WithCancel(context.Background())
	f.selfMD = metadata.Pairs(HopsKey, f.self)
	w, err := newWindows(f.src, f.clock, f.log, o.Registerer)
	if err != nil {
		return nil, err
	}
	f.windows = w
	return f, nil
}

// Self returns the forwarder's hop name.
func (f *Forwarder) Self() string { return f.self }

// Close stops the background probes and reconciliation and closes the
// cached connections; calls under way finish first. Releases still
// queued are dropped.
func (f *Forwarder) Close() {
	f.closeOnce.Do(func() {
		f.stopProbes()
		f.probers.Wait()
		f.rec.close()
		f.windows.close()
		f.clients.close()
	})
}

// ClusterOf returns the cluster name of the policy whose endpoint (a
// response's source) allocated a forwarded request, empty for an
// endpoint that never did.
func (f *Forwarder) ClusterOf(endpoint string) string {
	if c, ok := f.clusterOf.Load(endpoint); ok {
		return c.(string)
	}
	return ""
}

// BreakerState returns the state of endpoint's breaker (host:port);
// Closed for an endpoint never tried.
func (f *Forwarder) BreakerState(endpoint string) BreakerState {
	f.mu.Lock()
	b := f.breakers[endpoint]
	f.mu.Unlock()
	if b == nil {
		return Closed
	}
	return b.current()
}

func (f *Forwarder) breaker(endpoint string) *breaker {
	f.mu.Lock()
	defer f.mu.Unlock()
	b := f.breakers[endpoint]
	if b == nil {
		b = newBreaker(f.bopts, func(from, to BreakerState) {
			f.m.breaker.WithLabelValues(endpoint).Set(float64(to))
			lvl := slog.LevelWarn
			if to == Closed {
				lvl = slog.LevelInfo
			}
			f.log.Log(context.Background(), lvl, "forwarding breaker changed state",
				"endpoint", endpoint, "from", from.String(), "to", to.String())
			if from == Closed && to == Open {
				f.startProber(endpoint, b)
			}
			if to == Closed {
				f.rec.wake() // releases waiting for the endpoint may go
			}
		})
		f.m.breaker.WithLabelValues(endpoint).Set(float64(Closed))
		f.breakers[endpoint] = b
	}
	return b
}

// hopsOf returns the hop names a call carries.
func hopsOf(ctx context.Context) []string {
	// ValueFromIncomingContext reads the one key; FromIncomingContext
	// would copy every header of every request to find it.
	var hops []string
	for _, v := range metadata.ValueFromIncomingContext(ctx, HopsKey) {
		for _, h := range strings.Split(v, ",") {
			if h = strings.TrimSpace(h); h != "" {
				hops = append(hops, h)
			}
		}
	}
	return hops
}

// Crossed returns a FailedPrecondition error when the call in ctx already
// passed through this allocator (or through too many), nil otherwise.
// The service asks it of every request, forwarded or not, so that a
// policy pointing back at an allocator on the path ends at that allocator
// with an error instead of going round.
func (f *Forwarder) Crossed(ctx context.Context) error {
	hops := hopsOf(ctx)
	if len(hops) == 0 {
		return nil
	}
	if len(hops) > maxHops {
		return status.Errorf(codes.FailedPrecondition,
			"the request was forwarded through %d allocators (%s), more than %d: refusing it as a forwarding loop",
			len(hops), strings.Join(hops, " -> "), maxHops)
	}
	for _, h := range hops {
		if h == f.self {
			return status.Errorf(codes.FailedPrecondition,
				"forwarding loop: the request already passed through this allocator (%q; path %s -> here): a GameServerAllocationPolicy on that path points back at a cluster already on it",
				f.self, strings.Join(hops, " -> "))
		}
	}
	return nil
}

// outcome of one cluster's try, for the error summary and the metrics.
type outcome string

const (
	outAllocated   outcome = "allocated"
	outUnallocated outcome = "unallocated"  // the allocator answered "no game server"
	outRefused     outcome = "refused"      // it answered with another error
	outUnavailable outcome = "unavailable"  // no endpoint could be reached
	outBreakerOpen outcome = "breaker_open" // every endpoint's breaker was open
	outMisconfig   outcome = "misconfigured"
	outDeadline    outcome = "deadline"
)

// try is one cluster's result.
type try struct {
	cluster string
	where   string // "local" or the endpoints
	out     outcome
	code    codes.Code
	msg     string
}

func (t try) String() string {
	return fmt.Sprintf("cluster %q (%s): %s (%s)", t.cluster, t.where, t.msg, t.code)
}

// Allocate serves a request with multiClusterSetting.enabled: the policies
// of its namespace that its policySelector matches, in core.OrderClusters
// order for seed, each cluster until one allocates. local serves local
// entries. Errors are gRPC status errors. The remote allocators are not
// told whom the request is for (AllocateFor does tell them).
func (f *Forwarder) Allocate(ctx context.Context, in *allocation.AllocationRequest, seed uint64, local Local) (*allocation.AllocationResponse, error) {
	return f.Forward(ctx, Call{Sent: in, Seed: seed}, local)
}

// AllocateFor is Allocate for the caller identity: the servers remote
// allocators make carry it (ForwardedForAnnotation), so that the caller,
// and no other caller of this allocator, can Release them through it.
// memo, if not nil, is in's own (see Memo): a request sent again is
// forwarded as encoded the first time.
func (f *Forwarder) AllocateFor(ctx context.Context, identity string, in *allocation.AllocationRequest, memo *Memo, seed uint64, local Local) (*allocation.AllocationResponse, error) {
	return f.Forward(ctx, Call{Identity: identity, Sent: in, Memo: memo, Seed: seed}, local)
}

// Call is one multi-cluster request.
type Call struct {
	// Identity is the caller's (see AllocateFor).
	Identity string
	// Sent is the request as the caller sent it: what is forwarded.
	Sent *allocation.AllocationRequest
	// Decoded is Sent as the service normalized it: the namespace, the
	// policy selector and the idempotency key are read from it. When nil
	// they are read from Sent.
	Decoded *core.Request
	// Memo, if not nil, is Sent's own (see Memo).
	Memo *Memo
	// Seed orders clusters of equal priority.
	Seed uint64
}

// decodedOf is the part of in that Forward reads, for a Call without its
// decoded request.
func decodedOf(in *allocation.AllocationRequest) *core.Request {
	meta := in.GetMetadata()
	if meta == nil {
		meta = in.GetMetaPatch() //nolint:staticcheck // SA1019: honoured when metadata is absent.
	}
	return &core.Request{
		Namespace:    in.GetNamespace(),
		Metadata:     core.MetaPatch{Annotations: meta.GetAnnotations()},
		MultiCluster: core.MultiClusterSetting{Enabled: true, PolicySelector: in.GetMultiClusterSetting().GetPolicySelector().GetMatchLabels()},
	}
}

// forwarding is one request's state across its clusters: its forwarded
// key, and the remote endpoints that may hold an allocation made with it
// (sent, no answer).
type forwarding struct {
	identity  string
	callerKey string // the caller's own key, if any
	key       string // the forwarded key; made when first needed
	held      []heldAt
}

// forwardedKey is the key fw's request is forwarded with: the caller's,
// derived; else one of the forwarder's own when own is set; else none.
func (fw *forwarding) forwardedKey(keys *requestKeys, own bool) string {
	if fw.key == "" {
		switch {
		case fw.callerKey != "":
			fw.key = derivedKey(fw.identity, fw.callerKey)
		case own:
			fw.key = keys.next()
		}
	}
	return fw.key
}

func (fw *forwarding) hold(h heldAt) {
	for _, o := range fw.held {
		if o.endpoint == h.endpoint && o.target == h.target {
			return
		}
	}
	fw.held = append(fw.held, h)
}

// Forward serves c: see Allocate and AllocateFor.
func (f *Forwarder) Forward(ctx context.Context, c Call, local Local) (*allocation.AllocationResponse, error) {
	if err := f.Crossed(ctx); err != nil {
		return nil, err
	}
	if r, ok := f.src.(ReadySource); ok {
		if err := r.Ready(); err != nil {
			return nil, status.Errorf(codes.Unavailable, "multi-cluster policies are not available yet: %v", err)
		}
	}
	req, decoded := c.Decoded, c.Decoded != nil
	if !decoded {
		req = decodedOf(c.Sent)
	}
	ns := req.Namespace
	if ns == "" {
		ns = core.DefaultNamespace
	}
	// The policies in force now, one snapshot per request (window.go).
	selected, err := f.policiesInForce(ns, req.MultiCluster.PolicySelector)
	if err != nil {
		return nil, err
	}
	fw := forwarding{identity: c.Identity, callerKey: callerKey(ctx, req, decoded)}
	order := selected
	if len(selected) > 1 {
		// (One policy is its own order; OrderClusters would still build
		// its tiers, maps and copy, per request.)
		seed := c.Seed
		if fw.callerKey != "" {
			// The caller's retry, through any replica, must meet first
			// the cluster that may hold its allocation from an answer
			// lost this time: a keyed request's order is its key's.
			seed = keySeed(fw.forwardedKey(nil, false))
		}
		order = core.OrderClusters(selected, seed)
	}
	hops := f.self
	if crossed := hopsOf(ctx); len(crossed) > 0 {
		hops = strings.Join(append(crossed, f.self), ",")
	}

	if fw.callerKey != "" {
		return f.forwardKeyed(ctx, c, order, ns, hops, &fw, local)
	}
	var tries []try // only a failing request needs them
	for i, p := range order {
		if ctx.Err() != nil {
			tries = notTried(tries, order[i:])
			break
		}
		resp, t := f.tryCluster(ctx, p, c, ns, hops, &fw, local)
		if resp != nil {
			if fw.held != nil {
				f.settle(&fw, where(p))
			}
			return resp, nil
		}
		tries = append(tries, t)
	}
	if fw.held != nil {
		// Nobody can ask for an allocation made with the forwarder's own
		// key: give it back.
		f.settle(&fw, "")
	}
	return nil, f.summary(ctx, ns, tries)
}

// notTried adds to tries the clusters of rest, not tried because the
// caller's deadline had passed.
func notTried(tries []try, rest []core.Policy) []try {
	for _, q := range rest {
		tries = append(tries, try{cluster: q.Connection.ClusterName, where: where(q), out: outDeadline,
			code: codes.DeadlineExceeded, msg: "not tried: the caller's deadline had passed"})
	}
	return tries
}

// tryCluster tries the cluster of p, and counts it.
func (f *Forwarder) tryCluster(ctx context.Context, p core.Policy, c Call, ns, hops string, fw *forwarding, local Local) (*allocation.AllocationResponse, try) {
	var resp *allocation.AllocationResponse
	var t try
	start := time.Now()
	if p.Connection.IsLocal() {
		resp, t = f.tryLocal(ctx, p, c.Sent, ns, local)
	} else {
		resp, t = f.tryRemote(ctx, p, c.Sent, c.Memo, ns, hops, fw)
	}
	f.m.latency.WithLabelValues(t.cluster).Observe(time.Since(start).Seconds())
	f.m.tries.WithLabelValues(t.cluster, string(t.out)).Inc()
	return resp, t
}

// maxPlaceConflicts bounds how often one request finds the record of its
// key changed by another try of it before it gives up (Unavailable: the
// caller sends it again).
const maxPlaceConflicts = 3

// forwardKeyed serves a request with the caller's key, whose clusters
// are in order: each cluster is recorded in the Placements before the
// request is sent there, and the request goes on to the next cluster only
// when that one answered that nothing was allocated for the key
// (afterKeyedTry). A cluster
// that may hold the key's allocation (its answer was lost, or an earlier
// try's record names it and it cannot be asked) ends the request with an
// answer the caller retries; the retry asks that cluster first.
func (f *Forwarder) forwardKeyed(ctx context.Context, c Call, order []core.Policy, ns, hops string, fw *forwarding, local Local) (*allocation.AllocationResponse, error) {
	key := fw.forwardedKey(nil, false)
	plan := append(make([]core.Policy, 0, len(order)), order...)
	var tries []try
	version := ""      // the record's version as this request last saw it
	inherited := false // the record named plan[0] before this request placed it
	empty := false     // the cluster the record names answered that it holds nothing
	for conflicts := 0; len(plan) > 0; {
		if ctx.Err() != nil {
			if empty {
				f.clearPlacement(ctx, key, version)
			}
			return nil, f.summary(ctx, ns, notTried(tries, plan))
		}
		name := plan[0].Connection.ClusterName
		cur, curVersion, ok, err := f.places.Place(ctx, key, name, version)
		if err != nil {
			f.m.placements.WithLabelValues(placeFailed).Inc()
			return nil, placeError(ctx, name, err)
		}
		if !ok {
			f.m.placements.WithLabelValues(placeConflict).Inc()
			if conflicts++; conflicts > maxPlaceConflicts {
				return nil, status.Errorf(codes.Unavailable,
					"other tries of this request's idempotency key keep moving it between clusters (now %q): send it again with the same key", cur)
			}
			switch i := clusterIndex(plan, cur); {
			case cur == "" || cur == name:
				inherited = inherited || cur == name
			case version != "":
				// This request placed the key, and another try of it
				// moved it since: that try goes on from there.
				return nil, status.Errorf(codes.Unavailable,
					"another try of this request's idempotency key has moved it to cluster %q meanwhile: send it again with the same key", cur)
			case i < 0:
				return nil, status.Errorf(codes.Unavailable,
					"an earlier try of this request's idempotency key was sent to cluster %q, which may hold its allocation, and no policy in force now names that cluster: send it again with the same key once the policy is back, or use a new key",
					cur)
			default:
				// An earlier try went to cur: ask it first.
				p := plan[i]
				copy(plan[1:i+1], plan[:i])
				plan[0], inherited = p, true
			}
			version = curVersion
			continue
		}
		f.m.placements.WithLabelValues(placePlaced).Inc()
		version = curVersion
		resp, t := f.tryCluster(ctx, plan[0], c, ns, hops, fw, local)
		if resp != nil {
			return resp, nil
		}
		tries = append(tries, t)
		switch afterKeyedTry(t, plan[0].Connection.IsLocal(), inherited, fw) {
		case retryThere:
			f.m.placements.WithLabelValues(placeHeld).Inc()
			return nil, heldForRetry(f.summary(ctx, ns, tries), []string{name})
		case answerIt:
			return nil, f.summary(ctx, ns, tries)
		}
		plan, inherited, empty, conflicts = plan[1:], false, true, 0
	}
	// Every cluster answered that it holds nothing for the key: so the
	// record says (a retry then takes the order afresh).
	f.clearPlacement(ctx, key, version)
	return nil, f.summary(ctx, ns, tries)
}

// clearPlacement records that no cluster holds key's allocation, from
// version, even when the caller has gone (briefly): a record left naming
// a cluster that holds nothing would make the next try wait for that
// cluster. Should it fail, that is all that happens.
func (f *Forwarder) clearPlacement(ctx context.Context, key, version string) {
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), clearPlacementTimeout)
	defer cancel()
	_, _, _, _ = f.places.Place(cctx, key, "", version)
}

// clearPlacementTimeout bounds clearPlacement.
const clearPlacementTimeout = 2 * time.Second

// clusterIndex is the index in plan of the policy for cluster, or -1.
func clusterIndex(plan []core.Policy, cluster string) int {
	for i, p := range plan {
		if p.Connection.ClusterName == cluster {
			return i
		}
	}
	return -1
}

// keyedNext is what a caller-keyed request does after a cluster's try.
type keyedNext uint8

const (
	// nextCluster: the cluster holds nothing for the key.
	nextCluster keyedNext = iota
	// retryThere: it may hold the key's allocation; the caller is to
	// send the request again, and the retry asks it first.
	retryThere
	// answerIt: it refused the request, or its key, for a reason the
	// caller must see (a key used with another request, or released
	// there); the record stays.
	answerIt
)

// afterKeyedTry classifies the try t of a caller-keyed request at a
// cluster (local, or not). Only an answer that nothing was allocated
// moves the request on: "no game server", a refusal that wrote nothing
// (contention, permissions), or a cluster this request never reached and
// no earlier try's record names (inherited). An error that may follow a
// write (the store or the remote unavailable, an internal error), an
// answer lost after the request was sent, the deadline passing during a
// local allocation (which runs on to its end), or a recorded cluster that
// cannot be asked: the allocation may be there.
func afterKeyedTry(t try, local, inherited bool, fw *forwarding) keyedNext {
	sentLost := false
	for _, h := range fw.held {
		sentLost = sentLost || h.cluster == t.where
	}
	switch t.out {
	case outUnallocated:
		return nextCluster
	case outRefused:
		switch t.code {
		case codes.Unavailable, codes.Internal, codes.Unknown, codes.DeadlineExceeded, codes.DataLoss, codes.Canceled:
			return retryThere
		case codes.InvalidArgument, codes.FailedPrecondition:
			return answerIt
		}
		return nextCluster
	case outDeadline:
		if local {
			return retryThere
		}
	}
	if sentLost || inherited {
		return retryThere
	}
	return nextCluster
}

// placeError is the answer when the record of where a keyed request is
// sent cannot be written: the request is not sent anywhere. A status
// error from the Placements (a permission to grant, say) keeps its code.
func placeError(ctx context.Context, cluster string, err error) error {
	code := codes.Unavailable
	if st, ok := status.FromError(err); ok && st.Code() != codes.Unknown {
		code = st.Code()
	}
	switch ctx.Err() {
	case context.DeadlineExceeded:
		code = codes.DeadlineExceeded
	case context.Canceled:
		code = codes.Canceled
	}
	return status.Errorf(code, "recording that this request's idempotency key is sent to cluster %q: %v; nothing was sent: send it again with the same key", cluster, err)
}

// heldForRetry is the answer to a keyed request that no cluster served
// while an allocation may be held for its key in clusters. The caller
// must send the request again with its key (it then meets that cluster
// first, and gets the allocation), so the answer is one a caller
// retries: Unavailable, whatever the other clusters said. "No game
// server" would have the caller give up and leave the server held.
func heldForRetry(err error, clusters []string) error {
	st := status.Convert(err)
	code := st.Code()
	if code != codes.DeadlineExceeded && code != codes.Canceled {
		code = codes.Unavailable
	}
	return status.Errorf(code, "%s; cluster %s may hold an allocation for this request's key (a try of it was sent there and no answer has come back, or it cannot be asked now): send it again with the same key",
		st.Message(), strings.Join(clusters, " and "))
}

// settle queues the release of fw's allocations that may be held in
// clusters other than served's.
func (f *Forwarder) settle(fw *forwarding, served string) {
	var give []heldAt
	for _, h := range fw.held {
		if h.cluster != served {
			give = append(give, h)
		}
	}
	if len(give) > 0 {
		f.rec.add(give)
	}
}

func where(p core.Policy) string {
	if p.Connection.IsLocal() {
		return "local"
	}
	return strings.Join(p.Connection.Endpoints, ", ")
}

func formatSelector(sel map[string]string) string {
	if len(sel) == 0 {
		return "{} (every policy)"
	}
	keys := make([]string, 0, len(sel))
	for k := range sel {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = k + "=" + sel[k]
	}
	return "{" + strings.Join(parts, ",") + "}"
}

func (f *Forwarder) tryLocal(ctx context.Context, p core.Policy, in *allocation.AllocationRequest, ns string, local Local) (*allocation.AllocationResponse, try) {
	t := try{cluster: p.Connection.ClusterName, where: "local"}
	req := proto.Clone(in).(*allocation.AllocationRequest)
	if req.MultiClusterSetting != nil {
		req.MultiClusterSetting.Enabled = false
	}
	req.Namespace = ns
	if p.Connection.Namespace != "" {
		req.Namespace = p.Connection.Namespace
	}
	resp, err := local(ctx, req)
	if err == nil {
		t.out = outAllocated
		return resp, t
	}
	st := status.Convert(err)
	t.code, t.msg = st.Code(), st.Message()
	switch {
	case ctx.Err() != nil:
		t.out = outDeadline
	case t.code == f.unallocated || t.code == codes.ResourceExhausted:
		t.out = outUnallocated
	default:
		t.out = outRefused
	}
	return nil, t
}

// tryRemote forwards to one remote cluster. Within it, a transport failure
// moves to the next endpoint; a round in which no endpoint answered is
// repeated after a backoff while retries and the caller's deadline allow.
// Any answer from an allocator ends the cluster's turn at once. A request
// that was sent and got no answer (the remote may have allocated) is sent
// to the same endpoint again, with the same key, before anything else.
func (f *Forwarder) tryRemote(ctx context.Context, p core.Policy, in *allocation.AllocationRequest, memo *Memo, ns, hops string, fw *forwarding) (*allocation.AllocationResponse, try) {
	t := try{cluster: p.Connection.ClusterName, where: where(p)}
	rc, ok := f.prepareRemote(ctx, p, in, memo, ns, hops, fw, &t)
	if !ok {
		return nil, t
	}
	var last []string
	for round := 0; ; round++ {
		reached := false
		for _, ep := range rc.endpoints {
			br := f.breaker(ep)
			if !br.allow() {
				// The background prober closes it when the endpoint is
				// back; no request waits for that.
				last = append(last, ep+": breaker open (recent transport failures), skipped")
				continue
			}
			reached = true
			resp, failure, done := f.tryEndpoint(ctx, &rc, ep, br, fw, &t)
			if done {
				return resp, t
			}
			last = append(last, failure)
		}
		t.code, t.msg = codes.Unavailable, strings.Join(last, "; ")
		t.out = outUnavailable
		if !reached {
			t.out = outBreakerOpen
		}
		if !reached || round >= f.retries {
			return nil, t
		}
		wait := f.backoff << round
		wait += time.Duration(mrand.Int64N(int64(wait)/2 + 1)) // jitter: up to half again
		// The caller's deadline is wall-clock time whatever the Clock.
		if dl, ok := ctx.Deadline(); ok && time.Until(dl) < wait {
			return nil, t // no time left for another round
		}
		if err := f.clock.Sleep(ctx, wait); err != nil {
			t.out, t.code = outDeadline, codes.DeadlineExceeded
			t.msg += "; the caller's deadline passed while waiting to retry"
			return nil, t
		}
		last = last[:0]
	}
}

// remoteCall is a request made ready for one remote cluster by
// prepareRemote: where it goes, with which credentials, and what is sent.
type remoteCall struct {
	policy    core.Policy
	ns        string // the request's namespace, where the Secret is
	target    string // the namespace asked for on the remote
	endpoints []string
	sec       Secret
	key       string // the forwarded idempotency key, "" for none
	// msg is what is sent: the request, or its encoding (keyed, when the
	// request carries a key).
	msg   any
	keyed *encodedRequest
	// octx is the caller's context with the outgoing metadata (the hops).
	octx context.Context
}

// releaseAt is where rc's allocation for identity is released, by its
// key, at endpoint ep of cluster (a where).
func (rc *remoteCall) releaseAt(cluster, ep, identity string) heldAt {
	return heldAt{cluster: cluster, endpoint: ep, namespace: rc.ns, secretName: rc.policy.Connection.SecretName,
		serverCA: rc.policy.Connection.ServerCA, target: rc.target, identity: identity, key: rc.key}
}

// misconfigured makes t the answer to a policy that cannot be used.
func (t *try) misconfigured(ns string, p core.Policy, format string, args ...any) {
	t.out, t.code = outMisconfig, codes.FailedPrecondition
	t.msg = "policy " + ns + "/" + p.Name + ": " + fmt.Sprintf(format, args...)
}

// prepareRemote checks p's connection (its endpoints and its Secret in
// ns) and makes the request ready to send to its cluster. When the request
// cannot be sent there, it says why in t and ok is false.
func (f *Forwarder) prepareRemote(ctx context.Context, p core.Policy, in *allocation.AllocationRequest, memo *Memo, ns, hops string, fw *forwarding, t *try) (rc remoteCall, ok bool) {
	if err := ValidatePolicy(p); err != nil {
		t.misconfigured(ns, p, "%v", err)
		return rc, false
	}
	rc = remoteCall{policy: p, ns: ns, target: ns, endpoints: make([]string, len(p.Connection.Endpoints))}
	for i, e := range p.Connection.Endpoints {
		rc.endpoints[i], _ = Endpoint(e) // validated above
	}
	// The Secret lives in the request's namespace, as Agones reads it.
	if rc.sec, ok = f.src.Secret(ns, p.Connection.SecretName); !ok {
		if e, isE := f.src.(SecretExplainer); isE {
			if err := e.SecretError(ns, p.Connection.SecretName); err != nil {
				t.misconfigured(ns, p, "Secret %s/%s (spec.connectionInfo.secretName): %v", ns, p.Connection.SecretName, err)
				return rc, false
			}
		}
		t.misconfigured(ns, p, "Secret %s/%s (spec.connectionInfo.secretName) not found", ns, p.Connection.SecretName)
		return rc, false
	}
	rc.key = fw.forwardedKey(f.keys, f.ownKeys)
	if p.Connection.Namespace != "" {
		rc.target = p.Connection.Namespace
	}
	var err error
	if rc.msg, rc.keyed, err = f.remoteMessage(in, memo, fw.identity, rc.target, rc.key); err != nil {
		t.out, t.code = outRefused, codes.InvalidArgument
		t.msg = "the request cannot be encoded: " + err.Error()
		return rc, false
	}
	if hops == f.self {
		// A request no other allocator forwarded (the usual one): the
		// same metadata every time, built once; AppendToOutgoingContext
		// copies its arguments into new slices per call.
		rc.octx = metadata.NewOutgoingContext(ctx, f.selfMD)
	} else {
		rc.octx = metadata.AppendToOutgoingContext(ctx, HopsKey, hops)
	}
	return rc, true
}

// remoteMessage is the request as sent to namespace target for identity:
// encoded already when the Memo has it, and followed by its key when it
// has one (keyed is then the message).
func (f *Forwarder) remoteMessage(in *allocation.AllocationRequest, memo *Memo, identity, target, key string) (msg any, keyed *encodedRequest, err error) {
	base := memo.get(identity, target)
	if base == nil {
		req := ForwardRequest(in, target)
		f.forwardedFor(req, identity) // see release.go
		if base = memo.encode(identity, target, req); base == nil {
			if key == "" {
				return req, nil, nil
			}
			b, err := req.MarshalVT()
			if err != nil {
				return nil, nil, err
			}
			base = &encodedRequest{data: mem.BufferSlice{mem.SliceBuffer(b)}}
		}
	}
	if key != "" {
		keyed = withKey(base.data, key)
		return keyed, keyed, nil
	}
	return base, nil, nil
}

// tryEndpoint sends rc to the endpoint ep, whose breaker is br. done says
// the cluster's turn is over: an allocator answered, or the caller's
// deadline passed, or the policy cannot be used; t and resp then say how.
// Otherwise ep could not be reached or gave no answer in time, and failure
// says so, for the summary.
func (f *Forwarder) tryEndpoint(ctx context.Context, rc *remoteCall, ep string, br *breaker, fw *forwarding, t *try) (resp *allocation.AllocationResponse, failure string, done bool) {
	resp, sent, lost, err := f.sendRetryingLost(ctx, rc, ep, br, t.cluster)
	if err != nil && isMisconfig(err) {
		t.misconfigured(rc.ns, rc.policy, "%v", err)
		return nil, "", true
	}
	if err == nil {
		br.success()
		resp.Source = ep
		if c, ok := f.clusterOf.Load(ep); !ok || c.(string) != t.cluster {
			f.clusterOf.Store(ep, t.cluster)
		}
		t.out = outAllocated
		return resp, "", true
	}
	if sent {
		fw.hold(rc.releaseAt(t.where, ep, fw.identity))
	}
	st := status.Convert(err)
	if ctx.Err() != nil || deadlinePassed(ctx) {
		// (A remote resets a call with CANCEL when the deadline it
		// was sent passes, which may reach grpc-go before the
		// caller's context says so: the caller's deadline still,
		// not the remote's failure.)
		t.out, t.code = outDeadline, codes.DeadlineExceeded
		t.msg = fmt.Sprintf("%s: the caller's deadline passed during the call", ep)
		return nil, "", true
	}
	if transportFailure(err) {
		// Not an answer from an allocator: the endpoint is down,
		// unreachable, or slower than the try timeout.
		if lost {
			return nil, fmt.Sprintf("%s: the request was sent and its answer lost (%s: %s)", ep, st.Code(), st.Message()), false
		}
		return nil, fmt.Sprintf("%s: %s (%s)", ep, st.Message(), st.Code()), false
	}
	br.success()
	t.code, t.msg = st.Code(), ep+": "+st.Message()
	if st.Code() == codes.ResourceExhausted || st.Code() == f.unallocated {
		t.out = outUnallocated
	} else {
		t.out = outRefused
	}
	return nil, "", true
}

// sendRetryingLost sends rc to ep, and sends it again while it was sent
// and its answer lost (up to the forwarder's lostRetries, while ep's
// breaker allows): a keyed request sent again gets the allocation a remote
// made for it. sent says the request may have reached the remote, lost
// that an answer was lost at least once.
func (f *Forwarder) sendRetryingLost(ctx context.Context, rc *remoteCall, ep string, br *breaker, cluster string) (resp *allocation.AllocationResponse, sent, lost bool, err error) {
	creds := probeCreds{sec: rc.sec, serverCA: rc.policy.Connection.ServerCA}
	for again := 0; ; again++ {
		var s bool
		resp, s, err = f.invoke(ctx, rc.octx, ep, rc.sec, rc.policy.Connection.ServerCA, rc.msg, rc.keyed)
		sent = sent || s
		if err == nil || !transportFailure(err) || ctx.Err() != nil || deadlinePassed(ctx) {
			return resp, sent, lost, err
		}
		br.failure(f.clock.Now(), creds)
		if !s {
			// Not sent: the endpoint is down or unreachable. (A
			// request without a key is not told apart: it is
			// never sent again here, as it could allocate twice.)
			return resp, sent, lost, err
		}
		// Sent, and no answer: the remote may have allocated.
		// The same request again, with the same key, gets that
		// allocation from a remote that has it.
		lost = true
		f.m.lost.WithLabelValues(cluster).Inc()
		if again >= f.lostRetries || !br.allow() {
			return resp, sent, lost, err
		}
	}
}

// misconfigError is a client that cannot be built from the policy.
type misconfigError struct{ error }

func isMisconfig(err error) bool {
	var m misconfigError
	return errors.As(err, &m)
}

// transportFailure reports whether err is not an allocator's answer: the
// endpoint is down, unreachable, or slower than the try timeout.
func transportFailure(err error) bool {
	switch status.Code(err) {
	case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled:
		return true
	}
	return false
}

// invoke sends msg to ep once. For a keyed request (msg is keyed), sent
// reports whether grpc-go took the request's bytes to write them on a call
// (it does so once the call has a stream on a connection): a failure with
// sent false was refused before anything of the request left, and the
// remote cannot have acted on it; with sent true it may have. A request
// without a key is not followed: sent is false.
func (f *Forwarder) invoke(ctx, octx context.Context, ep string, sec Secret, serverCA []byte, msg any, keyed *encodedRequest) (resp *allocation.AllocationResponse, sent bool, err error) {
	c, err := f.clients.get(ep, sec, serverCA, false)
	if err != nil {
		return nil, false, misconfigError{err}
	}
	tctx, cancel := octx, context.CancelFunc(nil)
	if dl, ok := ctx.Deadline(); !ok || time.Until(dl) > f.tryTimeout {
		// (A caller's deadline within the try timeout bounds the try
		// already, without a timer and context per call.)
		tctx, cancel = context.WithTimeout(octx, f.tryTimeout)
	}
	var encodings int32
	if keyed != nil {
		encodings = keyed.encodings.Load()
	}
	resp = new(allocation.AllocationResponse)
	err = c.cc.Invoke(tctx, allocation.AllocationService_Allocate_FullMethodName, msg, resp)
	if cancel != nil {
		cancel()
	}
	f.clients.put(c)
	if err != nil {
		return nil, keyed != nil && keyed.encodings.Load() != encodings, err
	}
	return resp, true, nil
}

// deadlinePassed reports whether ctx's deadline is behind the clock,
// which may be a moment before ctx is done.
func deadlinePassed(ctx context.Context) bool {
	dl, ok := ctx.Deadline()
	return ok && !time.Now().Before(dl)
}

// summary is the error of a request no cluster served: every cluster
// tried and why, with the code of the last meaningful failure.
func (f *Forwarder) summary(ctx context.Context, ns string, tries []try) error {
	parts := make([]string, len(tries))
	for i, t := range tries {
		parts[i] = t.String()
	}
	msg := fmt.Sprintf("multi-cluster allocation in namespace %q failed on every cluster: %s", ns, strings.Join(parts, "; "))
	var code codes.Code
	switch err := ctx.Err(); {
	case errors.Is(err, context.Canceled):
		code = codes.Canceled
	case err != nil:
		code = codes.DeadlineExceeded
	default:
		code = f.finalCode(tries)
	}
	return status.Error(code, msg)
}

func (f *Forwarder) finalCode(tries []try) codes.Code {
	allUnallocated, allUnreachable := true, true
	for _, t := range tries {
		if t.out != outUnallocated {
			allUnallocated = false
		}
		if t.out != outUnavailable && t.out != outBreakerOpen {
			allUnreachable = false
		}
	}
	switch {
	case allUnallocated:
		return f.unallocated
	case allUnreachable:
		return codes.Unavailable
	}
	// The last answer an allocator gave, else the last configuration
	// error, else the last deadline.
	for i := len(tries) - 1; i >= 0; i-- {
		switch tries[i].out {
		case outUnallocated:
			return f.unallocated
		case outRefused:
			return tries[i].code
		}
	}
	for _, want := range []outcome{outMisconfig, outDeadline} {
		for i := len(tries) - 1; i >= 0; i-- {
			if tries[i].out == want {
				return tries[i].code
			}
		}
	}
	return codes.Unavailable
}

// ForwardRequest is the request a forwarder sends to a remote cluster,
// with the fields Agones' forwarder sets: namespace set to the policy's,
// multiClusterSetting present with enabled=false and the policySelector
// kept, the selectors both as gameServerSelectors and in the deprecated
// required (the last) and preferred (the others) form, and the metadata in
// both metadata and the deprecated metaPatch, so that an older allocator
// reads the same request. The result shares sub-messages with in: change
// neither while it is in use.
func ForwardRequest(in *allocation.AllocationRequest, namespace string) *allocation.AllocationRequest {
	out := &allocation.AllocationRequest{
		Namespace:  namespace,
		Scheduling: in.GetScheduling(),
		MultiClusterSetting: &allocation.MultiClusterSetting{
			Enabled:        false,
			PolicySelector: &allocation.LabelSelector{MatchLabels: in.GetMultiClusterSetting().GetPolicySelector().GetMatchLabels()},
		},
		Priorities: in.GetPriorities(),
		Counters:   in.GetCounters(),
		Lists:      in.GetLists(),
	}
	sels := in.GetGameServerSelectors()
	if len(sels) == 0 {
		//nolint:staticcheck // SA1019: the deprecated form is what this request used.
		sels = append(append([]*allocation.GameServerSelector(nil), in.GetPreferredGameServerSelectors()...), in.GetRequiredGameServerSelector())
		if sels[len(sels)-1] == nil {
			sels[len(sels)-1] = &allocation.GameServerSelector{}
		}
	}
	out.GameServerSelectors = sels
	//nolint:staticcheck // SA1019: written for allocators that read only the deprecated fields.
	out.PreferredGameServerSelectors = sels[:len(sels)-1]
	//nolint:staticcheck // SA1019: as above.
	out.RequiredGameServerSelector = sels[len(sels)-1]

	meta := in.GetMetadata()
	if meta == nil {
		meta = in.GetMetaPatch() //nolint:staticcheck // SA1019: honoured when metadata is absent.
	}
	out.Metadata = &allocation.MetaPatch{Labels: meta.GetLabels(), Annotations: meta.GetAnnotations()}
	//nolint:staticcheck // SA1019: the double write Agones does.
	out.MetaPatch = &allocation.MetaPatch{Labels: meta.GetLabels(), Annotations: meta.GetAnnotations()}
	// out shares sub-messages (selectors, counters, maps) with in instead
	// of copying them, and is only read: marshalled by each call, which
	// ends before Allocate returns.
	return out
}

// metrics of the forwarder, on a registry the caller passes.
type metrics struct {
	tries   *prometheus.CounterVec
	latency *prometheus.HistogramVec
	breaker *prometheus.GaugeVec
	probes  *prometheus.CounterVec
	// Lost answers and their reconciliation (reconcile.go).
	lost             *prometheus.CounterVec
	reconciles       *prometheus.CounterVec
	reconcilePending prometheus.Gauge
	// Records of where caller-keyed requests went (placements.go).
	placements *prometheus.CounterVec
}

// The outcomes of qm_forward_key_placements_total.
const (
	placePlaced   = "placed"
	placeConflict = "conflict"
	placeFailed   = "failed"
	placeHeld     = "held"
)

func newMetrics() *metrics {
	return &metrics{
		tries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "qm_forward_tries_total",
			Help: "Multi-cluster tries by cluster and outcome (allocated, unallocated, refused, unavailable, breaker_open, misconfigured, deadline).",
		}, []string{"cluster", "outcome"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "qm_forward_duration_seconds",
			Help:    "Time spent on one cluster of a multi-cluster allocation, retries included.",
			Buckets: prometheus.ExponentialBuckets(100e-6, 2.5, 14),
		}, []string{"cluster"}),
		breaker: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "qm_forward_breaker_state",
			Help: "Breaker of a remote allocator endpoint: 0 closed, 1 open, 2 half-open.",
		}, []string{"endpoint"}),
		probes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "qm_forward_probes_total",
			Help: "Background health probes of remote allocator endpoints whose breaker is open, by outcome (up: the breaker closed; down: it stays open, for twice as long).",
		}, []string{"endpoint", "outcome"}),
		lost: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "qm_forward_answers_lost_total",
			Help: "Forwarded requests that reached a remote allocator and got no answer (the connection broke or the try timed out after the request was sent), by cluster: the remote may have allocated.",
		}, []string{"cluster"}),
		reconciles: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "qm_forward_reconciliations_total",
			Help: "Releases of allocations whose answers were lost, at remotes whose allocation nobody received, by outcome (queued, attempted: a release sent, released, nothing_there: the remote held nothing for the key, given_up).",
		}, []string{"outcome"}),
		reconcilePending: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "qm_forward_reconciliations_pending",
			Help: "Releases of allocations whose answers were lost, queued or under way.",
		}),
		placements: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "qm_forward_key_placements_total",
			Help: "Records of the cluster a request with the caller's idempotency key is sent to, by outcome (placed: recorded before a send; conflict: another try of the key changed the record first; failed: it could not be written, and nothing was sent; held: the request was answered Unavailable because the recorded cluster may hold its allocation).",
		}, []string{"outcome"}),
	}
}

func (m *metrics) register(r prometheus.Registerer) error {
	for _, c := range []prometheus.Collector{m.tries, m.latency, m.breaker, m.probes, m.lost, m.reconciles, m.reconcilePending, m.placements} {
		if err := r.Register(c); err != nil {
			return fmt.Errorf("forward: registering metrics: %w", err)
		}
	}
	return nil
}
