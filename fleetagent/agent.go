package fleetagent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"math/rand/v2"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
)

// The resources the agent reads and writes.
var (
	FleetResource      = schema.GroupVersionResource{Group: "agones.dev", Version: "v1", Resource: "fleets"}
	GameServerResource = schema.GroupVersionResource{Group: "agones.dev", Version: "v1", Resource: "gameservers"}
)

// Labels and annotations, as Agones names them where Agones has one.
const (
	FleetLabel              = "agones.dev/fleet"
	GameServerSetLabel      = "agones.dev/gameserverset"
	LastAllocatedAnnotation = "agones.dev/last-allocated"
	// ScheduledAtAnnotation is when the agent created a server, by the
	// agent's clock: creationTimestamp has one-second resolution and the
	// server's clock, which a fake clock in tests cannot move.
	ScheduledAtAnnotation = "quartermaster.dev/scheduled-at"
)

// GameServer states the agent writes or acts on (Agones' names).
const (
	stateScheduled = "Scheduled"
	stateReady     = "Ready"
	stateReserved  = "Reserved"
	stateAllocated = "Allocated"
	stateShutdown  = "Shutdown"
	stateError     = "Error"
	stateUnhealthy = "Unhealthy"
)

// Clock is the agent's only source of time.
type Clock interface{ Now() time.Time }

// RealClock is the wall clock.
type RealClock struct{}

// Now implements Clock.
func (RealClock) Now() time.Time { return time.Now() }

// Config configures an Agent.
type Config struct {
	// Client reaches the API server.
	Client dynamic.Interface
	// Namespace to manage; "" manages Fleets in every namespace.
	Namespace string
	// Nodes is the size of the simulated node pool (default 50).
	Nodes int
	// MaxPerNode is how many servers a Packed fleet puts on a node before
	// it starts the next one (default 20).
	MaxPerNode int
	// Startup is how long a server stays Scheduled before it is Ready
	// (0: Ready on the next pass).
	Startup time.Duration
	// Session is how long an Allocated server plays before the agent
	// shuts it down and replaces it (0: sessions never end).
	Session time.Duration
	// Interval between passes in Run (default 500ms).
	Interval time.Duration
	// Workers bounds the writes in flight at once (default 8).
	Workers int
	// MaxWritesPerFleet bounds the creates and deletes one pass makes for
	// one fleet, so a pass stays short and sees fresh state soon (default
	// 500).
	MaxWritesPerFleet int
	// Clock defaults to RealClock.
	Clock Clock
	// Seed makes generated names reproducible (0: from the clock).
	Seed uint64
	// Logger defaults to slog.Default().
	Logger *slog.Logger
}

// Stats counts what passes did (cumulative since New).
type Stats struct {
	Created, Readied, SessionsEnded, ShutDown, Deleted, Conflicts, FleetStatusWrites int64
}

// Agent keeps Fleets' GameServers. Sync may not run concurrently with
// itself; Run calls it from one goroutine.
type Agent struct {
	cfg Config
	log *slog.Logger

	mu            sync.Mutex
	rng           *rand.Rand
	allocatedSeen map[types.UID]time.Time // first pass that saw a server Allocated without a parseable annotation

	created, readied, ended, shutdown, deleted, conflicts, statusWrites atomic.Int64
}

