package kindcluster

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// ProviderLocal runs etcd and kube-apiserver as local processes. It is the
// only provider: ProviderKind would need Docker, which these machines lack.
const (
	ProviderLocal = "local"
	ProviderKind  = "kind"
)

// Options configure one cluster. The zero value starts a cluster named "qm"
// in a fresh temporary directory on free ports.
type Options struct {
	// Provider is "local" (default). "kind" is refused: it needs a running
	// Docker or Podman, which this project's machines do not have.
	Provider string
	// Name tells clusters apart in kubeconfigs, logs and directory names.
	// Default "qm".
	Name string
	// Dir is the cluster's own directory (etcd data, certificates, logs,
	// kubeconfig, state file). It must not exist or be empty; Stop removes
	// it. Default: a new directory under os.TempDir().
	Dir string
	// KeepDir leaves Dir in place on Stop (to read the logs).
	KeepDir bool
	// BinDir holds etcd and kube-apiserver (and kubectl, for Kubectl).
	// Default: DefaultBinDir().
	BinDir string
	// Runner runs the processes. Default ExecRunner; a *DryRunner prints
	// the commands and Start then skips every wait and network step.
	Runner Runner
	// Ports; 0 picks a free loopback port.
	EtcdPort, EtcdPeerPort, APIServerPort int
	// StartTimeout bounds each wait for readiness (etcd, API server, CRDs).
	// Default 2 minutes: on a busy 2-core machine the API server can take
	// far longer than its usual 10 s.
	StartTimeout time.Duration
	// StopGrace is how long each process gets to exit after SIGTERM before
	// SIGKILL. Default 10 s.
	StopGrace time.Duration
	// SkipCRDs leaves the cluster without Quartermaster's CRDs.
	SkipCRDs bool
	// EtcdUnsafeNoFsync trades crash safety for speed (test clusters are
	// thrown away anyway). Leave it off when measuring write throughput.
	EtcdUnsafeNoFsync bool
	// ExtraEtcdArgs and ExtraAPIServerArgs are appended to the command
	// lines (later flags win).
	ExtraEtcdArgs, ExtraAPIServerArgs []string
	// Log receives progress lines (may be nil).
	Log io.Writer
}

func (o *Options) setDefaults() error {
	if o.Provider == "" {
		o.Provider = ProviderLocal
	}
	switch o.Provider {
	case ProviderLocal:
	case ProviderKind:
		return errors.New(`provider "kind" needs a running Docker (or Podman) and the kindest/node image; it is not implemented here: use "local"`)
	default:
		return fmt.Errorf("unknown provider %q (want %q)", o.Provider, ProviderLocal)
	}
	if o.Name == "" {
		o.Name = "qm"
	}
	if strings.ContainsAny(o.Name, `/\ `) {
		return fmt.Errorf("cluster name %q: no slashes or spaces", o.Name)
	}
	if o.Runner == nil {
		o.Runner = ExecRunner{}
	}
	if o.StartTimeout <= 0 {
		o.StartTimeout = 2 * time.Minute
	}
	if o.StopGrace <= 0 {
		o.StopGrace = 10 * time.Second
	}
	if o.BinDir == "" {
		d, err := DefaultBinDir()
		if err != nil {
			return err
		}
		o.BinDir = d
	}
	return nil
}

// Cluster is one running etcd + kube-apiserver pair. It is safe for
// concurrent use; Stop may be called any number of times.
type Cluster struct {
	opts      Options
	dryRun    *DryRunner
	dir       string
	ownsDir   bool
	ports     []int // picked by us, released on Stop
	etcdURL   string
	serverURL string
	token     string
	caPEM     []byte
	cfg       *rest.Config

	etcd, apiserver Process
	// apiserverUnready: StartAPIServer started the kube-apiserver and did
	// not see it ready; the next StartAPIServer waits for it again.
	apiserverUnready bool

	stopOnce sync.Once
	stopErr  error
}

// Paths inside a cluster's directory.
const (
	kubeconfigFile = "kubeconfig"
	stateFile      = "cluster.json"
	etcdLog        = "etcd.log"
	apiserverLog   = "kube-apiserver.log"
)

