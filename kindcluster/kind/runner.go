package kind

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	kindcluster "github.com/quartermaster-dev/quartermaster/kindcluster"
	"sigs.k8s.io/kind/pkg/apis/config/v1alpha4"
	"sigs.k8s.io/kind/pkg/cluster"
	"sigs.k8s.io/kind/pkg/cluster/nodeutils"
	kindlog "sigs.k8s.io/kind/pkg/log"
)

// Runner does every step of Up and Down that reaches outside the rig's
// directory: kind's cluster operations and the programs run (docker,
// kubectl). Exec does them; DryRun records them.
type Runner interface {
	// Create makes a kind cluster from config, waits up to wait for its
	// node to be Ready, and writes its kubeconfig to kubeconfig (never to
	// the user's own). configFile holds the same config as YAML, for
	// people and for the dry run's record.
	Create(name string, config *v1alpha4.Cluster, configFile, kubeconfig string, wait time.Duration) error
	// KubeConfig is the cluster's kubeconfig for clients on the host.
	KubeConfig(name string) (string, error)
	// LoadImage loads an image archive (`docker save`'s output) into every
	// node of the cluster, as `kind load docker-image` does.
	LoadImage(name, archive string) error
	// Delete removes the cluster and its entry in kubeconfig.
	Delete(name, kubeconfig string) error
	// Run runs a program to completion and returns its combined output.
	Run(ctx context.Context, cmd kindcluster.Command) ([]byte, error)
}

// Exec is the Runner that does the work: kind's Go API on Docker, and
// programs run as child processes. Docker always, whatever kind would
// detect: the rig's own steps (build, save, restart, network inspect) are
// docker commands, so the clusters must be Docker's too (Check and Up
// refuse KIND_EXPERIMENTAL_PROVIDER=podman or nerdctl).
type Exec struct {
	Provider *cluster.Provider
	Programs kindcluster.Runner
	// Log receives why Create waits or tries again (may be nil).
	Log io.Writer
	// PortWait bounds Create's wait for the config's host ports to be
	// free (default DefaultPortWait).
	PortWait time.Duration
}

var _ Runner = (*Exec)(nil)

// NewExec is an Exec whose kind logs go to log (may be nil).
func NewExec(log io.Writer) *Exec {
	return &Exec{
		Provider: cluster.NewProvider(cluster.ProviderWithLogger(writerLogger{w: log}), cluster.ProviderWithDocker()),
		Programs: kindcluster.ExecRunner{},
		Log:      log,
	}
}

// createAttempts bounds Create's tries: a second one only when a host
// port was taken between the wait for it and Docker's bind.
const createAttempts = 2

// Create implements Runner. It first waits for the config's host ports
// to be free (ports.go says why they may not be), and a failure says what
// the failed command printed.
func (e *Exec) Create(name string, config *v1alpha4.Cluster, _, kubeconfig string, wait time.Duration) error {
	portWait := e.PortWait
	if portWait == 0 {
		portWait = DefaultPortWait
	}
	for attempt := 1; ; attempt++ {
		if err := waitForPorts(hostPorts(config), portWait, e.logf); err != nil {
			return fmt.Errorf("kind cluster %s: %w", name, err)
		}
		err := withOutput(e.Provider.Create(name,
			cluster.CreateWithV1Alpha4Config(config),
			cluster.CreateWithKubeconfigPath(kubeconfig),
			cluster.CreateWithWaitForReady(wait),
			cluster.CreateWithDisplayUsage(false),
			cluster.CreateWithDisplaySalutation(false)))
		if err == nil || attempt == createAttempts || !portTaken(err) {
			return err
		}
		// kind deleted the node it could not start.
		e.logf("creating kind cluster %s again: a host port was taken after the check: %v", name, err)
	}
}

func (e *Exec) logf(format string, args ...any) {
	if e.Log != nil {
		fmt.Fprintf(e.Log, format+"\n", args...)
	}
}

// KubeConfig implements Runner.
func (e *Exec) KubeConfig(name string) (string, error) { return e.Provider.KubeConfig(name, false) }

// LoadImage implements Runner: the archive is imported into each node's
// containerd, the way kind's own `load docker-image` does it.
func (e *Exec) LoadImage(name, archive string) error {
	nodes, err := e.Provider.ListInternalNodes(name)
	if err != nil {
		return err
	}
	if len(nodes) == 0 {
		return fmt.Errorf("kind cluster %q has no nodes", name)
	}
	for _, n := range nodes {
		f, err := os.Open(archive)
		if err != nil {
			return err
		}
		err = nodeutils.LoadImageArchive(n, f)
		f.Close()
		if err != nil {
			return fmt.Errorf("node %s: %w", n, err)
		}
	}
	return nil
}

