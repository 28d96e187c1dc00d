package kube

import (
	"context"

	"github.com/quartermaster-dev/quartermaster/core"
)

// RunWithoutRelease takes part in the membership like Run, but when ctx
// ends leaves the Lease behind, as a replica killed without a graceful stop
// does.
func (m *Membership) RunWithoutRelease(ctx context.Context) { m.run(ctx, false) }

// StopAfterKeyedCommit makes every keyed allocation stop between its
// commit and its record when stop says so, as a replica killed at that
// moment would: the server is Allocated, the key's record still pending.
func (b *Backend) StopAfterKeyedCommit(stop func() bool) { b.afterKeyedCommit = stop }

// StoredAllocated lists the Allocated GameServers in namespace as the API
// server has them now (not the informer's cache).
func (b *Backend) StoredAllocated(ctx context.Context, namespace string) ([]*core.GameServer, error) {
	raw, err := b.client.Get().Namespace(namespace).Resource(GameServerResource.Resource).Do(ctx).Raw()
	if err != nil {
		return nil, err
	}
	l, err := decodeGameServerList(raw)
	if err != nil {
		return nil, err
	}
	var out []*core.GameServer
	for i := range l.Items {
		gs, err := toCore(&l.Items[i])
		if err != nil {
			return nil, err
		}
		if gs.State == core.StateAllocated {
			out = append(out, gs)
		}
	}
	return out, nil
}
