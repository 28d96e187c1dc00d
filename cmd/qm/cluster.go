package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/quartermaster-dev/quartermaster/kindcluster"
	"github.com/quartermaster-dev/quartermaster/kindcluster/rig"
	"github.com/quartermaster-dev/quartermaster/scenarios/live"
)

// `qm cluster up` runs in the foreground and owns its cluster: Ctrl-C (or
// SIGTERM, which `qm cluster down` sends) stops etcd and kube-apiserver and
// removes the cluster's directory. Staying in the foreground means the
// processes can never outlive the command that started them; run it in a
// second terminal, or with `&`, and use the printed kubeconfig.

func init() {
	register(command{
		name:    "cluster",
		summary: "start or stop a local Kubernetes API server (etcd + kube-apiserver) with our CRDs",
		run:     runCluster,
	})
}

const clusterUsage = `usage:
  qm cluster up   [--name N] [--dir D] [--bin-dir B] [--dry-run]
  qm cluster down [--name N] [--dir D]
  qm cluster up   --topology FILE [--provider local|kind] [--dir D] [--bin-dir B] [--dry-run]
  qm cluster down --topology FILE [--provider local|kind] [--dir D]
  qm cluster check --provider kind

'up' starts etcd and kube-apiserver on free 127.0.0.1 ports, installs the
GameServer, Fleet and GameServerAllocationPolicy CRDs, prints the kubeconfig
path and stays in the foreground until Ctrl-C (or 'qm cluster down'), then
stops both processes and removes the cluster's directory.

With --topology (a Topology file, or a Scenario file whose clusters and
policies describe the rig), 'up' brings up a multi-cluster rig: one API
server per cluster (started together), its fleets and a fleet agent, its
allocator replicas as qm processes, a latency proxy on every link (callers to
allocators, allocators to each other) and the GameServerAllocationPolicies
and connection Secrets that route between them. It prints, per cluster, the
kubeconfig, the allocator address callers dial and the client certificates.

The binaries come from bin/ of the repository (make bin/etcd
bin/kube-apiserver bin/kubectl), or from --bin-dir or $QM_BIN_DIR.

--provider kind (default: the topology's spec.provider, else local) makes
one kind cluster per topology cluster instead, with Docker: it builds the
qm image from the repository's Dockerfile (--image NAME --no-build uses an
image you built), loads it into each cluster, and applies the CRDs, the
allocator (deploy/allocator.yaml), the fleet agent, the fleets, and the
policies and connection Secrets. 'check --provider kind' says whether
this machine can (Docker answering, kind's node image pulled, kubectl):
exit 0 if so, 3 and the one missing thing if not.
`

func runCluster(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && (args[0] == "-h" || args[0] == "--help") {
		fmt.Fprint(stdout, clusterUsage)
		return nil
	}
	if len(args) == 0 {
		return usageFail(stderr, "cluster", nil, "want a subcommand: up or down")
	}
	switch args[0] {
	case "up":
		return clusterUp(ctx, args[1:], stdout, stderr)
	case "down":
		return clusterDown(args[1:], stdout, stderr)
	case "check":
		return clusterCheck(ctx, args[1:], stdout, stderr)
	default:
		return usageFail(stderr, "cluster", nil, "unknown subcommand %q (want up, down or check)", args[0])
	}
}

// defaultClusterDir is where a named cluster lives unless --dir says
// otherwise: a fixed place per name, so `down` finds what `up` started.
func defaultClusterDir(name string) string {
	return filepath.Join(os.TempDir(), "qm-cluster-"+name)
}

