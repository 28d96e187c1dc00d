package kube

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/quartermaster-dev/quartermaster/allocator"
	"github.com/quartermaster-dev/quartermaster/core"
)

// On-demand servers (allocator.Creator). Create POSTs the expanded
// GameServer; Agones' controller (or qm agent) schedules it and brings it
// to Ready; the informer shows that, and Create allocates it with an
// Update preconditioned on the resourceVersion it saw. While the server
// carries allocator.CreatingAnnotation the index sees a Ready server as
// Reserved (holdWhileCreating), so no other request, on this replica or
// another, can allocate it before its creator does.

var _ allocator.Creator = (*Backend)(nil)

// fleetResource is Agones' Fleet resource, read for templates that name one.
const fleetResource = "fleets"

// createPoll is how often Create looks at the informer's copy of the
// server it waits for: a map lookup under the backend's lock.
const createPoll = 5 * time.Millisecond

// cleanupTimeout bounds deleting a failed Create's server; the caller's
// deadline has often passed by then.
const cleanupTimeout = 10 * time.Second

// holdWhileCreating keeps a created server out of allocations until its
// creator has it: Ready with allocator.CreatingAnnotation reads as Reserved,
// which Agones never allocates.
func holdWhileCreating(gs *core.GameServer) {
	if gs.State == core.StateReady && gs.Annotations[allocator.CreatingAnnotation] != "" {
		gs.State = core.StateReserved
	}
}

// Create implements allocator.Creator.
func (b *Backend) Create(ctx context.Context, o *allocator.CreateOrder) (*core.GameServer, error) {
	k := o.Key
	fail := func(err error, made bool, uid types.UID) error {
		ce := &allocator.CreateError{Key: k, Err: err, Made: made}
		if made {
			ce.CleanupErr = b.deleteCreated(k, uid)
			ce.Deleted = ce.CleanupErr == nil
		}
		return ce
	}
	if ns := b.cfg.Namespace; ns != "" && k.Namespace != ns {
		return nil, fail(fmt.Errorf("this allocator watches namespace %q only, so it would never see the server become Ready in %q", ns, k.Namespace), false, "")
	}
	body, err := json.Marshal(o.Object)
	if err != nil {
		return nil, fail(err, false, "")
	}
	raw, err := b.client.Post().Namespace(k.Namespace).Resource(GameServerResource.Resource).Body(body).Do(ctx).Raw()
	switch {
	case apierrors.IsAlreadyExists(err):
		return nil, fail(fmt.Errorf("%w: %s/%s", allocator.ErrAlreadyExists, k.Namespace, k.Name), false, "")
	case err != nil && ctx.Err() != nil:
		// The POST may have gone through before the deadline cut it off:
		// look, and delete it if it is ours.
		return nil, fail(ctx.Err(), true, "")
	case err != nil:
		return nil, fail(storeError("creating", k, err), false, "")
	}
	made, err := decodeGameServer(raw)
	if err != nil {
		return nil, fail(err, true, "")
	}
	uid := made.UID

	ready, err := b.awaitReady(ctx, k, uid)
	if err != nil {
		return nil, fail(err, true, uid)
	}
	gs, err := b.allocateCreated(ctx, k, ready, o.Now())
	if err != nil {
		return nil, fail(err, true, uid)
	}
	return gs, nil
}

// awaitReady waits until the informer shows the server uid Ready and
// returns that object; a server that fails or disappears first is
// ErrServerFailed.
func (b *Backend) awaitReady(ctx context.Context, k core.Key, uid types.UID) (*gameServer, error) {
	t := time.NewTicker(createPoll)
	defer t.Stop()
	seen, lastRV := false, ""
	for {
		b.mu.Lock()
		g := b.raw[k]
		b.mu.Unlock()
		switch {
		case g != nil && g.UID == uid:
			seen = true
			if g.ResourceVersion != lastRV {
				lastRV = g.ResourceVersion
				st, err := rawState(g.raw)
				if err != nil {
					return nil, err
				}
				switch st {
				case core.StateReady:
					return g, nil
				case core.StateError, core.StateUnhealthy, core.StateShutdown, core.StateAllocated:
					return nil, fmt.Errorf("%w: it went to %s", allocator.ErrServerFailed, st)
				}
			}
		case seen:
			return nil, fmt.Errorf("%w: it was deleted while starting", allocator.ErrServerFailed)
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-t.C:
		}
	}
}

// rawState reads status.state from a GameServer's JSON (the index's copy
// says Reserved for a created server that is Ready).
func rawState(raw []byte) (core.State, error) {
	var obj struct {
		Status struct {
			State core.State `json:"state"`
		} `json:"status"`
	}
	if err := json.Unmarshal(raw, &obj); err != nil {
		return "", fmt.Errorf("reading the created server's state: %w", err)
	}
	return obj.Status.State, nil
}

