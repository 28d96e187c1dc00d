// Package core is Quartermaster's allocation engine: it decides which game
// server answers an allocation request, and what that server looks like once
// allocated.
//
// It is shared unchanged by the live allocator service, the simulator and the
// test rigs, so it is pure: it depends only on the standard library, never
// reads the wall clock or the global random source, and does no I/O. Time and
// randomness are arguments (a time.Time and a seed), so every decision can be
// replayed.
//
// The pieces:
//
//   - GameServer, Request, Selector, Policy: the engine's own types. The
//     allocator converts Kubernetes and protobuf types to these at its edge.
//   - Normalize: validates a Request (errors name the field and the reason),
//     applies defaults and turns the deprecated required/preferred selectors
//     into the ordered selector list.
//   - Selector.Matches, Apply: matching and the allocation's effect on a
//     server (metadata, counters, lists, state), as Agones defines them.
//   - Index: keeps a fleet of GameServers organised so that an allocation
//     finds its server without scanning or sorting the fleet, and guarantees
//     that concurrent allocations never receive the same server.
//   - OrderClusters: the order in which multi-cluster policies are tried.
//   - Window, PoliciesAt, NextPolicyChange: when a policy is in force (from,
//     until, recurring times of day in a time zone), asked at an instant
//     the caller passes. Zones load through time.LoadLocation, the one
//     thing here that may read the system's zone database.
package core
