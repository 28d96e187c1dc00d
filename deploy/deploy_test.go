// Package deploy_test checks the manifests in deploy/ against a real API
// server: that they apply, and that the allocator's RBAC grants what the
// kubernetes backend does and nothing it does not.
package deploy_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/quartermaster-dev/quartermaster/allocator"
	"github.com/quartermaster-dev/quartermaster/allocator/kube"
	"github.com/quartermaster-dev/quartermaster/core"
	"github.com/quartermaster-dev/quartermaster/kindcluster"
)

const (
	manifest       = "allocator.yaml"
	allocatorNS    = "quartermaster"
	serviceAccount = "system:serviceaccount:quartermaster:qm-allocator"
)

var gameServers = schema.GroupVersionResource{Group: "agones.dev", Version: "v1", Resource: "gameservers"}

func TestManifest(t *testing.T) {
	c := kindcluster.NewForTest(t, kindcluster.Options{Name: "deploy", EtcdUnsafeNoFsync: true})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	// A server-side dry run of a Namespace does not create it, so the
	// objects inside it would fail with "namespace not found": the first
	// dry run checks the Namespace alone (and the CRDs), the second
	// everything once the Namespace exists. Both run every admission and
	// strict field validation the API server has.
	out, err := c.Kubectl(ctx, "apply", "--dry-run=server", "-f", "crds/", "-f", manifest)
	if err != nil && !strings.Contains(string(out), `namespaces "quartermaster" not found`) {
		t.Fatalf("dry run: %v", err)
	}
	if !strings.Contains(string(out), "namespace/quartermaster created (server dry run)") {
		t.Fatalf("dry run did not accept the Namespace:\n%s", out)
	}
	cs, err := c.Clientset()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: allocatorNS}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	out, err = c.Kubectl(ctx, "apply", "--dry-run=server", "-f", "crds/", "-f", manifest)
	if err != nil {
		t.Fatalf("dry run: %v", err)
	}
	for _, want := range []string{
		"serviceaccount/qm-allocator", "clusterrole.rbac.authorization.k8s.io/qm-allocator",
		"clusterrolebinding.rbac.authorization.k8s.io/qm-allocator", "clusterrole.rbac.authorization.k8s.io/qm-allocator-remote-certs",
		"rolebinding.rbac.authorization.k8s.io/qm-allocator-remote-certs", "deployment.apps/qm-allocator", "service/qm-allocator",
		"role.rbac.authorization.k8s.io/qm-allocator-replicas", "rolebinding.rbac.authorization.k8s.io/qm-allocator-replicas",
	} {
		if !strings.Contains(string(out), want+" created (server dry run)") {
			t.Errorf("dry run output lacks %q:\n%s", want, out)
		}
	}

	t.Run("rbac", func(t *testing.T) {
		// Apply for real so the roles exist, then ask as the ServiceAccount.
		if out, err := c.Kubectl(ctx, "apply", "-f", manifest); err != nil {
			t.Fatalf("apply: %v\n%s", err, out)
		}
		for _, tc := range []struct {
			verb, group, resource, ns string
			allowed                   bool
		}{
			// What the kubernetes backend does.
			{"list", "agones.dev", "gameservers", "", true},
			{"watch", "agones.dev", "gameservers", "", true},
			{"get", "agones.dev", "gameservers", "games", true},
			{"update", "agones.dev", "gameservers", "games", true},
			{"list", "multicluster.agones.dev", "gameserverallocationpolicies", "games", true},
			{"watch", "multicluster.agones.dev", "gameserverallocationpolicies", "", true},
			{"get", "", "secrets", "default", true},
			{"list", "", "secrets", "default", true},
			{"watch", "", "secrets", "default", true},
			// Replica membership: its own namespace's Leases.
			{"get", "coordination.k8s.io", "leases", allocatorNS, true},
			{"list", "coordination.k8s.io", "leases", allocatorNS, true},
			{"watch", "coordination.k8s.io", "leases", allocatorNS, true},
			{"create", "coordination.k8s.io", "leases", allocatorNS, true},
			{"update", "coordination.k8s.io", "leases", allocatorNS, true},
			{"delete", "coordination.k8s.io", "leases", allocatorNS, true},
			// What it must not.
			{"patch", "coordination.k8s.io", "leases", allocatorNS, false},
			{"deletecollection", "coordination.k8s.io", "leases", allocatorNS, false},
			{"update", "coordination.k8s.io", "leases", "kube-system", false},
			{"create", "coordination.k8s.io", "leases", "default", false},
			{"list", "coordination.k8s.io", "leases", "", false},
			{"delete", "agones.dev", "gameservers", "games", false},
			{"create", "agones.dev", "gameservers", "games", false},
			{"patch", "agones.dev", "gameservers", "games", false},
			{"deletecollection", "agones.dev", "gameservers", "games", false},
			{"update", "agones.dev", "fleets", "games", false},
			{"update", "multicluster.agones.dev", "gameserverallocationpolicies", "games", false},
			{"get", "", "secrets", "games", false},
			{"get", "", "secrets", "kube-system", false},
			{"list", "", "secrets", allocatorNS, false},
			{"get", "", "secrets", allocatorNS, false},
			{"update", "", "secrets", "default", false},
			{"delete", "", "secrets", "default", false},
			{"list", "", "secrets", "", false},
			{"create", "", "pods", allocatorNS, false},
			{"update", "rbac.authorization.k8s.io", "clusterroles", "", false},
		} {
			got := canI(ctx, t, cs, tc.verb, tc.group, tc.resource, tc.ns)
			if got != tc.allowed {
				t.Errorf("%s %s.%s in %q: allowed=%v, want %v", tc.verb, tc.resource, tc.group, tc.ns, got, tc.allowed)
			}
		}

		// And for real, through an impersonating client: the read works,
		// the delete and a secret elsewhere are Forbidden.
		cfg := c.RESTConfig()
		cfg.Impersonate = rest.ImpersonationConfig{UserName: serviceAccount, Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + allocatorNS, "system:authenticated"}}
		dc, err := dynamic.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := dc.Resource(gameServers).List(ctx, metav1.ListOptions{}); err != nil {
			t.Errorf("list gameservers as the allocator: %v", err)
		}
		if err := dc.Resource(gameServers).Namespace("default").Delete(ctx, "any", metav1.DeleteOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("delete gameserver as the allocator: %v, want Forbidden", err)
		}
		ics, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		// What the multi-cluster Secret informer sends, in a namespace
		// with the binding.
		if _, err := ics.CoreV1().Secrets("default").List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=qm-to-b"}); err != nil {
			t.Errorf("list one secret by name in default as the allocator: %v", err)
		}
		if _, err := ics.CoreV1().Secrets("kube-system").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("list secrets in kube-system as the allocator: %v, want Forbidden", err)
		}

		// The membership itself, as the ServiceAccount: it takes its
		// Lease in its own namespace, sees it, and deletes it on stop.
		kb, err := kube.New(kube.Config{REST: cfg})
		if err != nil {
			t.Fatal(err)
		}
		m, err := kube.NewMembership(kube.MembershipConfig{REST: cfg, Namespace: allocatorNS, Identity: "qm-allocator-abc"}, kb)
		if err != nil {
			t.Fatal(err)
		}
		mctx, stop := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { defer close(done); m.Run(mctx) }()
		held := false
		for deadline := time.Now().Add(20 * time.Second); !held && time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
			_, err := cs.CoordinationV1().Leases(allocatorNS).Get(ctx, m.Name(), metav1.GetOptions{})
			held = err == nil
		}
		stop()
		<-done
		if !held {
			t.Errorf("the allocator took no Lease in %s as its ServiceAccount", allocatorNS)
		}
		if _, err := cs.CoordinationV1().Leases(allocatorNS).Get(ctx, m.Name(), metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("the allocator's Lease after a graceful stop: %v, want NotFound", err)
		}
	})

	t.Run("templates", func(t *testing.T) {
		testTemplatesOverlay(ctx, t, c, cs)
	})
}

