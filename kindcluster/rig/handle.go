package rig

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"k8s.io/client-go/rest"

	"github.com/quartermaster-dev/quartermaster/certs"
)

// Handle is a running rig as a test drives it, whatever runs its clusters:
// the e2e suite holds one and runs the same specs on the local provider
// (*Rig) and on kind (kindcluster/kind's Rig). Everything a spec does to a
// rig goes through it: clients for each cluster's API server, the callers'
// addresses and certificates, the links whose faults it switches, an
// allocator's metrics, and the three disruptions (an API server
// restarted, a connection Secret rotated, the rig stopped).
type Handle interface {
	// ClusterNames are the rig's clusters, in the topology's order.
	ClusterNames() []string
	// RESTConfig is an administrator's client configuration for the
	// cluster's API server.
	RESTConfig(cluster string) (*rest.Config, error)
	// CallerAddrs are the addresses callers dial for cluster: one link per
	// allocator replica.
	CallerAddrs(cluster string) []string
	// CallerCerts holds the callers' client certificate (CallerIdentity)
	// and the CA the allocators' server certificate chains to.
	CallerCerts() certs.Layout
	// Links are the rig's links: from the callers to every cluster and
	// between clusters; their faults are switched while load runs.
	Links() *Proxies
	// SelfEndpoint is an address the cluster's own allocators reach it
	// at as if it were another cluster: what a policy that loops back to
	// its own cluster names.
	SelfEndpoint(cluster string) string
	// Metrics is the Prometheus text exposition of every allocator
	// replica of the cluster, one after another, so a counter summed over
	// the text is the cluster's.
	Metrics(ctx context.Context, cluster string) (string, error)
	// RestartAPIServer restarts the cluster's API server and returns once
	// it serves again (and, where the restart took them down, its
	// allocators do too).
	RestartAPIServer(ctx context.Context, cluster string) error
	// RotateSecrets issues a new client certificate for the identity the
	// cluster's allocators forward with and writes it into the
	// cluster's connection Secrets through its API server.
	RotateSecrets(ctx context.Context, cluster string) error
	// Stop takes everything down; it is safe to call more than once.
	Stop() error
}

var _ Handle = (*Rig)(nil)

// ClusterNames implements Handle.
func (r *Rig) ClusterNames() []string {
	out := make([]string, len(r.Clusters))
	for i, c := range r.Clusters {
		out[i] = c.Name
	}
	return out
}

func (r *Rig) cluster(name string) (*Cluster, error) {
	if c := r.Cluster(name); c != nil {
		return c, nil
	}
	return nil, fmt.Errorf("rig %q has no cluster %q (it has %s)", r.Topology.Metadata.Name, name, strings.Join(r.ClusterNames(), ", "))
}

// RESTConfig implements Handle.
func (r *Rig) RESTConfig(cluster string) (*rest.Config, error) {
	c, err := r.cluster(cluster)
	if err != nil {
		return nil, err
	}
	return c.Kube.RESTConfig(), nil
}

// CallerCerts implements Handle.
func (r *Rig) CallerCerts() certs.Layout { return r.Certs }

// Links implements Handle.
func (r *Rig) Links() *Proxies { return r.Proxies }

// SelfEndpoint implements Handle: on this machine the callers' link to the
// cluster's first replica is as reachable from its allocators as from the
// callers.
func (r *Rig) SelfEndpoint(cluster string) string {
	if addrs := r.CallerAddrs(cluster); len(addrs) > 0 {
		return addrs[0]
	}
	return ""
}

// Metrics implements Handle, from each replica's /metrics.
func (r *Rig) Metrics(ctx context.Context, cluster string) (string, error) {
	c, err := r.cluster(cluster)
	if err != nil {
		return "", err
	}
	var b strings.Builder
	for n, rep := range c.Replicas {
		if rep.HTTP == "" {
			return "", fmt.Errorf("cluster %q: allocator %d has no HTTP address (is the rig up?)", cluster, n)
		}
		text, err := getMetrics(ctx, "http://"+rep.HTTP+"/metrics")
		if err != nil {
			return "", fmt.Errorf("cluster %q: allocator %d: %w", cluster, n, err)
		}
		b.WriteString(text)
		if !strings.HasSuffix(text, "\n") {
			b.WriteByte('\n')
		}
	}
	return b.String(), nil
}

func getMetrics(ctx context.Context, url string) (string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return "", err
	}
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return string(body), nil
}

// RestartAPIServer implements Handle: the kube-apiserver process stops and
// starts again on the same port over the same etcd; the allocators and the
// fleet agent keep running and ride it out.
func (r *Rig) RestartAPIServer(ctx context.Context, cluster string) error {
	c, err := r.cluster(cluster)
	if err != nil {
		return err
	}
	if c.Kube == nil {
		return errors.New("the rig has no API servers (a dry run?)")
	}
	return c.Kube.RestartAPIServer(ctx)
}