// Delete implements Runner.
func (e *Exec) Delete(name, kubeconfig string) error { return e.Provider.Delete(name, kubeconfig) }

// Run implements Runner.
func (e *Exec) Run(ctx context.Context, cmd kindcluster.Command) ([]byte, error) {
	out, err := e.Programs.Run(ctx, cmd)
	if err != nil {
		return out, fmt.Errorf("%s: %w: %s", cmd, err, strings.TrimSpace(string(out)))
	}
	return out, nil
}

// DryRun records every step instead of doing it, as the shell line that
// would do the same with kind's CLI, and prints each to Out.
type DryRun struct {
	Out io.Writer

	mu    sync.Mutex
	steps []string
}

var _ Runner = (*DryRun)(nil)

// Steps are the steps recorded so far, in order.
func (d *DryRun) Steps() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.steps...)
}

func (d *DryRun) record(line string) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.steps = append(d.steps, line)
	if d.Out != nil {
		fmt.Fprintln(d.Out, line)
	}
}

// Notef records a step that runs no program (a wait, a file written).
func (d *DryRun) Notef(format string, args ...any) { d.record("# " + fmt.Sprintf(format, args...)) }

// Create implements Runner.
func (d *DryRun) Create(name string, _ *v1alpha4.Cluster, configFile, kubeconfig string, wait time.Duration) error {
	d.record(kindcluster.Command{Path: "kind", Args: []string{"create", "cluster", "--name", name,
		"--config", configFile, "--kubeconfig", kubeconfig, "--wait", wait.String()}}.String())
	return nil
}

// KubeConfig implements Runner.
func (d *DryRun) KubeConfig(name string) (string, error) {
	d.record(kindcluster.Command{Path: "kind", Args: []string{"get", "kubeconfig", "--name", name}}.String())
	return "# dry run: kind get kubeconfig --name " + name + "\n", nil
}

// LoadImage implements Runner.
func (d *DryRun) LoadImage(name, archive string) error {
	d.record(kindcluster.Command{Path: "kind", Args: []string{"load", "image-archive", archive, "--name", name}}.String())
	return nil
}

// Delete implements Runner.
func (d *DryRun) Delete(name, kubeconfig string) error {
	d.record(kindcluster.Command{Path: "kind", Args: []string{"delete", "cluster", "--name", name, "--kubeconfig", kubeconfig}}.String())
	return nil
}

// DryRunNetwork is what a dry run answers `docker network inspect kind`
// with: the subnets Docker typically gives kind's network on Linux, so the
// rest of the run (certificates, policies, links) has a host address.
const DryRunNetwork = `[{"Subnet":"172.18.0.0/16","Gateway":"172.18.0.1"},{"Subnet":"fc00:f853:ccd:e793::/64","Gateway":"fc00:f853:ccd:e793::1"}]`

// Run implements Runner. It prints nothing for every program but the
// probe of kind's network, which gets DryRunNetwork.
func (d *DryRun) Run(_ context.Context, cmd kindcluster.Command) ([]byte, error) {
	d.record(cmd.String())
	if len(cmd.Args) >= 2 && cmd.Args[0] == "network" && cmd.Args[1] == "inspect" {
		return []byte(DryRunNetwork + "\n"), nil
	}
	return nil, nil
}

// writerLogger is kind's log.Logger on an io.Writer: warnings, errors and
// kind's progress (verbosity 0) only.
type writerLogger struct{ w io.Writer }

func (l writerLogger) print(s string) {
	if l.w != nil {
		fmt.Fprintln(l.w, "kind:", s)
	}
}
func (l writerLogger) Warn(m string)                        { l.print(m) }
func (l writerLogger) Warnf(f string, a ...any)             { l.print(fmt.Sprintf(f, a...)) }
func (l writerLogger) Error(m string)                       { l.print(m) }
func (l writerLogger) Errorf(f string, a ...any)            { l.print(fmt.Sprintf(f, a...)) }
func (l writerLogger) V(v kindlog.Level) kindlog.InfoLogger { return infoLogger{l, v == 0} }

type infoLogger struct {
	l  writerLogger
	on bool
}

func (i infoLogger) Info(m string) {
	if i.on {
		i.l.print(m)
	}
}
func (i infoLogger) Infof(f string, a ...any) {
	if i.on {
		i.l.print(fmt.Sprintf(f, a...))
	}
}
func (i infoLogger) Enabled() bool { return i.on }
