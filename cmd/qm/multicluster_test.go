package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/quartermaster-dev/quartermaster/allocator/forward/kubesource"
	"github.com/quartermaster-dev/quartermaster/certs"
	"github.com/quartermaster-dev/quartermaster/kindcluster"
	"github.com/quartermaster-dev/quartermaster/kindcluster/kubetest"
)

// mcOutput is the part of `qm allocate`'s JSON a multi-cluster test reads.
type mcOutput struct {
	GameServerName string `json:"gameServerName"`
	Source         string `json:"source"`
}

// freePort returns a loopback address nothing listens on (yet).
func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// waitReady waits for a --ready-file and returns the gRPC address in it.
func waitReady(t *testing.T, p *qmProcess, path string) string {
	t.Helper()
	var addrs map[string]string
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if b, err := os.ReadFile(path); err == nil && json.Unmarshal(b, &addrs) == nil {
			return addrs["grpc"]
		}
		select {
		case err := <-p.exited:
			p.exited <- err
			t.Fatalf("qm serve exited: %v\n%s", err, p.stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("qm serve did not start:\n%s", p.stderr.String())
		}
	}
}

// TestMultiClusterExample runs the README's multi-cluster section: three
// `qm serve --policies` processes (memory backend) with the example's
// policies, fleets and a Secret made by examples/multicluster/secret.sh,
// and `qm allocate --policy-selector` against the on-prem one. On-prem
// fills first, then requests go to the cloud allocators (checked on their
// side with `qm list`), a selector that matches nothing is refused naming
// the namespace, and a cloud allocator going down costs nothing but
// itself: the other one serves.
func TestMultiClusterExample(t *testing.T) {
	if testing.Short() {
		t.Skip("starts three qm serve processes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	certsDir := filepath.Join(dir, "certs")
	var o, e bytes.Buffer
	if err := commands["certs"].run(ctx, []string{"--dir", certsDir, "--hosts", "localhost,127.0.0.1", "--clients", "caller,forwarder"}, &o, &e); err != nil {
		t.Fatalf("qm certs: %v\n%s", err, e.String())
	}
	examples := filepath.Join("..", "..", "examples", "multicluster")
	secret, err := exec.CommandContext(ctx, "sh", filepath.Join(examples, "secret.sh"), certsDir, "forwarder", "to-cloud").Output()
	if err != nil {
		t.Fatalf("secret.sh: %v", err)
	}

	// The example's fixed ports, moved to free ones so the test can run
	// beside anything else.
	names := []string{"onprem", "cloud-a", "cloud-b"}
	fixed := map[string]string{"onprem": "127.0.0.1:8443", "cloud-a": "127.0.0.1:8444", "cloud-b": "127.0.0.1:8445"}
	addr := map[string]string{}
	for _, n := range names {
		addr[n] = freePort(t)
	}
	procs := map[string]*qmProcess{}
	for _, n := range names {
		b, err := os.ReadFile(filepath.Join(examples, n+".yaml"))
		if err != nil {
			t.Fatal(err)
		}
		s := string(b)
		for _, m := range names {
			s = strings.ReplaceAll(s, fixed[m], addr[m])
		}
		policies := filepath.Join(dir, n+"-policies.yaml")
		if err := os.WriteFile(policies, append([]byte(s), secret...), 0o600); err != nil {
			t.Fatal(err)
		}
		fleets := "fleets-cloud.yaml"
		if n == "onprem" {
			fleets = "fleets-onprem.yaml"
		}
		ready := filepath.Join(dir, n+"-ready.json")
		procs[n] = startQM(t, "serve", "--addr", addr[n], "--http-addr", "", "--log-format", "json",
			"--tls-dir", filepath.Join(certsDir, "server"), "--client-ca-dir", filepath.Join(certsDir, "client-ca"),
			"--fleets", filepath.Join(examples, fleets), "--policies", policies, "--cluster-name", n,
			"--forward-timeout", "2s", "--ready-file", ready)
		if got := waitReady(t, procs[n], ready); got != addr[n] {
			t.Fatalf("%s listens on %s, want %s", n, got, addr[n])
		}
	}
	allocate := func(args ...string) (mcOutput, string, error) {
		out, err := runClient(ctx, "allocate", addr["onprem"], certsDir, append([]string{"--identity", "caller"}, args...)...)
		var r mcOutput
		if err == nil {
			if jerr := json.Unmarshal([]byte(out), &r); jerr != nil {
				t.Fatalf("allocate output: %v\n%s", jerr, out)
			}
		}
		return r, out, err
	}

	// On-prem's two servers first, then the cloud.
	bySource := map[string][]string{}
	for i := range 10 {
		r, out, err := allocate("--policy-selector", "route=burst")
		if err != nil {
			t.Fatalf("allocation %d: %v\n%s", i, err, out)
		}
		want := "local"
		if i >= 2 {
			want = "cloud"
		}
		switch {
		case want == "local" && r.Source != "local":
			t.Fatalf("allocation %d came from %q, want local (on-prem has servers left)", i, r.Source)
		case want == "cloud" && r.Source != addr["cloud-a"] && r.Source != addr["cloud-b"]:
			t.Fatalf("allocation %d came from %q, want a cloud allocator (%s or %s)", i, r.Source, addr["cloud-a"], addr["cloud-b"])
		}
		bySource[r.Source] = append(bySource[r.Source], r.GameServerName)
	}
	// The cloud allocators hold what they answered, owned by the identity
	// the forwarder presented.
	for _, n := range []string{"cloud-a", "cloud-b"} {
		out, err := runClient(ctx, "list", addr[n], certsDir, "--identity", "forwarder")
		if err != nil {
			t.Fatalf("qm list on %s: %v\n%s", n, err, out)
		}
		for _, name := range bySource[addr[n]] {
			if !strings.Contains(out, name) {
				t.Errorf("%s does not list %s, which it answered:\n%s", n, name, out)
			}
		}
		if got, want := strings.Count(out, `"gameServerName"`), len(bySource[addr[n]]); got != want {
			t.Errorf("%s lists %d allocations, answered %d:\n%s", n, got, want, out)
		}
	}

	// A selector no policy matches: InvalidArgument naming it.
	if _, out, err := allocate("--policy-selector", "route=nowhere"); err == nil ||
		!strings.Contains(out, `namespace "default"`) || !strings.Contains(out, "route=nowhere") || !strings.Contains(out, "InvalidArgument") {
		t.Fatalf("unmatched selector: %v\n%s", err, out)
	}

	// cloud-a goes down: requests still succeed, from cloud-b.
	if err := procs["cloud-a"].cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = procs["cloud-a"].wait(t, 10*time.Second)
	// cloud-a is tried first for three requests in four (weight 300:100);
	// one try is enough to open its breaker (3 failed rounds), after which
	// it is skipped.
	opened := func() bool {
		for _, m := range procs["onprem"].logLines() {
			if m["msg"] == "forwarding breaker changed state" && m["endpoint"] == addr["cloud-a"] && m["to"] == "open" {
				return true
			}
		}
		return false
	}
	for i := 0; i < 20 && !opened(); i++ {
		r, out, err := allocate("--policy-selector", "route=burst")
		if err != nil {
			t.Fatalf("with cloud-a down, allocation %d: %v\n%s", i, err, out)
		}
		if r.Source != addr["cloud-b"] {
			t.Fatalf("with cloud-a down, allocation %d came from %q, want cloud-b %s", i, r.Source, addr["cloud-b"])
		}
	}
	procs["onprem"].waitLog(t, 5*time.Second, "forwarding breaker changed state", func(m map[string]any) bool {
		return m["endpoint"] == addr["cloud-a"] && m["to"] == "open"
	})
	// With the breaker open, a request skips cloud-a without waiting.
	start := time.Now()
	if r, out, err := allocate("--policy-selector", "route=burst"); err != nil || r.Source != addr["cloud-b"] {
		t.Fatalf("with cloud-a's breaker open: %v %q\n%s", err, r.Source, out)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Errorf("with cloud-a's breaker open a request took %v, as long as a forward timeout", d)
	}
}

// TestMultiClusterKubernetes forwards between two `qm serve --backend
// kubernetes` processes, each on its own real API server, with the
// policies and the connection Secret as objects there (no --policies
// file): cluster a allocates locally first; an edit of its policies with
// the API moves the next requests to cluster b, without a restart. Each
// outcome is checked on the GameServer objects of the cluster that
// answered.
func TestMultiClusterKubernetes(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two API servers")
	}
	apiA, apiB := kubetest.Start(t, "mc-a"), kubetest.Start(t, "mc-b")
	ca, cb := apiA.Cluster, apiB.Cluster
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir := t.TempDir()
	certsDir := filepath.Join(dir, "certs")
	var o, e bytes.Buffer
	if err := commands["certs"].run(ctx, []string{"--dir", certsDir, "--hosts", "localhost,127.0.0.1", "--clients", "caller,forwarder"}, &o, &e); err != nil {
		t.Fatalf("qm certs: %v\n%s", err, e.String())
	}
	addrA, addrB := freePort(t), freePort(t)

	policyA := func(name, cluster string, priority int64, endpoint string) *unstructured.Unstructured {
		info := map[string]any{"clusterName": cluster}
		if endpoint != "" {
			info["allocationEndpoints"] = []any{endpoint}
			info["secretName"] = "to-b"
		}
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "multicluster.agones.dev/v1", "kind": "GameServerAllocationPolicy",
			"metadata": map[string]any{"name": name, "namespace": "default", "labels": map[string]any{"route": "burst"}},
			"spec":     map[string]any{"priority": priority, "weight": int64(100), "connectionInfo": info},
		}}
	}
	for _, x := range []struct {
		api *kubetest.API
		u   *unstructured.Unstructured
	}{
		{apiA, policyA("a", "a", 1, "")},
		{apiA, policyA("b", "b", 2, addrB)},
		{apiB, policyA("b", "b", 1, "")},
	} {
		if _, err := x.api.Dynamic.Resource(kubesource.PoliciesResource).Namespace("default").Create(ctx, x.u, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	l := certs.Layout{Dir: certsDir}
	data := map[string][]byte{}
	for key, path := range map[string]string{"tls.crt": l.ClientCert("forwarder"), "tls.key": l.ClientKey("forwarder"), "ca.crt": l.CACert()} {
		var err error
		if data[key], err = os.ReadFile(path); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := apiA.Core.CoreV1().Secrets("default").Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "to-b"}, Data: data}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	runCtx, stop := context.WithCancel(ctx)
	exited := make(chan error, 2)
	var agentErr syncBuf
	for _, api := range []*kubetest.API{apiA, apiB} {
		api.Apply(t, ctx, exampleFleet)
		go func() {
			exited <- commands["agent"].run(runCtx, []string{"--kubeconfig", api.Cluster.KubeconfigPath(), "--startup", "100ms",
				"--interval", "100ms", "--session", "0"}, &bytes.Buffer{}, &agentErr)
		}()
	}
	defer func() {
		stop()
		for range 2 {
			if err := <-exited; err != nil {
				t.Errorf("qm agent ended with %v\n%s", err, agentErr.String())
			}
		}
	}()
	serve := func(name string, c *kindcluster.Cluster, addr string) *qmProcess {
		ready := filepath.Join(dir, name+"-ready.json")
		p := startQM(t, "serve", "--backend", "kubernetes", "--kubeconfig", c.KubeconfigPath(),
			"--addr", addr, "--http-addr", "", "--log-format", "json", "--cluster-name", name,
			"--tls-dir", filepath.Join(certsDir, "server"), "--client-ca-dir", filepath.Join(certsDir, "client-ca"),
			"--forward-timeout", "5s", "--forward-own-keys", "--ready-file", ready)
		waitReady(t, p, ready)
		return p
	}
	procA := serve("a", ca, addrA)
	serve("b", cb, addrB)
	procA.waitLog(t, 30*time.Second, "multi-cluster policies listed from the API server", nil)

	allocate := func() (mcOutput, string, error) {
		out, err := runClient(ctx, "allocate", addrA, certsDir, "--identity", "caller",
			"--policy-selector", "route=burst", "--selector", "agones.dev/fleet=simple-game")
		var r mcOutput
		if err == nil {
			if jerr := json.Unmarshal([]byte(out), &r); jerr != nil {
				t.Fatalf("allocate output: %v\n%s", jerr, out)
			}
		}
		return r, out, err
	}
	onAPIServer := func(c *kindcluster.Cluster, name, owner string) {
		t.Helper()
		out, err := c.Kubectl(ctx, "get", "gameserver", name, "-n", "default", "-o",
			`jsonpath={.status.state} {.metadata.annotations.quartermaster\.dev/owner}`)
		if err != nil || string(out) != "Allocated "+owner {
			t.Fatalf("gameserver %s on %s: %v %q, want Allocated by %s", name, c.Name(), err, out, owner)
		}
	}
	// The agents need a moment to make the servers Ready, and b's may be
	// Ready (and so answer, as priority 2) before a's: that is burst to
	// cloud working. Once a has a Ready server, a answers.
	var r mcOutput
	var err error
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		var out string
		r, out, err = allocate()
		if err == nil && r.Source == "local" {
			break
		}
		if err == nil && r.Source == addrB {
			onAPIServer(cb, r.GameServerName, "forwarder")
		} else if err == nil {
			t.Fatalf("allocation came from %q, want local or %s", r.Source, addrB)
		}
		if time.Now().After(deadline) {
			t.Fatalf("no allocation on a within 30s: %v (last source %q)\n%s\n%s", err, r.Source, out, procA.stderr.String())
		}
	}
	onAPIServer(ca, r.GameServerName, "caller")

	// b first from now on: a's local policy drops below it.
	policiesA := apiA.Dynamic.Resource(kubesource.PoliciesResource).Namespace("default")
	u, err := policiesA.Get(ctx, "a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := unstructured.SetNestedField(u.Object, int64(3), "spec", "priority"); err != nil {
		t.Fatal(err)
	}
	if _, err := policiesA.Update(ctx, u, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		r, out, err := allocate()
		if err != nil {
			t.Fatalf("allocate after the edit: %v\n%s", err, out)
		}
		if r.Source == addrB {
			// Forwarded: allocated on b's API server, by the identity of
			// the Secret's certificate, and not on a's.
			onAPIServer(cb, r.GameServerName, "forwarder")
			if _, err := ca.Kubectl(ctx, "get", "gameserver", r.GameServerName, "-n", "default"); err == nil {
				t.Fatalf("gameserver %s answered by b also exists on a", r.GameServerName)
			}
			// --forward-own-keys: the caller sent no key, a's forwarder
			// gave the request one, and it landed on b's server.
			out, err := cb.Kubectl(ctx, "get", "gameserver", r.GameServerName, "-n", "default", "-o",
				`jsonpath={.metadata.annotations.quartermaster\.dev/allocation-key}`)
			if err != nil || len(out) == 0 {
				t.Fatalf("gameserver %s on b carries no idempotency key with --forward-own-keys: %v %q", r.GameServerName, err, out)
			}
			break
		}
		onAPIServer(ca, r.GameServerName, "caller")
		if time.Now().After(deadline) {
			t.Fatalf("the policy edit was not applied within 20s; last source %q", r.Source)
		}
	}
}