// allocateCreated allocates the Ready server g to its creator: state
// Allocated, CreatingAnnotation gone, last-allocated set. A conflict (the
// agent or controller wrote meanwhile) re-reads and tries again while the
// server is still Ready and still being created.
func (b *Backend) allocateCreated(ctx context.Context, k core.Key, g *gameServer, now time.Time) (*core.GameServer, error) {
	raw := g.raw
	for range b.cfg.MaxConflictRetries + 1 {
		obj, err := decodeTree(raw)
		if err != nil {
			return nil, err
		}
		meta, err := child(obj, "metadata")
		if err != nil {
			return nil, err
		}
		ann, err := child(meta, "annotations")
		if err != nil {
			return nil, err
		}
		delete(ann, allocator.CreatingAnnotation)
		ann[core.LastAllocatedAnnotation] = now.UTC().Format(time.RFC3339Nano)
		st, err := child(obj, "status")
		if err != nil {
			return nil, err
		}
		st["state"] = string(core.StateAllocated)
		body, err := encodeTree(obj)
		if err != nil {
			return nil, err
		}
		updated, err := b.put(ctx, k, body)
		if err == nil {
			b.noteRV(&b.writtenRV, updated.ResourceVersion)
			b.rememberWritten(updated, true)
			return toCore(updated)
		}
		if !apierrors.IsConflict(err) {
			return nil, storeError("allocating created", k, err)
		}
		cur, err := b.get(ctx, k)
		if err != nil {
			return nil, storeError("re-reading created", k, err)
		}
		if cur.UID != g.UID {
			return nil, fmt.Errorf("%w: it was replaced while starting", allocator.ErrServerFailed)
		}
		if s, err := rawState(cur.raw); err != nil || s != core.StateReady || cur.Annotations[allocator.CreatingAnnotation] == "" {
			return nil, fmt.Errorf("%w: it changed to %s before it could be allocated", allocator.ErrServerFailed, s)
		}
		raw = cur.raw
	}
	return nil, allocator.ErrContention
}

// deleteCreated deletes a failed Create's server: the object of uid, or,
// when uid is unknown (the POST's answer was lost), the object of that
// name if it is still being created. NotFound is success.
func (b *Backend) deleteCreated(k core.Key, uid types.UID) error {
	ctx, cancel := context.WithTimeout(context.Background(), cleanupTimeout)
	defer cancel()
	if uid == "" {
		cur, err := b.get(ctx, k)
		if apierrors.IsNotFound(err) {
			return nil
		}
		if err != nil {
			return err
		}
		if cur.Annotations[allocator.CreatingAnnotation] == "" {
			return nil // not one of ours being made: leave it
		}
		uid = cur.UID
	}
	err := b.client.Delete().Namespace(k.Namespace).Resource(GameServerResource.Resource).Name(k.Name).
		Body(&metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}}).Do(ctx).Error()
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	b.mu.Lock()
	if g := b.raw[k]; g != nil && g.UID == uid {
		delete(b.raw, k)
		b.ix.Remove(k)
	}
	b.mu.Unlock()
	return nil
}

// Destroy implements allocator.Creator: a Delete preconditioned on the
// object read, so a server that changed hands meanwhile is not deleted.
func (b *Backend) Destroy(ctx context.Context, k core.Key, owner string) (*core.GameServer, error) {
	for range b.cfg.MaxConflictRetries + 1 {
		cur, err := b.get(ctx, k)
		if apierrors.IsNotFound(err) {
			return nil, allocator.ErrNotFound
		}
		if err != nil {
			return nil, storeError("reading", k, err)
		}
		if owner != "" && cur.Annotations[allocator.OwnerAnnotation] != owner {
			return nil, allocator.ErrNotFound
		}
		uid, rv := cur.UID, cur.ResourceVersion
		err = b.client.Delete().Namespace(k.Namespace).Resource(GameServerResource.Resource).Name(k.Name).
			Body(&metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid, ResourceVersion: &rv}}).Do(ctx).Error()
		switch {
		case apierrors.IsConflict(err):
			continue
		case apierrors.IsNotFound(err):
			return nil, allocator.ErrNotFound
		case err != nil:
			return nil, storeError("deleting", k, err)
		}
		b.forget(k, cur)
		gs, err := toCore(cur)
		if err != nil {
			return nil, err
		}
		return gs, nil
	}
	return nil, allocator.ErrContention
}

// FleetTemplate implements allocator.Creator: the Fleet's spec.template,
// read from the API server at each use so that edits to the Fleet apply.
// Agones' controller decides the start-up time.
func (b *Backend) FleetTemplate(ctx context.Context, namespace, name string) (map[string]any, time.Duration, error) {
	raw, err := b.client.Get().Namespace(namespace).Resource(fleetResource).Name(name).Do(ctx).Raw()
	if apierrors.IsNotFound(err) {
		return nil, 0, allocator.ErrFleetNotFound
	}
	if err != nil {
		return nil, 0, fmt.Errorf("reading fleet %s/%s: %w", namespace, name, err)
	}
	obj, err := decodeTree(raw)
	if err != nil {
		return nil, 0, fmt.Errorf("fleet %s/%s: %w", namespace, name, err)
	}
	spec, _ := obj["spec"].(map[string]any)
	tmpl, _ := spec["template"].(map[string]any)
	if tmpl == nil {
		return nil, 0, fmt.Errorf("fleet %s/%s has no spec.template", namespace, name)
	}
	out, err := allocator.FleetTemplateSpec(tmpl)
	if err != nil {
		return nil, 0, fmt.Errorf("fleet %s/%s%w", namespace, name, err)
	}
	return out, 0, nil
}
