// Package sim is Quartermaster's discrete-event simulator: it runs the
// production allocation core (package core) unchanged under a virtual clock,
// against models of clusters, nodes, fleets, matchmaker load, API-server
// latency and stale allocator caches, and measures what operators care
// about: allocation latency, outcomes, packing, node-hours and cost.
//
// # Why it is built this way
//
// One goroutine pops events from a queue ordered by virtual time, ties broken
// by insertion order, so a run is a pure function of its Config: the same
// scenario and seed give byte-identical results. Nothing reads the wall
// clock; every random stream is seeded from the scenario seed and the name of
// what it drives, so adding a cluster does not reshuffle another cluster's
// draws.
//
// The simulated API server holds the truth (every object with a revision
// that grows cluster-wide, like etcd's). Each allocator replica has its own
// core.Index as its informer cache, fed with the truth's changes after a
// propagation delay. A replica allocates from its cache, holds the server
// and writes it with the cached version as precondition; a write that finds
// a newer version is a conflict: the replica upserts the fresh state, aborts
// the hold and tries again, exactly as the live Kubernetes backend does.
//
// Multi-cluster requests are routed with core.SelectPolicies and
// core.OrderClusters, each forward costing the target cluster's round trip,
// and a cluster that is down costing the forwarding timeout. Of the
// policies, those whose window (core.Window) is open at the virtual clock
// are in force, with Config.Start the instant of virtual time zero; a
// request with none in force ends as no match.
//
// The loss model (loss.go), on when a cluster loses answers or a stream has
// a Caller, loses answers after the allocation they carry committed: on a
// cluster's link back to the forwarder, or on the way to the caller, or
// after the caller gave up at its timeout. Without idempotency keys each
// such allocation is a leaked server and the retry allocates another; with
// keys the forwarder and the caller get the same server again (a keyed
// request never moves on from a cluster that may hold its allocation: its
// caller is answered Unavailable and retries there), and what no one takes
// is released. Results then carry a losses section: leaks (and per hour),
// retries, duplicate allocations avoided, key-window releases. Its draws
// come from random streams of its own, so at zero rates a run is the same.
//
// Latencies are recorded as loadgen records live ones, in an HdrHistogram
// with loadgen's range and precision, so that simulated and measured
// percentiles come from one estimator.
package sim
