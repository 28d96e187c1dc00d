package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/quartermaster-dev/quartermaster/allocator"
	"github.com/quartermaster-dev/quartermaster/fleetagent"
	"github.com/quartermaster-dev/quartermaster/kindcluster/kubetest"
)

// The agent starts what the allocator's Create makes only if both name the
// label alike (fleetagent keeps its own copy to stay free of the allocator).
func TestTemplateLabelAgrees(t *testing.T) {
	if fleetagent.TemplateLabel != allocator.TemplateLabel {
		t.Fatalf("fleetagent.TemplateLabel %q, allocator.TemplateLabel %q", fleetagent.TemplateLabel, allocator.TemplateLabel)
	}
}

// createTemplatesYAML is the templates the create tests serve: one of its
// own and one that takes the example Fleet's template (examples/fleet.yaml
// on Kubernetes, the same-named memory fleet otherwise).
const createTemplatesYAML = `
apiVersion: quartermaster.dev/v1alpha1
kind: GameServerTemplates
templates:
- name: private-match
  template:
    metadata: {labels: {mode: private}}
    spec:
      ports: [{name: game, containerPort: 7654}]
      template: {spec: {containers: [{name: g, image: example/game, args: ["--admins={{.AccessList}}"]}]}}
- name: simple
  fleet: simple-game
`

// One instance per user, as seed 004: maxAllocations 1 for everyone.
const createLimitsYAML = `
apiVersion: quartermaster.dev/v1alpha1
kind: AllocatorLimits
default: {maxAllocations: 1, templates: ["*"]}
`

// createRig is a `qm serve` process with the create tests' templates and
// limits, and client certificates for alice and bob.
type createRig struct {
	addr, certs string
	serve       *qmProcess
}

