package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/quartermaster-dev/quartermaster/kindcluster"
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

'up' starts etcd and kube-apiserver on free 127.0.0.1 ports, installs the
GameServer, Fleet and GameServerAllocationPolicy CRDs, prints the kubeconfig
path and stays in the foreground until Ctrl-C (or 'qm cluster down'), then
stops both processes and removes the cluster's directory.

The binaries come from bin/ of the repository (make bin/etcd
bin/kube-apiserver bin/kubectl), or from --bin-dir or $QM_BIN_DIR.
`

func runCluster(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" {
		fmt.Fprint(stderr, clusterUsage)
		return exitError{2}
	}
	switch args[0] {
	case "up":
		return clusterUp(ctx, args[1:], stdout, stderr)
	case "down":
		return clusterDown(args[1:], stdout, stderr)
	default:
		fmt.Fprintf(stderr, "qm cluster: unknown subcommand %q\n\n%s", args[0], clusterUsage)
		return exitError{2}
	}
}

// defaultClusterDir is where a named cluster lives unless --dir says
// otherwise: a fixed place per name, so `down` finds what `up` started.
func defaultClusterDir(name string) string {
	return filepath.Join(os.TempDir(), "qm-cluster-"+name)
}

func clusterUp(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("qm cluster up", flag.ContinueOnError)
	fs.SetOutput(stderr)
	name := fs.String("name", "qm", "cluster name (kubeconfig context, directory)")
	dir := fs.String("dir", "", "cluster directory; must not exist or be empty (default $TMPDIR/qm-cluster-NAME)")
	binDir := fs.String("bin-dir", "", "directory with etcd and kube-apiserver (default ./bin of the repository, or $"+kindcluster.BinDirEnv+")")
	dryRun := fs.Bool("dry-run", false, "print the commands instead of running them")
	timeout := fs.Duration("timeout", 2*time.Minute, "how long to wait for the API server to be ready")
	if err := fs.Parse(args); err != nil {
		return exitError{2}
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
  kubectl get gameservers,fleets,gameserverallocationpolicies -A

Ctrl-C here, or 'qm cluster down --name %s', stops it and removes %s.
`, c.Name(), c.Server(), c.KubeconfigPath(), c.KubeconfigPath(), c.Name(), c.Dir())
	<-ctx.Done()
	fmt.Fprintln(stderr, "stopping cluster", c.Name())
	return c.Stop()
}

func clusterDown(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("qm cluster down", flag.ContinueOnError)
	fs.SetOutput(stderr)
	name := fs.String("name", "qm", "cluster name")
	dir := fs.String("dir", "", "cluster directory (default $TMPDIR/qm-cluster-NAME)")
	grace := fs.Duration("grace", 10*time.Second, "how long each process gets after SIGTERM before SIGKILL")
	if err := fs.Parse(args); err != nil {
		return exitError{2}
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
