package rig

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	mrand "math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/quartermaster-dev/quartermaster/certs"
	"github.com/quartermaster-dev/quartermaster/kindcluster"
)

// Options configure Up.
type Options struct {
	// Dir is the rig's directory: certificates, one directory per cluster
	// (API server, logs, policies), the state file. It must not exist or be
	// empty; Stop removes it. Default: DefaultDir(the topology's name).
	Dir string
	// BinDir holds etcd and kube-apiserver (default kindcluster's).
	BinDir string
	// QM is the qm binary the allocators and fleet agents run as (default:
	// this executable, which is right for `qm cluster up`).
	QM string
	// Runner runs the processes (default kindcluster.ExecRunner); a
	// *kindcluster.DryRunner prints every command instead.
	Runner kindcluster.Runner
	// StartTimeout bounds each wait: an API server, an allocator, a fleet
	// turning Ready. Default 2 minutes.
	StartTimeout time.Duration
	// Log receives progress lines (may be nil).
	Log io.Writer
	// ServeArgs are added to every allocator's command line.
	ServeArgs []string
	// Session is how long the fleet agents let an allocated server play
	// before replacing it (0: for ever, so allocations stay on the API
	// servers for a test to count).
	Session time.Duration
}

// DefaultDir is where the rig of a topology named name lives unless told
// otherwise: a fixed place per name, so `qm cluster down` finds it.
func DefaultDir(name string) string {
	if name == "" {
		name = "rig"
	}
	return filepath.Join(os.TempDir(), "qm-rig-"+name)
}

// Identities in the rig's certificate directory.
const (
	// CallerIdentity is the matchmaker's client certificate.
	CallerIdentity = "caller"
	// forwarderPrefix + cluster name is the identity a cluster's
	// allocators present when they forward to another cluster.
	forwarderPrefix = "forwarder-"
)

// Rig is a running rig.
type Rig struct {
	Topology *Topology
	Dir      string
	Certs    certs.Layout
	Clusters []*Cluster
	Proxies  *Proxies

	opts  Options
	dry   bool
	mu    sync.Mutex
	procs []ownedProcess
	kube  []*kindcluster.Cluster
	once  sync.Once
	err   error
}

// Cluster is one cluster of a running rig.
type Cluster struct {
	Name string
	Kube *kindcluster.Cluster
	// Replicas are the allocator replicas: their own addresses, which only
	// the rig's links use.
	Replicas []Replica
}

// Replica is one allocator process.
type Replica struct {
	GRPC, HTTP string
	Pid        int

	// proc and cmd are the running process and the command line that
	// started it, so that a fault can kill it and start it again.
	proc  kindcluster.Process
	cmd   kindcluster.Command
	ready string
}

type ownedProcess struct {
	name string
	p    kindcluster.Process
}

// Cluster returns the named cluster of the rig, or nil.
func (r *Rig) Cluster(name string) *Cluster {
	for _, c := range r.Clusters {
		if c.Name == name {
			return c
		}
	}
	return nil
}

// CallerAddrs are the addresses callers dial for a cluster: the links to
// each of its allocator replicas.
func (r *Rig) CallerAddrs(cluster string) []string {
	var out []string
	for _, l := range r.Proxies.Find(CallersName, cluster) {
		out = append(out, l.Addr())
	}
	return out
}

