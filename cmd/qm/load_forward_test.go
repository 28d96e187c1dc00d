package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/quartermaster-dev/quartermaster/loadgen"
)

// TestLoadReleasesForwarded runs qm load with multi-cluster requests
// against the on-prem allocator of the README's three `qm serve
// --policies` processes. The fleets hold 22 servers and the load makes 80
// allocations, so it succeeds only if the sessions the cloud allocators
// answered are given back too: each Release carries the response's
// source, and on-prem forwards it there. At the end no allocator holds
// anything, and on-prem's metrics name the clusters that answered.
func TestLoadReleasesForwarded(t *testing.T) {
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
	names := []string{"onprem", "cloud-a", "cloud-b"}
	fixed := map[string]string{"onprem": "127.0.0.1:8443", "cloud-a": "127.0.0.1:8444", "cloud-b": "127.0.0.1:8445"}
	addr := map[string]string{}
	for _, n := range names {
		addr[n] = freePort(t)
	}
	httpAddr := freePort(t)
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
		fleets, h := "fleets-cloud.yaml", ""
		if n == "onprem" {
			fleets, h = "fleets-onprem.yaml", httpAddr
		}
		ready := filepath.Join(dir, n+"-ready.json")
		p := startQM(t, "serve", "--addr", addr[n], "--http-addr", h, "--log-format", "json",
			"--tls-dir", filepath.Join(certsDir, "server"), "--client-ca-dir", filepath.Join(certsDir, "client-ca"),
			"--fleets", filepath.Join(examples, fleets), "--policies", policies, "--cluster-name", n,
			"--forward-timeout", "2s", "--ready-file", ready)
		waitReady(t, p, ready)
	}

	// By hand: on-prem's two servers, then one from a cloud allocator,
	// given back through on-prem with qm release --source.
	var got [3]mcOutput
	for i := range got {
		out, err := runClient(ctx, "allocate", addr["onprem"], certsDir, "--identity", "caller", "--policy-selector", "route=burst")
		if err != nil {
			t.Fatalf("allocation %d: %v\n%s", i, err, out)
		}
		if err := json.Unmarshal([]byte(out), &got[i]); err != nil {
			t.Fatal(err)
		}
	}
	if got[0].Source != "local" || got[1].Source != "local" || (got[2].Source != addr["cloud-a"] && got[2].Source != addr["cloud-b"]) {
		t.Fatalf("sources %q, %q, %q: want local, local, a cloud allocator", got[0].Source, got[1].Source, got[2].Source)
	}
	if out, err := runClient(ctx, "release", addr["onprem"], certsDir, "--identity", "caller", "--name", got[2].GameServerName); err == nil {
		t.Fatalf("release without --source of a forwarded allocation succeeded:\n%s", out)
	}
	for _, g := range got {
		if out, err := runClient(ctx, "release", addr["onprem"], certsDir, "--identity", "caller", "--name", g.GameServerName, "--source", g.Source); err != nil {
			t.Fatalf("qm release --source %s: %v\n%s", g.Source, err, out)
		}
	}

	reqFile := filepath.Join(dir, "request.json")
	if err := os.WriteFile(reqFile, []byte(`{"multiClusterSetting": {"enabled": true, "policySelector": {"matchLabels": {"route": "burst"}}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "result.json")
	stdout, stderr, err := runLoadCmd(t, "--addr", addr["onprem"], "--certs-dir", certsDir, "--identity", "caller",
		"--request", reqFile, "--workers", "4", "--requests", "80", "--release", "--out", out)
	if err != nil {
		t.Fatalf("qm load: %v\n%s\n%s", err, stdout, stderr)
	}
	fh, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	res, err := loadgen.ReadResult(fh)
	if err != nil {
		t.Fatal(err)
	}
	r := res.Targets[0]
	t.Logf("sent %d, ok %d, released %d (%d failed), errors %v", r.Sent, r.OK, r.Released, r.ReleaseErrors, r.Errors)
	if r.OK != 80 || r.Released != 80 || r.ReleaseErrors != 0 {
		t.Errorf("ok %d, released %d, release errors %d: want 80, 80, 0", r.OK, r.Released, r.ReleaseErrors)
	}

	// Nothing is held anywhere: on-prem's own servers by the caller, the
	// cloud ones by the identity on-prem forwards with.
	for n, id := range map[string]string{"onprem": "caller", "cloud-a": "forwarder", "cloud-b": "forwarder"} {
		got, err := runClient(ctx, "list", addr[n], certsDir, "--identity", id)
		if err != nil {
			t.Fatalf("qm list on %s: %v\n%s", n, err, got)
		}
		if strings.Contains(got, `"gameServerName"`) {
			t.Errorf("%s still holds allocations for %s:\n%s", n, id, got)
		}
	}
	// On-prem counted each allocation under the cluster that made it.
	resp, err := http.Get("http://" + httpAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, src := range []string{"local", "cloud-a", "cloud-b"} {
		if !strings.Contains(string(body), `source="`+src+`"`) {
			t.Errorf("on-prem's metrics have no allocation with source %q", src)
		}
	}
	var lines []string
	for _, l := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(l, "qm_allocator_allocations_total{") || (strings.HasPrefix(l, "qm_allocator_admin_requests_total{") && strings.Contains(l, `method="Release"`)) {
			lines = append(lines, l)
		}
	}
	t.Logf("on-prem:\n%s", strings.Join(lines, "\n"))
}
