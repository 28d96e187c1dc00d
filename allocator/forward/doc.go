// Package forward is the live allocator's multi-cluster router: what a
// request with multiClusterSetting.enabled does.
//
// It reads Agones' multicluster.agones.dev/v1 GameServerAllocationPolicy
// objects and their connection Secrets from a Source (a policies file for
// the memory backend, informers for the kubernetes one), orders the
// clusters with core.OrderClusters, and tries them in turn: a local entry
// through the caller-supplied local allocation path, a remote one over gRPC
// with mutual TLS, exactly as Agones' forwarder sends it (enabled=false,
// namespace rewritten). The first Allocated answer wins.
//
// Where Agones dials a new client per call, waits on context.Background and
// retries a down cluster until its own 30 s are gone, this package keeps one
// client per (endpoint, Secret version), bounds everything by the caller's
// deadline, keeps a breaker per endpoint so that a down cluster costs a
// request nothing once it is known to be down, and names every cluster it
// tried, and why each failed, in one error. Forwarded calls carry the hops
// they crossed in gRPC metadata so that a policy pointing back at an
// allocator already on the path is refused instead of looping.
package forward