// Up brings the topology's rig up: API servers (concurrently), CRDs,
// certificates, fleets and fleet agents, allocator replicas, links, and the
// connection Secrets and policies in every cluster. On failure it stops
// whatever it started and returns an error naming the step and cluster.
func Up(ctx context.Context, t *Topology, opts Options) (_ *Rig, err error) {
	if opts.Dir == "" {
		opts.Dir = DefaultDir(t.Metadata.Name)
	}
	if opts.Runner == nil {
		opts.Runner = kindcluster.ExecRunner{}
	}
	if opts.StartTimeout == 0 {
		opts.StartTimeout = 2 * time.Minute
	}
	if opts.QM == "" {
		if opts.QM, err = os.Executable(); err != nil {
			return nil, err
		}
	}
	if t.Spec.Provider != ProviderLocal {
		return nil, fmt.Errorf("provider %q: only %q runs on this machine (kind needs Docker and kind's node image)", t.Spec.Provider, ProviderLocal)
	}
	_, dry := opts.Runner.(*kindcluster.DryRunner)
	r := &Rig{Topology: t, Dir: opts.Dir, opts: opts, dry: dry, Proxies: NewProxies()}
	if err := makeEmptyDir(opts.Dir); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			_ = r.Stop()
		}
	}()
	if err := r.writeState(); err != nil {
		return nil, err
	}
	r.logf("rig %q in %s", t.Metadata.Name, r.Dir)
	if err := r.makeCerts(); err != nil {
		return nil, fmt.Errorf("certificates: %w", err)
	}

	kopts := make([]kindcluster.Options, len(t.Spec.Clusters))
	for i, c := range t.Spec.Clusters {
		kopts[i] = kindcluster.Options{
			Name: c.Name, Dir: filepath.Join(r.Dir, c.Name, "apiserver"), BinDir: opts.BinDir,
			Runner: opts.Runner, StartTimeout: opts.StartTimeout, Log: opts.Log, EtcdUnsafeNoFsync: true,
		}
		if err := os.MkdirAll(filepath.Join(r.Dir, c.Name), 0o755); err != nil {
			return nil, err
		}
	}
	r.logf("starting %d API servers", len(kopts))
	ks, err := kindcluster.StartMany(ctx, kopts)
	if err != nil {
		return nil, err
	}
	r.kube = ks
	for i, c := range t.Spec.Clusters {
		r.Clusters = append(r.Clusters, &Cluster{Name: c.Name, Kube: ks[i]})
	}
	if err := r.writeState(); err != nil {
		return nil, err
	}

	// The allocators' ports are chosen first, so the links, and the
	// policies that name them, exist before the allocators start: an
	// allocator then serves multi-cluster requests from its first one.
	for i, c := range r.Clusters {
		for range *t.Spec.Clusters[i].Allocator.Replicas {
			addr := "127.0.0.1:0"
			if !r.dry {
				if addr, err = FreeAddr(); err != nil {
					return nil, err
				}
			}
			c.Replicas = append(c.Replicas, Replica{GRPC: addr})
		}
	}
	if !r.dry {
		if err := r.link(); err != nil {
			return nil, err
		}
		for i := range r.Clusters {
			if err := r.installPolicies(ctx, i); err != nil {
				return nil, fmt.Errorf("cluster %q: policies: %w", r.Clusters[i].Name, err)
			}
		}
	}

	// Each cluster's fleets, agent and allocators, concurrently.
	errs := make([]error, len(r.Clusters))
	var wg sync.WaitGroup
	for i := range r.Clusters {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := r.startCluster(ctx, i); err != nil {
				errs[i] = fmt.Errorf("cluster %q: %w", r.Clusters[i].Name, err)
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if err := r.writeState(); err != nil {
		return nil, err
	}
	r.logf("rig %q is up", t.Metadata.Name)
	return r, nil
}

func makeEmptyDir(dir string) error {
	if entries, err := os.ReadDir(dir); err == nil && len(entries) > 0 {
		return fmt.Errorf("%s exists and is not empty: is a rig of this name running? ('qm cluster down' stops it)", dir)
	}
	return os.MkdirAll(dir, 0o755)
}

func (r *Rig) logf(format string, args ...any) {
	if r.opts.Log != nil {
		fmt.Fprintf(r.opts.Log, format+"\n", args...)
	}
}

func (r *Rig) makeCerts() error {
	var clusters []string
	for _, c := range r.Topology.Spec.Clusters {
		clusters = append(clusters, c.Name)
	}
	l, err := MakeCerts(filepath.Join(r.Dir, "certs"), clusters)
	if err != nil {
		return err
	}
	r.Certs = l
	return nil
}

// MakeCerts makes a rig's certificates in dir with certs.Generate: a CA, a
// server certificate for 127.0.0.1, localhost and hosts, and the client
// certificates of the callers (CallerIdentity) and of each cluster's
// forwarder (ForwarderIdentity).
func MakeCerts(dir string, clusters []string, hosts ...string) (certs.Layout, error) {
	clients := []string{CallerIdentity}
	for _, c := range clusters {
		clients = append(clients, ForwarderIdentity(c))
	}
	res, err := certs.Generate(certs.GenerateOptions{
		Dir: dir, Hosts: append([]string{"127.0.0.1", "localhost"}, hosts...), Clients: clients, Now: time.Now(),
	})
	if err != nil {
		return certs.Layout{}, err
	}
	return res.Layout, nil
}

// RenewForwarderCert issues cluster's forwarder a new client certificate
// (a new key) from the CA of l and writes it over the one in l, as an
// operator rotating credentials would.
func RenewForwarderCert(l certs.Layout, cluster string) error {
	ca, err := certs.LoadAuthority(l)
	if err != nil {
		return err
	}
	id := ForwarderIdentity(cluster)
	kp, err := ca.IssueClient(id, certs.ValidFor(time.Now().Add(-time.Minute), 24*time.Hour))
	if err != nil {
		return err
	}
	return certs.WriteKeyPair(l.ClientDir(id), kp)
}

// start runs a long-lived process the rig owns.
func (r *Rig) start(name string, cmd kindcluster.Command) (kindcluster.Process, error) {
	p, err := r.opts.Runner.Start(cmd)
	if err != nil {
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	r.mu.Lock()
	r.procs = append(r.procs, ownedProcess{name, p})
	r.mu.Unlock()
	return p, nil
}

func (r *Rig) startCluster(ctx context.Context, i int) error {
	c := r.Clusters[i]
	spec := r.Topology.Spec.Clusters[i]
	dir := filepath.Join(r.Dir, c.Name)
	if err := r.applyFleets(ctx, i); err != nil {
		return fmt.Errorf("fleets: %w", err)
	}
	agent := kindcluster.Command{
		Path: r.opts.QM,
		Args: []string{"agent", "--kubeconfig", c.Kube.KubeconfigPath(), "--namespace", r.Topology.Spec.Namespace,
			"--nodes", strconv.Itoa(spec.Nodes.Count), "--max-per-node", strconv.Itoa(spec.Nodes.Slots),
			"--startup", "100ms", "--interval", "200ms", "--session", r.opts.Session.String()},
		LogFile: filepath.Join(dir, "agent.log"),
	}
	if _, err := r.start(c.Name+" fleet agent", agent); err != nil {
		return err
	}
	if err := os.WriteFile(r.limitsFile(), []byte(rigLimits), 0o644); err != nil {
		return err
	}
	replicas := *spec.Allocator.Replicas
	for n := range replicas {
		ready := filepath.Join(dir, fmt.Sprintf("allocator-%d.ready", n))
		args := []string{"serve", "--backend", "kubernetes", "--kubeconfig", c.Kube.KubeconfigPath(),
			"--addr", c.Replicas[n].GRPC, "--http-addr", "127.0.0.1:0",
			"--tls-dir", r.Certs.ServerDir(), "--client-ca-dir", r.Certs.ClientCADir(),
			// No --policies: the allocators watch the policies and
			// Secrets on their cluster's API server, as in production.
			"--ready-file", ready, "--cluster-name", c.Name,
			"--limits", r.limitsFile(), "--log-format", "json"}
		if replicas > 1 {
			args = append(args, "--replicas", strconv.Itoa(replicas), "--replica-shard", strconv.Itoa(n))
		}
		args = append(args, r.opts.ServeArgs...)
		cmd := kindcluster.Command{
			Path: r.opts.QM, Args: args, LogFile: filepath.Join(dir, fmt.Sprintf("allocator-%d.log", n)),
		}
		p, err := r.start(fmt.Sprintf("%s allocator %d", c.Name, n), cmd)
		if err != nil {
			return err
		}
		rep := &c.Replicas[n]
		rep.Pid, rep.proc, rep.cmd, rep.ready = p.Pid(), p, cmd, ready
		if !r.dry {
			if rep.GRPC, rep.HTTP, err = waitReady(ctx, ready, p, r.opts.StartTimeout); err != nil {
				return fmt.Errorf("allocator %d: %w (log: %s)", n, err, filepath.Join(dir, fmt.Sprintf("allocator-%d.log", n)))
			}
		}
	}
	if r.dry {
		return nil
	}
	return r.waitFleets(ctx, i)
}

// rigLimits let every identity allocate in any namespace and make the
// callers' identity an admin, so a test (or an operator at the rig) can list
// and release what the forwarders allocated in other clusters on its behalf.
const rigLimits = `apiVersion: quartermaster.dev/v1alpha1
kind: AllocatorLimits
default: {namespaces: ["*"]}
identities:
  ` + CallerIdentity + `: {admin: true, namespaces: ["*"]}
`

// Limits are the rig's identity limits (rigLimits), which the kind
// provider gives its allocators too.
const Limits = rigLimits

func (r *Rig) limitsFile() string { return filepath.Join(r.Dir, "limits.yaml") }

// PoliciesFile is a copy of what installPolicies wrote to cluster's API
// server, as a policies file: for `qm serve --policies` by hand against the
// rig, or to read. The rig's allocators watch the API server instead.
func (r *Rig) PoliciesFile(cluster string) string { return r.policiesFile(cluster) }

func (r *Rig) policiesFile(cluster string) string {
	return filepath.Join(r.Dir, cluster, "policies.yaml")
}

// waitReady waits for an allocator's ready file and its /ready.
func waitReady(ctx context.Context, file string, p kindcluster.Process, timeout time.Duration) (grpcAddr, httpAddr string, err error) {
	deadline := time.Now().Add(timeout)
	for {
		if b, err := os.ReadFile(file); err == nil && len(b) > 0 {
			var addrs struct{ GRPC, HTTP string }
			if err := json.Unmarshal(b, &addrs); err == nil && addrs.GRPC != "" {
				grpcAddr, httpAddr = addrs.GRPC, addrs.HTTP
				resp, err := http.Get("http://" + httpAddr + "/ready")
				if err == nil {
					resp.Body.Close()
					if resp.StatusCode == http.StatusOK {
						return grpcAddr, httpAddr, nil
					}
				}
			}
		}
		select {
		case <-p.Done():
			return "", "", fmt.Errorf("exited before it was ready: %v", p.Err())
		case <-ctx.Done():
			return "", "", ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			return "", "", fmt.Errorf("not ready after %v", timeout)
		}
	}
}

var (
	fleetGVR  = schema.GroupVersionResource{Group: "agones.dev", Version: "v1", Resource: "fleets"}
	gsGVR     = schema.GroupVersionResource{Group: "agones.dev", Version: "v1", Resource: "gameservers"}
	policyGVR = schema.GroupVersionResource{Group: "multicluster.agones.dev", Version: "v1", Resource: "gameserverallocationpolicies"}
)

func (r *Rig) clients(c *Cluster) (kubernetes.Interface, dynamic.Interface, error) {
	cs, err := c.Kube.Clientset()
	if err != nil {
		return nil, nil, err
	}
	dc, err := c.Kube.Dynamic()
	return cs, dc, err
}

func (r *Rig) applyFleets(ctx context.Context, i int) error {
	if r.dry {
		return nil
	}
	c := r.Clusters[i]
	cs, dc, err := r.clients(c)
	if err != nil {
		return err
	}
	ns := r.Topology.Spec.Namespace
	if ns != "default" {
		_, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
	}
	for _, obj := range FleetObjects(r.Topology, i) {
		if _, err := dc.Resource(fleetGVR).Namespace(ns).Create(ctx, obj, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create Fleet %s: %w", obj.GetName(), err)
		}
	}
	return nil
}

// waitFleets waits until every fleet of the cluster has its replicas Ready.
func (r *Rig) waitFleets(ctx context.Context, i int) error {
	c := r.Clusters[i]
	want := 0
	for _, f := range r.Topology.Spec.Clusters[i].Fleets {
		want += f.Replicas
	}
	_, dc, err := r.clients(c)
	if err != nil {
		return err
	}
	deadline := time.Now().Add(r.opts.StartTimeout)
	for {
		list, err := dc.Resource(gsGVR).Namespace(r.Topology.Spec.Namespace).List(ctx, metav1.ListOptions{})
		ready := 0
		if err == nil {
			for _, gs := range list.Items {
				if st, _, _ := unstructured.NestedString(gs.Object, "status", "state"); st == "Ready" {
					ready++
				}
			}
			if ready >= want {
				r.logf("cluster %q: %d game servers Ready", c.Name, ready)
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("fleets: %d of %d game servers Ready after %v (agent log: %s)", ready, want, r.opts.StartTimeout,
				filepath.Join(r.Dir, c.Name, "agent.log"))
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// FreeAddr returns a loopback address nothing listens on, for a process
// to listen on later (once the links to it exist, say). The port is closed
// again in between, so it comes from below the kernel's ephemeral range
// when it can: a port from that range (what port 0 gives) can be taken
// meanwhile as the source port of any process's outgoing connection, and
// the process meant for it then fails to start (seen in CI, with other
// tests' processes connecting all the while).
func FreeAddr() (string, error) {
	low := ephemeralLow()
	if low > minFixedPort+1000 {
		for range 100 {
			port := minFixedPort + mrand.IntN(low-minFixedPort)
			ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
			if err == nil {
				addr := ln.Addr().String()
				_ = ln.Close()
				return addr, nil
			}
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// minFixedPort is the lowest port FreeAddr picks: above the well-known
// and most registered services' ports.
const minFixedPort = 20000

// ephemeralLow is the first port of the kernel's ephemeral range (Linux's
// default when it cannot be read).
func ephemeralLow() int {
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil {
				return n
			}
		}
	}
	return 32768
}

// link starts a proxy from the callers to every allocator replica, and from
// every cluster to every other's replicas.
func (r *Rig) link() error {
	if r.dry {
		return nil
	}
	for _, to := range r.Clusters {
		for n, rep := range to.Replicas {
			if _, err := r.Proxies.Add(CallersName, to.Name, n, rep.GRPC, r.Topology.LinkBetween(CallersName, to.Name)); err != nil {
				return err
			}
			for _, from := range r.Clusters {
				if from == to {
					continue
				}
				if _, err := r.Proxies.Add(from.Name, to.Name, n, rep.GRPC, r.Topology.LinkBetween(from.Name, to.Name)); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// installPolicies writes cluster i's policies and connection Secrets to
// its API server, where its allocators' informers read them, and a copy
// to PoliciesFile.
func (r *Rig) installPolicies(ctx context.Context, i int) error {
	c := r.Clusters[i]
	endpoints := map[string][]string{}
	for _, to := range r.Clusters {
		for _, l := range r.Proxies.Find(c.Name, to.Name) {
			endpoints[to.Name] = append(endpoints[to.Name], l.Addr())
		}
	}
	objs, err := PolicyObjects(r.Topology, c.Name, endpoints, r.Certs)
	if err != nil {
		return err
	}
	if err := WriteManifests(r.policiesFile(c.Name), objs); err != nil {
		return err
	}
	if r.dry {
		return nil
	}
	_, dc, err := r.clients(c)
	if err != nil {
		return err
	}
	for _, obj := range objs {
		gvr := policyGVR
		if obj.GetKind() == "Secret" {
			gvr = schema.GroupVersionResource{Version: "v1", Resource: "secrets"}
		}
		res := dc.Resource(gvr).Namespace(obj.GetNamespace())
		_, err := res.Create(ctx, obj, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			var cur *unstructured.Unstructured
			if cur, err = res.Get(ctx, obj.GetName(), metav1.GetOptions{}); err == nil {
				obj.SetResourceVersion(cur.GetResourceVersion())
				_, err = res.Update(ctx, obj, metav1.UpdateOptions{})
			}
		}
		if err != nil {
			return fmt.Errorf("write %s %s: %w", obj.GetKind(), obj.GetName(), err)
		}
	}
	return nil
}

// RotateSecrets issues a new client certificate (new key) for the
// identity cluster's allocators present to other clusters, and writes it
// into that cluster's connection Secrets on its API server, as an operator
// rotating credentials would.
func (r *Rig) RotateSecrets(ctx context.Context, cluster string) error {
	i := slices.IndexFunc(r.Clusters, func(c *Cluster) bool { return c.Name == cluster })
	if i < 0 {
		return fmt.Errorf("no cluster %q", cluster)
	}
	if err := RenewForwarderCert(r.Certs, cluster); err != nil {
		return err
	}
	return r.installPolicies(ctx, i)
}

// state is what `qm cluster down` needs to stop a rig whose owner is gone.
type state struct {
	OwnerPID int      `json:"ownerPID"`
	Clusters []string `json:"clusters"` // their directories
	QM       string   `json:"qm"`
	Pids     []int    `json:"pids"`
}

const stateFile = "rig.json"

func (r *Rig) writeState() error {
	s := state{OwnerPID: os.Getpid(), QM: r.opts.QM}
	for _, c := range r.Topology.Spec.Clusters {
		s.Clusters = append(s.Clusters, filepath.Join(r.Dir, c.Name, "apiserver"))
	}
	r.mu.Lock()
	for _, p := range r.procs {
		s.Pids = append(s.Pids, p.p.Pid())
	}
	r.mu.Unlock()
	b, _ := json.MarshalIndent(s, "", "  ")
	return certs.WriteFileAtomic(filepath.Join(r.Dir, stateFile), b, 0o644)
}

// Stop stops every process and link of the rig and removes its directory.
// It is safe to call more than once.
func (r *Rig) Stop() error {
	r.once.Do(func() {
		var errs []error
		r.Proxies.Close()
		r.mu.Lock()
		procs := r.procs
		r.mu.Unlock()
		// Allocators and agents first: they would log errors about the
		// API servers going away.
		var wg sync.WaitGroup
		perr := make([]error, len(procs))
		for i, p := range procs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				if err := p.p.Stop(10 * time.Second); err != nil {
					perr[i] = fmt.Errorf("%s: %w", p.name, err)
				}
			}()
		}
		wg.Wait()
		errs = append(errs, perr...)
		errs = append(errs, kindcluster.StopAll(r.kube))
		if err := os.RemoveAll(r.Dir); err != nil {
			errs = append(errs, err)
		}
		r.err = errors.Join(errs...)
	})
	return r.err
}

// StopDir stops the rig in dir from another process: it asks the owner to
// stop it (SIGTERM) and waits for the directory to go; if the owner is gone,
// it stops the recorded processes and clusters itself.
func StopDir(dir string, grace time.Duration) error {
	var s state
	err := kindcluster.ReadState(dir, stateFile, &s)
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("no rig in %s (no %s)", dir, stateFile)
	}
	if err != nil {
		return err
	}
	if kindcluster.AskOwnerToStop(dir, s.OwnerPID, grace+60*time.Second) {
		return nil
	}
	var errs []error
	for _, pid := range s.Pids {
		if err := kindcluster.StopProcess(pid, filepath.Base(s.QM), grace); err != nil {
			errs = append(errs, err)
		}
	}
	for _, d := range s.Clusters {
		if _, err := os.Stat(d); err == nil {
			if err := kindcluster.StopDir(d, grace); err != nil {
				errs = append(errs, err)
			}
		}
	}
	if err := os.RemoveAll(dir); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
