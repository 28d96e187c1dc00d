package kind

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"sigs.k8s.io/kind/pkg/apis/config/defaults"

	"github.com/quartermaster-dev/quartermaster/certs"
	kindcluster "github.com/quartermaster-dev/quartermaster/kindcluster"
	"github.com/quartermaster-dev/quartermaster/kindcluster/rig"
)

// DefaultImage is the qm image Up builds and loads unless told otherwise.
// It is never pushed anywhere: kind nodes get it from the archive.
const DefaultImage = "quartermaster.dev/qm:dev"

// Options configure Up.
type Options struct {
	// Dir holds certificates, kind configs, kubeconfigs, manifests and the
	// image archive. It must not exist or be empty; Stop removes it.
	// Default: DefaultDir(the topology's name).
	Dir string
	// RepoDir is the repository: its Dockerfile builds the image and its
	// deploy/allocator.yaml is the allocator. Default: the repository
	// holding the working directory.
	RepoDir string
	// Image is the qm image the allocators and fleet agents run.
	Image string
	// Build builds Image from RepoDir's Dockerfile first; without it Image
	// must already be in the local Docker.
	Build bool
	// ImageArchive is Image already saved as an archive (`make
	// kind-qm-image` writes one with no base image and no Docker build):
	// loaded into the nodes as it is, with no build and no save. Default
	// $QM_KIND_IMAGE_ARCHIVE.
	ImageArchive string
	// Docker and Kubectl are the programs (default "docker", and the
	// repository's bin/kubectl if there is one, else "kubectl").
	Docker, Kubectl string
	// NodeImage is kind's node image (default $QM_KIND_NODE_IMAGE, else
	// kind's own; OfflineNodeImage is the one `make kind-node-image`
	// builds with no registry).
	NodeImage string
	// APIServerPort and CallerPort are cluster 0's host ports; cluster i
	// uses the next i-th (defaults DefaultAPIServerPort, DefaultCallerPort).
	APIServerPort, CallerPort int
	// HostAddress is the address kind's pods reach this host by, where the
	// links between clusters listen (see links.go). Default:
	// $QM_KIND_HOST_ADDRESS, else the gateway of kind's Docker network,
	// asked of Docker once the first cluster (and so the network) exists;
	// on Docker Desktop set host.docker.internal.
	HostAddress string
	// LinkListen is the address the links between clusters listen on
	// (default $QM_KIND_LINK_LISTEN, else LinkListen(HostAddress)).
	LinkListen string
	// LinkPort is the first host port of the links between clusters
	// (default DefaultLinkPort; n*n ports from there for n clusters).
	LinkPort int
	// Wait bounds each wait: a node Ready, a rollout, a fleet Ready
	// (default 5 minutes).
	Wait time.Duration
	// Runner does every step (default NewExec(Log)); a *DryRun records them.
	Runner Runner
	// Log receives progress lines (may be nil).
	Log io.Writer
}

func (o *Options) defaults() {
	if o.Image == "" {
		o.Image = DefaultImage
	}
	if o.Docker == "" {
		o.Docker = "docker"
	}
	if o.NodeImage == "" {
		o.NodeImage = defaults.Image
	}
	if o.APIServerPort == 0 {
		o.APIServerPort = DefaultAPIServerPort
	}
	if o.CallerPort == 0 {
		o.CallerPort = DefaultCallerPort
	}
	if o.LinkPort == 0 {
		o.LinkPort = DefaultLinkPort
	}
	if o.Wait == 0 {
		o.Wait = 5 * time.Minute
	}
}

// Environment variables that set NodeImage and ImageArchive where the
// caller left them empty (`make e2e-multicluster PROVIDER=kind` sets both
// when the offline images are there).
const (
	NodeImageEnv    = "QM_KIND_NODE_IMAGE"
	ImageArchiveEnv = "QM_KIND_IMAGE_ARCHIVE"
)