const (
	templatesOverlay = "allocator-templates.yaml"
	templatesPatch   = "allocator-templates-patch.yaml"
)

// testTemplatesOverlay applies the on-demand opt-in the way its header
// says (after allocator.yaml, which the rbac subtest applied) and checks
// the result: qm serve is given a templates file it can parse, mounted from
// the overlay's ConfigMap; the ServiceAccount may make and delete servers
// and read Fleets where the RoleBinding says and nowhere else, checked with
// the kubernetes backend's own Create-side calls; and deleting the overlay
// takes that access away again.
func testTemplatesOverlay(ctx context.Context, t *testing.T, c *kindcluster.Cluster, cs kubernetes.Interface) {
	if out, err := c.Kubectl(ctx, "apply", "-f", templatesOverlay); err != nil {
		t.Fatalf("apply: %v\n%s", err, out)
	}
	if out, err := c.Kubectl(ctx, "-n", allocatorNS, "patch", "deployment", "qm-allocator", "--type=json", "--patch-file", templatesPatch); err != nil {
		t.Fatalf("patch: %v\n%s", err, out)
	}
	dep, err := cs.AppsV1().Deployments(allocatorNS).Get(ctx, "qm-allocator", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod := dep.Spec.Template.Spec
	const flag = "--templates=/etc/qm/templates/templates.yaml"
	if args := pod.Containers[0].Args; args[len(args)-1] != flag {
		t.Errorf("patched args end %q, want %s", args[len(args)-1], flag)
	}
	mounted := false
	for _, m := range pod.Containers[0].VolumeMounts {
		if m.MountPath == "/etc/qm/templates" && m.ReadOnly {
			for _, v := range pod.Volumes {
				mounted = mounted || v.Name == m.Name && v.ConfigMap != nil && v.ConfigMap.Name == "qm-allocator-templates"
			}
		}
	}
	if !mounted {
		t.Errorf("the patched Deployment mounts no ConfigMap qm-allocator-templates read-only at /etc/qm/templates: %+v", pod.Volumes)
	}
	cm, err := cs.CoreV1().ConfigMaps(allocatorNS).Get(ctx, "qm-allocator-templates", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tmpl, err := allocator.ParseTemplates([]byte(cm.Data["templates.yaml"]))
	if err != nil {
		t.Fatalf("qm serve refuses the overlay's templates file: %v", err)
	}
	if got := tmpl.Names(); len(got) != 2 {
		t.Errorf("templates %v, want the two examples", got)
	}

	for _, tc := range []struct {
		verb, group, resource, ns string
		allowed                   bool
	}{
		{"create", "agones.dev", "gameservers", "default", true},
		{"delete", "agones.dev", "gameservers", "default", true},
		{"get", "agones.dev", "fleets", "default", true},
		{"create", "agones.dev", "gameservers", "games", false},
		{"delete", "agones.dev", "gameservers", allocatorNS, false},
		{"create", "agones.dev", "gameservers", "", false},
		{"get", "agones.dev", "fleets", "games", false},
		{"list", "agones.dev", "fleets", "default", false},
		{"watch", "agones.dev", "fleets", "default", false},
		{"patch", "agones.dev", "gameservers", "default", false},
		{"deletecollection", "agones.dev", "gameservers", "default", false},
	} {
		if got := canI(ctx, t, cs, tc.verb, tc.group, tc.resource, tc.ns); got != tc.allowed {
			t.Errorf("with the overlay: %s %s.%s in %q: allowed=%v, want %v", tc.verb, tc.resource, tc.group, tc.ns, got, tc.allowed)
		}
	}

	// The backend's own calls as the ServiceAccount: FleetTemplate's read
	// (no such Fleet here: NotFound, not Forbidden), Create's POST, and
	// Destroy's read and preconditioned Delete of the caller's server.
	cfg := c.RESTConfig()
	cfg.Impersonate = rest.ImpersonationConfig{UserName: serviceAccount, Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + allocatorNS, "system:authenticated"}}
	kb, err := kube.New(kube.Config{REST: cfg})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := kb.FleetTemplate(ctx, "default", "simple-game"); !errors.Is(err, allocator.ErrFleetNotFound) {
		t.Errorf("FleetTemplate in default as the allocator: %v, want %v", err, allocator.ErrFleetNotFound)
	}
	if _, _, err := kb.FleetTemplate(ctx, "games", "simple-game"); err == nil || errors.Is(err, allocator.ErrFleetNotFound) {
		t.Errorf("FleetTemplate in games (no RoleBinding) as the allocator: %v, want a refusal", err)
	}
	dc, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dc.Resource(gameServers).Namespace("default").Create(ctx, onDemandServer("private-match-x7k2q"), metav1.CreateOptions{}); err != nil {
		t.Fatalf("create a gameserver in default as the allocator: %v", err)
	}
	if _, err := kb.Destroy(ctx, core.Key{Namespace: "default", Name: "private-match-x7k2q"}, "alice"); err != nil {
		t.Errorf("Destroy as the allocator: %v", err)
	}
	if _, err := dc.Resource(gameServers).Namespace("default").Get(ctx, "private-match-x7k2q", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("the destroyed server: %v, want NotFound", err)
	}
	if _, err := dc.Resource(gameServers).Namespace("games").Create(ctx, onDemandServer("elsewhere"), metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("create a gameserver in games as the allocator: %v, want Forbidden", err)
	}

	// Off again: deleting the overlay takes the access away.
	if out, err := c.Kubectl(ctx, "delete", "-f", templatesOverlay); err != nil {
		t.Fatalf("delete: %v\n%s", err, out)
	}
	for _, verb := range []string{"create", "delete"} {
		if canI(ctx, t, cs, verb, "agones.dev", "gameservers", "default") {
			t.Errorf("%s gameservers in default still allowed after deleting %s", verb, templatesOverlay)
		}
	}
}

// onDemandServer is a GameServer as Create POSTs one for alice (trimmed to
// what the CRD needs).
func onDemandServer(name string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "agones.dev/v1",
		"kind":       "GameServer",
		"metadata": map[string]any{
			"name":        name,
			"labels":      map[string]any{"quartermaster.dev/template": "private-match"},
			"annotations": map[string]any{allocator.OwnerAnnotation: "alice"},
		},
		"spec": map[string]any{
			"ports": []any{map[string]any{"name": "game", "containerPort": int64(7654), "protocol": "UDP"}},
			"template": map[string]any{"spec": map[string]any{
				"containers": []any{map[string]any{"name": "game", "image": "example/game:1.0"}},
			}},
		},
	}}
}

// canI asks the API server's authorizer whether the allocator's
// ServiceAccount may do verb on resource (a SubjectAccessReview: what
// `kubectl auth can-i --as` does).
func canI(ctx context.Context, t *testing.T, cs kubernetes.Interface, verb, group, resource, ns string) bool {
	t.Helper()
	sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User:   serviceAccount,
		Groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + allocatorNS, "system:authenticated"},
		ResourceAttributes: &authorizationv1.ResourceAttributes{
			Namespace: ns, Verb: verb, Group: group, Resource: resource,
		},
	}}
	out, err := cs.AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("SubjectAccessReview: %v", err)
	}
	return out.Status.Allowed
}
