package kube

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/quartermaster-dev/quartermaster/allocator"
	"github.com/quartermaster-dev/quartermaster/core"
)

// Idempotency keys across replicas: one record per key, created if absent.
//
// Each replica's Service lets one call per key at a time reach its backend;
// two replicas know nothing of each other's calls, and their informers may
// not have delivered each other's writes. So the key is claimed where every
// replica sees the same truth at once, the API server: a
// coordination.k8s.io Lease in the key namespace, named after a hash of the
// key's scope (the caller's identity and key). Its create is the claim, and
// the API server lets exactly one create of a name succeed:
//
//   - the create wins: this replica allocates (the key's annotation lands
//     on the GameServer with every request annotation), then writes the
//     server's name into the record;
//   - the record exists with another request's fingerprint: a
//     *allocator.KeyConflictError;
//   - it names a server: that server is read from the API server (never
//     from the cache, which may lag) and, if it is still Allocated carrying
//     this key for this identity, it is the answer, with Replayed set and
//     nothing written; otherwise allocator.ErrKeyReleased;
//   - it is still pending: the claimant is allocating; wait (polling the
//     record, bounded by the caller's context) and answer the same way;
//   - it is pending past its claim bound: the claimant died or stalled.
//     Take it over with an Update on its resourceVersion (one taker wins),
//     look on the API server for a server the claimant allocated before
//     recording it (carrying the key and the allocation stamp of that
//     claimant or of any claimant before it), and only if there is none
//     allocate anew.
//
// Once claimed, an allocation runs to its end even if the caller leaves
// (bounded by Config.KeyClaimTimeout, not by the caller's context): a write
// cancelled half-way may still land on the API server unseen, and a keyed
// allocation is kept for the caller's retry anyway. A claimant that
// overran its bound and finds its record taken over gives its own server
// back. An allocation that ends in "nothing matches" or Contention wrote
// nothing, so its record is deleted and a retry may try again.
//
// Records live for Config.KeyWindow after their allocation and are then
// forgotten: replicas that take keyed requests delete the expired ones,
// and any replica treats an expired record as absent. A request without a key
// never reaches this code: one map lookup decides.
//
// Why not the key on the GameServer alone: two replicas with the same key
// at the same moment choose two different servers, and neither write
// conflicts with the other. Why not route keys to an owning replica: the
// owner changes whenever the membership does, and two replicas whose views
// of it differ (for seconds after a change) would both think they own it.

// Defaults for the key settings in Config.
const (
	// DefaultKeyWindow is how long a key is remembered after its
	// allocation: the service's own window (allocator.Options.KeyWindow).
	DefaultKeyWindow = allocator.DefaultKeyWindow
	// DefaultKeyClaimTimeout bounds one keyed allocation once claimed; a
	// claim is taken for dead after twice this (the margin covers clocks
	// that disagree).
	DefaultKeyClaimTimeout = 15 * time.Second
	// KeyRecordLabel marks the Leases that are key records (and carries the
	// backend's watched namespace hash, so that collecting them never
	// touches replica Leases or another allocator's keys' records).
	KeyRecordLabel = "quartermaster.dev/allocation-key-record"

	keyRecordPrefix          = "qm-key-"
	keyFingerprintAnnotation = "quartermaster.dev/key-fingerprint"
	keyStampAnnotation       = "quartermaster.dev/key-allocation-stamp"
	keyServerAnnotation      = "quartermaster.dev/key-server"
	keyPollFirst             = 5 * time.Millisecond
	keyPollMax               = 100 * time.Millisecond
	keyCollectPage           = 500
	keyCollectEvery          = time.Minute
)

// keyed is one keyed request's identity in the records.
type keyed struct {
	key, identity string
	record        string // the record's Lease name
	fingerprint   string
	stamp         string // this attempt's allocation stamp (the server's last-allocated)
	// stamps are the allocation stamps of every claimant of the record so
	// far, this one's last (comma-separated): a chain of takeovers looks
	// for a server allocated by any of them.
	stamps string
}

// keyRecordName is the Lease name for scope: the backend's watched
// namespace and the scope, hashed, so any key fits a Lease name.
func (b *Backend) keyRecordName(scope string) string {
	sum := sha256.Sum256([]byte(b.cfg.Namespace + "\x00" + scope))
	return keyRecordPrefix + hex.EncodeToString(sum[:20])
}