// OfflineNodeImage is the node image `make kind-node-image` builds with
// no registry, for the Kubernetes version the rigs use (mk/kube.mk).
const OfflineNodeImage = "quartermaster.dev/kind-node:v1.36.3"

// resolve fills in what needs the file system or the environment: the
// repository, kubectl, the node image and image archive
// (NodeImageEnv, ImageArchiveEnv), and the host address and link listener
// where the environment sets them (HostAddressEnv, LinkListenEnv), so `qm
// cluster up --provider kind` and the tests can be pointed at Docker
// Desktop's host name or the offline images without a flag of their own.
func (o *Options) resolve() error {
	if o.NodeImage == "" {
		o.NodeImage = os.Getenv(NodeImageEnv)
	}
	if o.ImageArchive == "" {
		o.ImageArchive = os.Getenv(ImageArchiveEnv)
	}
	o.defaults()
	if o.HostAddress == "" {
		o.HostAddress = os.Getenv(HostAddressEnv)
	}
	if o.LinkListen == "" {
		o.LinkListen = os.Getenv(LinkListenEnv)
	}
	if o.RepoDir == "" {
		wd, err := os.Getwd()
		if err != nil {
			return err
		}
		root, ok := findRepo(wd)
		if !ok {
			return fmt.Errorf("cannot find the repository (a directory with Dockerfile and deploy/allocator.yaml) above %s: run inside it", wd)
		}
		o.RepoDir = root
	}
	if o.Kubectl == "" {
		o.Kubectl = "kubectl"
		if p := filepath.Join(o.RepoDir, "bin", kindcluster.KubectlBinary); isFile(p) {
			o.Kubectl = p
		}
	}
	return nil
}

func findRepo(dir string) (string, bool) {
	for {
		if isFile(filepath.Join(dir, "Dockerfile")) && isFile(filepath.Join(dir, "deploy", "allocator.yaml")) {
			return dir, true
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", false
		}
		dir = parent
	}
}

func isFile(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.Mode().IsRegular()
}

// DefaultDir is where the kind rig of a topology named name keeps its
// files unless told otherwise: a fixed place per name, so `qm cluster
// down` finds it.
func DefaultDir(name string) string { return rig.DefaultDir(name) + "-kind" }

// Rig is a topology brought up on kind.
type Rig struct {
	Topology *rig.Topology
	Dir      string
	Certs    certs.Layout
	Clusters []Cluster
	// HostAddress is where the clusters' pods reach this host: the links
	// between clusters are dialled there.
	HostAddress string
	// Proxies are the links: from the callers to each cluster, and from
	// each cluster to each (itself included), as the policies name them.
	Proxies *rig.Proxies

	opts     Options
	workload string // the allocator's, as kubectl names it
	httpPort int    // the allocator's /metrics
	mu       sync.Mutex
	made     []Cluster // created, so Stop deletes them
	once     sync.Once
	err      error
}

// Cluster is one kind cluster of the rig.
type Cluster struct {
	Name       string // the topology's
	Kind       string // kind's cluster name
	Kubeconfig string
	// CallerAddr is where callers on the host reach its allocators.
	CallerAddr string
}

// CallerIdentity is the client certificate callers present.
const CallerIdentity = rig.CallerIdentity

func (r *Rig) logf(format string, args ...any) {
	if r.opts.Log != nil {
		fmt.Fprintf(r.opts.Log, format+"\n", args...)
	}
}

func (r *Rig) clusterDir(name string) string { return filepath.Join(r.Dir, name) }

func (r *Rig) kubectl(kubeconfig string, args ...string) kindcluster.Command {
	return kindcluster.Command{Path: r.opts.Kubectl, Args: append([]string{"--kubeconfig", kubeconfig}, args...)}
}

