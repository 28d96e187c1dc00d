package kube

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Where a multi-cluster request with the caller's idempotency key was sent
// (the forwarder's Placements): one Lease per forwarded key, beside the
// key records and collected with them once a key window has passed since
// its last change, holding the cluster's name. Its resourceVersion is the
// record's version, so a move from a version another replica has changed
// meanwhile is refused by the API server, as a key record's takeover is.

const (
	placementPrefix     = "qm-place-"
	placementAnnotation = "quartermaster.dev/key-placement"
)

// Placements is this backend's record of where keyed multi-cluster
// requests were sent, shared by every replica through the API server
// (allocator/forward's Placements).
func (b *Backend) Placements() *Placements { return &Placements{b: b} }

// Placements: see Backend.Placements.
type Placements struct{ b *Backend }

// Place records that key's request is being sent to cluster, if the
// record is still at version ("" for none): forward.Placements.
func (p *Placements) Place(ctx context.Context, key, cluster, version string) (cur, curVersion string, ok bool, err error) {
	b := p.b
	b.lastKeyed.Store(time.Now().UnixNano()) // its records are collected too
	leases := b.leases.Leases(b.cfg.KeyNamespace)
	l := b.newPlacement(key, cluster)
	if version == "" {
		made, err := leases.Create(ctx, l, metav1.CreateOptions{})
		if err == nil {
			return cluster, made.ResourceVersion, true, nil
		}
		if !apierrors.IsAlreadyExists(err) {
			return "", "", false, err
		}
		return p.current(ctx, l.Name)
	}
	l.ResourceVersion = version
	moved, err := leases.Update(ctx, l, metav1.UpdateOptions{})
	switch {
	case err == nil:
		return cluster, moved.ResourceVersion, true, nil
	case apierrors.IsConflict(err), apierrors.IsNotFound(err):
		return p.current(ctx, l.Name)
	default:
		return "", "", false, err
	}
}

// current reads the record name as it is: no cluster when it is gone or
// older than the key window (the key is forgotten).
func (p *Placements) current(ctx context.Context, name string) (string, string, bool, error) {
	l, err := p.b.leases.Leases(p.b.cfg.KeyNamespace).Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return "", "", false, nil
	case err != nil:
		return "", "", false, err
	case recordExpired(l, time.Now()):
		return "", l.ResourceVersion, false, nil
	}
	return l.Annotations[placementAnnotation], l.ResourceVersion, false, nil
}

// newPlacement is key's record naming cluster, changed now.
func (b *Backend) newPlacement(key, cluster string) *coordinationv1.Lease {
	sum := sha256.Sum256([]byte(b.cfg.Namespace + "\x00placement\x00" + key))
	now := metav1.NewMicroTime(time.Now())
	secs := durationSeconds(b.cfg.KeyWindow)
	return &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{
			Name: placementPrefix + hex.EncodeToString(sum[:20]), Namespace: b.cfg.KeyNamespace,
			Labels:      map[string]string{KeyRecordLabel: b.keyGroup, "app.kubernetes.io/managed-by": "quartermaster"},
			Annotations: map[string]string{placementAnnotation: cluster},
		},
		// No AcquireTime: collectable once RenewTime is a window old.
		Spec: coordinationv1.LeaseSpec{LeaseDurationSeconds: &secs, RenewTime: &now},
	}
}
