package fleetagent

import (
	"context"
	"fmt"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// TemplateLabel marks a GameServer an allocator made on demand from a
// template (Quartermaster's AllocationAdmin Create; allocator.TemplateLabel).
// Such a server belongs to no Fleet. Agones' controller starts every
// standalone GameServer; the agent starts only these, so that servers a
// test or an operator made by hand stay exactly as they were written.
const TemplateLabel = "quartermaster.dev/template"

// listStandalone lists the on-demand servers and counts them into load, so
// that fleets' servers and these share the node pool.
func (a *Agent) listStandalone(ctx context.Context, load *nodeLoad) ([]*unstructured.Unstructured, error) {
	list, err := a.cfg.Client.Resource(GameServerResource).Namespace(a.cfg.Namespace).List(ctx, metav1.ListOptions{LabelSelector: TemplateLabel})
	if err != nil {
		return nil, fmt.Errorf("listing on-demand gameservers: %w", err)
	}
	var out []*unstructured.Unstructured
	for i := range list.Items {
		gs := &list.Items[i]
		if _, owned := fleetOwner(gs); owned || gs.GetDeletionTimestamp() != nil {
			continue
		}
		load.add(gs)
		out = append(out, gs)
	}
	return out, nil
}

// syncStandalone moves each on-demand server one step, as Agones'
// controller would: a new one (no state yet) is scheduled on the least
// loaded node with ports of its own; then step takes it to Ready after the
// start-up delay, and deletes it once Shutdown (an allocator's Release) or
// failed.
func (a *Agent) syncStandalone(ctx context.Context, gss []*unstructured.Unstructured, load *nodeLoad) {
	now := a.cfg.Clock.Now()
	var fresh, rest []*unstructured.Unstructured
	for _, gs := range gss {
		switch state(gs) {
		case "", "Creating", "PortAllocation", "Starting":
			next := gs.DeepCopy()
			if err := a.schedule(next, load, now.UTC().Format(time.RFC3339Nano)); err != nil {
				a.log.Warn("gameserver not schedulable", "namespace", gs.GetNamespace(), "name", gs.GetName(), "err", err)
				continue
			}
			fresh = append(fresh, next)
		default:
			rest = append(rest, gs)
		}
	}
	a.each(ctx, fresh, func(gs *unstructured.Unstructured) {
		if _, ok := a.update(ctx, gs); ok {
			a.created.Add(1)
		}
	})
	a.each(ctx, rest, func(gs *unstructured.Unstructured) { a.step(ctx, gs, now) })
}

// schedule gives gs a node, ports (from spec.ports), its counters and lists
// as status, and state Scheduled, as newGameServer does for a fleet's.
func (a *Agent) schedule(gs *unstructured.Unstructured, load *nodeLoad, at string) error {
	spec, _, err := unstructured.NestedMap(gs.Object, "spec")
	if err != nil {
		return fmt.Errorf("spec: %w", err)
	}
	if spec == nil {
		spec = map[string]any{}
	}
	node := load.pick(true, a.cfg.MaxPerNode)
	var ports []any
	for _, name := range portNames(spec) {
		ports = append(ports, map[string]any{"name": name, "port": load.port(node)})
	}
	load.place(node)
	status := map[string]any{"state": stateScheduled, "nodeName": node, "ports": ports}
	if c, ok := spec["counters"].(map[string]any); ok {
		status["counters"] = c
	}
	if l, ok := spec["lists"].(map[string]any); ok {
		status["lists"] = l
	}
	gs.Object["status"] = status
	ann := gs.GetAnnotations()
	if ann == nil {
		ann = map[string]string{}
	}
	ann[ScheduledAtAnnotation] = at
	gs.SetAnnotations(ann)
	return nil
}
