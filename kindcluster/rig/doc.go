// Package rig brings up a multi-cluster rig from a topology file: several
// real clusters (kindcluster's etcd and kube-apiserver processes), each with
// its fleets, a fleet agent and allocator replicas as `qm` processes, the
// cross-cluster mTLS Secrets and GameServerAllocationPolicies, and a TCP
// proxy on every link (callers to allocators, allocators to each other) whose
// latency and faults can be switched while load runs.
//
// `qm cluster up --topology FILE` and the e2e suite use it. The topology
// is the rig's own description; a scenario file describes a rig too, and
// scenarios/live converts it (the rig knows nothing of scenarios).
// Handle is a running rig as a test drives it; the kind provider
// (kindcluster/kind) implements it too, so one suite runs on both.
package rig
