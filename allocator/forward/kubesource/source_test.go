package kubesource_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"

	"github.com/quartermaster-dev/quartermaster/allocator/forward"
	"github.com/quartermaster-dev/quartermaster/allocator/forward/kubesource"
	"github.com/quartermaster-dev/quartermaster/kindcluster"
	"github.com/quartermaster-dev/quartermaster/kindcluster/kubetest"
)

func policy(ns, name, cluster string, priority, weight int64, endpoints []string, secret string, labels map[string]any) *unstructured.Unstructured {
	info := map[string]any{"clusterName": cluster}
	if len(endpoints) > 0 {
		eps := make([]any, len(endpoints))
		for i, e := range endpoints {
			eps[i] = e
		}
		info["allocationEndpoints"] = eps
		info["secretName"] = secret
	}
	meta := map[string]any{"name": name, "namespace": ns}
	if labels != nil {
		meta["labels"] = labels
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": forward.PolicyAPIVersion, "kind": forward.PolicyKind, "metadata": meta,
		"spec": map[string]any{"priority": priority, "weight": weight, "connectionInfo": info},
	}}
}

type lockedLog struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("not within 20s: %s", what)
		}
	}
}

// TestSourceOnAPIServer reads policies and Secrets as objects on a real API
// server: the first list, a policy edit and a deletion picked up live, a
// Secret watched only while a policy names it, its rotation seen as a new
// version, and a policy in a namespace outside --watch-namespace ignored.
func TestSourceOnAPIServer(t *testing.T) {
	api := kubetest.Start(t, "kubesource")
	c, cs, dyn := api.Cluster, api.Core, api.Dynamic
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	api.Namespace(t, ctx, "games")
	api.Namespace(t, ctx, "other")
	pols := dyn.Resource(kubesource.PoliciesResource)
	create := func(u *unstructured.Unstructured) {
		t.Helper()
		if _, err := pols.Namespace(u.GetNamespace()).Create(ctx, u, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	create(policy("games", "here", "a", 1, 100, nil, "", nil))
	create(policy("games", "there", "b", 2, 100, []string{"b.example:8443"}, "to-b", map[string]any{"route": "burst"}))
	create(policy("other", "elsewhere", "c", 1, 100, []string{"c.example"}, "to-c", nil))
	secrets := cs.CoreV1().Secrets("games")
	if _, err := secrets.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "to-b"},
		Data: map[string][]byte{"tls.crt": []byte("cert-1"), "tls.key": []byte("key-1")}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Another application's Secret in the same namespace: never read.
	if _, err := secrets.Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "unrelated"},
		Data: map[string][]byte{"password": []byte("x")}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	logs := &lockedLog{}
	src, err := kubesource.New(kubesource.Options{REST: c.RESTConfig(), Namespace: "games",
		Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if err := src.Ready(); err == nil {
		t.Fatal("Ready before Run: nil, want an error")
	}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	src.Run(runCtx)
	if !src.WaitForSync(ctx) {
		t.Fatal("policies never listed")
	}
	if err := src.Ready(); err != nil {
		t.Fatalf("Ready after sync: %v", err)
	}

	got := src.Policies("games")
	if len(got) != 2 || got[0].Name != "here" || got[1].Name != "there" {
		t.Fatalf("policies in games: %+v", got)
	}
	if !got[0].Connection.IsLocal() || got[1].Connection.Endpoints[0] != "b.example:8443" ||
		got[1].Priority != 2 || got[1].Labels["route"] != "burst" || got[1].Connection.SecretName != "to-b" {
		t.Fatalf("policies decoded wrong: %+v", got)
	}
	if p := src.Policies("other"); len(p) != 0 {
		t.Fatalf("a policy outside the watched namespace was read: %+v", p)
	}
	if w := src.WatchedSecrets(); len(w) != 1 || w[0] != "games/to-b" {
		t.Fatalf("watched Secrets: %v, want only games/to-b", w)
	}

	sec, ok := src.Secret("games", "to-b")
	if !ok || string(sec.Data["tls.crt"]) != "cert-1" || sec.Version == "" {
		t.Fatalf("Secret games/to-b: %v %+v", ok, sec)
	}
	v1 := sec.Version
	// Rotation: new data, new version.
	s, err := secrets.Get(ctx, "to-b", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	s.Data["tls.crt"] = []byte("cert-2")
	if _, err := secrets.Update(ctx, s, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the rotated Secret", func() bool {
		sec, ok := src.Secret("games", "to-b")
		return ok && string(sec.Data["tls.crt"]) == "cert-2" && sec.Version != v1
	})

	// A policy edit applies without a restart.
	u, err := pols.Namespace("games").Get(ctx, "there", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := unstructured.SetNestedField(u.Object, int64(0), "spec", "priority"); err != nil {
		t.Fatal(err)
	}
	if _, err := pols.Namespace("games").Update(ctx, u, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the edited priority", func() bool {
		for _, p := range src.Policies("games") {
			if p.Name == "there" {
				return p.Priority == 0
			}
		}
		return false
	})

	// A new policy naming a Secret that does not exist (yet): the lookup
	// answers "not there", with no error to explain, after the list.
	create(policy("games", "far", "d", 3, 100, []string{"d.example"}, "to-d", nil))
	eventually(t, "the new policy", func() bool { return len(src.Policies("games")) == 3 })
	if _, ok := src.Secret("games", "to-d"); ok {
		t.Fatal("Secret games/to-d found, but it does not exist")
	}
	if err := src.SecretError("games", "to-d"); err != nil {
		t.Fatalf("SecretError of a plainly missing Secret: %v", err)
	}

	// An unusable policy (endpoint with a scheme) is kept, so requests
	// reaching it fail naming it, and the log says so once.
	create(policy("games", "broken", "e", 4, 100, []string{"https://e.example"}, "to-e", nil))
	eventually(t, "the warning about the broken policy", func() bool {
		return strings.Contains(logs.String(), "games/broken") && strings.Contains(logs.String(), "not host[:port]")
	})

	// Window annotations: a well-formed one comes with the policy; a
	// malformed one skips the policy, and the log names it and the
	// annotation.
	evening := policy("games", "evening", "f", 5, 100, nil, "", nil)
	evening.SetAnnotations(map[string]string{forward.WindowDuringAnnotation: "weekdays 18:00-23:00 Europe/Paris", "other/annotation": "x"})
	create(evening)
	typo := policy("games", "typo", "g", 5, 100, nil, "", nil)
	typo.SetAnnotations(map[string]string{forward.WindowUntilAnnotation: "tomorrow"})
	create(typo)
	eventually(t, "the windowed policy and the skipped one", func() bool {
		return len(src.Policies("games")) == 5 && strings.Contains(logs.String(), "games/typo")
	})
	for _, p := range src.Policies("games") {
		switch p.Name {
		case "typo":
			t.Fatal("a policy with a malformed window is in the table")
		case "evening":
			if got := p.Window.String(); got != "during weekdays 18:00-23:00 Europe/Paris" {
				t.Fatalf("window read as %q", got)
			}
		}
	}
	if l := logs.String(); !strings.Contains(l, "policy skipped") || !strings.Contains(l, forward.WindowUntilAnnotation) || !strings.Contains(l, "RFC 3339") {
		t.Fatalf("the log does not say which policy was skipped and why:\n%s", l)
	}
	if tab := src.PolicyTable(); len(tab.Policies("games")) != 5 || len(tab.Namespaces()) != 1 {
		t.Fatalf("table: %v %+v", tab.Namespaces(), tab.Policies("games"))
	}

	// Deleting the policies that name a Secret stops its watch.
	for _, n := range []string{"there", "far", "broken", "evening", "typo"} {
		if err := pols.Namespace("games").Delete(ctx, n, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	eventually(t, "the deletions", func() bool { return len(src.Policies("games")) == 1 })
	if w := src.WatchedSecrets(); len(w) != 0 {
		t.Fatalf("Secrets still watched after their policies went: %v", w)
	}
}

// TestSourceNotReadyExplains: without the CRD the source never becomes
// ready, and says why.
func TestSourceNotReadyExplains(t *testing.T) {
	c := kindcluster.NewForTest(t, kindcluster.Options{Name: "kubesource-nocrd", EtcdUnsafeNoFsync: true, SkipCRDs: true})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	src, err := kubesource.New(kubesource.Options{REST: c.RESTConfig()})
	if err != nil {
		t.Fatal(err)
	}
	src.Run(ctx)
	eventually(t, "a reason", func() bool {
		err := src.Ready()
		return err != nil && strings.Contains(err.Error(), "CRD installed")
	})
}

// TestSourceSecretForbidden: an allocator that may read policies but not
// the Secret a policy names says so, naming the binding to add, instead
// of "not found".
func TestSourceSecretForbidden(t *testing.T) {
	api := kubetest.Start(t, "kubesource-rbac")
	c, cs, dyn := api.Cluster, api.Core, api.Dynamic
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const user = "system:serviceaccount:games:allocator"
	if _, err := cs.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: "policies-only"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{"multicluster.agones.dev"}, Resources: []string{"gameserverallocationpolicies"}, Verbs: []string{"get", "list", "watch"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "policies-only"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "policies-only"},
		Subjects:   []rbacv1.Subject{{Kind: "User", APIGroup: "rbac.authorization.k8s.io", Name: user}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := dyn.Resource(kubesource.PoliciesResource).Namespace("default").Create(ctx,
		policy("default", "far", "far", 1, 1, []string{"far.example"}, "to-far", nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	cfg := c.RESTConfig()
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
	src, err := kubesource.New(kubesource.Options{REST: cfg, SecretWait: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	src.Run(ctx)
	if !src.WaitForSync(ctx) {
		t.Fatal("policies never listed")
	}
	eventually(t, "a reason for the missing Secret", func() bool {
		if _, ok := src.Secret("default", "to-far"); ok {
			t.Fatal("a Secret was read without the right to")
		}
		err := src.SecretError("default", "to-far")
		return err != nil && strings.Contains(err.Error(), "forbidden") && strings.Contains(err.Error(), "qm-allocator-remote-certs")
	})
}
