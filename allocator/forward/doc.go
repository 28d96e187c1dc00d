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
//
// # Lost answers, retries and reconciliation
//
// A forwarded request can fail in two ways that look alike and are not: it
// was refused before the remote could act on it (the connection could not
// be made or was refused, the endpoint's breaker is open), or it was sent
// and no answer came back (the connection broke mid-call, the try timed
// out). The forwarder tells them apart by whether grpc-go created the
// call's stream on a connection: only then may the request have reached
// the remote. A refusal moves on to the next endpoint, as before. A lost
// answer means the remote may have allocated, and moving on could leave
// two clusters each holding a server for one request; so the forwarder
// first sends the request to the same endpoint again (LostAnswerRetries
// times, within the caller's deadline) with the same idempotency key,
// and a Quartermaster remote that allocated answers with that allocation.
//
// A keyed request carries its key to the remote (the
// quartermaster.dev/allocation-key annotation, in metadata and metaPatch
// alike, appended after the request's bytes: protobuf merges it into the
// request's metadata, so a Memo's encoding serves every key). The caller's
// own key, from the annotation or the gRPC header, is sent as a digest of
// the caller's identity and the key: a remote scopes keys by its caller,
// which is this allocator's certificate for every one of its callers, and
// two callers using the same key must not be given each other's servers;
// the same caller's retry, through any replica, derives the same key.
//
// A request without a key is forwarded as it came, unless OwnKeys gives it
// a key of the forwarder's own for its forwarding only. Without a key a
// lost answer cannot be told apart from a refusal safely, so it is neither
// sent to the same endpoint again (that could allocate twice) nor given
// back; it fails over as any transport failure does, and a remote
// Quartermaster gives the server back itself when the dropped connection
// ends the call before the allocation commits. OwnKeys closes the rest of
// the gap, at a price every such request pays: the remote keeps it in its
// table of keys and answers with the key on the server, which costs the
// entry and the remote a measurable part of a forwarded request's CPU
// (docs/performance.md). Callers that retry should send keys anyway, and
// they pay that price alone. An Agones remote puts the annotation on the
// GameServer it allocates and ignores it otherwise: its lost answers are
// retried with the key but neither recognised nor given back (it has no
// Release).
//
// A request with the caller's key never goes past a cluster that may
// hold its allocation. Before it is sent to a cluster, local or remote,
// that cluster is recorded as the key's (Placements: the kubernetes
// backend's replicas share the record on the API server, the memory
// backend keeps it in the process), and the record moves on only when
// that cluster has answered that nothing was allocated for the key ("no
// game server", or a refusal that writes nothing: contention, a denied
// permission). A try whose answer was lost, an error that may follow a
// write (the store or the remote unavailable, an internal error), or a
// retry that cannot reach the cluster the record names is answered
// Unavailable naming that cluster: a caller retries that, and the retry,
// through any replica of this allocator, goes to the recorded cluster
// first and gets the allocation held there. A refusal of the key itself
// there (used with another request, or released) is the answer, and the
// record stays. Two tries of one key at once cannot both move the
// record: a move is made only from the version of the record its try
// last saw.
//
// The price and the limits: one record write per cluster a keyed request
// is sent to, so keyed requests fail (Unavailable, nothing sent) while
// the entry's own API server cannot be written, even when another
// cluster could serve them; a key whose cluster stays unreachable is not
// served elsewhere until the key is forgotten (the caller may give it up
// and use a new key). The guarantee needs remotes that honour the key
// (Quartermaster's): an Agones remote allocates anew for every request,
// so its lost answer cannot be recovered by asking again, and its "no
// game server" after one does not prove it holds nothing. And two live
// tries of one key (a caller that sends again before its first try's
// deadline) can each be served, in two clusters, if the cluster the
// first is waiting on answers the second "no game server" and then
// serves the first: callers retry after their try's deadline.
//
// A request without the caller's key fails over after a lost answer, as
// any other transport failure. When another cluster then serves it, or
// no cluster does, and it carried a key of the forwarder's own (nobody
// else can ask for that allocation), the forwarder queues a release of
// the key at the endpoint whose answer was lost (ReleaseRequest with
// allocationKey, for the identity the request was forwarded for, as a
// forwarded Release by name is). A background worker sends it once the
// endpoint is reachable: at once, then with a doubling backoff, and as
// soon as the endpoint's breaker closes; NotFound (nothing was allocated,
// or it was released already) ends it as nothing there; an endpoint that
// refuses (an allocator without release by key) or stays unreachable for
// ReconcileFor ends it as given up. The queue is bounded, and dropped when
// the forwarder closes.
//
// qm_forward_answers_lost_total and qm_forward_reconciliations_total
// (queued, attempted, released, nothing_there, given_up) count what
// happened.
package forward
