package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/quartermaster-dev/quartermaster/kindcluster"
)

// runAsQM makes the test binary act as the qm binary when re-executed with
// it set, so start-up tests can signal a real process as a kubelet would.
const runAsQM = "QM_TEST_RUN_AS_QM"

func TestMain(m *testing.M) {
	if os.Getenv(runAsQM) == "1" {
		os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
	}
	os.Exit(m.Run())
}

// qmProcess is `qm serve` running as a process of its own, logging JSON.
type qmProcess struct {
	cmd    *exec.Cmd
	stderr syncBuf
	exited chan error
	done   chan struct{} // closed once Wait has returned

	mu    sync.Mutex
	lines []map[string]any // every log line, decoded
}

func (p *qmProcess) logLines() []map[string]any {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.lines
}

func startQM(t *testing.T, args ...string) *qmProcess {
	t.Helper()
	p := &qmProcess{exited: make(chan error, 1), done: make(chan struct{})}
	p.cmd = exec.Command(os.Args[0], args...)
	p.cmd.Env = append(os.Environ(), runAsQM+"=1")
	pr, pw := io.Pipe()
	p.cmd.Stderr = io.MultiWriter(pw, &p.stderr)
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(pr)
		for sc.Scan() {
			var m map[string]any
			if json.Unmarshal(sc.Bytes(), &m) == nil {
				p.mu.Lock()
				p.lines = append(p.lines, m)
				p.mu.Unlock()
			}
		}
	}()
	go func() {
		err := p.cmd.Wait()
		pw.Close()
		p.exited <- err
		close(p.done)
	}()
	t.Cleanup(func() {
		// Kill after an exit is harmless; waiting on done rather than
		// reading cmd.ProcessState keeps this clear of the Wait above.
		_ = p.cmd.Process.Kill()
		<-p.done
		if t.Failed() {
			t.Logf("qm serve stderr:\n%s", p.stderr.String())
		}
	})
	return p
}

