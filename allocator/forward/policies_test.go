package forward

import (
	"bytes"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/quartermaster-dev/quartermaster/core"
)

func TestLoadValidPolicies(t *testing.T) {
	set, err := LoadPolicies("testdata/valid-policies.yaml")
	if err != nil {
		t.Fatal(err)
	}
	got := set.Policies("default")
	if len(got) != 3 {
		t.Fatalf("got %d policies in default, want 3: %+v", len(got), got)
	}
	want := core.Policy{
		Name: "cloud-a", Priority: 2, Weight: 300,
		Labels: map[string]string{"route": "burst"},
		Connection: core.ConnectionInfo{
			ClusterName: "cloud-a",
			Endpoints:   []string{"cloud-a.example.com", "10.0.0.7:8443"},
			SecretName:  "cloud-a-client", Namespace: "games",
		},
	}
	if !reflect.DeepEqual(got[1], want) {
		t.Errorf("policy 2:\n got %+v\nwant %+v", got[1], want)
	}
	if got[0].Name != "on-prem" || !got[0].Connection.IsLocal() || got[2].Name != "cloud-b" {
		t.Errorf("order or local entry wrong: %+v", got)
	}
	a, ok := set.Secret("default", "cloud-a-client")
	isPEM := func(b []byte, kind string) bool { return strings.HasPrefix(string(b), "-----BEGIN "+kind+"-----\n") }
	if !ok || !isPEM(a.Data["tls.crt"], "CERTIFICATE") || !isPEM(a.Data["ca.crt"], "CERTIFICATE") || a.Version == "" {
		t.Errorf("Secret cloud-a-client = %+v, %v", a, ok)
	}
	b, ok := set.Secret("default", "cloud-b-client")
	if !ok || !isPEM(b.Data["tls.key"], "PRIVATE KEY") {
		t.Errorf("Secret from stringData = %+v, %v", b, ok)
	}
	if a.Version == b.Version {
		t.Errorf("different data, the same version %q", a.Version)
	}
	if _, ok := set.Secret("other", "cloud-a-client"); ok {
		t.Error("a Secret is found in a namespace it is not in")
	}
	if n := len(set.Policies("games")); n != 0 {
		t.Errorf("policies are read from the connection's namespace: %d", n)
	}
}

func TestLoadPolicyDirectory(t *testing.T) {
	set, err := LoadPolicies("testdata/valid-dir")
	if err != nil {
		t.Fatal(err)
	}
	ps := set.Policies("default")
	if len(ps) != 2 || ps[0].Name != "here" || ps[1].Name != "there" {
		t.Fatalf("policies = %+v", ps)
	}
	if _, ok := set.Secret("default", "there"); !ok {
		t.Error("the JSON file's Secret is missing")
	}
}

func TestInvalidPolicies(t *testing.T) {
	// Each error must name the file, the object and what is wrong.
	want := map[string][]string{
		"invalid-unknown-field.yaml":     {"GameServerAllocationPolicy \"typo\"", `unknown field "wieght"`},
		"invalid-endpoint.yaml":          {"default/scheme", "allocationEndpoints[0]", "no scheme"},
		"invalid-negative-priority.yaml": {"default/neg", "spec.priority", "negative"},
		"invalid-no-secret-name.yaml":    {"default/nosecret", "spec.connectionInfo.secretName"},
		"invalid-server-ca.yaml":         {"default/badca", "serverCa", "no PEM"},
		"invalid-kind.yaml":              {"document 1", `kind "Fleet"`},
		"invalid-duplicate.yaml":         {"document 2", "default/twice", "already defined"},
		"invalid-no-cluster-name.yaml":   {"default/anon", "clusterName"},
		"invalid-yaml.yaml":              {"invalid-yaml.yaml", "YAML"},
		"invalid-secret-crt.yaml":        {"document 2 (Secret default/to-cloud, for cluster cloud)", `data["tls.crt"]: not PEM`},
		"invalid-secret-pair.yaml":       {"(Secret default/to-cloud, for cluster cloud)", `data["tls.crt"] and data["tls.key"]`, "does not match"},
		"invalid-secret-ca.yaml":         {"(Secret default/to-cloud, for cluster cloud)", `data["ca.crt"]: holds no PEM certificate`},
		"invalid-window.yaml": {"default/late", `metadata.annotations["quartermaster.dev/window-during"]`, "DAYS HH:MM-HH:MM ZONE",
			`metadata.annotations["quartermaster.dev/window-untill"]: unknown window annotation`},
	}
	files, _ := filepath.Glob("testdata/invalid-*.yaml")
	if len(files) != len(want) {
		t.Errorf("%d invalid fixtures, %d expectations", len(files), len(want))
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			_, err := LoadPolicies(f)
			if err == nil {
				t.Fatal("loaded without error")
			}
			for _, w := range append(want[filepath.Base(f)], f) {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not say %q", err, w)
				}
			}
		})
	}
}

