// Package kind is the rig's kind provider: it brings a topology
// (kindcluster/rig.Topology) up as kind clusters, one per topology cluster,
// through sigs.k8s.io/kind's Go API, for people whose machines run Docker.
//
// Each cluster gets a generated kind config (its API server port, a host
// port for callers, node labels from the cluster's provider and region),
// the qm image built from the repository's Dockerfile and loaded into its
// node, Agones' CRDs, the allocator from deploy/allocator.yaml (image,
// replicas and cluster name filled in, its Service on a fixed NodePort),
// the fleet agent, the fleets, and the GameServerAllocationPolicies and
// connection Secrets that point at the other clusters' allocators through
// links: toxiproxy proxies in this process, as on the local provider,
// listening where kind's pods reach this host (links.go says where).
//
// A running Rig is a rig.Handle, so the e2e suite runs its specs on kind
// unchanged: link faults switched on those links, an API server restarted
// by `docker restart` of its cluster's node, a connection Secret rotated
// through the API.
//
// Every step goes through a Runner: Exec does it (kind's Go API, docker,
// kubectl), DryRun records the whole story (tests keep it as a golden
// file, and test Exec against a stand-in docker). Machines with Docker
// but no registry build kind's node image and the qm image offline first
// (hack/kind/setup-host.sh, make kind-node-image; docs/local-clusters.md).
package kind