// waitLog returns the first log line (since the start) with message msg
// for which match holds, failing the test after d.
func (p *qmProcess) waitLog(t *testing.T, d time.Duration, msg string, match func(map[string]any) bool) map[string]any {
	t.Helper()
	timeout := time.After(d)
	for {
		for _, m := range p.logLines() {
			if m["msg"] == msg && (match == nil || match(m)) {
				return m
			}
		}
		select {
		case err := <-p.exited:
			p.exited <- err
			time.Sleep(100 * time.Millisecond) // let the reader catch up
			for _, m := range p.logLines() {
				if m["msg"] == msg && (match == nil || match(m)) {
					return m
				}
			}
			t.Fatalf("qm serve exited (%v) before logging %q", err, msg)
		case <-timeout:
			t.Fatalf("qm serve did not log %q within %s", msg, d)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// wait returns the process's exit error, failing the test after d.
func (p *qmProcess) wait(t *testing.T, d time.Duration) error {
	t.Helper()
	select {
	case err := <-p.exited:
		p.exited <- err
		return err
	case <-time.After(d):
		t.Fatalf("qm serve still running %s later", d)
		return nil
	}
}

func httpStatus(t *testing.T, url string) int {
	t.Helper()
	c := &http.Client{Timeout: 2 * time.Second}
	resp, err := c.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// unreachableKubeconfig points at a loopback port nothing listens on.
func unreachableKubeconfig(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	path := filepath.Join(t.TempDir(), "kubeconfig")
	cfg := fmt.Sprintf(`apiVersion: v1
kind: Config
clusters: [{name: gone, cluster: {server: "https://%s", insecure-skip-tls-verify: true}}]
users: [{name: u, user: {token: t}}]
contexts: [{name: gone, context: {cluster: gone, user: u}}]
current-context: gone
`, addr)
	if err := os.WriteFile(path, []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func kubeServeArgs(kubeconfig, state string, extra ...string) []string {
	return append([]string{"serve", "--backend", "kubernetes", "--kubeconfig", kubeconfig,
		"--addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0", "--state-dir", state, "--log-format", "json"}, extra...)
}

// healthAddr waits for the line that says the health port serves.
func (p *qmProcess) healthAddr(t *testing.T) string {
	t.Helper()
	m := p.waitLog(t, 20*time.Second, "health port serving while the GameServer cache syncs", nil)
	addr, _ := m["http"].(string)
	if addr == "" {
		t.Fatalf("no http address in %v", m)
	}
	return "http://" + addr
}

func reasonIs(r string) func(map[string]any) bool {
	return func(m map[string]any) bool { return m["reason"] == r }
}

// An API server that cannot be reached: /live answers at once, /ready does
// not, the reason is logged, and SIGTERM stops the process cleanly.
func TestServeKubeStartupUnreachableStopsOnSIGTERM(t *testing.T) {
	p := startQM(t, kubeServeArgs(unreachableKubeconfig(t), t.TempDir(), "--sync-timeout", "0")...)
	base := p.healthAddr(t)
	if got := httpStatus(t, base+"/live"); got != http.StatusOK {
		t.Errorf("/live while syncing: %d, want 200", got)
	}
	if got := httpStatus(t, base+"/ready"); got != http.StatusServiceUnavailable {
		t.Errorf("/ready while syncing: %d, want 503", got)
	}
	m := p.waitLog(t, 10*time.Second, "gameserver list failed; retrying", reasonIs("unreachable"))
	if s, _ := m["err"].(string); !strings.Contains(s, "connection refused") {
		t.Errorf("the logged error does not say what happened: %q", s)
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := p.wait(t, 5*time.Second); err != nil {
		t.Fatalf("after SIGTERM: %v, want exit 0", err)
	}
	if !strings.Contains(p.stderr.String(), "stopped before the GameServer cache synced") {
		t.Errorf("no word of the stop in the log")
	}
}

// --sync-timeout gives up with exit 1 and the reason.
func TestServeKubeStartupTimeout(t *testing.T) {
	p := startQM(t, kubeServeArgs(unreachableKubeconfig(t), t.TempDir(), "--sync-timeout", "1s")...)
	err := p.wait(t, 15*time.Second)
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 {
		t.Fatalf("exit: %v, want status 1", err)
	}
	last := p.stderr.String()
	if i := strings.LastIndex(strings.TrimSpace(last), "\n"); i >= 0 {
		last = last[i+1:]
	}
	for _, want := range []string{"qm serve: starting the kubernetes backend: the GameServer cache did not sync within 1s: unreachable:", "connection refused", "check the kubeconfig's server address"} {
		if !strings.Contains(last, want) {
			t.Errorf("the last line does not say %q:\n%s", want, last)
		}
	}
}

// A real API server without the GameServer CRD: the wait names it, and
// installing the CRDs is enough for the running process to become ready.
func TestServeKubeStartupCRDMissingThenInstalled(t *testing.T) {
	c := kindcluster.NewForTest(t, kindcluster.Options{Name: "no-crds", SkipCRDs: true, EtcdUnsafeNoFsync: true})
	p := startQM(t, kubeServeArgs(c.KubeconfigPath(), t.TempDir(), "--sync-timeout", "2m")...)
	base := p.healthAddr(t)
	m := p.waitLog(t, 20*time.Second, "gameserver list failed; retrying", reasonIs("crd-missing"))
	if s, _ := m["err"].(string); !strings.Contains(s, "install Agones, or deploy/crds/") {
		t.Errorf("the logged error does not say what to do: %q", s)
	}
	if got := httpStatus(t, base+"/ready"); got != http.StatusServiceUnavailable {
		t.Errorf("/ready without the CRD: %d, want 503", got)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := kindcluster.InstallCRDs(ctx, c.RESTConfig(), time.Minute); err != nil {
		t.Fatal(err)
	}
	p.waitLog(t, time.Minute, "gameserver cache synced", nil)
	for deadline := time.Now().Add(10 * time.Second); httpStatus(t, base+"/ready") != http.StatusOK; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("/ready not 200 after the cache synced")
		}
	}
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := p.wait(t, 30*time.Second); err != nil {
		t.Fatalf("after SIGTERM: %v, want exit 0", err)
	}
}

// The manifest's startupProbe must outlast --sync-timeout (so the process
// gives up first, with its reason), and probe /ready (so liveness starts
// only once the cache has synced).
func TestDeployStartupProbeOutlastsSyncTimeout(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "deploy", "allocator.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	type probe struct {
		HTTPGet struct {
			Path string `yaml:"path"`
		} `yaml:"httpGet"`
		PeriodSeconds    int `yaml:"periodSeconds"`
		FailureThreshold int `yaml:"failureThreshold"`
	}
	var set struct {
		Kind string `yaml:"kind"`
		Spec struct {
			Template struct {
				Spec struct {
					Containers []struct {
						Args         []string `yaml:"args"`
						StartupProbe *probe   `yaml:"startupProbe"`
					} `yaml:"containers"`
				} `yaml:"spec"`
			} `yaml:"template"`
		} `yaml:"spec"`
	}
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	for set.Kind != "Deployment" {
		if err := dec.Decode(&set); err != nil {
			t.Fatalf("no Deployment in deploy/allocator.yaml: %v", err)
		}
	}
	c := set.Spec.Template.Spec.Containers[0]
	var f serveFlags
	if err := serveFlagSet(&f).Parse(c.Args[1:]); err != nil {
		t.Fatal(err)
	}
	p := c.StartupProbe
	if p == nil || p.HTTPGet.Path != "/ready" {
		t.Fatalf("startupProbe %+v: want one on /ready", p)
	}
	budget := time.Duration(p.PeriodSeconds*p.FailureThreshold) * time.Second
	if f.syncTimeout <= 0 || budget <= f.syncTimeout {
		t.Fatalf("startupProbe budget %s does not outlast --sync-timeout %s", budget, f.syncTimeout)
	}
}