func clusterUp(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("qm cluster up", flag.ContinueOnError)
	name := fs.String("name", "qm", "cluster name (kubeconfig context, directory)")
	dir := fs.String("dir", "", "cluster directory; must not exist or be empty (default $TMPDIR/qm-cluster-NAME)")
	binDir := fs.String("bin-dir", "", "directory with etcd and kube-apiserver (default ./bin of the repository, or $"+kindcluster.BinDirEnv+")")
	dryRun := fs.Bool("dry-run", false, "print the commands instead of running them")
	timeout := fs.Duration("timeout", 2*time.Minute, "how long to wait for the API server to be ready")
	topology := fs.String("topology", "", "a topology (or scenario) file: bring up a multi-cluster rig")
	provider := fs.String("provider", "", "with --topology: local or kind (default: the topology's spec.provider, else local)")
	kf := addKindFlags(fs)
	if _, ok, err := parseFlags("cluster up", clusterUsage+"\nflags of 'up':\n", fs, args, stdout, stderr); !ok {
		return err
	}
	if *topology != "" {
		t, onKind, err := loadRigTopology(*topology, *provider)
		if err != nil {
			return err
		}
		if onKind {
			return kindUp(ctx, t, *dir, *dryRun, *timeout, kf, stdout, stderr)
		}
		return rigUp(ctx, t, *dir, *binDir, *dryRun, *timeout, stdout, stderr)
	}
	if err := singleClusterFlags(fs, *provider); err != nil {
		return usageFail(stderr, "cluster up", nil, "%v", err)
	}
	if *dir == "" {
		*dir = defaultClusterDir(*name)
	}
	opts := kindcluster.Options{
		Name:         *name,
		Dir:          *dir,
		BinDir:       *binDir,
		StartTimeout: *timeout,
		Log:          stderr,
	}
	if *dryRun {
		opts.Runner = &kindcluster.DryRunner{Out: stdout}
		opts.Log = nil
	}
	c, err := kindcluster.Start(ctx, opts)
	if err != nil && ctx.Err() != nil {
		// Ctrl-C while starting is a request to stop, not a failure: Start
		// has already stopped what it started and removed the directory.
		fmt.Fprintf(stderr, "interrupted during start-up; cluster %q stopped\n", *name)
		return nil
	}
	if err != nil {
		return err
	}
	// Covers every return below; Stop is idempotent.
	defer func() { _ = c.Stop() }()
	if *dryRun {
		return c.Stop()
	}
	fmt.Fprintf(stdout, `cluster %q is up: %s
kubeconfig: %s

  export KUBECONFIG=%s
  %s get gameservers,fleets,gameserverallocationpolicies -A

Ctrl-C here, or 'qm cluster down --name %s', stops it and removes %s.
`, c.Name(), c.Server(), c.KubeconfigPath(), c.KubeconfigPath(), kubectlPath(*binDir), c.Name(), c.Dir())
	<-ctx.Done()
	fmt.Fprintln(stderr, "stopping cluster", c.Name())
	return c.Stop()
}

// kubectlPath is how to run the kubectl built beside etcd and
// kube-apiserver (bin/kubectl from the repository root), so that the
// printed commands work on a machine with no kubectl, or another version,
// on its PATH.
func kubectlPath(binDir string) string {
	if binDir == "" {
		d, err := kindcluster.DefaultBinDir()
		if err != nil {
			return "kubectl"
		}
		binDir = d
	}
	p := filepath.Join(binDir, "kubectl")
	if wd, err := os.Getwd(); err == nil {
		if rel, err := filepath.Rel(wd, p); err == nil && !strings.HasPrefix(rel, "..") {
			return rel
		}
	}
	return p
}

