package kind

import (
	"os"
	"slices"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// TestRepositoryAllocatorManifest edits the repository's own
// deploy/allocator.yaml (the golden test uses a fixed copy, so that edits
// there do not churn golden files): whatever it says today, the kind
// cluster's copy runs our image with the topology's replicas and cluster
// name, and serves callers on the fixed NodePort.
func TestRepositoryAllocatorManifest(t *testing.T) {
	top := loadExample(t)
	l := testCerts(t, top)
	src, err := os.ReadFile("../../deploy/allocator.yaml")
	if err != nil {
		t.Fatal(err)
	}
	i := 1 // cloud: two replicas
	objs, err := allocatorObjects(top, i, Options{Image: "example.test/qm:1"}, l, src)
	if err != nil {
		t.Fatal(err)
	}
	var sts, svc map[string]any
	secrets := 0
	for _, o := range objs {
		u := unstructured.Unstructured{Object: o}
		switch {
		case isWorkload(u.GetKind()) && u.GetName() == allocatorName:
			sts = o
		case u.GetKind() == "Service" && u.GetName() == allocatorName:
			svc = o
		case u.GetKind() == "Secret" && u.GetNamespace() == allocatorNamespace:
			secrets++
		}
	}
	if sts == nil || svc == nil {
		t.Fatalf("no workload or Service %s in the edited manifest", allocatorName)
	}
	if n, _, _ := unstructured.NestedInt64(sts, "spec", "replicas"); n != 2 {
		t.Errorf("workload replicas %d, want 2", n)
	}
	containers, _, _ := unstructured.NestedSlice(sts, "spec", "template", "spec", "containers")
	ct := containers[0].(map[string]any)
	if ct["image"] != "example.test/qm:1" {
		t.Errorf("image %v", ct["image"])
	}
	args, _, _ := unstructured.NestedStringSlice(ct, "args")
	for _, want := range []string{"--cluster-name=cloud", "--backend=kubernetes"} {
		if !slices.Contains(args, want) {
			t.Errorf("args %q lack %s", args, want)
		}
	}
	// --replicas only where the manifest shards statically (its replicas
	// may instead learn their number from each other).
	want := 0
	if strings.Contains(string(src), "--replicas=") {
		want = 1
		if !slices.Contains(args, "--replicas=2") {
			t.Errorf("args %q lack --replicas=2", args)
		}
	}
	if n := countPrefix(args, "--replicas="); n != want {
		t.Errorf("args %q set --replicas %d times, want %d", args, n, want)
	}
	if typ, _, _ := unstructured.NestedString(svc, "spec", "type"); typ != "NodePort" {
		t.Errorf("Service type %q, want NodePort", typ)
	}
	if secrets != 2 {
		t.Errorf("%d Secrets in %s, want the TLS and client-CA ones", secrets, allocatorNamespace)
	}
}

func countPrefix(args []string, p string) int {
	n := 0
	for _, a := range args {
		if strings.HasPrefix(a, p) {
			n++
		}
	}
	return n
}

// TestAllocatorManifestErrors: an allocator manifest the provider cannot
// edit is refused with what is missing, not half applied.
func TestAllocatorManifestErrors(t *testing.T) {
	top := loadExample(t)
	l := testCerts(t, top)
	src, err := os.ReadFile("testdata/allocator-in.yaml")
	if err != nil {
		t.Fatal(err)
	}
	docs := strings.Split(string(src), "\n---\n")
	without := func(kind string) string {
		var keep []string
		for _, d := range docs {
			if !strings.Contains(d, "\nkind: "+kind+"\n") {
				keep = append(keep, d)
			}
		}
		return strings.Join(keep, "\n---\n")
	}
	for _, tc := range []struct{ name, src, want string }{
		{"empty", "", "no objects"},
		{"not yaml", "kind: [", "document 1"},
		{"no kind", "apiVersion: v1\nmetadata: {name: x}\n", "document 1 has no kind"},
		{"no workload", without("StatefulSet"), "no workload of the allocator"},
		{"no service", without("Service"), "no Service of the allocator"},
		{"no allocator container", strings.Replace(string(src), "- name: allocator\n", "- name: other\n", 1), `no container "allocator"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Manifests(top, 0, Options{HostAddress: "172.18.0.1"}, l, []byte(tc.src))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Manifests: %v, want an error containing %q", err, tc.want)
			}
		})
	}
}

// TestAllocatorAsDeployment: an allocator run as a Deployment whose
// replicas count themselves (no --replicas) keeps doing so on kind, and Up
// waits for the Deployment's rollout.
func TestAllocatorAsDeployment(t *testing.T) {
	top := loadExample(t)
	l := testCerts(t, top)
	src, err := os.ReadFile("testdata/allocator-in.yaml")
	if err != nil {
		t.Fatal(err)
	}
	dep := strings.Replace(string(src), "kind: StatefulSet\n", "kind: Deployment\n", 1)
	dep = strings.Replace(dep, "            - --replicas=3\n", "", 1)
	if dep == string(src) || strings.Contains(dep, "--replicas=") {
		t.Fatal("the fixture changed shape; update this test")
	}
	if w, err := allocatorWorkload([]byte(dep)); err != nil || w != "deployment" {
		t.Fatalf("allocatorWorkload: %q, %v", w, err)
	}
	objs, err := allocatorObjects(top, 1, Options{}, l, []byte(dep))
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range objs {
		u := unstructured.Unstructured{Object: o}
		if u.GetKind() != "Deployment" {
			continue
		}
		containers, _, _ := unstructured.NestedSlice(o, "spec", "template", "spec", "containers")
		args, _, _ := unstructured.NestedStringSlice(containers[0].(map[string]any), "args")
		if countPrefix(args, "--replicas=") != 0 || !slices.Contains(args, "--cluster-name=cloud") {
			t.Errorf("args %q: want --cluster-name=cloud and no --replicas", args)
		}
		if n, _, _ := unstructured.NestedInt64(o, "spec", "replicas"); n != 2 {
			t.Errorf("replicas %d, want 2", n)
		}
		return
	}
	t.Fatal("no Deployment in the edited manifest")
}
