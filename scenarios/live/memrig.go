package live

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/quartermaster-dev/quartermaster/certs"
	"github.com/quartermaster-dev/quartermaster/kindcluster"
	"github.com/quartermaster-dev/quartermaster/kindcluster/rig"
)

// memRig is a live rig of memory-backend `qm serve` processes joined by
// latency links.
type memRig struct {
	plan    *Plan
	dir     string
	certs   certs.Layout
	proxies *rig.Proxies
	// gates stand in front of the links: what callers and the entry dial,
	// and what an outage switches off.
	gates []linkGate
	procs []kindcluster.Process
	// allocators by cluster name.
	allocators map[string]*allocatorProc
	log        io.Writer
	stopOnce   sync.Once
}

type linkGate struct {
	from, to string
	g        *gate
}

type allocatorProc struct {
	cluster    string
	grpc, http string // its own addresses (no link)
	logFile    string
	proc       kindcluster.Process
}

// startRig brings up one allocator per cluster of the plan, the links,
// and the entry's policies. On failure it stops what it started.
func startRig(ctx context.Context, p *Plan, qm, dir string, seed uint64, log io.Writer) (_ *memRig, err error) {
	r := &memRig{plan: p, dir: dir, proxies: rig.NewProxies(), allocators: map[string]*allocatorProc{}, log: log}
	defer func() {
		if err != nil {
			r.stop()
		}
	}()
	// The certificates and limits of the local rig: the matchmaker
	// (rig.CallerIdentity) allocates, and releases sessions on whichever
	// cluster served them as an admin, since a forwarded allocation
	// belongs to the forwarding allocator (rig.ForwarderIdentity).
	var clusters []string
	for _, c := range p.Clusters {
		clusters = append(clusters, c.Name)
	}
	if r.certs, err = rig.MakeCerts(filepath.Join(dir, "certs"), clusters); err != nil {
		return nil, fmt.Errorf("certificates: %w", err)
	}
	limits := filepath.Join(dir, "limits.yaml")
	if err := os.WriteFile(limits, []byte(rig.Limits), 0o600); err != nil {
		return nil, err
	}

	// Ports first, so that the links, and the policies that name them,
	// exist before the allocators start.
	for _, c := range p.Clusters {
		addr, err := rig.FreeAddr()
		if err != nil {
			return nil, err
		}
		r.allocators[c.Name] = &allocatorProc{cluster: c.Name, grpc: addr}
	}
	endpoints := map[string][]string{}
	for _, c := range p.Clusters {
		a := r.allocators[c.Name]
		if _, err := r.addLink(rig.CallersName, c.Name, a.grpc, c.CallerLink); err != nil {
			return nil, err
		}
		if c.Name == p.Entry {
			continue
		}
		addr, err := r.addLink(p.Entry, c.Name, a.grpc, c.ForwardLink)
		if err != nil {
			return nil, err
		}
		endpoints[c.Name] = []string{addr}
	}
	policies := ""
	if len(p.Scenario.Spec.Policies) > 0 {
		policies = filepath.Join(dir, p.Entry, "policies.yaml")
		if err := r.writePolicies(policies, endpoints); err != nil {
			return nil, fmt.Errorf("policies: %w", err)
		}
	}

	var wg sync.WaitGroup
	errs := make([]error, len(p.Clusters))
	for i, c := range p.Clusters {
		cdir := filepath.Join(dir, c.Name)
		if err := os.MkdirAll(cdir, 0o755); err != nil {
			return nil, err
		}
		fleets := filepath.Join(cdir, "fleets.yaml")
		b, err := yaml.Marshal(c.Fleets)
		if err != nil {
			return nil, err
		}
		if err := os.WriteFile(fleets, b, 0o644); err != nil {
			return nil, err
		}
		a := r.allocators[c.Name]
		a.logFile = filepath.Join(cdir, "allocator.log")
		ready := filepath.Join(cdir, "allocator.ready")
		args := []string{"serve", "--backend", "memory", "--fleets", fleets,
			"--addr", a.grpc, "--http-addr", "127.0.0.1:0",
			"--tls-dir", r.certs.ServerDir(), "--client-ca-dir", r.certs.ClientCADir(),
			"--limits", limits, "--cluster-name", c.Name, "--log-format", "json",
			// Each allocator its own seed, from the scenario's: the same
			// file gives the same servers' names and request seeds.
			"--seed", strconv.FormatUint(seed+uint64(i)*0x9e3779b9+1, 10),
			"--timeout", p.Deadline.String(),
			"--ready-file", ready}
		if c.Name == p.Entry && policies != "" {
			args = append(args, "--policies", policies, "--forward-timeout", p.ForwardTimeout.String(),
				"--breaker-open", p.BreakerOpen.String(), "--breaker-max-open", p.BreakerMaxOpen.String())
		}
		proc, err := kindcluster.ExecRunner{}.Start(kindcluster.Command{Path: qm, Args: args, LogFile: a.logFile})
		if err != nil {
			return nil, fmt.Errorf("cluster %s: %w", c.Name, err)
		}
		a.proc = proc
		r.procs = append(r.procs, proc)
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := waitReady(ctx, ready, a); err != nil {
				errs[i] = fmt.Errorf("cluster %s: allocator: %w (log: %s)", c.Name, err, a.logFile)
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return r, nil
}

// addLink starts a latency link to upstream and a gate in front of it,
// and returns the gate's address.
func (r *memRig) addLink(from, to, upstream string, l rig.Link) (string, error) {
	pl, err := r.proxies.Add(from, to, 0, upstream, l)
	if err != nil {
		return "", err
	}
	g, err := newGate(pl.Addr())
	if err != nil {
		return "", err
	}
	r.gates = append(r.gates, linkGate{from, to, g})
	return g.addr, nil
}

// writePolicies writes the entry's GameServerAllocationPolicies and the
// connection Secrets they name, as one policies file.
func (r *memRig) writePolicies(path string, endpoints map[string][]string) error {
	t := topologyOf(r.plan.Scenario)
	t.Spec.Namespace = "default"
	objs, err := rig.PolicyObjects(&t, r.plan.Entry, endpoints, r.certs)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	return rig.WriteManifests(path, objs)
}

// waitReady waits for an allocator's ready file and its /ready.
func waitReady(ctx context.Context, file string, a *allocatorProc) error {
	deadline := time.Now().Add(time.Minute)
	for {
		if b, err := os.ReadFile(file); err == nil && len(b) > 0 {
			var addrs struct{ GRPC, HTTP string }
			if json.Unmarshal(b, &addrs) == nil && addrs.HTTP != "" {
				resp, err := http.Get("http://" + addrs.HTTP + "/ready")
				if err == nil {
					resp.Body.Close()
					if resp.StatusCode == http.StatusOK {
						a.http = addrs.HTTP
						return nil
					}
				}
			}
		}
		select {
		case <-a.proc.Done():
			return fmt.Errorf("exited before it was ready: %v; its log ends:\n%s", a.proc.Err(), kindcluster.TailFile(a.logFile, 10))
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return errors.New("not ready after a minute")
		}
	}
}

// setDown switches a cluster's links (from the callers and from the
// entry) down or up: an outage as the simulator models it, the cluster's
// allocator unreachable.
func (r *memRig) setDown(cluster string, down bool) error {
	var errs []error
	for _, lg := range r.gates {
		if lg.to == cluster {
			errs = append(errs, lg.g.setDown(down))
		}
	}
	return errors.Join(errs...)
}

func (r *memRig) certsDir() string { return r.certs.Dir }

func (r *memRig) callerAddrs(cluster string) []string {
	for _, lg := range r.gates {
		if lg.from == rig.CallersName && lg.to == cluster {
			return []string{lg.g.addr}
		}
	}
	return nil
}

func (r *memRig) releaseAddr(cluster string) string { return r.allocators[cluster].grpc }

func (r *memRig) metricsAddrs(cluster string) []string {
	return []string{r.allocators[cluster].http}
}

// sourceClusters maps what an allocation's source can say to the cluster
// that served it: "local" (or empty) is the entry, a forwarded one names
// the entry's link to the cluster.
func (r *memRig) sourceClusters() map[string]string {
	m := map[string]string{"": r.plan.Entry, "local": r.plan.Entry}
	for _, lg := range r.gates {
		if lg.from == r.plan.Entry {
			m[lg.g.addr] = lg.to
		}
	}
	return m
}

// stop stops the allocators and the links.
func (r *memRig) stop() {
	r.stopOnce.Do(func() {
		for _, lg := range r.gates {
			lg.g.close()
		}
		r.proxies.Close()
		var wg sync.WaitGroup
		for _, p := range r.procs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_ = p.Stop(5 * time.Second)
			}()
		}
		wg.Wait()
	})
}
