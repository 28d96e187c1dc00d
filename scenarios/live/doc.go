// Package live runs a scenario file on real allocators instead of the
// simulator: `qm scenario run FILE --live`.
//
// It brings the scenario's clusters up as memory-backend `qm serve`
// processes on this machine, each with the scenario's fleets, all joined by
// latency links (toxiproxy, as the multi-cluster rig uses) that carry the
// clusters' RTTs and are switched down during the scenario's outages. The
// policies become GameServerAllocationPolicies and connection Secrets in a
// policies file per allocator, so the allocators forward between clusters
// the way they do in production. The workload is driven by loadgen as an
// open-loop arrival schedule, the simulator's own schedule with Poisson
// arrivals, and every session is given back after a length drawn from the
// scenario's distribution.
//
// A scenario of hours runs in minutes through a time scale N: every span of
// the scenario's timeline (its duration, rate steps, session lengths,
// start-up delays, outages, phases, the breakers' open periods) is divided
// by N and every rate multiplied by N, so each server sees the same load.
// Per-request latencies (RTTs, timeouts) are not scaled.
//
// The result is written in the simulator's result format (kind
// LiveScenarioReport), with the scenario's expectations checked on it, so
// `qm report` puts predicted and measured side by side. Whatever the file
// describes that the live run does not reproduce is listed in the result
// under live.notModelled: a difference is named, never silent.
//
// It is also where scenario files meet the live tools, so that neither
// depends on the scenario format: Topology converts a scenario to the
// multi-cluster rig's own topology (LoadTopology reads either file for
// `qm cluster up --topology`), and WorkloadOf turns one of its streams into
// what loadgen drives (`qm load --scenario`).
package live
