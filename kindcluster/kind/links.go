package kind

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"

	kindcluster "github.com/quartermaster-dev/quartermaster/kindcluster"
	"github.com/quartermaster-dev/quartermaster/kindcluster/rig"
)

// Links on kind, as on the local provider: every connection from one
// cluster's allocators to another's goes through a toxiproxy link in this
// process, so the e2e suite switches the same faults on the same kind of
// object. The links listen on this host where kind's containers reach it,
// and forward to the other cluster's allocators at the host port kind maps
// to their NodePort; the policies name the links.
//
// Kind puts its nodes on a user-defined Docker bridge network named "kind".
// On Linux the host owns that bridge's gateway address, and traffic from a
// pod leaves its node masqueraded as the node, so the gateway is where pods
// reach this host (`docker network inspect kind` shows it; kind never
// removes the network, so it stays put between rigs). A host firewall that
// drops traffic from Docker's bridges to host ports must let the link
// ports through. Docker Desktop (macOS, Windows) runs the bridge in
// a VM, where the gateway is not this host: there the name
// host.docker.internal is, and HostAddress must be set to it.

// DefaultLinkPort is the first host port of the cluster links: the link
// from cluster i to cluster j (of n) listens on DefaultLinkPort + i*n + j.
// i == j is the cluster's link to itself, which a policy that loops back
// names.
const DefaultLinkPort = 29443

// KindNetwork is the Docker network kind puts its nodes on (kind's own
// default; KIND_EXPERIMENTAL_DOCKER_NETWORK changes it, and then so must
// HostAddress).
const KindNetwork = "kind"

// inspectNetwork is the probe for the network's address ranges: the IPAM
// configuration as JSON, one object per subnet.
func inspectNetwork(docker string) kindcluster.Command {
	return kindcluster.Command{Path: docker, Args: []string{"network", "inspect", KindNetwork, "--format", "{{json .IPAM.Config}}"}}
}

// GatewayFromInspect chooses the address kind's containers reach this host
// by from `docker network inspect kind --format '{{json .IPAM.Config}}'`:
// the IPv4 subnet's gateway, or, where Docker left the gateway out (it
// may), the subnet's first address, which is the gateway Docker assigns a
// bridge. IPv4, because kind's clusters are IPv4 unless configured
// otherwise and their pods dial the policies' endpoints over it.
func GatewayFromInspect(out []byte) (string, error) {
	text := strings.TrimSpace(string(out))
	if text == "" {
		return "", fmt.Errorf("docker network inspect %s printed nothing", KindNetwork)
	}
	var subnets []struct {
		Subnet  string `json:"Subnet"`
		Gateway string `json:"Gateway"`
	}
	if err := json.Unmarshal([]byte(text), &subnets); err != nil {
		return "", fmt.Errorf("docker network inspect %s: want a JSON list of subnets, got %q: %v", KindNetwork, firstLine([]byte(text), err), err)
	}
	var seen []string
	for _, s := range subnets {
		if gw, err := netip.ParseAddr(s.Gateway); err == nil && gw.Is4() {
			return gw.String(), nil
		}
		if p, err := netip.ParsePrefix(s.Subnet); err == nil && p.Addr().Is4() {
			if p.Bits() > 30 {
				return "", fmt.Errorf("network %s: IPv4 subnet %s has no gateway and no room for one", KindNetwork, p)
			}
			return p.Masked().Addr().Next().String(), nil
		}
		seen = append(seen, s.Subnet)
	}
	return "", fmt.Errorf("network %s has no IPv4 subnet (subnets: %s); set the host address kind's pods reach this host by", KindNetwork, strings.Join(seen, ", "))
}

// LinkListen is where the links listen given the address containers reach
// this host by: that address itself when it is an IP (the bridge's gateway
// on Linux), so the links are not offered on every interface; every
// interface when it is a name such as host.docker.internal, whose address
// this process cannot know.
func LinkListen(hostAddress string) string {
	if _, err := netip.ParseAddr(hostAddress); err == nil {
		return hostAddress
	}
	return "0.0.0.0"
}

