package memory

import (
	"context"
	"fmt"
	"maps"
	"time"

	"github.com/quartermaster-dev/quartermaster/allocator"
	"github.com/quartermaster-dev/quartermaster/core"
)

// The memory backend makes servers on demand (allocator.Creator): a created
// server goes onto the least loaded simulated node, stays Scheduled for its
// template's start-up time, and is then allocated to its creator in the same
// step that makes it Ready, so nobody else can take it in between.

var _ allocator.Creator = (*Backend)(nil)

// Create implements allocator.Creator.
func (b *Backend) Create(ctx context.Context, o *allocator.CreateOrder) (*core.GameServer, error) {
	fail := func(err error, made bool) error {
		ce := &allocator.CreateError{Key: o.Key, Err: err, Made: made}
		if made {
			b.removeCreating(o.Key)
			ce.Deleted = true
		}
		return ce
	}
	if err := ctx.Err(); err != nil {
		return nil, fail(err, false)
	}
	gs, err := allocator.GameServerFromObject(o.Object)
	if err != nil {
		return nil, fail(err, false)
	}
	if gs.Key() != o.Key {
		return nil, fail(fmt.Errorf("the object is named %s/%s", gs.Namespace, gs.Name), false)
	}
	if err := b.agent.place(gs); err != nil {
		return nil, fail(err, false)
	}
	select {
	case <-ctx.Done():
		return nil, fail(ctx.Err(), true)
	case <-b.clock.After(o.Startup):
	}

	b.mu.Lock()
	defer b.mu.Unlock()
	cur, ok := b.ix.Get(o.Key)
	if !ok {
		// Destroyed (by its owner, or an admin) while it started.
		return nil, &allocator.CreateError{Key: o.Key, Err: fmt.Errorf("%w: it was deleted while starting", allocator.ErrServerFailed), Made: true, Deleted: true}
	}
	if err := ctx.Err(); err != nil {
		// The deadline passed just as it became Ready: the caller has
		// given up, so it must not be left allocated to nobody listening.
		b.ix.Remove(o.Key)
		b.post(event{kind: evRemoved, gs: cur})
		return nil, &allocator.CreateError{Key: o.Key, Err: err, Made: true, Deleted: true}
	}
	out := *cur
	out.State = core.StateAllocated
	out.Annotations = maps.Clone(cur.Annotations)
	delete(out.Annotations, allocator.CreatingAnnotation)
	out.Annotations[core.LastAllocatedAnnotation] = o.Now().UTC().Format(time.RFC3339Nano)
	b.ix.Upsert(&out)
	return &out, nil
}

// removeCreating removes a server still being created (a failed Create's
// clean-up) and frees its node's ports.
func (b *Backend) removeCreating(k core.Key) {
	b.mu.Lock()
	gs, ok := b.ix.Get(k)
	if ok && gs.Annotations[allocator.CreatingAnnotation] != "" {
		b.ix.Remove(k)
	}
	b.mu.Unlock()
	if ok {
		b.post(event{kind: evRemoved, gs: gs})
	}
}

// Destroy implements allocator.Creator: the server is removed; a fleet's
// agent starts a replacement for one of its own, a created one is gone.
func (b *Backend) Destroy(ctx context.Context, k core.Key, owner string) (*core.GameServer, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	b.mu.Lock()
	gs, ok := b.ix.Get(k)
	if !ok || (owner != "" && gs.Annotations[allocator.OwnerAnnotation] != owner) {
		b.mu.Unlock()
		return nil, allocator.ErrNotFound
	}
	b.ix.Remove(k)
	b.mu.Unlock()
	b.post(event{kind: evRemoved, gs: gs})
	return gs, nil
}

// FleetTemplate implements allocator.Creator from the fleets file: the
// fleet's labels, annotations, ports, counters and lists, and its start-up
// time.
func (b *Backend) FleetTemplate(_ context.Context, namespace, name string) (map[string]any, time.Duration, error) {
	f := b.agent.byKey[core.Key{Namespace: namespace, Name: name}] // read-only after New
	if f == nil {
		return nil, 0, allocator.ErrFleetNotFound
	}
	spec := map[string]any{}
	var ports []any
	for _, p := range f.spec.Ports {
		ports = append(ports, map[string]any{"name": p})
	}
	if len(ports) > 0 {
		spec["ports"] = ports
	}
	if len(f.spec.Counters) > 0 {
		cs := map[string]any{}
		for k, c := range f.spec.Counters {
			cs[k] = map[string]any{"count": c.Count, "capacity": c.Capacity}
		}
		spec["counters"] = cs
	}
	if len(f.spec.Lists) > 0 {
		ls := map[string]any{}
		for k, l := range f.spec.Lists {
			vs := make([]any, len(l.Values))
			for i, v := range l.Values {
				vs[i] = v
			}
			ls[k] = map[string]any{"values": vs, "capacity": l.Capacity}
		}
		spec["lists"] = ls
	}
	tmpl := map[string]any{"metadata": map[string]any{
		"labels":      anyMap(f.spec.Labels),
		"annotations": anyMap(f.spec.Annotations),
	}, "spec": spec}
	out, err := allocator.FleetTemplateSpec(tmpl)
	if err != nil {
		return nil, 0, fmt.Errorf("fleet %s/%s%w", namespace, name, err)
	}
	return out, f.spec.StartupDuration.Duration, nil
}

func anyMap(m map[string]string) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

// place puts a created server, Scheduled, on the least loaded node with
// ports of its own, unless its name is taken.
func (a *agent) place(gs *core.GameServer) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, taken := a.b.ix.Get(gs.Key()); taken {
		return fmt.Errorf("%w: %s/%s", allocator.ErrAlreadyExists, gs.Namespace, gs.Name)
	}
	n := a.nodes[0]
	for _, x := range a.nodes[1:] {
		if x.servers < n.servers {
			n = x
		}
	}
	out := *gs
	out.State = core.StateScheduled
	out.NodeName, out.Address, out.Addresses = n.name, n.addresses[0].Address, n.addresses
	out.Ports = make([]core.Port, len(gs.Ports))
	for i, p := range gs.Ports {
		out.Ports[i] = core.Port{Name: p.Name, Port: n.takePort()}
	}
	n.servers++
	a.b.ix.Upsert(&out)
	return nil
}

// Clock returns the clock the backend starts servers by (tests advance a
// FakeClock through it).
func (b *Backend) Clock() Clock { return b.clock }
