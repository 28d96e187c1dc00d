package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/quartermaster-dev/quartermaster/kindcluster/kubetest"
)

var windowPolicies = filepath.Join("..", "..", "allocator", "forward", "testdata", "valid-window-policies.yaml")

func TestPoliciesAtAnInstant(t *testing.T) {
	code, out, errOut := runQM("policies", "--policies", windowPolicies, "--at", "2026-11-24T18:30:00+01:00", "--for", "30h", "--zone", "Europe/Paris")
	if code != 0 || errOut != "" {
		t.Fatalf("exit %d, stderr %q", code, errOut)
	}
	row := func(name string) []string {
		for _, l := range strings.Split(out, "\n") {
			if f := strings.Fields(l); len(f) > 6 && f[1] == name {
				return f
			}
		}
		t.Fatalf("no row for %s:\n%s", name, out)
		return nil
	}
	// NAMESPACE POLICY CLUSTER PRIORITY WEIGHT IN-FORCE NEXT-CHANGE WINDOW...
	for name, want := range map[string][2]string{
		"on-prem":           {"yes", "-"},
		"cloud-evening":     {"yes", "2026-11-24T23:00:00+01:00"},
		"cloud-maintenance": {"no", "2026-11-24T22:00:00+01:00"},
	} {
		if f := row(name); f[5] != want[0] || f[6] != want[1] {
			t.Errorf("%s: in force %s, next change %s; want %s, %s", name, f[5], f[6], want[0], want[1])
		}
	}
	for _, want := range []string{
		"policies at 2026-11-24T18:30:00+01:00",
		"2026-11-24T22:00:00+01:00  default: in force on-prem, cloud-evening, cloud-maintenance (was on-prem, cloud-evening)",
		"2026-11-25T06:00:00+01:00  default: in force on-prem (was on-prem, cloud-maintenance)",
		"2026-11-25T18:00:00+01:00  default: in force on-prem, cloud-evening (was on-prem)",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if strings.Contains(out, "2026-11-26T18:00") {
		t.Errorf("a change past --for was listed:\n%s", out)
	}
	// The same instant in UTC.
	if _, out, _ := runQM("policies", "--policies", windowPolicies, "--at", "2026-11-24T17:30:00Z"); !strings.Contains(out, "policies at 2026-11-24T17:30:00Z") || !strings.Contains(out, "2026-11-24T22:00:00Z") {
		t.Errorf("UTC output:\n%s", out)
	}
}

func TestPoliciesRefusals(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte(`apiVersion: multicluster.agones.dev/v1
kind: GameServerAllocationPolicy
metadata:
  name: late
  annotations: {quartermaster.dev/window-during: "weekdays 18:00-23:00 Europe/Pariss"}
spec: {priority: 1, weight: 1, connectionInfo: {clusterName: here}}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		code int
		says string
	}{
		{[]string{"--policies", bad}, 1, `default/late): metadata.annotations["quartermaster.dev/window-during"]: "weekdays 18:00-23:00 Europe/Pariss": unknown time zone`},
		{[]string{"--policies", windowPolicies, "--at", "tomorrow"}, 2, "--at:"},
		{[]string{"--policies", windowPolicies, "--zone", "Mars"}, 2, "--zone"},
		{[]string{"--policies", windowPolicies, "--for", "-1h"}, 2, "--for"},
		{[]string{"--policies", windowPolicies, "--kubeconfig", "x"}, 2, "not both"},
	} {
		code, _, errOut := runQM(append([]string{"policies"}, tc.args...)...)
		if code != tc.code || !strings.Contains(errOut, tc.says) {
			t.Errorf("qm policies %v: exit %d, stderr %q; want %d saying %q", tc.args, code, errOut, tc.code, tc.says)
		}
	}
}

// TestPoliciesFromAPIServer reads the policies from a real API server, as
// an allocator watching it would: a malformed window is named and exits 1,
// the rest are shown.
func TestPoliciesFromAPIServer(t *testing.T) {
	api := kubetest.Start(t, "qm-policies")
	c := api.Cluster
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	manifest := filepath.Join(t.TempDir(), "policies.yaml")
	if err := os.WriteFile(manifest, []byte(`apiVersion: multicluster.agones.dev/v1
kind: GameServerAllocationPolicy
metadata:
  name: evening
  namespace: default
  annotations: {quartermaster.dev/window-during: "weekdays 18:00-23:00 Europe/Paris"}
spec: {priority: 1, weight: 1, connectionInfo: {clusterName: cloud}}
---
apiVersion: multicluster.agones.dev/v1
kind: GameServerAllocationPolicy
metadata:
  name: typo
  namespace: default
  annotations: {quartermaster.dev/window-form: "2026-11-24T18:00:00Z"}
spec: {priority: 1, weight: 1, connectionInfo: {clusterName: here}}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	api.Apply(t, ctx, manifest)
	code, out, errOut := runQM("policies", "--kubeconfig", c.KubeconfigPath(), "--at", "2026-11-24T17:30:00Z")
	if code != 1 {
		t.Fatalf("exit %d, want 1 for the skipped policy\n%s%s", code, out, errOut)
	}
	if !strings.Contains(out, "evening") || !strings.Contains(out, "yes") || strings.Contains(out, "typo") {
		t.Errorf("stdout:\n%s", out)
	}
	if !strings.Contains(errOut, "skipped (an allocator does not use it): default/typo") || !strings.Contains(errOut, "quartermaster.dev/window-form") {
		t.Errorf("stderr: %s", errOut)
	}
}

// TestWindowServe is a user's setup: two `qm serve` processes over mTLS,
// the entry's --policies file edited to add a cloud policy whose window
// opens a few seconds later. Requests sent before the instant are served
// here, those sent after it by the cloud; the entry logs the change within
// a second and its /metrics counts two policies in force.
func TestWindowServe(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two qm serve processes")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	certsDir := filepath.Join(dir, "certs")
	var o, e bytes.Buffer
	if err := commands["certs"].run(ctx, []string{"--dir", certsDir, "--hosts", "localhost,127.0.0.1", "--clients", "caller,forwarder"}, &o, &e); err != nil {
		t.Fatalf("qm certs: %v\n%s", err, e.String())
	}
	secret, err := exec.CommandContext(ctx, "sh", filepath.Join("..", "..", "examples", "multicluster", "secret.sh"), certsDir, "forwarder", "to-cloud").Output()
	if err != nil {
		t.Fatalf("secret.sh: %v", err)
	}
	fleets := filepath.Join(dir, "fleets.yaml")
	if err := os.WriteFile(fleets, []byte("apiVersion: quartermaster.dev/v1alpha1\nkind: Fleets\nnodes: 2\nfleets:\n- {name: game, namespace: default, replicas: 200, labels: {game: shooter}}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	local := `apiVersion: multicluster.agones.dev/v1
kind: GameServerAllocationPolicy
metadata: {name: here, namespace: default, labels: {route: peak}}
spec: {priority: 1, weight: 1, connectionInfo: {clusterName: onprem}}
---
`
	policies := filepath.Join(dir, "policies.yaml")
	if err := os.WriteFile(policies, append([]byte(local), secret...), 0o600); err != nil {
		t.Fatal(err)
	}
	addr := map[string]string{"onprem": freePort(t), "cloud": freePort(t)}
	httpAddr := freePort(t)
	procs := map[string]*qmProcess{}
	for _, n := range []string{"cloud", "onprem"} {
		args := []string{"serve", "--addr", addr[n], "--http-addr", "", "--log-format", "json",
			"--tls-dir", filepath.Join(certsDir, "server"), "--client-ca-dir", filepath.Join(certsDir, "client-ca"),
			"--fleets", fleets, "--cluster-name", n, "--ready-file", filepath.Join(dir, n+"-ready.json")}
		if n == "onprem" {
			args = append(args, "--policies", policies, "--http-addr", httpAddr)
		}
		procs[n] = startQM(t, args...)
		waitReady(t, procs[n], filepath.Join(dir, n+"-ready.json"))
	}

	// The edit: the cloud, from a few seconds from now.
	opens := time.Now().Add(4 * time.Second).Truncate(time.Second)
	cloud := fmt.Sprintf(`apiVersion: multicluster.agones.dev/v1
kind: GameServerAllocationPolicy
metadata:
  name: to-cloud
  namespace: default
  labels: {route: peak}
  annotations: {quartermaster.dev/window-from: %q}
spec: {priority: 0, weight: 1, connectionInfo: {clusterName: cloud, allocationEndpoints: [%q], secretName: to-cloud}}
---
`, opens.Format(time.RFC3339), addr["cloud"])
	if err := os.WriteFile(policies, append([]byte(local+cloud), secret...), 0o600); err != nil {
		t.Fatal(err)
	}
	procs["onprem"].waitLog(t, 5*time.Second, "policies reloaded", func(m map[string]any) bool { return m["policies"] == float64(2) })
	if time.Now().After(opens) {
		t.Skip("the machine is too slow to read the edit before the window opens")
	}

	var before, after int
	// Paced, so that neither fleet of 200 runs out (a fleet that ran out
	// would send the request on to the other).
	for end := opens.Add(1500 * time.Millisecond); time.Now().Before(end); time.Sleep(40 * time.Millisecond) {
		sent := time.Now()
		var ao, ae bytes.Buffer
		err := commands["allocate"].run(ctx, []string{"--addr", addr["onprem"], "--certs-dir", certsDir, "--identity", "caller", "--policy-selector", "route=peak"}, &ao, &ae)
		out := ao.String() + ae.String()
		if err != nil {
			t.Fatalf("allocate: %v\n%s", err, out)
		}
		done := time.Now()
		var r mcOutput
		if err := json.Unmarshal([]byte(out), &r); err != nil {
			t.Fatalf("allocate output: %v\n%s", err, out)
		}
		switch {
		case done.Before(opens):
			before++
			if r.Source != "local" {
				t.Errorf("answered before the window opened by %q, want local", r.Source)
			}
		case !sent.Before(opens):
			after++
			if r.Source != addr["cloud"] {
				t.Errorf("sent %v after the window opened, answered by %q, want the cloud (%s)", sent.Sub(opens), r.Source, addr["cloud"])
			}
		}
	}
	if before == 0 || after == 0 {
		t.Fatalf("requests on either side of the edge: %d before, %d after", before, after)
	}
	line := procs["onprem"].waitLog(t, 2*time.Second, "multi-cluster policies in force", func(m map[string]any) bool { return m["entered"] == "to-cloud" })
	if at, err := time.Parse(time.RFC3339Nano, fmt.Sprint(line["time"])); err != nil || at.Sub(opens) > time.Second {
		t.Errorf("the change was logged at %v, %v after the window opened: want within a second", line["time"], at.Sub(opens))
	}
	resp, err := http.Get("http://" + httpAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if !strings.Contains(string(body), `qm_forward_policies_in_force{namespace="default"} 2`) {
		t.Errorf("/metrics lacks two policies in force:\n%s", grepLines(string(body), "qm_forward_policies"))
	}
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// TestServeRefusesUnusableKeyMaterial: qm serve --policies refuses at
// start a connection Secret whose tls.crt is not PEM, naming the Secret,
// the cluster that uses it and the field, instead of failing every
// request forwarded to that cluster.
func TestServeRefusesUnusableKeyMaterial(t *testing.T) {
	good, err := os.ReadFile(windowPolicies)
	if err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(t.TempDir(), "policies.yaml")
	if err := os.WriteFile(bad, []byte(strings.Replace(string(good), "-----BEGIN CERTIFICATE-----", "-----BEGIN CERTIFICATE", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(t.TempDir(), "state")
	code, _, errOut := runQM("serve", "--policies", bad, "--state-dir", state, "--addr", "127.0.0.1:0", "--http-addr", "", "--cluster-name", "on-prem")
	if want := `(Secret default/cloud-client, for cluster cloud): data["tls.crt"]: not PEM`; code == 0 || !strings.Contains(errOut, want) {
		t.Errorf("qm serve with an unusable tls.crt: exit %d, stderr:\n%s\nwant it refused, saying %q", code, errOut, want)
	}
}