// keyGroup labels this backend's records: a hash of its watched namespace.
func keyGroup(namespace string) string {
	sum := sha256.Sum256([]byte("records\x00" + namespace))
	return hex.EncodeToString(sum[:12])
}

// stampOf is the last-allocated annotation the core writes for now.
func stampOf(now time.Time) string {
	return time.Unix(0, now.UnixNano()).UTC().Format(time.RFC3339Nano)
}

// allocateKeyed is Allocate for a request carrying key.
func (b *Backend) allocateKeyed(ctx context.Context, req *core.Request, key string, now time.Time, seed uint64) (*allocator.Allocation, error) {
	b.lastKeyed.Store(time.Now().UnixNano())
	identity := req.Metadata.Annotations[allocator.OwnerAnnotation]
	fp, err := allocator.KeyFingerprint(req)
	if err != nil {
		return nil, fmt.Errorf("idempotency key %q: %w", key, err)
	}
	k := keyed{key: key, identity: identity, record: b.keyRecordName(allocator.KeyScope(identity, key)), fingerprint: fp, stamp: stampOf(now)}
	k.stamps = k.stamp
	leases := b.leases.Leases(b.cfg.KeyNamespace)
	wait := keyPollFirst
	for {
		// The claim is not cancelled with the caller either: a create the
		// API server applies after its caller gave up would hold the key
		// for a claim bound with nobody allocating.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), b.cfg.KeyClaimTimeout)
		rec, err := leases.Create(cctx, b.newKeyRecord(k), metav1.CreateOptions{})
		cancel()
		if err == nil {
			b.keyMetrics.WithLabelValues("claimed").Inc()
			return b.allocateClaimed(ctx, req, k, rec, now, seed, "")
		}
		if !apierrors.IsAlreadyExists(err) {
			return nil, b.keyStoreError("claiming", k, err)
		}
		for {
			cur, err := leases.Get(ctx, k.record, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				break // deleted meanwhile (a failed allocation): claim it
			}
			if err != nil {
				return nil, b.keyStoreError("reading", k, err)
			}
			server, allocated := cur.Annotations[keyServerAnnotation]
			expired := recordExpired(cur, time.Now())
			switch {
			case allocated && expired:
				// Forgotten: the key names nothing any more.
				if rec, ok, err := b.takeOver(ctx, k, cur); err != nil {
					return nil, err
				} else if ok {
					b.keyMetrics.WithLabelValues("claimed").Inc()
					return b.allocateClaimed(ctx, req, k, rec, now, seed, "")
				}
				continue
			case cur.Annotations[keyFingerprintAnnotation] != k.fingerprint:
				b.keyMetrics.WithLabelValues("conflict").Inc()
				return nil, &allocator.KeyConflictError{Key: key}
			case allocated:
				return b.replay(ctx, k, server)
			case expired:
				// The claimant died or overran its bound; it (or one it
				// took over from) may have allocated before it stopped.
				before := cur.Annotations[keyStampAnnotation]
				taker := k
				taker.stamps = before + "," + k.stamp
				if rec, ok, err := b.takeOver(ctx, taker, cur); err != nil {
					return nil, err
				} else if ok {
					b.keyMetrics.WithLabelValues("taken_over").Inc()
					return b.allocateClaimed(ctx, req, taker, rec, now, seed, before)
				}
				continue
			}
			// Pending: the claimant (on this replica or another) is at work.
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return nil, ctx.Err()
			case <-t.C:
			}
			wait = min(2*wait, keyPollMax)
		}
	}
}

// newKeyRecord is k's record, pending: claimed by this replica now.
func (b *Backend) newKeyRecord(k keyed) *coordinationv1.Lease {
	l := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{
		Name: k.record, Namespace: b.cfg.KeyNamespace,
		Labels: map[string]string{KeyRecordLabel: b.keyGroup, "app.kubernetes.io/managed-by": "quartermaster"},
	}}
	b.markPending(l, k)
	return l
}

