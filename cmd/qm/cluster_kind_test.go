package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/quartermaster-dev/quartermaster/kindcluster/kind"
)

// TestClusterUpKindDryRun: `qm cluster up --provider kind --dry-run`
// prints every step for both clusters of the example and leaves nothing
// behind; `down` then finds no rig.
func TestClusterUpKindDryRun(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "rig")
	code, out, errOut := runQM("cluster", "up", "--topology", "../../examples/rig-burst-to-cloud.yaml", "--provider", "kind",
		"--dry-run", "--dir", dir, "--image", "example.test/qm:1")
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, out, errOut)
	}
	for _, want := range []string{
		"docker build -t example.test/qm:1",
		"kind create cluster --name qm-on-prem --config " + dir + "/on-prem/kind.yaml",
		"kind load image-archive " + dir + "/qm-image.tar --name qm-cloud",
		"apply --server-side -f " + dir + "/cloud/manifests/40-policies.yaml",
		"kind delete cluster --name qm-cloud",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("dry run lacks %q:\n%s", want, out)
		}
	}
	if !strings.Contains(errOut, "spec.links") {
		t.Errorf("no note that links are not modelled on kind: %q", errOut)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the dry run left %s (%v)", dir, err)
	}
	code, _, errOut = runQM("cluster", "down", "--topology", "../../examples/rig-burst-to-cloud.yaml", "--provider", "kind", "--dir", dir)
	if code != 1 || !strings.Contains(errOut, "no kind rig in "+dir) {
		t.Errorf("down of no rig: exit %d, %q", code, errOut)
	}
	code, _, errOut = runQM("cluster", "up", "--topology", "../../examples/rig-burst-to-cloud.yaml", "--provider", "docker")
	if code == 0 || !strings.Contains(errOut, `--provider "docker": want local or kind`) {
		t.Errorf("an unknown provider: exit %d, %q", code, errOut)
	}
}

// TestClusterCheckKind: check agrees with kind.Check on this machine (the
// image to be built, as `up` builds it): 0 and "ready", or 3 and what is
// missing on one line.
func TestClusterCheckKind(t *testing.T) {
	code, out, errOut := runQM("cluster", "check", "--provider", "kind")
	err := kind.Check(context.Background(), kind.Options{Build: true}, nil)
	var m *kind.MissingError
	switch {
	case err == nil:
		if code != 0 || !strings.Contains(out, "ready") {
			t.Errorf("exit %d, %q, want 0 and ready", code, out)
		}
	case errors.As(err, &m):
		if code != 3 || strings.TrimSpace(out) != m.Error() || strings.Count(out, "\n") != 1 {
			t.Errorf("exit %d, %q, want 3 and %q on one line", code, out, m.Error())
		}
	default:
		if code != 1 {
			t.Errorf("exit %d (%s), want 1 for %v", code, errOut, err)
		}
	}
	if code, _, errOut := runQM("cluster", "check", "--provider", "local"); code != 2 || !strings.Contains(errOut, "only kind") {
		t.Errorf("check --provider local: exit %d, %q", code, errOut)
	}
}

// TestClusterUpProviderFromFile: a topology that says provider: kind comes
// up on kind without the flag, and --provider local overrides it.
func TestClusterUpProviderFromFile(t *testing.T) {
	src, err := os.ReadFile("../../examples/rig-burst-to-cloud.yaml")
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "kind.yaml")
	if err := os.WriteFile(file, []byte(strings.Replace(string(src), "spec:\n", "spec:\n  provider: kind\n", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		flags []string
		want  string
	}{
		{nil, "kind create cluster --name qm-on-prem"},
		{[]string{"--provider", "local"}, "kube-apiserver"},
	} {
		dir := filepath.Join(t.TempDir(), "rig")
		args := append([]string{"cluster", "up", "--topology", file, "--dry-run", "--dir", dir}, tc.flags...)
		code, out, errOut := runQM(args...)
		if code != 0 || !strings.Contains(out, tc.want) {
			t.Errorf("qm %s: exit %d, want %q in the dry run\n%s\n%s", strings.Join(args, " "), code, tc.want, out, errOut)
		}
	}
}

// TestClusterUpKindNeedsTopology: without --topology, --provider kind and
// the kind flags are refused with a reason, not ignored.
func TestClusterUpKindNeedsTopology(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"cluster", "up", "--provider", "kind", "--dry-run"}, "--provider kind needs --topology FILE"},
		{[]string{"cluster", "down", "--provider", "kind"}, "--provider kind needs --topology FILE"},
		{[]string{"cluster", "up", "--provider", "docker", "--dry-run"}, `--provider "docker": want local or kind`},
		{[]string{"cluster", "up", "--no-build", "--dry-run"}, "--no-build: only with --topology and --provider kind"},
		{[]string{"cluster", "up", "--image", "x:1", "--dry-run"}, "--image: only with --topology and --provider kind"},
	} {
		code, out, errOut := runQM(tc.args...)
		if code != 2 || !strings.Contains(errOut, tc.want) {
			t.Errorf("qm %s: exit %d, %q, want 2 and %q (stdout %q)", strings.Join(tc.args, " "), code, errOut, tc.want, out)
		}
	}
	dir := filepath.Join(t.TempDir(), "c")
	if code, out, errOut := runQM("cluster", "up", "--provider", "local", "--dry-run", "--dir", dir); code != 0 || !strings.Contains(out, "kube-apiserver") {
		t.Errorf("qm cluster up --provider local --dry-run: exit %d\n%s\n%s", code, out, errOut)
	}
}
