package kind

import (
	"strconv"

	"sigs.k8s.io/kind/pkg/apis/config/v1alpha4"
	"sigs.k8s.io/yaml"

	"github.com/quartermaster-dev/quartermaster/kindcluster/rig"
)

// Fixed ports. The allocator's Service is a NodePort on AllocatorNodePort,
// which kind maps to a host port: the callers on the host reach it there,
// and so do the links other clusters' allocators forward through. The
// default host ports lie below every common ephemeral port range (Linux's
// starts at 32768), where no outgoing connection takes them as its local
// port and keeps Docker from publishing them (ports.go).
const (
	AllocatorNodePort = 30443
	// DefaultAPIServerPort + i is cluster i's API server on the host.
	DefaultAPIServerPort = 26443
	// DefaultCallerPort + i is where callers on the host reach cluster i's
	// allocators (any replica, through the Service).
	DefaultCallerPort = 28443
	// MaxClusters bounds a kind rig's clusters: the host ports of cluster
	// i's allocator replicas are spaced by it (ReplicaCallerPort).
	MaxClusters = 100
)

// ReplicaNodePort is the NodePort of the Service of allocator replica k
// (ReplicaServiceName): the ports after AllocatorNodePort.
func ReplicaNodePort(k int) int { return AllocatorNodePort + 1 + k }

// ReplicaCallerPort is where callers on the host reach allocator replica
// k of cluster i alone: CallerPort + (k+1)*MaxClusters + i.
func ReplicaCallerPort(callerPort, i, k int) int { return callerPort + (k+1)*MaxClusters + i }

// kubeletPatch lets the kubelet run on a cgroup v1 host, which kubelets
// from 1.35 on refuse unless told; on cgroup v2 it changes nothing.
const kubeletPatch = `kind: KubeletConfiguration
apiVersion: kubelet.config.k8s.io/v1beta1
failCgroupV1: false
`

// Node labels kind puts on each cluster's node: the region is the
// well-known topology label, the provider has no well-known label.
const (
	RegionLabel   = "topology.kubernetes.io/region"
	ProviderLabel = "quartermaster.dev/provider"
	ClusterLabel  = "quartermaster.dev/cluster"
)

// ClusterName is the kind cluster for a topology cluster: prefixed, so a
// rig never takes over a kind cluster someone made for something else.
func ClusterName(cluster string) string { return "qm-" + cluster }

// NodeHost is the host name of the cluster's node container on kind's
// Docker network, where the other clusters' allocators reach it.
func NodeHost(cluster string) string { return ClusterName(cluster) + "-control-plane" }

// Config is the kind config for topology cluster i: one control-plane node
// (the fleet agent simulates the topology's node pool; a kind node per
// simulated node would be a container each), labelled with the cluster's
// provider and region, its API server on 127.0.0.1 at a port of its own,
// the allocator's NodePort mapped to a host port for the callers, and so is
// the NodePort of each allocator replica's own Service; the kubelet is
// allowed cgroup v1 (kubeletPatch).
func Config(t *rig.Topology, i int, opts Options) *v1alpha4.Cluster {
	opts.defaults()
	c := t.Spec.Clusters[i]
	ports := []v1alpha4.PortMapping{{
		ContainerPort: AllocatorNodePort,
		HostPort:      int32(opts.CallerPort + i),
		ListenAddress: "127.0.0.1",
		Protocol:      v1alpha4.PortMappingProtocolTCP,
	}}
	for k := range *c.Allocator.Replicas {
		ports = append(ports, v1alpha4.PortMapping{
			ContainerPort: int32(ReplicaNodePort(k)),
			HostPort:      int32(ReplicaCallerPort(opts.CallerPort, i, k)),
			ListenAddress: "127.0.0.1",
			Protocol:      v1alpha4.PortMappingProtocolTCP,
		})
	}
	labels := map[string]string{ClusterLabel: c.Name}
	if c.Region != "" {
		labels[RegionLabel] = c.Region
	}
	if c.Provider != "" {
		labels[ProviderLabel] = c.Provider
	}
	return &v1alpha4.Cluster{
		TypeMeta: v1alpha4.TypeMeta{Kind: "Cluster", APIVersion: "kind.x-k8s.io/v1alpha4"},
		Name:     ClusterName(c.Name),
		Nodes: []v1alpha4.Node{{
			Role:              v1alpha4.ControlPlaneRole,
			Image:             opts.NodeImage,
			Labels:            labels,
			ExtraPortMappings: ports,
		}},
		KubeadmConfigPatches: []string{kubeletPatch},
		Networking: v1alpha4.Networking{
			APIServerAddress: "127.0.0.1",
			APIServerPort:    int32(opts.APIServerPort + i),
		},
	}
}

// ConfigYAML is Config as the file `kind create cluster --config` reads.
func ConfigYAML(t *rig.Topology, i int, opts Options) ([]byte, error) {
	return yaml.Marshal(Config(t, i, opts))
}

// CallerAddr is where callers on the host reach cluster i's allocators.
func CallerAddr(i int, opts Options) string {
	opts.defaults()
	return "127.0.0.1:" + strconv.Itoa(opts.CallerPort+i)
}

// ReplicaCallerAddr is where callers on the host reach allocator replica
// k of cluster i alone.
func ReplicaCallerAddr(i, k int, opts Options) string {
	opts.defaults()
	return "127.0.0.1:" + strconv.Itoa(ReplicaCallerPort(opts.CallerPort, i, k))
}