// New checks cfg and builds an Agent.
func New(cfg Config) (*Agent, error) {
	if cfg.Client == nil {
		return nil, errors.New("fleetagent: Config.Client is required")
	}
	if cfg.Nodes == 0 {
		cfg.Nodes = 50
	}
	if cfg.MaxPerNode == 0 {
		cfg.MaxPerNode = 20
	}
	if cfg.Interval == 0 {
		cfg.Interval = 500 * time.Millisecond
	}
	if cfg.Workers == 0 {
		cfg.Workers = 8
	}
	if cfg.MaxWritesPerFleet == 0 {
		cfg.MaxWritesPerFleet = 500
	}
	switch {
	case cfg.Nodes < 0 || cfg.Nodes > 65000:
		return nil, fmt.Errorf("fleetagent: Nodes %d: want 1..65000", cfg.Nodes)
	case cfg.MaxPerNode < 0, cfg.Workers < 0, cfg.MaxWritesPerFleet < 0:
		return nil, errors.New("fleetagent: MaxPerNode, Workers and MaxWritesPerFleet must not be negative")
	case cfg.Startup < 0, cfg.Session < 0, cfg.Interval < 0:
		return nil, errors.New("fleetagent: Startup, Session and Interval must not be negative")
	}
	if cfg.Clock == nil {
		cfg.Clock = RealClock{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	seed := cfg.Seed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	return &Agent{
		cfg:           cfg,
		log:           cfg.Logger,
		rng:           rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		allocatedSeen: map[types.UID]time.Time{},
	}, nil
}

// Stats returns the counts so far.
func (a *Agent) Stats() Stats {
	return Stats{
		Created: a.created.Load(), Readied: a.readied.Load(), SessionsEnded: a.ended.Load(),
		ShutDown: a.shutdown.Load(), Deleted: a.deleted.Load(), Conflicts: a.conflicts.Load(),
		FleetStatusWrites: a.statusWrites.Load(),
	}
}

// Run makes a pass every Interval until ctx ends. A failed pass is logged
// and the next one starts from fresh state; Run returns nil when ctx ends.
func (a *Agent) Run(ctx context.Context) error {
	t := time.NewTicker(a.cfg.Interval)
	defer t.Stop()
	for {
		// Bound each pass so a hung API server cannot stall the agent
		// forever; the next pass retries.
		pctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		err := a.Sync(pctx)
		cancel()
		if err != nil && ctx.Err() == nil {
			a.log.Warn("fleet agent pass failed", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// Sync makes one pass over every Fleet: it reads Fleets and GameServers
// from the API server and moves each Fleet one step towards what it asks
// for. Conflicts are not errors: the next pass sees the winner's write.
func (a *Agent) Sync(ctx context.Context) error {
	fleets, err := a.cfg.Client.Resource(FleetResource).Namespace(a.cfg.Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("listing fleets: %w", err)
	}
	gss, err := a.cfg.Client.Resource(GameServerResource).Namespace(a.cfg.Namespace).List(ctx, metav1.ListOptions{LabelSelector: FleetLabel})
	if err != nil {
		return fmt.Errorf("listing gameservers: %w", err)
	}
	now := a.cfg.Clock.Now()

	// Servers by the Fleet (UID) that owns them: a Fleet deleted and
	// recreated under the same name does not inherit the old servers.
	owned := map[types.UID][]*unstructured.Unstructured{}
	load := newNodeLoad(a.cfg.Nodes)
	seen := map[types.UID]bool{}
	for i := range gss.Items {
		gs := &gss.Items[i]
		seen[gs.GetUID()] = true
		load.add(gs)
		if uid, ok := fleetOwner(gs); ok {
			owned[uid] = append(owned[uid], gs)
		}
	}
	var errs []error
	standalone, err := a.listStandalone(ctx, load) // standalone.go
	if err != nil {
		errs = append(errs, err)
	}
	for _, gs := range standalone {
		seen[gs.GetUID()] = true
	}
	a.forgetUnseen(seen)

	live := map[types.UID]bool{}
	for i := range fleets.Items {
		f := &fleets.Items[i]
		live[f.GetUID()] = true
		if err := a.syncFleet(ctx, f, owned[f.GetUID()], load, now); err != nil {
			errs = append(errs, fmt.Errorf("fleet %s/%s: %w", f.GetNamespace(), f.GetName(), err))
		}
	}
	// Servers whose Fleet is gone go too, as Agones' garbage collection
	// would take them (there is no controller-manager in a local rig).
	var orphans []*unstructured.Unstructured
	for uid, list := range owned {
		if !live[uid] {
			orphans = append(orphans, list...)
		}
	}
	a.each(ctx, orphans, func(gs *unstructured.Unstructured) { a.retire(ctx, gs) })
	a.syncStandalone(ctx, standalone, load)
	return errors.Join(errs...)
}

func (a *Agent) forgetUnseen(seen map[types.UID]bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	for uid := range a.allocatedSeen {
		if !seen[uid] {
			delete(a.allocatedSeen, uid)
		}
	}
}

// fleetOwner returns the UID of the Fleet that controls gs, if any. Only
// such servers are the agent's: a GameServer someone made by hand (tests
// do) is left alone even if it carries a fleet label.
func fleetOwner(gs *unstructured.Unstructured) (types.UID, bool) {
	for _, o := range gs.GetOwnerReferences() {
		if o.Kind == "Fleet" && o.APIVersion == "agones.dev/v1" && o.Controller != nil && *o.Controller {
			return o.UID, true
		}
	}
	return "", false
}

func state(gs *unstructured.Unstructured) string {
	s, _, _ := unstructured.NestedString(gs.Object, "status", "state")
	return s
}

func (a *Agent) syncFleet(ctx context.Context, f *unstructured.Unstructured, gss []*unstructured.Unstructured, load *nodeLoad, now time.Time) error {
	replicas, _, err := unstructured.NestedInt64(f.Object, "spec", "replicas")
	if err != nil {
		return fmt.Errorf("spec.replicas: %w", err)
	}
	template, _, err := unstructured.NestedMap(f.Object, "spec", "template")
	if err != nil {
		return fmt.Errorf("spec.template: %w", err)
	}
	scheduling, _, _ := unstructured.NestedString(f.Object, "spec", "scheduling")

	// Walk every server one step; what survives counts towards replicas.
	var mu sync.Mutex
	var alive []*unstructured.Unstructured
	a.each(ctx, gss, func(gs *unstructured.Unstructured) {
		if gs.GetDeletionTimestamp() != nil {
			return
		}
		if next := a.step(ctx, gs, now); next != nil {
			mu.Lock()
			alive = append(alive, next)
			mu.Unlock()
		}
	})
	sort.Slice(alive, func(i, j int) bool { return alive[i].GetName() < alive[j].GetName() })

	switch n := int64(len(alive)); {
	case n < replicas:
		want := min(replicas-n, int64(a.cfg.MaxWritesPerFleet))
		objs := make([]*unstructured.Unstructured, 0, want)
		for range want {
			gs, err := a.newGameServer(f, template, scheduling, load, now)
			if err != nil {
				return err
			}
			objs = append(objs, gs)
		}
		a.each(ctx, objs, func(gs *unstructured.Unstructured) {
			out, err := a.cfg.Client.Resource(GameServerResource).Namespace(gs.GetNamespace()).Create(ctx, gs, metav1.CreateOptions{})
			if err != nil {
				// A name clash or a hiccup: the next pass counts again.
				a.log.Warn("creating gameserver", "namespace", gs.GetNamespace(), "name", gs.GetName(), "err", err)
				return
			}
			a.created.Add(1)
			mu.Lock()
			alive = append(alive, out)
			mu.Unlock()
		})
	case n > replicas:
		victims := scaleDownOrder(alive, load)
		victims = victims[:min(int64(len(victims)), n-replicas, int64(a.cfg.MaxWritesPerFleet))]
		gone := map[types.UID]bool{}
		a.each(ctx, victims, func(gs *unstructured.Unstructured) {
			if a.retire(ctx, gs) {
				mu.Lock()
				gone[gs.GetUID()] = true
				mu.Unlock()
			}
		})
		kept := alive[:0]
		for _, gs := range alive {
			if !gone[gs.GetUID()] {
				kept = append(kept, gs)
			}
		}
		alive = kept
	}
	return a.writeFleetStatus(ctx, f, alive)
}

// step moves one server along its life and returns its newest state, or
// nil if it is gone (or going).
func (a *Agent) step(ctx context.Context, gs *unstructured.Unstructured, now time.Time) *unstructured.Unstructured {
	switch state(gs) {
	case stateShutdown, stateError, stateUnhealthy:
		a.retire(ctx, gs)
		return nil
	case stateAllocated:
		start, ok := a.sessionStart(gs, now)
		if a.cfg.Session > 0 && ok && !now.Before(start.Add(a.cfg.Session)) {
			if a.retire(ctx, gs) {
				a.ended.Add(1)
				return nil
			}
		}
		return gs
	case stateReady, stateReserved:
		return gs
	default: // Scheduled, or anything before it
		at, err := time.Parse(time.RFC3339Nano, gs.GetAnnotations()[ScheduledAtAnnotation])
		if err != nil {
			at = gs.GetCreationTimestamp().Time
		}
		if now.Before(at.Add(a.cfg.Startup)) {
			return gs
		}
		next := gs.DeepCopy()
		if err := markReady(next); err != nil {
			a.log.Warn("gameserver not ready-able", "namespace", gs.GetNamespace(), "name", gs.GetName(), "err", err)
			return gs
		}
		out, ok := a.update(ctx, next)
		if !ok {
			return gs
		}
		a.readied.Add(1)
		return out
	}
}

// sessionStart is when an Allocated server's session began: the
// allocator's last-allocated annotation, or else the first pass that saw
// it Allocated.
func (a *Agent) sessionStart(gs *unstructured.Unstructured, now time.Time) (time.Time, bool) {
	if t, err := time.Parse(time.RFC3339Nano, gs.GetAnnotations()[LastAllocatedAnnotation]); err == nil {
		return t, true
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	t, ok := a.allocatedSeen[gs.GetUID()]
	if !ok {
		a.allocatedSeen[gs.GetUID()] = now
		t = now
	}
	return t, true
}

// retire shuts a server down (unless it already is) and deletes it, both
// conditional on the state read, so a server an allocator took meanwhile is
// never removed under it. It reports whether the server is gone.
func (a *Agent) retire(ctx context.Context, gs *unstructured.Unstructured) bool {
	cur := gs
	if state(gs) != stateShutdown {
		next := gs.DeepCopy()
		if err := unstructured.SetNestedField(next.Object, stateShutdown, "status", "state"); err != nil {
			return false
		}
		out, ok := a.update(ctx, next)
		if !ok {
			return false
		}
		a.shutdown.Add(1)
		cur = out
	}
	uid, rv := cur.GetUID(), cur.GetResourceVersion()
	err := a.cfg.Client.Resource(GameServerResource).Namespace(cur.GetNamespace()).Delete(ctx, cur.GetName(),
		metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid, ResourceVersion: &rv}})
	switch {
	case err == nil:
		a.deleted.Add(1)
		return true
	case apierrors.IsNotFound(err):
		return true
	case apierrors.IsConflict(err):
		a.conflicts.Add(1)
	default:
		a.log.Warn("deleting gameserver", "namespace", cur.GetNamespace(), "name", cur.GetName(), "err", err)
	}
	return false
}

// update writes obj, which carries the resourceVersion it was read at. A
// conflict means someone else (an allocator) wrote first: keep their write.
func (a *Agent) update(ctx context.Context, obj *unstructured.Unstructured) (*unstructured.Unstructured, bool) {
	out, err := a.cfg.Client.Resource(GameServerResource).Namespace(obj.GetNamespace()).Update(ctx, obj, metav1.UpdateOptions{})
	switch {
	case err == nil:
		return out, true
	case apierrors.IsConflict(err), apierrors.IsNotFound(err):
		a.conflicts.Add(1)
	default:
		a.log.Warn("updating gameserver", "namespace", obj.GetNamespace(), "name", obj.GetName(), "err", err)
	}
	return nil, false
}

// each runs fn on every item with at most Workers at once.
func (a *Agent) each(ctx context.Context, items []*unstructured.Unstructured, fn func(*unstructured.Unstructured)) {
	sem := make(chan struct{}, a.cfg.Workers)
	var wg sync.WaitGroup
	for _, it := range items {
		if ctx.Err() != nil {
			break
		}
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			fn(it)
		})
	}
	wg.Wait()
}

func (a *Agent) writeFleetStatus(ctx context.Context, f *unstructured.Unstructured, alive []*unstructured.Unstructured) error {
	counts := map[string]int64{}
	for _, gs := range alive {
		counts[state(gs)]++
	}
	want := map[string]any{
		"replicas":          int64(len(alive)),
		"readyReplicas":     counts[stateReady],
		"reservedReplicas":  counts[stateReserved],
		"allocatedReplicas": counts[stateAllocated],
		"labelSelector":     FleetLabel + "=" + f.GetName(),
	}
	have, _, _ := unstructured.NestedMap(f.Object, "status")
	same := true
	for k, v := range want {
		if fmt.Sprint(have[k]) != fmt.Sprint(v) {
			same = false
			break
		}
	}
	if same {
		return nil
	}
	next := f.DeepCopy()
	st, _, _ := unstructured.NestedMap(next.Object, "status")
	if st == nil {
		st = map[string]any{}
	}
	for k, v := range want {
		st[k] = v
	}
	if err := unstructured.SetNestedMap(next.Object, st, "status"); err != nil {
		return err
	}
	_, err := a.cfg.Client.Resource(FleetResource).Namespace(f.GetNamespace()).UpdateStatus(ctx, next, metav1.UpdateOptions{})
	switch {
	case err == nil:
		a.statusWrites.Add(1)
		return nil
	case apierrors.IsConflict(err), apierrors.IsNotFound(err):
		a.conflicts.Add(1) // someone scaled the fleet: the next pass recounts
		return nil
	default:
		return fmt.Errorf("writing fleet status: %w", err)
	}
}

// scaleDownOrder lists the servers a scale-down may remove, best first:
// never Allocated or Reserved ones (as Agones); servers not yet Ready before
// Ready ones; then those on the emptiest nodes, so Packed fleets stay packed.
func scaleDownOrder(alive []*unstructured.Unstructured, load *nodeLoad) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, gs := range alive {
		if s := state(gs); s != stateAllocated && s != stateReserved {
			out = append(out, gs)
		}
	}
	rank := func(gs *unstructured.Unstructured) int {
		if state(gs) == stateReady {
			return 1
		}
		return 0
	}
	sort.SliceStable(out, func(i, j int) bool {
		if ri, rj := rank(out[i]), rank(out[j]); ri != rj {
			return ri < rj
		}
		ni, _, _ := unstructured.NestedString(out[i].Object, "status", "nodeName")
		nj, _, _ := unstructured.NestedString(out[j].Object, "status", "nodeName")
		return load.count(ni) < load.count(nj)
	})
	return out
}

// templateHash names the GameServerSet a template stands for, as a
// ReplicaSet's pod-template hash does.
func templateHash(template map[string]any) string {
	b, _ := json.Marshal(template) // maps marshal with sorted keys
	h := fnv.New32a()
	h.Write(b)
	return strconv.FormatUint(uint64(h.Sum32())%(36*36*36*36*36), 36)
}

const nameAlphabet = "bcdfghjklmnpqrstvwxz2456789" // as apimachinery's generateName

func (a *Agent) suffix() string {
	a.mu.Lock()
	defer a.mu.Unlock()
	b := make([]byte, 5)
	for i := range b {
		b[i] = nameAlphabet[a.rng.IntN(len(nameAlphabet))]
	}
	return string(b)
}

// newGameServer builds a Scheduled server from the fleet's template, on a
// node of the pool with its ports chosen.
func (a *Agent) newGameServer(f *unstructured.Unstructured, template map[string]any, scheduling string, load *nodeLoad, now time.Time) (*unstructured.Unstructured, error) {
	set := f.GetName() + "-" + templateHash(template)
	gs := &unstructured.Unstructured{Object: map[string]any{}}
	gs.SetAPIVersion("agones.dev/v1")
	gs.SetKind("GameServer")
	gs.SetNamespace(f.GetNamespace())
	gs.SetName(set + "-" + a.suffix())

	labels, _, _ := unstructured.NestedStringMap(template, "metadata", "labels")
	if labels == nil {
		labels = map[string]string{}
	}
	labels[FleetLabel] = f.GetName()
	labels[GameServerSetLabel] = set
	gs.SetLabels(labels)
	ann, _, _ := unstructured.NestedStringMap(template, "metadata", "annotations")
	if ann == nil {
		ann = map[string]string{}
	}
	ann[ScheduledAtAnnotation] = now.UTC().Format(time.RFC3339Nano)
	gs.SetAnnotations(ann)
	yes, no := true, false
	gs.SetOwnerReferences([]metav1.OwnerReference{{
		APIVersion: "agones.dev/v1", Kind: "Fleet", Name: f.GetName(), UID: f.GetUID(),
		Controller: &yes, BlockOwnerDeletion: &no,
	}})

	spec, _, err := unstructured.NestedMap(template, "spec")
	if err != nil {
		return nil, fmt.Errorf("spec.template.spec: %w", err)
	}
	if spec == nil {
		spec = map[string]any{}
	}
	gs.Object["spec"] = spec // NestedMap returned a deep copy

	node := load.pick(scheduling == "Distributed", a.cfg.MaxPerNode)
	status := map[string]any{"state": stateScheduled, "nodeName": node}
	var ports []any
	names := portNames(spec)
	for _, name := range names {
		ports = append(ports, map[string]any{"name": name, "port": load.port(node)})
	}
	status["ports"] = ports
	if c, ok := spec["counters"].(map[string]any); ok {
		status["counters"] = c
	}
	if l, ok := spec["lists"].(map[string]any); ok {
		status["lists"] = l
	}
	gs.Object["status"] = status
	load.place(node)
	return gs, nil
}

func portNames(spec map[string]any) []string {
	var names []string
	ps, _ := spec["ports"].([]any)
	for i, p := range ps {
		m, _ := p.(map[string]any)
		name, _ := m["name"].(string)
		if name == "" {
			name = "p" + strconv.Itoa(i)
		}
		names = append(names, name)
	}
	if len(names) == 0 {
		names = []string{"default"}
	}
	return names
}

// markReady fills in what Agones writes when a server becomes Ready.
func markReady(gs *unstructured.Unstructured) error {
	node, _, _ := unstructured.NestedString(gs.Object, "status", "nodeName")
	addr := nodeAddress(node)
	for _, f := range []struct {
		v    any
		path []string
	}{
		{stateReady, []string{"status", "state"}},
		{addr, []string{"status", "address"}},
		{[]any{
			map[string]any{"type": "InternalIP", "address": addr},
			map[string]any{"type": "Hostname", "address": node},
		}, []string{"status", "addresses"}},
	} {
		if err := unstructured.SetNestedField(gs.Object, f.v, f.path...); err != nil {
			return err
		}
	}
	return nil
}