// markPending makes l a pending claim of k by this replica from now on.
func (b *Backend) markPending(l *coordinationv1.Lease, k keyed) {
	now := metav1.NewMicroTime(time.Now())
	secs := durationSeconds(2 * b.cfg.KeyClaimTimeout)
	id := b.id
	if l.Annotations == nil {
		l.Annotations = map[string]string{}
	}
	l.Annotations[keyFingerprintAnnotation] = k.fingerprint
	l.Annotations[keyStampAnnotation] = k.stamps
	delete(l.Annotations, keyServerAnnotation)
	l.Spec = coordinationv1.LeaseSpec{HolderIdentity: &id, LeaseDurationSeconds: &secs, AcquireTime: &now, RenewTime: &now}
}

func durationSeconds(d time.Duration) int32 {
	s := (d + time.Second - 1) / time.Second
	return int32(max(s, 1))
}

// recordExpired: a pending record past its claim bound, or an allocated
// one past the key window.
func recordExpired(l *coordinationv1.Lease, now time.Time) bool {
	if l.Spec.RenewTime == nil || l.Spec.LeaseDurationSeconds == nil {
		return true
	}
	return now.After(l.Spec.RenewTime.Add(time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second))
}

// collectable: an allocated record past the key window, or a pending one
// whose claim began a key window ago. A pending record past its claim bound
// alone is not: the claimant may have allocated before it died, and only a
// takeover looks for that server, so it is left for a retry to take over
// until the key would have been forgotten anyway.
func collectable(l *coordinationv1.Lease, now time.Time, window time.Duration) bool {
	if _, allocated := l.Annotations[keyServerAnnotation]; allocated || l.Spec.AcquireTime == nil {
		return recordExpired(l, now)
	}
	return now.After(l.Spec.AcquireTime.Add(window))
}

// takeOver claims the record cur for k with an Update on cur's
// resourceVersion; ok is false when another replica changed it first.
func (b *Backend) takeOver(ctx context.Context, k keyed, cur *coordinationv1.Lease) (*coordinationv1.Lease, bool, error) {
	l := cur.DeepCopy()
	b.markPending(l, k)
	// Not cancelled with the caller, as the claim's create is not.
	uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), b.cfg.KeyClaimTimeout)
	defer cancel()
	rec, err := b.leases.Leases(b.cfg.KeyNamespace).Update(uctx, l, metav1.UpdateOptions{})
	switch {
	case err == nil:
		return rec, true, nil
	case apierrors.IsConflict(err), apierrors.IsNotFound(err):
		return nil, false, nil
	default:
		return nil, false, b.keyStoreError("taking over", k, err)
	}
}

// allocateClaimed allocates for k, whose record rec this replica holds.
// With before set (a takeover) it first looks for the server the previous
// claimant allocated with that stamp.
func (b *Backend) allocateClaimed(ctx context.Context, req *core.Request, k keyed, rec *coordinationv1.Lease, now time.Time, seed uint64, before string) (*allocator.Allocation, error) {
	if err := ctx.Err(); err != nil {
		// Gone before anything was allocated: free the key, unless it
		// was taken over from a claimant that may have allocated (the
		// next takeover looks for that server).
		if before == "" {
			b.dropRecord(k, rec)
		}
		return nil, err
	}
	// Detached from the caller (see the file's comment), bounded by the claim.
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), b.cfg.KeyClaimTimeout)
	defer cancel()
	if before != "" {
		gs, err := b.findKeyed(actx, req.Namespace, k, before)
		if err != nil {
			return nil, err
		}
		if gs != nil {
			if _, err := b.recordServer(actx, k, rec, gs); err != nil {
				return nil, err
			}
			return &allocator.Allocation{GameServer: gs, Replayed: true}, nil
		}
	}
	a, err := b.allocate(actx, req, now, seed)
	if err != nil {
		if errors.Is(err, core.ErrNoMatch) || errors.Is(err, allocator.ErrContention) {
			// Nothing was written: a retry may try again.
			b.dropRecord(k, rec)
		}
		// Otherwise a write may have landed: the record stays pending and
		// is taken over, with a search, once its claim bound passes.
		return a, err
	}
	if b.afterKeyedCommit != nil && b.afterKeyedCommit() {
		return nil, errors.New("kube: test hook: stopped between allocating and recording")
	}
	// The record is written with a bound of its own: a claimant that
	// overran its claim must still learn whether it was taken over.
	rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), b.cfg.KeyClaimTimeout)
	defer rcancel()
	lost, err := b.recordServer(rctx, k, rec, a.GameServer)
	if err != nil {
		// The allocation stands and the caller gets it; the record stays
		// pending and a takeover finds the server by its stamp.
		b.log.Warn("allocated but could not record the idempotency key; a retry finds the server once the claim expires", "key_record", k.record, "err", err)
		return a, nil
	}
	if lost {
		// We overran the claim and another replica took the key over.
		// Its search may have found this very server and recorded it:
		// then it is the key's allocation. Otherwise give it back and
		// answer as a duplicate would.
		b.keyMetrics.WithLabelValues("overran").Inc()
		cur, err := b.leases.Leases(b.cfg.KeyNamespace).Get(rctx, k.record, metav1.GetOptions{})
		if err == nil && cur.Annotations[keyServerAnnotation] == a.GameServer.Namespace+"/"+a.GameServer.Name {
			return a, nil
		}
		if _, err := b.Release(rctx, a.GameServer.Key(), a.GameServer.LastAllocated()); err != nil && !errors.Is(err, allocator.ErrNotAllocated) {
			b.log.Warn("could not give back a server allocated past its key claim", "server", a.GameServer.Key(), "err", err)
		}
		return b.allocateKeyed(ctx, req, k.key, now, seed)
	}
	return a, nil
}