// Start brings up a cluster and returns once its API server is ready and
// (unless SkipCRDs) the CRDs are Established. On error nothing is left
// running. The caller must Stop the cluster; tests use NewForTest, which
// registers that for them.
func Start(ctx context.Context, opts Options) (*Cluster, error) {
	if err := opts.setDefaults(); err != nil {
		return nil, err
	}
	dry, _ := opts.Runner.(*DryRunner)
	if dry == nil {
		if err := CheckBinaries(opts.BinDir, EtcdBinary, APIServerBinary); err != nil {
			return nil, err
		}
	}
	// A port taken by someone else between our probe and the server's bind
	// shows up as an early exit; try again with fresh ports.
	var lastErr error
	for attempt := 0; attempt < 3; attempt++ {
		c, err := startOnce(ctx, opts, dry)
		if err == nil {
			return c, nil
		}
		lastErr = err
		if !errors.Is(err, errPortInUse) || ctx.Err() != nil {
			break
		}
	}
	return nil, lastErr
}

var errPortInUse = errors.New("port already in use")

func startOnce(ctx context.Context, opts Options, dry *DryRunner) (_ *Cluster, err error) {
	c := &Cluster{opts: opts, dryRun: dry}
	defer func() {
		if err != nil {
			if stopErr := c.Stop(); stopErr != nil {
				err = errors.Join(err, stopErr)
			}
		}
	}()

	if err := c.makeDir(); err != nil {
		return c, err
	}
	if err := c.pickPorts(); err != nil {
		return c, err
	}
	etcdPort, peerPort, apiPort := c.opts.EtcdPort, c.opts.EtcdPeerPort, c.opts.APIServerPort
	c.etcdURL = "http://127.0.0.1:" + strconv.Itoa(etcdPort)
	c.serverURL = "https://127.0.0.1:" + strconv.Itoa(apiPort)
	c.logf("cluster %q: dir %s, etcd %s, kube-apiserver %s", c.opts.Name, c.dir, c.etcdURL, c.serverURL)

	if err := c.writeFiles(); err != nil {
		return c, err
	}

	c.etcd, err = c.opts.Runner.Start(c.etcdCommand(etcdPort, peerPort))
	if err != nil {
		return c, err
	}
	if err := c.waitEtcd(ctx); err != nil {
		return c, err
	}
	c.apiserver, err = c.opts.Runner.Start(c.apiserverCommand(apiPort))
	if err != nil {
		return c, err
	}
	if err := c.waitAPIServer(ctx); err != nil {
		return c, err
	}
	if !c.opts.SkipCRDs {
		if err := c.installCRDs(ctx); err != nil {
			return c, err
		}
	}
	if err := c.writeState(); err != nil {
		return c, err
	}
	c.logf("cluster %q ready: KUBECONFIG=%s", c.opts.Name, c.KubeconfigPath())
	return c, nil
}

func (c *Cluster) makeDir() error {
	if c.opts.Dir == "" {
		d, err := os.MkdirTemp("", "qm-cluster-"+c.opts.Name+"-")
		if err != nil {
			return err
		}
		c.dir, c.ownsDir = d, true
		return nil
	}
	d, err := filepath.Abs(c.opts.Dir)
	if err != nil {
		return err
	}
	entries, err := os.ReadDir(d)
	switch {
	case errors.Is(err, os.ErrNotExist):
	case err != nil:
		return err
	case len(entries) > 0:
		// Stop removes the directory: refuse anything we did not make.
		return fmt.Errorf("cluster dir %s is not empty (a cluster still running there? `qm cluster down --dir %s`)", d, d)
	}
	if err := os.MkdirAll(d, 0o700); err != nil {
		return err
	}
	c.dir, c.ownsDir = d, true
	return nil
}

