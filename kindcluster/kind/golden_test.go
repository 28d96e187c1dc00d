package kind

import (
	"bytes"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/quartermaster-dev/quartermaster/certs"
	"github.com/quartermaster-dev/quartermaster/kindcluster/rig"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

const example = "../../examples/rig-burst-to-cloud.yaml"

func loadExample(t *testing.T) *rig.Topology {
	t.Helper()
	top, err := rig.Load(example)
	if err != nil {
		t.Fatal(err)
	}
	return top
}

// testCerts makes a rig's certificates for the topology, as Up does.
func testCerts(t *testing.T, top *rig.Topology) certs.Layout {
	t.Helper()
	clients := []string{CallerIdentity}
	for _, c := range top.Spec.Clusters {
		clients = append(clients, rig.ForwarderIdentity(c.Name))
	}
	res, err := certs.Generate(certs.GenerateOptions{Dir: filepath.Join(t.TempDir(), "certs"), Hosts: []string{"localhost"},
		Clients: clients, Now: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	return res.Layout
}

// golden compares got with testdata/name, or rewrites it with -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -update to record it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs from the golden file (go test ./kindcluster/kind -update re-records it; read the diff first):\n--- got\n%s", path, got)
	}
}

// redactSecrets replaces every Secret's data (fresh keys each run) so the
// rest of a manifest can be compared byte for byte; it fails if a Secret
// has no data, which would be a broken Secret.
func redactSecrets(t *testing.T, manifest []byte) []byte {
	t.Helper()
	docs, err := decodeAll(manifest)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range docs {
		if d["kind"] != "Secret" {
			continue
		}
		data, _ := d["data"].(map[string]any)
		if len(data) == 0 {
			t.Errorf("Secret %v has no data", d["metadata"])
		}
		for k, v := range data {
			if s, _ := v.(string); s == "" {
				t.Errorf("Secret %v: %s is empty", d["metadata"], k)
			}
			data[k] = "REDACTED"
		}
	}
	out, err := marshalAll(docs)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestGoldenKindConfigs(t *testing.T) {
	top := loadExample(t)
	for i, c := range top.Spec.Clusters {
		got, err := ConfigYAML(top, i, Options{})
		if err != nil {
			t.Fatal(err)
		}
		golden(t, filepath.Join("burst-to-cloud", c.Name, "kind.yaml"), got)
	}
}

func TestGoldenManifests(t *testing.T) {
	top := loadExample(t)
	l := testCerts(t, top)
	src, err := os.ReadFile("testdata/allocator-in.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range top.Spec.Clusters {
		files, err := Manifests(top, i, Options{HostAddress: "172.18.0.1"}, l, src)
		if err != nil {
			t.Fatal(err)
		}
		var names []string
		for _, f := range files {
			names = append(names, f.Name)
			golden(t, filepath.Join("burst-to-cloud", c.Name, f.Name), redactSecrets(t, f.Data))
		}
		if got, want := strings.Join(names, " "), "allocator.yaml agent.yaml fleets.yaml policies.yaml"; got != want {
			t.Errorf("manifest files %q, want %q", got, want)
		}
	}
	if _, err := Manifests(top, 0, Options{}, l, src); err == nil || !strings.Contains(err.Error(), "no host address") {
		t.Errorf("Manifests without a host address: %v, want an error saying so", err)
	}
}
