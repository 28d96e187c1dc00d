package helm_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/quartermaster-dev/quartermaster/kindcluster"
)

var gameServers = schema.GroupVersionResource{Group: "agones.dev", Version: "v1", Resource: "gameservers"}

// TestApply renders every variant and applies it to a real API server: a
// server-side dry run first (admission and strict field validation, no
// objects made), then the default and the watched-namespace renderings for
// real, to ask the authorizer what the allocator's ServiceAccount may do.
func TestApply(t *testing.T) {
	c := kindcluster.NewForTest(t, kindcluster.Options{Name: "helm", EtcdUnsafeNoFsync: true, SkipCRDs: true})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cs, err := c.Clientset()
	if err != nil {
		t.Fatal(err)
	}
	// The release namespaces exist before an install (helm -n NS
	// --create-namespace makes them); so does the watched one.
	for _, ns := range []string{"quartermaster", "agones-system", "games"} {
		if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	thirdParty := filepath.Join("testdata", "thirdparty-crds.yaml")
	if out, err := c.Kubectl(ctx, "apply", "-f", thirdParty); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if out, err := c.Kubectl(ctx, "wait", "--for=condition=Established", "--timeout=60s", "-f", thirdParty); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}

	files := map[string]string{}
	for _, v := range variants {
		manifests := mustRender(t, v)
		files[v.name] = filepath.Join(t.TempDir(), v.name+".yaml")
		if err := os.WriteFile(files[v.name], []byte(manifests), 0o644); err != nil {
			t.Fatal(err)
		}
		t.Run("dry-run/"+v.name, func(t *testing.T) {
			out, err := c.Kubectl(ctx, "apply", "--dry-run=server", "-f", files[v.name])
			if err != nil {
				t.Fatalf("dry run: %v", err)
			}
			// Every rendered object is accepted, none skipped.
			objs := objects(t, manifests)
			if n := strings.Count(string(out), "(server dry run)"); n != len(objs) {
				t.Errorf("dry run accepted %d objects, the chart rendered %d:\n%s", n, len(objs), out)
			}
		})
	}

	t.Run("rbac", func(t *testing.T) {
		if out, err := c.Kubectl(ctx, "apply", "-f", files["default"]); err != nil {
			t.Fatalf("apply: %v\n%s", err, out)
		}
		if out, err := c.Kubectl(ctx, "wait", "--for=condition=Established", "--timeout=60s", "crd/gameservers.agones.dev"); err != nil {
			t.Fatalf("the chart's CRDs: %v\n%s", err, out)
		}
		sa := serviceAccount("quartermaster", "qm-allocator")
		for _, tc := range []access{
			// What the kubernetes backend does.
			{"list", "agones.dev", "gameservers", "", true},
			{"watch", "agones.dev", "gameservers", "", true},
			{"get", "agones.dev", "gameservers", "games", true},
			{"update", "agones.dev", "gameservers", "games", true},
			// Forwarding: policies anywhere, Secrets in the forwarding
			// namespaces (default: default) only.
			{"list", "multicluster.agones.dev", "gameserverallocationpolicies", "games", true},
			{"watch", "multicluster.agones.dev", "gameserverallocationpolicies", "", true},
			{"get", "", "secrets", "default", true},
			{"list", "", "secrets", "default", true},
			{"watch", "", "secrets", "default", true},
			// Membership: its own namespace's Leases.
			{"get", "coordination.k8s.io", "leases", "quartermaster", true},
			{"list", "coordination.k8s.io", "leases", "quartermaster", true},
			{"watch", "coordination.k8s.io", "leases", "quartermaster", true},
			{"create", "coordination.k8s.io", "leases", "quartermaster", true},
			{"update", "coordination.k8s.io", "leases", "quartermaster", true},
			{"delete", "coordination.k8s.io", "leases", "quartermaster", true},
			// What it must not.
			{"delete", "agones.dev", "gameservers", "games", false},
			{"create", "agones.dev", "gameservers", "games", false},
			{"patch", "agones.dev", "gameservers", "games", false},
			{"deletecollection", "agones.dev", "gameservers", "games", false},
			{"update", "agones.dev", "fleets", "games", false},
			{"update", "multicluster.agones.dev", "gameserverallocationpolicies", "games", false},
			{"get", "", "secrets", "games", false},
			{"get", "", "secrets", "kube-system", false},
			{"get", "", "secrets", "quartermaster", false},
			{"list", "", "secrets", "quartermaster", false},
			{"update", "", "secrets", "default", false},
			{"delete", "", "secrets", "default", false},
			{"list", "", "secrets", "", false},
			{"create", "coordination.k8s.io", "leases", "kube-system", false},
			{"create", "coordination.k8s.io", "leases", "default", false},
			{"list", "coordination.k8s.io", "leases", "", false},
			{"patch", "coordination.k8s.io", "leases", "quartermaster", false},
			{"deletecollection", "coordination.k8s.io", "leases", "quartermaster", false},
			{"create", "", "pods", "quartermaster", false},
			{"update", "rbac.authorization.k8s.io", "clusterroles", "", false},
		} {
			if got := canI(ctx, t, cs, sa, tc); got != tc.allowed {
				t.Errorf("%s %s.%s in %q: allowed=%v, want %v", tc.verb, tc.resource, tc.group, tc.ns, got, tc.allowed)
			}
		}

		// And for real, as the ServiceAccount: the reads and a Lease's
		// life work; writes it has no business with are Forbidden.
		cfg := c.RESTConfig()
		cfg.Impersonate = rest.ImpersonationConfig{UserName: sa.user, Groups: sa.groups}
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
		// templates.enabled is off: Create's POST and Fleet read are refused.
		if _, err := dc.Resource(gameServers).Namespace("default").Create(ctx, onDemandServer("refused"), metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("create gameserver as the allocator without templates.enabled: %v, want Forbidden", err)
		}
		if _, err := dc.Resource(fleets).Namespace("default").Get(ctx, "simple-game", metav1.GetOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("get fleet as the allocator without templates.enabled: %v, want Forbidden", err)
		}
		ics, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := ics.CoreV1().Secrets("default").Get(ctx, "remote-cluster-cert", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("get a secret in a forwarding namespace as the allocator: %v, want NotFound", err)
		}
		if _, err := ics.CoreV1().Secrets("quartermaster").Get(ctx, "remote-cluster-cert", metav1.GetOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("get a secret in its own namespace as the allocator: %v, want Forbidden", err)
		}
		if _, err := ics.CoreV1().Secrets("kube-system").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("list secrets in kube-system as the allocator: %v, want Forbidden", err)
		}
		holder := "qm-allocator-0"
		lease := &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: "qm-allocator-0"},
			Spec:       coordinationv1.LeaseSpec{HolderIdentity: &holder},
		}
		got, err := ics.CoordinationV1().Leases("quartermaster").Create(ctx, lease, metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("create a Lease as the allocator: %v", err)
		}
		now := metav1.NewMicroTime(time.Now())
		got.Spec.RenewTime = &now
		if _, err := ics.CoordinationV1().Leases("quartermaster").Update(ctx, got, metav1.UpdateOptions{}); err != nil {
			t.Errorf("renew the Lease as the allocator: %v", err)
		}
		if err := ics.CoordinationV1().Leases("quartermaster").Delete(ctx, lease.Name, metav1.DeleteOptions{}); err != nil {
			t.Errorf("delete the Lease as the allocator: %v", err)
		}
		if _, err := ics.CoordinationV1().Leases("kube-system").Create(ctx, lease, metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("create a Lease in kube-system as the allocator: %v, want Forbidden", err)
		}
	})

	t.Run("rbac/watch-namespace", func(t *testing.T) {
		// The full rendering watches games only: the GameServer rules are
		// bound there, not cluster-wide. Its objects have the default
		// rendering's names, so the cluster-wide binding goes first.
		if out, err := c.Kubectl(ctx, "delete", "--ignore-not-found", "clusterrolebinding/qm-allocator"); err != nil {
			t.Fatalf("%v\n%s", err, out)
		}
		if out, err := c.Kubectl(ctx, "apply", "-f", files["full"]); err != nil {
			t.Fatalf("apply: %v\n%s", err, out)
		}
		sa := serviceAccount("quartermaster", "qm-allocator")
		for _, tc := range []access{
			{"list", "agones.dev", "gameservers", "games", true},
			{"watch", "agones.dev", "gameservers", "games", true},
			{"update", "agones.dev", "gameservers", "games", true},
			{"list", "multicluster.agones.dev", "gameserverallocationpolicies", "games", true},
			{"get", "", "secrets", "games", true},
			{"get", "", "secrets", "default", true},
			{"list", "agones.dev", "gameservers", "", false},
			{"list", "agones.dev", "gameservers", "default", false},
			{"update", "agones.dev", "gameservers", "default", false},
			{"create", "coordination.k8s.io", "leases", "quartermaster", true},
		} {
			if got := canI(ctx, t, cs, sa, tc); got != tc.allowed {
				t.Errorf("%s %s.%s in %q: allowed=%v, want %v", tc.verb, tc.resource, tc.group, tc.ns, got, tc.allowed)
			}
		}
	})

	t.Run("rbac/templates", func(t *testing.T) {
		// On-demand servers on: templates in games (private-match) and
		// default (simple-game), cluster-wide watching as by default.
		if out, err := c.Kubectl(ctx, "apply", "-f", files["templates"]); err != nil {
			t.Fatalf("apply: %v\n%s", err, out)
		}
		sa := serviceAccount("quartermaster", "qm-allocator")
		for _, tc := range []access{
			// What Create and Destroy do, where the templates put servers.
			{"create", "agones.dev", "gameservers", "games", true},
			{"delete", "agones.dev", "gameservers", "games", true},
			{"create", "agones.dev", "gameservers", "default", true},
			{"delete", "agones.dev", "gameservers", "default", true},
			{"get", "agones.dev", "fleets", "default", true},
			{"get", "agones.dev", "fleets", "games", true},
			// Nowhere else, and nothing more.
			{"create", "agones.dev", "gameservers", "quartermaster", false},
			{"delete", "agones.dev", "gameservers", "kube-system", false},
			{"create", "agones.dev", "gameservers", "", false},
			{"get", "agones.dev", "fleets", "quartermaster", false},
			{"list", "agones.dev", "fleets", "default", false},
			{"watch", "agones.dev", "fleets", "", false},
			{"update", "agones.dev", "fleets", "default", false},
			{"patch", "agones.dev", "gameservers", "games", false},
			{"deletecollection", "agones.dev", "gameservers", "games", false},
			// The allocation side is unchanged.
			{"update", "agones.dev", "gameservers", "games", true},
			{"watch", "agones.dev", "gameservers", "", true},
		} {
			if got := canI(ctx, t, cs, sa, tc); got != tc.allowed {
				t.Errorf("%s %s.%s in %q: allowed=%v, want %v", tc.verb, tc.resource, tc.group, tc.ns, got, tc.allowed)
			}
		}

		// Create's and Destroy's own calls, as the ServiceAccount: the POST,
		// the Fleet read by name, the UID- and resourceVersion-preconditioned
		// Delete; and the POST in a namespace no template uses is refused.
		cfg := c.RESTConfig()
		cfg.Impersonate = rest.ImpersonationConfig{UserName: sa.user, Groups: sa.groups}
		dc, err := dynamic.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		gs := dc.Resource(gameServers).Namespace("games")
		made, err := gs.Create(ctx, onDemandServer("private-match-x7k2q"), metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("create a gameserver in games as the allocator: %v", err)
		}
		uid, rv := made.GetUID(), made.GetResourceVersion()
		if err := gs.Delete(ctx, made.GetName(), metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid, ResourceVersion: &rv}}); err != nil {
			t.Errorf("delete the created gameserver as the allocator: %v", err)
		}
		if _, err := dc.Resource(fleets).Namespace("default").Get(ctx, "simple-game", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
			t.Errorf("get a fleet in default as the allocator: %v, want NotFound (allowed, none there)", err)
		}
		if _, err := dc.Resource(gameServers).Namespace("quartermaster").Create(ctx, onDemandServer("elsewhere"), metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
			t.Errorf("create a gameserver in quartermaster as the allocator: %v, want Forbidden", err)
		}
	})
}

