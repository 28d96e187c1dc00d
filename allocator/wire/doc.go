// Package wire converts between the allocator's API messages (the generated
// Agones allocation types and Quartermaster's quartermaster.v1 types) and
// the core's own types, and holds the REST codec (proto3 JSON as Agones'
// REST endpoint speaks it).
//
// It is the one place where protobuf types meet core types, so that the
// core stays free of them and the gRPC and REST front ends, the
// multi-cluster forwarder and the client all convert the same way. Nothing
// here panics on any input: nil messages read as empty ones, and values the
// API does not define (an enum number out of range, an unknown enum name)
// are errors that name the field, as a *core.InvalidRequestError so the
// service answers InvalidArgument / HTTP 400 with them.
package wire