func startCreateRig(t *testing.T, ctx context.Context, serveArgs ...string) *createRig {
	t.Helper()
	dir := t.TempDir()
	r := &createRig{certs: filepath.Join(dir, "certs"), addr: freePort(t)}
	var o, e bytes.Buffer
	if err := commands["certs"].run(ctx, []string{"--dir", r.certs, "--hosts", "localhost,127.0.0.1", "--clients", "alice,bob"}, &o, &e); err != nil {
		t.Fatalf("qm certs: %v\n%s", err, e.String())
	}
	templates, limits := filepath.Join(dir, "templates.yaml"), filepath.Join(dir, "limits.yaml")
	for path, s := range map[string]string{templates: createTemplatesYAML, limits: createLimitsYAML} {
		if err := os.WriteFile(path, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	ready := filepath.Join(dir, "ready.json")
	args := append([]string{"serve", "--addr", r.addr, "--http-addr", "", "--log-format", "json",
		"--tls-dir", filepath.Join(r.certs, "server"), "--client-ca-dir", filepath.Join(r.certs, "client-ca"),
		"--templates", templates, "--limits", limits, "--ready-file", ready}, serveArgs...)
	r.serve = startQM(t, args...)
	waitReady(t, r.serve, ready)
	return r
}

// qm runs a client command as identity; out is stdout, or stderr on failure.
func (r *createRig) qm(ctx context.Context, identity, name string, args ...string) (string, error) {
	return runClient(ctx, name, r.addr, r.certs, append([]string{"--identity", identity}, args...)...)
}

// createOutput is the part of qm create's (and destroy's) JSON the tests read.
type createOutput struct {
	Allocation struct {
		GameServerName, Namespace, Owner, Template, NodeName, Address string
		Ports                                                         []struct {
			Name string
			Port int
		}
	}
}

func (r *createRig) create(t *testing.T, ctx context.Context, identity string, args ...string) createOutput {
	t.Helper()
	out, err := r.qm(ctx, identity, "create", args...)
	if err != nil {
		t.Fatalf("qm create as %s %v: %v\n%s", identity, args, err, out)
	}
	var c createOutput
	if err := json.Unmarshal([]byte(out), &c); err != nil || c.Allocation.GameServerName == "" || c.Allocation.Owner != identity ||
		c.Allocation.NodeName == "" || c.Allocation.Address == "" || len(c.Allocation.Ports) == 0 || c.Allocation.Ports[0].Port == 0 {
		t.Fatalf("qm create as %s answered %v:\n%s", identity, err, out)
	}
	return c
}

// listed is what qm list says identity holds, as name:template.
func (r *createRig) listed(t *testing.T, ctx context.Context, identity string) []string {
	t.Helper()
	out, err := r.qm(ctx, identity, "list")
	if err != nil {
		t.Fatalf("qm list as %s: %v\n%s", identity, err, out)
	}
	var l struct {
		Allocations []struct{ GameServerName, Template string }
	}
	if err := json.Unmarshal([]byte(out), &l); err != nil {
		t.Fatalf("qm list output: %v\n%s", err, out)
	}
	var s []string
	for _, a := range l.Allocations {
		s = append(s, a.GameServerName+":"+a.Template)
	}
	return s
}

// exercise runs what both backends must do: create, one per user, list,
// ownership, destroy. It returns bob's server, still held.
func (r *createRig) exercise(t *testing.T, ctx context.Context, onGone func(name string)) string {
	t.Helper()
	a := r.create(t, ctx, "alice", "--template", "private-match")
	if a.Allocation.Template != "private-match" || a.Allocation.Ports[0].Name != "game" || !strings.HasPrefix(a.Allocation.GameServerName, "private-match-") {
		t.Fatalf("alice's server %+v", a.Allocation)
	}
	out, err := r.qm(ctx, "alice", "create", "--template", "private-match")
	if err == nil || !strings.Contains(out, "ResourceExhausted") || !strings.Contains(out, "default/"+a.Allocation.GameServerName) {
		t.Fatalf("second create: %v\n%s", err, out)
	}
	b := r.create(t, ctx, "bob", "--template", "simple", "--name", "bobs-server")
	if b.Allocation.GameServerName != "bobs-server" || b.Allocation.Template != "simple" {
		t.Fatalf("bob's server %+v", b.Allocation)
	}
	if got := r.listed(t, ctx, "bob"); len(got) != 1 || got[0] != "bobs-server:simple" {
		t.Fatalf("bob lists %v", got)
	}
	// Bob cannot destroy alice's server, nor learn that it exists.
	out, err = r.qm(ctx, "bob", "destroy", "--name", a.Allocation.GameServerName)
	if err == nil || !strings.Contains(out, "NotFound") {
		t.Fatalf("bob destroying alice's: %v\n%s", err, out)
	}
	if got := r.listed(t, ctx, "alice"); len(got) != 1 || got[0] != a.Allocation.GameServerName+":private-match" {
		t.Fatalf("alice lists %v after bob's attempt", got)
	}
	if out, err := r.qm(ctx, "alice", "destroy", "--name", a.Allocation.GameServerName); err != nil || !strings.Contains(out, a.Allocation.GameServerName) {
		t.Fatalf("alice's destroy: %v\n%s", err, out)
	}
	onGone(a.Allocation.GameServerName)
	if got := r.listed(t, ctx, "alice"); len(got) != 0 {
		t.Fatalf("alice lists %v after destroying hers", got)
	}
	return b.Allocation.GameServerName
}

// TestCreateMemory: qm create, list and destroy against a `qm serve`
// process on the memory backend, over mTLS.
func TestCreateMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a qm serve process")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	r := startCreateRig(t, ctx)
	r.exercise(t, ctx, func(string) {})
	// REST answers the same.
	out, err := r.qm(ctx, "alice", "create", "--rest", "--template", "private-match", "--name", "over-rest")
	if err != nil || !strings.Contains(out, `"gameServerName": "over-rest"`) {
		t.Fatalf("create over REST: %v\n%s", err, out)
	}
}

// TestCreateKubernetes: the same against `qm serve --backend kubernetes`
// on a real API server, with `qm agent` starting the servers; then, with
// the agent stopped, a Create that cannot become Ready leaves nothing
// behind on the API server.
func TestCreateKubernetes(t *testing.T) {
	api := kubetest.Start(t, "qm-create")
	c := api.Cluster
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	kubeconfig := c.KubeconfigPath()
	api.Apply(t, ctx, exampleFleet)
	agent := startQM(t, "agent", "--kubeconfig", kubeconfig, "--startup", "100ms", "--interval", "50ms", "--session", "0")
	r := startCreateRig(t, ctx, "--backend", "kubernetes", "--kubeconfig", kubeconfig)

	onServer := func(name string) string {
		out, err := c.Kubectl(ctx, "get", "gameserver", name, "-n", "default", "-o",
			`jsonpath={.status.state} {.metadata.labels.quartermaster\.dev/template} {.metadata.annotations.quartermaster\.dev/owner} {.metadata.annotations.quartermaster\.dev/creating}|{.metadata.annotations.quartermaster\.dev/access-list}`)
		if err != nil {
			return "error: " + strings.TrimSpace(string(out))
		}
		return string(out)
	}
	bobs := r.exercise(t, ctx, func(name string) {
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			if s := onServer(name); strings.Contains(s, "NotFound") {
				return
			} else if time.Now().After(deadline) {
				t.Fatalf("destroyed %s is still on the API server: %s", name, s)
			}
		}
	})
	if s := onServer(bobs); s != `Allocated simple bob |["bob"]` {
		t.Fatalf("bob's server on the API server: %q", s)
	}

	// The agent stops: nothing starts any more. Alice's Create runs into
	// its deadline, is told so, and her server is gone from the API server.
	_ = agent.cmd.Process.Kill()
	<-agent.done
	start := time.Now()
	out, err := r.qm(ctx, "alice", "create", "--template", "private-match", "--name", "never-ready", "--timeout", "3s")
	if err == nil || !strings.Contains(out, "DeadlineExceeded") || !strings.Contains(out, "it was deleted, nothing is left behind") {
		t.Fatalf("create without an agent: %v\n%s", err, out)
	}
	if d := time.Since(start); d > 4*time.Second {
		t.Errorf("create took %v with a 3s deadline", d)
	}
	if s := onServer("never-ready"); !strings.Contains(s, "NotFound") {
		t.Fatalf("never-ready is on the API server: %s", s)
	}
	out2, err := c.Kubectl(ctx, "get", "gameservers", "-n", "default", "-l", "quartermaster.dev/template", "-o", "jsonpath={.items[*].metadata.name}")
	if err != nil || strings.TrimSpace(string(out2)) != bobs {
		t.Fatalf("created servers left on the API server: %q (%v)", out2, err)
	}
}
