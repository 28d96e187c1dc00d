// Package kindcluster brings up real Kubernetes API servers for tests, e2e
// rigs and `qm cluster up`: one cluster is an etcd process plus a
// kube-apiserver process on free loopback ports, with generated
// certificates, an admin token, a kubeconfig and Quartermaster's CRDs
// installed and Established.
//
// These clusters are what the rigs' `local` provider (kindcluster/rig) is
// made of: no Docker, no node containers, no kubelets. GameServers in such a
// cluster are objects that a fleet agent creates and marks Ready. Where Docker runs, the `kind`
// provider (package kindcluster/kind) brings the same rigs up as kind
// clusters instead.
//
// Every process the package starts goes through a Runner, so a DryRunner can
// print the commands instead of running them, and every process and
// directory a Cluster owns is removed by Stop, which tests register as a
// cleanup so that a failed or interrupted run leaves nothing behind.
// NewForTest starts one for a test; package kindcluster/kubetest holds what
// tests do with it next (clients, namespaces, GameServers as Agones writes
// them).
package kindcluster