// Up brings the topology up on kind, in this order: certificates; every
// file that needs no cluster (kind configs, CRDs) and a trial of the
// manifests; the image built (with Build) and saved to an archive; every
// kind cluster created, its kubeconfig written and the image loaded; the
// address kind's pods reach this host by (HostAddress, else the gateway of
// kind's network, which exists from the first cluster on); the server
// certificate reissued for that address and the manifests written; the
// links started (callers to each cluster, each cluster to each); then in
// each cluster: the CRDs installed and Established, the allocator, the
// fleet agent, the fleets and the policies applied; last, in each cluster,
// the allocator and agent rollouts and the fleets' Ready servers awaited.
// Clusters are made one after another, not together: the record of a run
// is then the same every time, and one failure stops before the next
// cluster costs a minute. On failure Up deletes what it created.
func Up(ctx context.Context, t *rig.Topology, opts Options) (_ *Rig, err error) {
	if err := checkProvider(); err != nil {
		return nil, err
	}
	if err := opts.resolve(); err != nil {
		return nil, err
	}
	if opts.Dir == "" {
		opts.Dir = DefaultDir(t.Metadata.Name)
	}
	if n := len(t.Spec.Clusters); n > MaxClusters {
		return nil, fmt.Errorf("topology %q has %d clusters: a kind rig takes at most %d", t.Metadata.Name, n, MaxClusters)
	}
	if opts.Runner == nil {
		opts.Runner = NewExec(opts.Log)
	}
	allocatorYAML, err := os.ReadFile(filepath.Join(opts.RepoDir, "deploy", "allocator.yaml"))
	if err != nil {
		return nil, err
	}
	workload, err := allocatorWorkload(allocatorYAML)
	if err != nil {
		return nil, fmt.Errorf("deploy/allocator.yaml: %w", err)
	}
	httpPort, err := allocatorHTTPPort(allocatorYAML)
	if err != nil {
		return nil, fmt.Errorf("deploy/allocator.yaml: %w", err)
	}
	r := &Rig{Topology: t, Dir: opts.Dir, opts: opts, workload: workload, httpPort: httpPort, Proxies: rig.NewProxies()}
	if err := makeEmptyDir(r.Dir); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			err = errors.Join(err, r.Stop())
		}
	}()
	for i, c := range t.Spec.Clusters {
		dir := r.clusterDir(c.Name)
		r.Clusters = append(r.Clusters, Cluster{Name: c.Name, Kind: ClusterName(c.Name),
			Kubeconfig: filepath.Join(dir, "kubeconfig"), CallerAddr: CallerAddr(i, opts)})
	}
	if err := r.writeState(); err != nil {
		return nil, err
	}
	r.logf("kind rig %q in %s", t.Metadata.Name, r.Dir)
	if err := r.makeCerts(opts.HostAddress); err != nil {
		return nil, fmt.Errorf("certificates: %w", err)
	}
	if err := r.writeConfigs(allocatorYAML); err != nil {
		return nil, err
	}
	archive, err := r.imageArchive(ctx)
	if err != nil {
		return nil, err
	}
	for i := range r.Clusters {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if err := r.createCluster(ctx, i, archive); err != nil {
			return nil, fmt.Errorf("cluster %q: %w", r.Clusters[i].Name, err)
		}
	}
	if r.HostAddress, err = r.resolveHostAddress(ctx); err != nil {
		return nil, err
	}
	r.logf("kind's pods reach this host at %s: the links between clusters are dialled there", r.HostAddress)
	if err := r.makeCerts(r.HostAddress); err != nil {
		return nil, fmt.Errorf("certificates for %s: %w", r.HostAddress, err)
	}
	if err := r.writeManifests(allocatorYAML); err != nil {
		return nil, err
	}
	if err := r.link(); err != nil {
		return nil, err
	}
	for i := range r.Clusters {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if err := r.applyCluster(ctx, i); err != nil {
			return nil, fmt.Errorf("cluster %q: %w", r.Clusters[i].Name, err)
		}
	}
	for i := range r.Clusters {
		if err := r.waitCluster(ctx, i); err != nil {
			return nil, fmt.Errorf("cluster %q: %w", r.Clusters[i].Name, err)
		}
	}
	r.logf("kind rig %q is up", t.Metadata.Name)
	return r, nil
}