func (c *Cluster) pickPorts() error {
	need := 0
	for _, p := range []int{c.opts.EtcdPort, c.opts.EtcdPeerPort, c.opts.APIServerPort} {
		if p == 0 {
			need++
		}
	}
	if need == 0 {
		return nil
	}
	got, err := ports.pick(need)
	if err != nil {
		return err
	}
	c.ports = got
	for _, p := range []*int{&c.opts.EtcdPort, &c.opts.EtcdPeerPort, &c.opts.APIServerPort} {
		if *p == 0 {
			*p, got = got[0], got[1:]
		}
	}
	return nil
}

func (c *Cluster) path(elem ...string) string {
	return filepath.Join(append([]string{c.dir}, elem...)...)
}

func (c *Cluster) writeFiles() error {
	s, err := newSecrets(time.Now())
	if err != nil {
		return err
	}
	c.token, c.caPEM = s.adminToken, s.caCert
	kubeconfig, err := renderKubeconfig(c.opts.Name, c.serverURL, s.caCert, s.adminToken)
	if err != nil {
		return err
	}
	files := []struct {
		name string
		data []byte
	}{
		{"pki/ca.crt", s.caCert},
		// kube-apiserver serves apiserver.crt/.key from --cert-dir when they
		// exist, instead of self-signing.
		{"certs/apiserver.crt", append(append([]byte{}, s.servingCert...), s.caCert...)},
		{"certs/apiserver.key", s.servingKey},
		{"pki/sa.key", s.saKey},
		{"pki/sa.pub", s.saPub},
		{"pki/tokens.csv", tokenFile(s.adminToken)},
		{kubeconfigFile, kubeconfig},
	}
	for _, f := range files {
		p := c.path(f.name)
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			return err
		}
		if err := os.WriteFile(p, f.data, 0o600); err != nil {
			return err
		}
	}
	c.cfg = &rest.Config{
		Host:            c.serverURL,
		BearerToken:     s.adminToken,
		TLSClientConfig: rest.TLSClientConfig{CAData: s.caCert},
		// Test rigs hammer the server on purpose; client-go's default of
		// 5 QPS would measure the client, not the server.
		QPS:   1000,
		Burst: 2000,
	}
	return nil
}

func (c *Cluster) etcdCommand(port, peerPort int) Command {
	client := "http://127.0.0.1:" + strconv.Itoa(port)
	peer := "http://127.0.0.1:" + strconv.Itoa(peerPort)
	args := []string{
		"--name=" + c.opts.Name,
		"--data-dir=" + c.path("etcd"),
		"--listen-client-urls=" + client,
		"--advertise-client-urls=" + client,
		"--listen-peer-urls=" + peer,
		"--initial-advertise-peer-urls=" + peer,
		"--initial-cluster=" + c.opts.Name + "=" + peer,
		"--log-level=warn",
	}
	if c.opts.EtcdUnsafeNoFsync {
		args = append(args, "--unsafe-no-fsync")
	}
	args = append(args, c.opts.ExtraEtcdArgs...)
	return Command{Path: filepath.Join(c.opts.BinDir, EtcdBinary), Args: args, LogFile: c.path(etcdLog)}
}

func (c *Cluster) apiserverCommand(port int) Command {
	args := []string{
		"--etcd-servers=" + c.etcdURL,
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(port),
		"--cert-dir=" + c.path("certs"),
		"--service-account-issuer=https://kubernetes.default.svc",
		"--service-account-key-file=" + c.path("pki/sa.pub"),
		"--service-account-signing-key-file=" + c.path("pki/sa.key"),
		"--token-auth-file=" + c.path("pki/tokens.csv"),
		"--authorization-mode=RBAC",
		"--service-cluster-ip-range=10.0.0.0/24",
	}
	args = append(args, c.opts.ExtraAPIServerArgs...)
	return Command{Path: filepath.Join(c.opts.BinDir, APIServerBinary), Args: args, LogFile: c.path(apiserverLog)}
}

// waitEtcd waits for etcd's /health; the API server would retry on its
// own, but a dead etcd is easier to diagnose here than from its symptoms.
func (c *Cluster) waitEtcd(ctx context.Context) error {
	if c.dryRun != nil {
		c.dryRun.Notef("wait until %s/health answers 200", c.etcdURL)
		return nil
	}
	return c.poll(ctx, "etcd", c.etcd, etcdLog, http.DefaultClient, c.etcdURL+"/health", nil)
}

