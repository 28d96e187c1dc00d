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
package kube
