package kube

import "context"

// RunWithoutRelease takes part in the membership like Run, but when ctx
// ends leaves the Lease behind, as a replica killed without a graceful stop
// does.
func (m *Membership) RunWithoutRelease(ctx context.Context) { m.run(ctx, false) }

// StopAfterKeyedCommit makes every keyed allocation stop between its
// commit and its record when stop says so, as a replica killed at that
// moment would: the server is Allocated, the key's record still pending.
func (b *Backend) StopAfterKeyedCommit(stop func() bool) { b.afterKeyedCommit = stop }