func (c *Cluster) waitAPIServer(ctx context.Context) error {
	if c.dryRun != nil {
		c.dryRun.Notef("wait until %s/readyz answers ok", c.serverURL)
		return nil
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(c.caPEM)
	hc := &http.Client{
		Timeout:   5 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}},
	}
	defer hc.CloseIdleConnections()
	return c.poll(ctx, "kube-apiserver", c.apiserver, apiserverLog, hc, c.serverURL+"/readyz", []byte("ok"))
}

// poll GETs url until it answers 200 (with body want, if set), the
// process exits, or StartTimeout passes.
func (c *Cluster) poll(ctx context.Context, what string, p Process, logName string, hc *http.Client, url string, want []byte) error {
	ctx, cancel := context.WithTimeout(ctx, c.opts.StartTimeout)
	defer cancel()
	start := time.Now()
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	var last string
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if c.token != "" && strings.HasPrefix(url, "https:") {
			req.Header.Set("Authorization", "Bearer "+c.token)
		}
		resp, err := hc.Do(req)
		if err == nil {
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK && (want == nil || strings.TrimSpace(string(body)) == string(want)) {
				c.logf("%s ready after %s", what, time.Since(start).Round(time.Millisecond))
				return nil
			}
			last = fmt.Sprintf("HTTP %d: %.200s", resp.StatusCode, body)
		} else {
			last = err.Error()
		}
		select {
		case <-p.Done():
			tail := c.logTail(logName)
			err := fmt.Errorf("%s exited before it was ready (%v); last lines of %s:\n%s", what, p.Err(), c.path(logName), tail)
			if strings.Contains(tail, "address already in use") {
				err = fmt.Errorf("%w: %w", errPortInUse, err)
			}
			return err
		case <-ctx.Done():
			return fmt.Errorf("%s not ready after %s (last answer: %s); last lines of %s:\n%s",
				what, time.Since(start).Round(time.Second), last, c.path(logName), c.logTail(logName))
		case <-tick.C:
		}
	}
}

// logTail returns the last lines of one of the cluster's logs, for errors.
func (c *Cluster) logTail(name string) string { return TailFile(c.path(name), 20) }

