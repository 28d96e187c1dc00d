package kind

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	kindcluster "github.com/quartermaster-dev/quartermaster/kindcluster"
)

// TestManifestsOnAPIServer applies what the kind provider applies to a
// kind cluster (the repository's deploy/allocator.yaml as edited, the fleet
// agent, the fleets, the policies and Secrets) to a real kube-apiserver
// with our CRDs, as kubectl apply --server-side, and checks the fleet
// agent's RBAC by impersonating its ServiceAccount: it may do what `qm
// agent` does and nothing else. Docker is not needed; kind's own nodes are.
func TestManifestsOnAPIServer(t *testing.T) {
	c := kindcluster.NewForTest(t, kindcluster.Options{Name: "kind-manifests", EtcdUnsafeNoFsync: true})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	top := loadExample(t)
	l := testCerts(t, top)
	src, err := os.ReadFile("../../deploy/allocator.yaml")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for i, cl := range top.Spec.Clusters {
		files, err := Manifests(top, i, Options{HostAddress: "172.18.0.1"}, l, src)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			path := filepath.Join(dir, cl.Name+"-"+f.Name)
			if err := os.WriteFile(path, f.Data, 0o600); err != nil {
				t.Fatal(err)
			}
			// The first cluster's objects are created; the second's (the
			// same names) must be accepted as an update of them.
			args := []string{"apply", "--server-side", "-f", path}
			if i > 0 {
				args = append(args, "--dry-run=server")
			}
			if out, err := c.Kubectl(ctx, args...); err != nil {
				t.Fatalf("%s: %s: %v\n%s", cl.Name, f.Name, err, out)
			}
		}
	}

	out, err := c.Kubectl(ctx, "-n", allocatorNamespace, "get", "service", allocatorName, "-o", "jsonpath={.spec.type} {.spec.ports[0].nodePort}")
	if err != nil || string(out) != "NodePort 30443" {
		t.Errorf("allocator Service: %q, %v; want NodePort 30443", out, err)
	}
	agent := "system:serviceaccount:" + allocatorNamespace + ":" + agentName
	for _, tc := range []struct {
		verb, resource string
		want           string
	}{
		{"list", "fleets.agones.dev", "yes"},
		{"update", "fleets.agones.dev --subresource=status", "yes"},
		{"create", "gameservers.agones.dev", "yes"},
		{"update", "gameservers.agones.dev", "yes"},
		{"delete", "gameservers.agones.dev", "yes"},
		{"update", "fleets.agones.dev", "no"},
		{"get", "secrets", "no"},
		{"list", "gameserverallocationpolicies.multicluster.agones.dev", "no"},
	} {
		args := append([]string{"auth", "can-i", tc.verb}, strings.Fields(tc.resource)...)
		out, _ := c.Kubectl(ctx, append(args, "-n", top.Spec.Namespace, "--as", agent)...)
		if got := strings.TrimSpace(string(out)); got != tc.want {
			t.Errorf("fleet agent may %s %s: %q, want %q", tc.verb, tc.resource, got, tc.want)
		}
	}
}
