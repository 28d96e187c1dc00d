package live

import (
	"context"
	"errors"
	"io"
	"path/filepath"

	"github.com/quartermaster-dev/quartermaster/kindcluster/rig"
)

// kubeRig is a live run on the multi-cluster rig of `make e2e-multicluster`:
// per cluster a real API server, a fleet agent and the file's allocator
// replicas (`qm serve --backend kubernetes`), the policies and connection
// Secrets as objects on each API server, and latency links. It is slower
// than the memory rig (every allocation is an API write) but has what the
// memory rig cannot: replicas with real informers racing for servers.
type kubeRig struct {
	r     *rig.Rig
	entry string
}

func startKubeRig(ctx context.Context, p *Plan, qm, dir string, log io.Writer) (*kubeRig, error) {
	// The clusters are the file's, with each fleet at its planned fixed
	// size, and the links the plan's.
	t := topologyOf(p.Scenario)
	for i := range t.Spec.Clusters {
		c := &t.Spec.Clusters[i]
		for j := range c.Fleets {
			c.Fleets[j].Replicas = p.Clusters[i].Fleets.Fleets[j].Replicas
		}
		cp := p.Clusters[i]
		t.Spec.Links.Overrides = append(t.Spec.Links.Overrides,
			rig.LinkOverride{From: rig.CallersName, To: cp.Name, Latency: cp.CallerLink.Latency, Jitter: cp.CallerLink.Jitter})
		if cp.Name != p.Entry {
			t.Spec.Links.Overrides = append(t.Spec.Links.Overrides,
				rig.LinkOverride{From: p.Entry, To: cp.Name, Latency: cp.ForwardLink.Latency, Jitter: cp.ForwardLink.Jitter})
		}
	}
	t.Default()
	if err := t.Validate(); err != nil {
		return nil, err
	}
	r, err := rig.Up(ctx, &t, rig.Options{
		Dir: filepath.Join(dir, "rig"), QM: qm, Log: log,
		ServeArgs: []string{"--forward-timeout", p.ForwardTimeout.String(), "--timeout", p.Deadline.String(),
			"--breaker-open", p.BreakerOpen.String(), "--breaker-max-open", p.BreakerMaxOpen.String()},
	})
	if err != nil {
		return nil, err
	}
	return &kubeRig{r: r, entry: p.Entry}, nil
}

func (k *kubeRig) certsDir() string { return k.r.Certs.Dir }

func (k *kubeRig) callerAddrs(cluster string) []string { return k.r.CallerAddrs(cluster) }

// releaseAddr is the cluster's first replica: any replica can release any
// server of its cluster, through the API server.
func (k *kubeRig) releaseAddr(cluster string) string {
	if c := k.r.Cluster(cluster); c != nil && len(c.Replicas) > 0 {
		return c.Replicas[0].GRPC
	}
	return ""
}

func (k *kubeRig) metricsAddrs(cluster string) []string {
	var out []string
	if c := k.r.Cluster(cluster); c != nil {
		for _, rep := range c.Replicas {
			out = append(out, rep.HTTP)
		}
	}
	return out
}

func (k *kubeRig) sourceClusters() map[string]string {
	m := map[string]string{"": k.entry, "local": k.entry}
	for _, c := range k.r.Clusters {
		for _, l := range k.r.Proxies.Find(k.entry, c.Name) {
			m[l.Addr()] = c.Name
		}
	}
	return m
}

// setDown is never called: NewPlan refuses outages on this backend.
func (k *kubeRig) setDown(cluster string, down bool) error {
	return errors.New("outages run on the memory backend only")
}

// stop stops the rig; what it could not stop is left to `qm cluster down`,
// as after any rig.
func (k *kubeRig) stop() { _ = k.r.Stop() }