// LinkPort is the host port of the link from cluster i to cluster j of n.
func LinkPort(base, i, j, n int) int { return base + i*n + j }

// linkEndpoints are where cluster i's allocators reach every cluster of
// the topology (itself included), by the links on hostAddress.
func linkEndpoints(t *rig.Topology, i int, hostAddress string, base int) map[string][]string {
	n := len(t.Spec.Clusters)
	out := map[string][]string{}
	for j, c := range t.Spec.Clusters {
		out[c.Name] = []string{net.JoinHostPort(hostAddress, strconv.Itoa(LinkPort(base, i, j, n)))}
	}
	return out
}

// resolveHostAddress is Options.HostAddress, or the gateway of kind's
// network, asked of Docker (the network exists once a kind cluster does).
func (r *Rig) resolveHostAddress(ctx context.Context) (string, error) {
	if r.opts.HostAddress != "" {
		return r.opts.HostAddress, nil
	}
	out, err := r.opts.Runner.Run(ctx, inspectNetwork(r.opts.Docker))
	if err != nil {
		return "", fmt.Errorf("the address kind's pods reach this host by: %w (set it: HostAddress, QM_KIND_HOST_ADDRESS)", err)
	}
	addr, err := GatewayFromInspect(out)
	if err != nil {
		return "", fmt.Errorf("the address kind's pods reach this host by: %w", err)
	}
	return addr, nil
}

// link starts the rig's links: from the callers to each allocator replica
// of each cluster (through the replica's own Service and host port), and from
// every cluster to every cluster on the host address. In a dry run it
// only notes them.
func (r *Rig) link() error {
	note, dry := r.notef()
	n := len(r.Clusters)
	listen := r.opts.LinkListen
	if listen == "" {
		listen = LinkListen(r.HostAddress)
	}
	for j, to := range r.Clusters {
		upstream := to.CallerAddr
		replicas := *r.Topology.Spec.Clusters[j].Allocator.Replicas
		for rep := range replicas {
			lat := r.Topology.LinkBetween(rig.CallersName, to.Name)
			// The replica's own Service, as on the local rig a link is
			// one replica's.
			own := ReplicaCallerAddr(j, rep, r.opts)
			if dry {
				note("link %s -> %s/%d: 127.0.0.1:(free port) -> %s, %v latency, %v jitter", rig.CallersName, to.Name, rep, own, lat.Latency.D(), lat.Jitter.D())
				continue
			}
			if _, err := r.Proxies.Add(rig.CallersName, to.Name, rep, own, lat); err != nil {
				return err
			}
		}
		for i, from := range r.Clusters {
			lat := r.Topology.LinkBetween(from.Name, to.Name)
			if i == j {
				// A cluster's link to itself is only ever a loop a test
				// makes on purpose: no latency to model.
				lat = rig.Link{}
			}
			port := strconv.Itoa(LinkPort(r.opts.LinkPort, i, j, n))
			at, dial := net.JoinHostPort(listen, port), net.JoinHostPort(r.HostAddress, port)
			if dry {
				note("link %s -> %s: listen %s, dialled as %s -> %s, %v latency, %v jitter", from.Name, to.Name, at, dial, upstream, lat.Latency.D(), lat.Jitter.D())
				continue
			}
			if _, err := r.Proxies.AddAt(at, dial, from.Name, to.Name, 0, upstream, lat); err != nil {
				return fmt.Errorf("%w (kind's pods reach this host at %s; set HostAddress and LinkListen if that is wrong here)", err, r.HostAddress)
			}
		}
	}
	return nil
}

// Environment variables that set HostAddress and LinkListen where the
// caller left them empty: for `qm cluster up --provider kind`, the e2e
// suite and TestKindRig (make e2e-multicluster PROVIDER=kind
// KIND_HOST_ADDRESS=... KIND_LINK_LISTEN=... sets them).
const (
	HostAddressEnv = "QM_KIND_HOST_ADDRESS"
	LinkListenEnv  = "QM_KIND_LINK_LISTEN"
)