// recordServer writes gs into k's record rec (on rec's resourceVersion):
// from now on the key names gs for the key window. lost says the record
// was taken over or deleted meanwhile.
func (b *Backend) recordServer(ctx context.Context, k keyed, rec *coordinationv1.Lease, gs *core.GameServer) (lost bool, err error) {
	l := rec.DeepCopy()
	now := metav1.NewMicroTime(time.Now())
	secs := durationSeconds(b.cfg.KeyWindow)
	l.Annotations[keyServerAnnotation] = gs.Namespace + "/" + gs.Name
	l.Spec.RenewTime, l.Spec.LeaseDurationSeconds = &now, &secs
	_, err = b.leases.Leases(b.cfg.KeyNamespace).Update(ctx, l, metav1.UpdateOptions{})
	if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
		return true, nil
	}
	if err != nil {
		return false, b.keyStoreError("recording", k, err)
	}
	return false, nil
}

// dropRecord deletes k's record as this replica claimed it (a
// precondition on its resourceVersion, so a takeover's claim stays).
func (b *Backend) dropRecord(k keyed, rec *coordinationv1.Lease) {
	ctx, cancel := context.WithTimeout(context.Background(), b.cfg.KeyClaimTimeout)
	defer cancel()
	rv := rec.ResourceVersion
	err := b.leases.Leases(b.cfg.KeyNamespace).Delete(ctx, k.record, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: &rv}})
	if err != nil && !apierrors.IsNotFound(err) && !apierrors.IsConflict(err) {
		b.log.Warn("could not delete an idempotency key's record after a failed allocation; it expires after the claim bound", "key_record", k.record, "err", err)
	}
}

// replay answers k with the server its record names, read from the API
// server: still Allocated, carrying k for k's identity, or the key's
// allocation was released.
func (b *Backend) replay(ctx context.Context, k keyed, server string) (*allocator.Allocation, error) {
	ns, name, ok := strings.Cut(server, "/")
	if !ok {
		return nil, fmt.Errorf("idempotency key %q: its record names no server (%q)", k.key, server)
	}
	g, err := b.get(ctx, core.Key{Namespace: ns, Name: name})
	if apierrors.IsNotFound(err) {
		b.keyMetrics.WithLabelValues("released").Inc()
		return nil, allocator.ErrKeyReleased
	}
	if err != nil {
		return nil, storeError("reading", core.Key{Namespace: ns, Name: name}, err)
	}
	gs, err := toCore(g)
	if err != nil {
		return nil, err
	}
	if !carries(gs, k, "") {
		b.keyMetrics.WithLabelValues("released").Inc()
		return nil, allocator.ErrKeyReleased
	}
	b.keyMetrics.WithLabelValues("replayed").Inc()
	return &allocator.Allocation{GameServer: gs, Replayed: true}, nil
}