// imageArchive is the qm image as an archive for kind to load: the one
// given (ImageArchive), else Image built (with Build) and saved from
// Docker. Saved for this machine's platform where Docker keeps images in
// containerd's store: there an image pulled for one platform still lists
// the others, and kind's import of every platform fails on their missing
// layers. The classic store has no such flag and needs none.
func (r *Rig) imageArchive(ctx context.Context) (string, error) {
	opts := r.opts
	if opts.ImageArchive != "" {
		if !isFile(opts.ImageArchive) {
			return "", fmt.Errorf("the image archive %s does not exist (make kind-qm-image writes it)", opts.ImageArchive)
		}
		r.logf("loading %s from %s", opts.Image, opts.ImageArchive)
		return opts.ImageArchive, nil
	}
	archive := filepath.Join(r.Dir, "qm-image.tar")
	if opts.Build {
		r.logf("building %s from %s", opts.Image, filepath.Join(opts.RepoDir, "Dockerfile"))
		if _, err := opts.Runner.Run(ctx, kindcluster.Command{Path: opts.Docker, Args: []string{"build", "-t", opts.Image,
			"-f", filepath.Join(opts.RepoDir, "Dockerfile"), opts.RepoDir}}); err != nil {
			return "", fmt.Errorf("build the image: %w", err)
		}
	}
	save := []string{"save", "-o", archive}
	out, err := opts.Runner.Run(ctx, kindcluster.Command{Path: opts.Docker, Args: []string{"info", "--format", "{{json .DriverStatus}}"}})
	if err != nil {
		return "", fmt.Errorf("docker info: %w", err)
	}
	if containerdStore(out) {
		save = append(save, "--platform", "linux/"+runtime.GOARCH)
	}
	if _, err := opts.Runner.Run(ctx, kindcluster.Command{Path: opts.Docker, Args: append(save, opts.Image)}); err != nil {
		return "", fmt.Errorf("save the image %s (build it, or pass Build): %w", opts.Image, err)
	}
	return archive, nil
}

// containerdStore says whether `docker info --format '{{json
// .DriverStatus}}'` describes Docker's containerd image store (its
// snapshotter as the storage driver) rather than the classic graph
// drivers.
func containerdStore(driverStatus []byte) bool {
	return strings.Contains(string(driverStatus), "io.containerd.snapshotter")
}

func makeEmptyDir(dir string) error {
	if entries, err := os.ReadDir(dir); err == nil && len(entries) > 0 {
		return fmt.Errorf("%s exists and is not empty: is a rig of this name up? ('qm cluster down --provider kind' takes it down)", dir)
	}
	return os.MkdirAll(dir, 0o755)
}

// makeCerts makes the rig's certificates, or completes them: run again with
// the host address, it reissues the server certificate for that name too
// and keeps the CA and the client certificates.
func (r *Rig) makeCerts(hostAddress string) error {
	var clusters, hosts []string
	for _, c := range r.Clusters {
		clusters = append(clusters, c.Name)
		// A node's name on kind's network reaches its allocators too
		// (NodeHost:AllocatorNodePort), for whoever forwards directly.
		hosts = append(hosts, NodeHost(c.Name))
	}
	if hostAddress != "" {
		// The links between clusters are dialled here.
		hosts = append(hosts, hostAddress)
	}
	l, err := rig.MakeCerts(filepath.Join(r.Dir, "certs"), clusters, hosts...)
	if err != nil {
		return err
	}
	r.Certs = l
	return nil
}

func (r *Rig) crdsFile() string { return filepath.Join(r.Dir, "crds.yaml") }

func (r *Rig) manifestsDir(name string) string { return filepath.Join(r.clusterDir(name), "manifests") }

// trialHostAddress stands in for the host address in the trial of the
// manifests before any cluster exists (TEST-NET-1: never anyone's).
const trialHostAddress = "192.0.2.1"