func TestEndpoint(t *testing.T) {
	good := map[string]string{
		"allocator.example.com":      "allocator.example.com:443",
		"allocator.example.com:8443": "allocator.example.com:8443",
		"10.1.2.3":                   "10.1.2.3:443",
		"[::1]:9000":                 "[::1]:9000",
		"localhost:1":                "localhost:1",
	}
	for in, want := range good {
		if got, err := Endpoint(in); err != nil || got != want {
			t.Errorf("Endpoint(%q) = %q, %v; want %q", in, got, err, want)
		}
	}
	for _, bad := range []string{"", ":443", "host:0", "host:70000", "host:https", "::1", "https://host", "host/path", "a b", "bad_host!:80", "host..com"} {
		if got, err := Endpoint(bad); err == nil {
			t.Errorf("Endpoint(%q) = %q, want an error", bad, got)
		}
	}
}

func TestPoliciesFileReload(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "policies.yaml")
	write := func(s string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(s), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	policy := func(name string) string {
		return "apiVersion: multicluster.agones.dev/v1\nkind: GameServerAllocationPolicy\nmetadata: {name: " + name +
			"}\nspec: {priority: 1, weight: 1, connectionInfo: {clusterName: " + name + "}}\n"
	}
	write(policy("first"))
	f, err := OpenPoliciesFile(path)
	if err != nil {
		t.Fatal(err)
	}
	store := NewStore(f.Set)
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, nil))

	if f.Reload(log, store.Replace) {
		t.Error("an unchanged file was applied again")
	}
	write(policy("second"))
	if !f.Reload(log, store.Replace) {
		t.Fatal("a changed file was not applied")
	}
	if ps := store.Policies("default"); len(ps) != 1 || ps[0].Name != "second" {
		t.Fatalf("after reload: %+v", ps)
	}
	write(policy("third") + "bogus: 1\n")
	if f.Reload(log, store.Replace) {
		t.Error("an invalid file was applied")
	}
	if ps := store.Policies("default"); len(ps) != 1 || ps[0].Name != "second" {
		t.Errorf("an invalid file replaced the policies in force: %+v", ps)
	}
	if !strings.Contains(logs.String(), "policies invalid") || !strings.Contains(logs.String(), "bogus") {
		t.Errorf("the invalid file was not logged with its reason: %s", logs.String())
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	if f.Reload(log, store.Replace) || len(store.Policies("default")) != 1 {
		t.Error("a removed file changed the policies in force")
	}
}

// A re-read whose connection Secret's key material cannot be used keeps
// the Set in force (its Secret included) and logs the Secret and field.
func TestPoliciesFileReloadBadKeyMaterial(t *testing.T) {
	good, err := os.ReadFile("testdata/valid-window-policies.yaml")
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "policies.yaml")
	if err := os.WriteFile(path, good, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := OpenPoliciesFile(path)
	if err != nil {
		t.Fatal(err)
	}
	store := NewStore(f.Set)
	before, ok := store.Secret("default", "cloud-client")
	if !ok {
		t.Fatal("the fixture's Secret cloud-client is missing")
	}
	bad := strings.Replace(string(good), "-----BEGIN CERTIFICATE-----", "-----BEGIN CERTIFICATE----", 1)
	if bad == string(good) {
		t.Fatal("the fixture has no certificate to break")
	}
	if err := os.WriteFile(path, []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	if f.Reload(slog.New(slog.NewTextHandler(&logs, nil)), store.Replace) {
		t.Error("a file with an unusable tls.crt was applied")
	}
	if after, _ := store.Secret("default", "cloud-client"); after.Version != before.Version {
		t.Error("the Secret in force changed")
	}
	for _, want := range []string{"policies invalid; keeping the policies in force", "Secret default/cloud-client, for cluster cloud", `data[\"tls.crt\"]: not PEM`} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("the log does not say %q:\n%s", want, logs.String())
		}
	}
}
