// Package allocator is Quartermaster's allocation service: a drop-in for
// Agones' allocator. It serves Agones' allocation.AllocationService over
// gRPC and POST /gameserverallocation over REST (proto3 JSON), on one
// mutual-TLS port or two, plus Quartermaster's own AllocationAdmin (List and
// Release of the caller's allocations).
//
// The pieces:
//
//   - Service: one request pipeline for both protocols, read top to bottom
//     in pipeline.go: decode, identify, normalize once (core.Normalize),
//     identity limits (namespaces, allocations held, request rate), the
//     backend or the multi-cluster forwarder, and one answer, an
//     AllocationResponse (written straight from the server for an
//     allocation made here, by generated code otherwise); errors as the
//     gRPC codes (and HTTP statuses) of Agones' table, with messages that
//     say what was wrong; metrics and one log line per failed allocation.
//   - Backend: where game servers live. The memory package is the embedded
//     one; a Kubernetes backend fits the same interface through CommitLoop
//     (informer-fed index, Update with resourceVersion, retry on conflict).
//   - Server: the listeners. On a shared port a splitter routes each
//     connection once, after its TLS handshake, to grpc-go's own transport
//     or to net/http, so gRPC there is as fast as on a port of its own.
//     /live, /ready, /metrics on a plain-HTTP port; the gRPC health service;
//     graceful shutdown.
//
// Ownership is recorded on the allocated game server itself
// (OwnerAnnotation), so every replica agrees on it. Re-allocating a live
// server (a selector with state Allocated) matches only the caller's own
// servers; only an admin may take another's, and becomes its owner.
package allocator
