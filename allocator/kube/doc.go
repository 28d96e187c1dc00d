// Package kube is the allocator's production backend: Agones GameServer
// objects (agones.dev/v1) in a Kubernetes cluster.
//
// An informer feeds the core's index incrementally. An allocation is a full
// Update of the chosen GameServer carrying the resourceVersion the decision
// was made on, so the API server rejects it if anyone else (another replica,
// the Agones controller) changed the object meanwhile; the fresh object then
// goes back into the index and the core chooses again (allocator.CommitLoop).
// The answer is returned only after the API server has accepted the write.
//
// Objects are kept as the JSON the API server sent, and an allocation
// changes only the fields it means to change — labels, annotations,
// status.state and the counters and lists it acts on — so everything Agones
// writes that this package does not model (the pod template under
// spec.template, status fields of newer Agones versions) survives
// untouched. Every replica's informer sees every write in the cluster, so
// watch events are decoded leanly: a small scanner (jsonscan.go) finds
// metadata and status, and only those go through encoding/json
// (object.go, watch.go).
//
// A request with an idempotency key is allocated once across all replicas
// sharing the GameServers (keys.go): before allocating, a replica creates
// the key's record, a coordination.k8s.io Lease in the allocator's own
// namespace named after a hash of the caller's identity and key. The API
// server lets one create of a name succeed, whatever each replica's
// informer has seen, so exactly one replica allocates; the others read the
// record and answer with the server it names (read from the API server,
// not the cache), wait while it is pending, or take over a claim whose
// replica died, looking first for a server that replica allocated. A
// request without a key never touches the records.
package kube
