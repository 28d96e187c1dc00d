package kube

import "context"

// RunWithoutRelease takes part in the membership like Run, but when ctx
// ends leaves the Lease behind, as a replica killed without a graceful stop
// does.
func (m *Membership) RunWithoutRelease(ctx context.Context) { m.run(ctx, false) }