// writeConfigs writes the files that need no cluster (kind configs, CRDs)
// and builds every manifest once in trial, so a bad manifest fails before
// any cluster costs a minute.
func (r *Rig) writeConfigs(allocatorYAML []byte) error {
	if err := os.WriteFile(r.crdsFile(), CRDs(), 0o644); err != nil {
		return err
	}
	trial := r.opts
	if trial.HostAddress == "" {
		trial.HostAddress = trialHostAddress
	}
	for i, c := range r.Clusters {
		if err := os.MkdirAll(r.manifestsDir(c.Name), 0o700); err != nil {
			return err
		}
		cfg, err := ConfigYAML(r.Topology, i, r.opts)
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(r.clusterDir(c.Name), "kind.yaml"), cfg, 0o644); err != nil {
			return err
		}
		if _, err := Manifests(r.Topology, i, trial, r.Certs, allocatorYAML); err != nil {
			return fmt.Errorf("cluster %q: %w", c.Name, err)
		}
	}
	return nil
}

// writeManifests writes what Up applies in each cluster, with the links
// on the host address as the policies' endpoints.
func (r *Rig) writeManifests(allocatorYAML []byte) error {
	opts := r.opts
	opts.HostAddress = r.HostAddress
	for i, c := range r.Clusters {
		files, err := Manifests(r.Topology, i, opts, r.Certs, allocatorYAML)
		if err != nil {
			return fmt.Errorf("cluster %q: %w", c.Name, err)
		}
		for n, f := range files {
			// Secrets are in there: only the owner reads them.
			name := filepath.Join(r.manifestsDir(c.Name), fmt.Sprintf("%d0-%s", n+1, f.Name))
			if err := os.WriteFile(name, f.Data, 0o600); err != nil {
				return err
			}
		}
	}
	return nil
}

// Manifest files in the order they are applied, by the names writeManifests
// gives them.
var manifestOrder = []string{"10-allocator.yaml", "20-agent.yaml", "30-fleets.yaml", "40-policies.yaml"}

// createCluster makes cluster i's kind cluster, writes its kubeconfig and
// loads the image into its node.
func (r *Rig) createCluster(ctx context.Context, i int, archive string) error {
	c := r.Clusters[i]
	dir := r.clusterDir(c.Name)
	cfg := Config(r.Topology, i, r.opts)
	r.logf("creating kind cluster %s", c.Kind)
	r.mu.Lock()
	r.made = append(r.made, c)
	r.mu.Unlock()
	if err := r.opts.Runner.Create(c.Kind, cfg, filepath.Join(dir, "kind.yaml"), c.Kubeconfig, r.opts.Wait); err != nil {
		return fmt.Errorf("kind create: %w", err)
	}
	kc, err := r.opts.Runner.KubeConfig(c.Kind)
	if err != nil {
		return fmt.Errorf("kubeconfig: %w", err)
	}
	// Only this cluster's context: the file kind merged into may not stay
	// that way if kind ever shares it.
	if err := certs.WriteFileAtomic(c.Kubeconfig, []byte(kc), 0o600); err != nil {
		return err
	}
	r.logf("loading %s into %s", r.opts.Image, c.Kind)
	if err := r.opts.Runner.LoadImage(c.Kind, archive); err != nil {
		return fmt.Errorf("load image: %w", err)
	}
	return nil
}

// applyCluster installs the CRDs in cluster i and applies its manifests.
func (r *Rig) applyCluster(ctx context.Context, i int) error {
	c := r.Clusters[i]
	wait := "--timeout=" + r.opts.Wait.String()
	steps := []kindcluster.Command{
		r.kubectl(c.Kubeconfig, "apply", "--server-side", "-f", r.crdsFile()),
		r.kubectl(c.Kubeconfig, "wait", "--for=condition=Established", wait,
			"crd/gameservers.agones.dev", "crd/fleets.agones.dev", "crd/gameserverallocationpolicies.multicluster.agones.dev"),
	}
	for _, f := range manifestOrder {
		steps = append(steps, r.kubectl(c.Kubeconfig, "apply", "--server-side", "-f", filepath.Join(r.manifestsDir(c.Name), f)))
	}
	for _, cmd := range steps {
		if _, err := r.opts.Runner.Run(ctx, cmd); err != nil {
			return err
		}
	}
	return nil
}