var fleets = schema.GroupVersionResource{Group: "agones.dev", Version: "v1", Resource: "fleets"}

// onDemandServer is a GameServer as Create POSTs one (trimmed to what the
// CRD needs).
func onDemandServer(name string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "agones.dev/v1",
		"kind":       "GameServer",
		"metadata": map[string]any{
			"name":        name,
			"labels":      map[string]any{"quartermaster.dev/template": "private-match"},
			"annotations": map[string]any{"quartermaster.dev/owner": "alice", "quartermaster.dev/creating": "true"},
		},
		"spec": map[string]any{
			"ports": []any{map[string]any{"name": "game", "containerPort": int64(7654), "protocol": "UDP"}},
			"template": map[string]any{"spec": map[string]any{
				"containers": []any{map[string]any{"name": "game", "image": "example/game:1.0"}},
			}},
		},
	}}
}

type access struct {
	verb, group, resource, ns string
	allowed                   bool
}

type subject struct {
	user   string
	groups []string
}

// serviceAccount is who a pod running as ns/name is to the API server.
func serviceAccount(ns, name string) subject {
	return subject{
		user:   "system:serviceaccount:" + ns + ":" + name,
		groups: []string{"system:serviceaccounts", "system:serviceaccounts:" + ns, "system:authenticated"},
	}
}

// canI asks the API server's authorizer whether sub may do a.verb on
// a.resource (a SubjectAccessReview: what `kubectl auth can-i --as` does).
func canI(ctx context.Context, t *testing.T, cs kubernetes.Interface, sub subject, a access) bool {
	t.Helper()
	sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User:   sub.user,
		Groups: sub.groups,
		ResourceAttributes: &authorizationv1.ResourceAttributes{
			Namespace: a.ns, Verb: a.verb, Group: a.group, Resource: a.resource,
		},
	}}
	out, err := cs.AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("SubjectAccessReview: %v", err)
	}
	return out.Status.Allowed
}