func clusterDown(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("qm cluster down", flag.ContinueOnError)
	name := fs.String("name", "qm", "cluster name")
	dir := fs.String("dir", "", "cluster directory (default $TMPDIR/qm-cluster-NAME)")
	grace := fs.Duration("grace", 10*time.Second, "how long each process gets after SIGTERM before SIGKILL")
	topology := fs.String("topology", "", "the topology file the rig was brought up from")
	provider := fs.String("provider", "", "local or kind, as given to 'up' (default: the topology's spec.provider, else local)")
	if _, ok, err := parseFlags("cluster down", clusterUsage+"\nflags of 'down':\n", fs, args, stdout, stderr); !ok {
		return err
	}
	if *topology != "" {
		if t, onKind, err := loadRigTopology(*topology, *provider); err != nil || onKind {
			if err != nil {
				return err
			}
			return kindDown(t, *dir, *grace, stdout, stderr)
		}
		return rigDown(*topology, *dir, *grace, stdout)
	}
	if err := singleClusterFlags(fs, *provider); err != nil {
		return usageFail(stderr, "cluster down", nil, "%v", err)
	}
	if *dir == "" {
		*dir = defaultClusterDir(*name)
	}
	if _, err := os.Stat(*dir); errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("no cluster %q (%s does not exist)", *name, *dir)
	}
	if err := kindcluster.StopDir(*dir, *grace); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "cluster %q stopped\n", *name)
	return nil
}

func rigUp(ctx context.Context, t *rig.Topology, dir, binDir string, dryRun bool, timeout time.Duration, stdout, stderr io.Writer) error {
	for _, n := range t.NotModelled() {
		fmt.Fprintln(stderr, "note: not modelled live:", n)
	}
	opts := rig.Options{Dir: dir, BinDir: binDir, StartTimeout: timeout, Log: stderr}
	if dryRun {
		opts.Runner = &kindcluster.DryRunner{Out: stdout}
		opts.Log = nil
	}
	r, err := rig.Up(ctx, t, opts)
	if err != nil && ctx.Err() != nil {
		// As for one cluster: Ctrl-C while starting is a stop, not a failure.
		fmt.Fprintf(stderr, "interrupted during start-up; rig %q stopped\n", t.Metadata.Name)
		return nil
	}
	if err != nil {
		return err
	}
	defer func() { _ = r.Stop() }()
	if dryRun {
		return r.Stop()
	}
	printRig(stdout, r)
	<-ctx.Done()
	fmt.Fprintln(stderr, "stopping rig", t.Metadata.Name)
	return r.Stop()
}

func printRig(w io.Writer, r *rig.Rig) {
	t := r.Topology
	fmt.Fprintf(w, "rig %q is up (%s)\n", t.Metadata.Name, r.Dir)
	l := r.Certs
	for i, c := range r.Clusters {
		spec := t.Spec.Clusters[i]
		fmt.Fprintf(w, "\ncluster %s (provider %s, region %s)\n", c.Name, spec.Provider, spec.Region)
		fmt.Fprintf(w, "  kubeconfig: %s\n", c.Kube.KubeconfigPath())
		addrs := r.CallerAddrs(c.Name)
		fmt.Fprintf(w, "  allocator:  %s (through the callers' link; %d replica(s))\n", strings.Join(addrs, ", "), len(c.Replicas))
		if len(addrs) > 0 {
			fmt.Fprintf(w, "  allocate:   qm allocate --addr %s --certs-dir %s --identity %s --multicluster\n", addrs[0], l.Dir, rig.CallerIdentity)
		}
	}
	fmt.Fprintf(w, "\nclient certificates: %s (identity %q: %s, %s; CA %s)\n", l.Dir, rig.CallerIdentity,
		l.ClientCert(rig.CallerIdentity), l.ClientKey(rig.CallerIdentity), l.CACert())
	fmt.Fprintf(w, "Ctrl-C here, or 'qm cluster down --topology FILE', stops every process and removes %s.\n", r.Dir)
}

func rigDown(file, dir string, grace time.Duration, stdout io.Writer) error {
	if dir == "" {
		t, err := live.LoadTopology(file)
		if err != nil {
			return err
		}
		dir = rig.DefaultDir(t.Metadata.Name)
	}
	if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("no rig in %s", dir)
	}
	if err := rig.StopDir(dir, grace); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "rig in %s stopped\n", dir)
	return nil
}