// waitCluster waits for cluster i's allocator and agent rollouts, then for
// every fleet's servers to be Ready (the agent writes readyReplicas), and
// labels the allocator pods for their replicas' Services.
func (r *Rig) waitCluster(ctx context.Context, i int) error {
	c := r.Clusters[i]
	wait := "--timeout=" + r.opts.Wait.String()
	steps := []kindcluster.Command{
		r.kubectl(c.Kubeconfig, "-n", allocatorNamespace, "rollout", "status", r.workload+"/"+allocatorName, wait),
		r.kubectl(c.Kubeconfig, "-n", allocatorNamespace, "rollout", "status", "deployment/"+agentName, wait),
	}
	for _, f := range r.Topology.Spec.Clusters[i].Fleets {
		steps = append(steps, r.kubectl(c.Kubeconfig, "-n", r.Topology.Spec.Namespace, "wait",
			"--for=jsonpath={.status.readyReplicas}="+strconv.Itoa(f.Replicas), wait, "fleet/"+f.Name))
	}
	for _, cmd := range steps {
		if _, err := r.opts.Runner.Run(ctx, cmd); err != nil {
			return err
		}
	}
	if err := r.labelReplicas(ctx, i); err != nil {
		return err
	}
	r.logf("cluster %q is ready", c.Name)
	return nil
}

// Stop deletes every kind cluster Up created and the rig's directory. It
// is safe to call more than once.
func (r *Rig) Stop() error {
	r.once.Do(func() {
		if r.Proxies != nil {
			r.Proxies.Close()
		}
		r.mu.Lock()
		made := r.made
		r.mu.Unlock()
		var errs []error
		for _, c := range made {
			r.logf("deleting kind cluster %s", c.Kind)
			if err := r.opts.Runner.Delete(c.Kind, c.Kubeconfig); err != nil {
				errs = append(errs, fmt.Errorf("delete %s: %w", c.Kind, err))
			}
		}
		if err := os.RemoveAll(r.Dir); err != nil {
			errs = append(errs, err)
		}
		r.err = errors.Join(errs...)
	})
	return r.err
}

// state is what Down needs when the owner of a rig is gone.
type state struct {
	OwnerPID int       `json:"ownerPID"`
	Clusters []Cluster `json:"clusters"`
}

const stateFile = "kind-rig.json"

func (r *Rig) writeState() error {
	b, err := json.MarshalIndent(state{OwnerPID: os.Getpid(), Clusters: r.Clusters}, "", "  ")
	if err != nil {
		return err
	}
	return certs.WriteFileAtomic(filepath.Join(r.Dir, stateFile), b, 0o644)
}

// Down takes down the kind rig in dir from another process: it asks the
// owner (`qm cluster up`) to stop (SIGTERM) and waits for the directory to
// go; if the owner is gone, it deletes the recorded clusters itself.
// runner is nil for the real thing.
func Down(dir string, runner Runner, grace time.Duration, log io.Writer) error {
	var s state
	err := kindcluster.ReadState(dir, stateFile, &s)
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("no kind rig in %s (no %s)", dir, stateFile)
	}
	if err != nil {
		return err
	}
	// Deleting a kind cluster takes seconds each.
	if kindcluster.AskOwnerToStop(dir, s.OwnerPID, grace+time.Duration(len(s.Clusters))*time.Minute) {
		return nil
	}
	if runner == nil {
		runner = NewExec(log)
	}
	r := &Rig{Dir: dir, made: s.Clusters, opts: Options{Runner: runner, Log: log}}
	return r.Stop()
}
