package multicluster_test

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/quartermaster-dev/quartermaster/kindcluster/kind"
	"github.com/quartermaster-dev/quartermaster/kindcluster/rig"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// TestKindPathDryRun runs the suite's kind path dry: the rig brought up
// with the suite's own options, then what the specs ask of it beyond
// allocating (a Secret rotated, an API server restarted), then the rig
// taken down, and checks every docker, kind and kubectl command it would
// issue against testdata/kind-dry-run.txt. Machines without Docker (these)
// can check no more of the kind path than this; the specs themselves run
// on kind only where `make e2e-multicluster PROVIDER=kind` finds Docker.
func TestKindPathDryRun(t *testing.T) {
	// The host address as the suite finds it by default: asked of Docker.
	t.Setenv(kind.HostAddressEnv, "")
	t.Setenv(kind.LinkListenEnv, "")
	top, err := rig.Load("testdata/topology.yaml")
	if err != nil {
		t.Fatal(err)
	}
	repo, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), "rig")
	dry := &kind.DryRun{}
	ctx := context.Background()
	opts := kindOptions(dir, repo, dry)
	// Whichever kubectl the machine has: bin/kubectl where it was built.
	opts.Kubectl = "kubectl"
	r, err := kind.Up(ctx, kindTopology(top), opts)
	if err != nil {
		t.Fatal(err)
	}
	var h rig.Handle = r
	if got := strings.Join(h.ClusterNames(), " "); got != "on-prem cloud" {
		t.Errorf("clusters %q, want the topology's", got)
	}
	if r.HostAddress != "172.18.0.1" {
		t.Errorf("host address %q, want the gateway docker network inspect answered", r.HostAddress)
	}
	// What the rotation and restart specs ask, in the order they run.
	before, err := os.ReadFile(filepath.Join(dir, "on-prem", "manifests", "40-policies.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := h.RotateSecrets(ctx, "on-prem"); err != nil {
		t.Fatal(err)
	}
	after, err := os.ReadFile(filepath.Join(dir, "on-prem", "manifests", "40-policies.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(before, after) {
		t.Error("rotation left on-prem's policies manifest (and its Secret) as it was")
	}
	if err := h.RestartAPIServer(ctx, "on-prem"); err != nil {
		t.Fatal(err)
	}
	if err := h.RotateSecrets(ctx, "edge"); err == nil || !strings.Contains(err.Error(), `no cluster "edge"`) {
		t.Errorf("rotation in an unknown cluster: %v", err)
	}
	if err := h.Stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Stop left %s (%v)", dir, err)
	}

	steps := dry.Steps()
	repl := strings.NewReplacer(dir, "$DIR", repo, "$REPO")
	var b strings.Builder
	for _, s := range steps {
		s = repl.Replace(s)
		// Every kubectl talks to a rig cluster, never the user's own.
		if strings.HasPrefix(s, "kubectl ") && !strings.HasPrefix(s, "kubectl --kubeconfig $DIR/") {
			t.Errorf("kubectl without the rig's kubeconfig: %s", s)
		}
		b.WriteString(s)
		b.WriteByte('\n')
	}
	for _, want := range []string{
		"docker network inspect kind --format '{{json .IPAM.Config}}'\n",
		"# link on-prem -> cloud: listen 172.18.0.1:29444, dialled as 172.18.0.1:29444 -> 127.0.0.1:28444, 3ms latency, 1ms jitter\n",
		"# update Secret default/qm-cloud on on-prem's API server",
		"docker restart --time 0 qm-on-prem-control-plane\n",
		"kind delete cluster --name qm-cloud",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("the dry run lacks %q", want)
		}
	}
	golden(t, "kind-dry-run.txt", []byte(b.String()))
}

// golden compares got with testdata/name, or rewrites it with -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (go test ./e2e/multicluster -run TestKindPathDryRun -update records it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs (go test ./e2e/multicluster -run TestKindPathDryRun -update re-records it; read the diff first):\n--- got\n%s", path, got)
	}
}
