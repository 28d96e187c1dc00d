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
// Every step goes through a Runner, so a dry run records the whole story
// (tests keep it as a golden file); machines without Docker and kind's node
// image, such as the ones this project is built on, can only run it dry.
package kind
