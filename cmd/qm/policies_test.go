package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/quartermaster-dev/quartermaster/kindcluster"
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
	c := kindcluster.NewForTest(t, kindcluster.Options{Name: "qm-policies", EtcdUnsafeNoFsync: true})
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
	if out, err := c.Kubectl(ctx, "apply", "-f", manifest); err != nil {
		t.Fatalf("kubectl apply: %v\n%s", err, out)
	}
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