// TailFile returns the last n lines of a log file, for an error that
// should say why a process stopped (and may outlive the file).
func TailFile(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// LogTail returns the last lines of the etcd and kube-apiserver logs, for a
// failing test's output.
func (c *Cluster) LogTail() string {
	return "== " + etcdLog + "\n" + c.logTail(etcdLog) + "\n== " + apiserverLog + "\n" + c.logTail(apiserverLog)
}

// state is what `qm cluster down` needs to find and stop a cluster started
// by another process.
type state struct {
	Name          string `json:"name"`
	OwnerPID      int    `json:"ownerPID"`
	EtcdPID       int    `json:"etcdPID"`
	APIServerPID  int    `json:"apiserverPID"`
	Server        string `json:"server"`
	Kubeconfig    string `json:"kubeconfig"`
	APIServerPath string `json:"apiserverPath"`
	EtcdPath      string `json:"etcdPath"`
}

func (c *Cluster) writeState() error {
	s := state{
		Name:          c.opts.Name,
		OwnerPID:      os.Getpid(),
		EtcdPID:       c.etcd.Pid(),
		APIServerPID:  c.apiserver.Pid(),
		Server:        c.serverURL,
		Kubeconfig:    c.KubeconfigPath(),
		APIServerPath: filepath.Join(c.opts.BinDir, APIServerBinary),
		EtcdPath:      filepath.Join(c.opts.BinDir, EtcdBinary),
	}
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(c.path(stateFile), append(b, '\n'), 0o600)
}

// Stop stops the API server, then etcd, and removes the cluster's
// directory (unless KeepDir). It is safe to call more than once and from
// cleanups of failed tests. It takes no context on purpose: a shutdown cut
// short is exactly how orphan API servers are made; StopGrace bounds it.
func (c *Cluster) Stop() error {
	c.stopOnce.Do(func() {
		var errs []error
		// The API server first: stopping etcd under it makes it log a storm
		// of errors and slows its exit.
		for _, p := range []Process{c.apiserver, c.etcd} {
			if p == nil {
				continue
			}
			if err := p.Stop(c.opts.StopGrace); err != nil {
				errs = append(errs, err)
			}
		}
		ports.release(c.ports...)
		if c.ownsDir && !c.opts.KeepDir && c.dir != "" {
			if err := os.RemoveAll(c.dir); err != nil {
				errs = append(errs, err)
			}
		}
		if len(errs) > 0 {
			c.stopErr = fmt.Errorf("stop cluster %q: %w", c.opts.Name, errors.Join(errs...))
		}
		// A start that failed before any process ran (its directory
		// taken by a running cluster of that name, say) stopped nothing,
		// and saying "stopped" would suggest the running one was.
		if c.etcd != nil || c.apiserver != nil {
			c.logf("cluster %q stopped", c.opts.Name)
		}
	})
	return c.stopErr
}

func (c *Cluster) logf(format string, args ...any) {
	if c.opts.Log != nil {
		fmt.Fprintf(c.opts.Log, format+"\n", args...)
	}
}

// Name is the cluster's name.
func (c *Cluster) Name() string { return c.opts.Name }

// Dir is the cluster's directory (removed by Stop unless KeepDir).
func (c *Cluster) Dir() string { return c.dir }

// KubeconfigPath is an admin kubeconfig for the cluster
// (`kubectl --kubeconfig PATH`, or KUBECONFIG=PATH).
func (c *Cluster) KubeconfigPath() string { return c.path(kubeconfigFile) }

// Server is the API server's URL (https://127.0.0.1:PORT).
func (c *Cluster) Server() string { return c.serverURL }

// EtcdURL is etcd's client URL (http://127.0.0.1:PORT).
func (c *Cluster) EtcdURL() string { return c.etcdURL }

// Pids returns the process ids of etcd and kube-apiserver (0 in a dry run),
// so tests can check nothing outlives Stop.
func (c *Cluster) Pids() (etcd, apiserver int) {
	if c.etcd != nil {
		etcd = c.etcd.Pid()
	}
	if c.apiserver != nil {
		apiserver = c.apiserver.Pid()
	}
	return etcd, apiserver
}

// RESTConfig returns a fresh copy of the admin client configuration (QPS
// 1000, burst 2000); callers may change their copy.
func (c *Cluster) RESTConfig() *rest.Config { return rest.CopyConfig(c.cfg) }

// Clientset returns a typed client for built-in resources.
func (c *Cluster) Clientset() (kubernetes.Interface, error) {
	return kubernetes.NewForConfig(c.RESTConfig())
}

// Dynamic returns a client for any resource, our CRDs included.
func (c *Cluster) Dynamic() (dynamic.Interface, error) {
	return dynamic.NewForConfig(c.RESTConfig())
}

// APIExtensions returns a client for CustomResourceDefinitions.
func (c *Cluster) APIExtensions() (apiextensionsclient.Interface, error) {
	return apiextensionsclient.NewForConfig(c.RESTConfig())
}

// Kubectl runs bin/kubectl against the cluster and returns its combined
// output (through the cluster's Runner, so a dry run prints it).
func (c *Cluster) Kubectl(ctx context.Context, args ...string) ([]byte, error) {
	if c.dryRun == nil {
		if err := CheckBinaries(c.opts.BinDir, KubectlBinary); err != nil {
			return nil, err
		}
	}
	cmd := Command{
		Path: filepath.Join(c.opts.BinDir, KubectlBinary),
		Args: append([]string{"--kubeconfig=" + c.KubeconfigPath()}, args...),
	}
	out, err := c.opts.Runner.Run(ctx, cmd)
	if err != nil {
		return out, fmt.Errorf("kubectl %s: %w\n%s", strings.Join(args, " "), err, out)
	}
	return out, nil
}