// carries: gs is Allocated with k's key for k's identity (and, if stamps
// is set, by an allocation with one of those comma-separated stamps).
func carries(gs *core.GameServer, k keyed, stamps string) bool {
	if gs.State != core.StateAllocated {
		return false
	}
	if v, _ := gs.Annotation(allocator.AllocationKeyAnnotation); v != k.key {
		return false
	}
	if v, _ := gs.Annotation(allocator.OwnerAnnotation); v != k.identity {
		return false
	}
	return stamps == "" || slices.Contains(strings.Split(stamps, ","), gs.LastAllocated())
}

// findKeyed looks on the API server (a consistent List, page by page) for
// the server in namespace allocated for k with one of stamps. Only a takeover
// needs it, so its cost is paid only after a replica died mid-allocation.
func (b *Backend) findKeyed(ctx context.Context, namespace string, k keyed, stamps string) (*core.GameServer, error) {
	cont := ""
	for {
		opts := metav1.ListOptions{Limit: keyCollectPage, Continue: cont}
		res := b.client.Get().Namespace(namespace).Resource(GameServerResource.Resource).VersionedParams(&opts, metav1.ParameterCodec).Do(ctx)
		if err := res.Error(); err != nil {
			return nil, fmt.Errorf("idempotency key %q: looking for the server a dead claimant allocated: %w", k.key, err)
		}
		raw, _ := res.Raw()
		l, err := decodeGameServerList(raw)
		if err != nil {
			return nil, err
		}
		for i := range l.Items {
			if gs, err := toCore(&l.Items[i]); err == nil && carries(gs, k, stamps) {
				return gs, nil
			}
		}
		if cont = l.Continue; cont == "" {
			return nil, nil
		}
	}
}

// keyStoreError describes a failed API call on k's record; as with
// GameServers, an unreachable or overloaded API server is
// allocator.ErrStoreUnavailable.
func (b *Backend) keyStoreError(what string, k keyed, err error) error {
	var status apierrors.APIStatus
	transient := !errors.As(err, &status) || apierrors.IsServiceUnavailable(err) || apierrors.IsTimeout(err) ||
		apierrors.IsServerTimeout(err) || apierrors.IsTooManyRequests(err)
	if transient {
		return fmt.Errorf("%s the record of idempotency key %q: %w: %w", what, k.key, allocator.ErrStoreUnavailable, err)
	}
	if apierrors.IsForbidden(err) {
		return fmt.Errorf("%s the record of idempotency key %q (grant get/create/update/delete on leases.coordination.k8s.io in namespace %s): %w", what, k.key, b.cfg.KeyNamespace, err)
	}
	return fmt.Errorf("%s the record of idempotency key %q: %w", what, k.key, err)
}

// collectKeys deletes expired key records every interval until ctx ends,
// once this replica has taken a keyed request in the last key window: a
// replica whose callers send no keys makes no call for them. Several
// replicas may collect at once; each delete is conditional, so none undoes
// another's claim.
func (b *Backend) collectKeys(ctx context.Context, every time.Duration) {
	t := time.NewTicker(every)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if last := b.lastKeyed.Load(); last != 0 && time.Since(time.Unix(0, last)) < 2*b.cfg.KeyWindow {
			b.CollectKeys(ctx)
		}
	}
}

// CollectKeys deletes this backend's expired key records (each on the
// resourceVersion it was seen at, so a record claimed again meanwhile
// stays) and says how many it deleted.
func (b *Backend) CollectKeys(ctx context.Context) int {
	leases := b.leases.Leases(b.cfg.KeyNamespace)
	deleted, cont := 0, ""
	for {
		l, err := leases.List(ctx, metav1.ListOptions{LabelSelector: KeyRecordLabel + "=" + b.keyGroup, Limit: keyCollectPage, Continue: cont})
		if err != nil {
			if ctx.Err() == nil {
				b.log.Warn("could not list idempotency key records to collect the expired ones", "namespace", b.cfg.KeyNamespace, "err", err)
			}
			return deleted
		}
		now := time.Now()
		for i := range l.Items {
			r := &l.Items[i]
			if !collectable(r, now, b.cfg.KeyWindow) {
				continue
			}
			rv := r.ResourceVersion
			err := leases.Delete(ctx, r.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: &rv}})
			if err == nil {
				deleted++
			}
		}
		if cont = l.Continue; cont == "" {
			break
		}
	}
	b.keyMetrics.WithLabelValues("collected").Add(float64(deleted))
	return deleted
}
