package fleetagent_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/util/retry"

	"github.com/quartermaster-dev/quartermaster/allocator/kube"
	"github.com/quartermaster-dev/quartermaster/core"
	"github.com/quartermaster-dev/quartermaster/fleetagent"
	"github.com/quartermaster-dev/quartermaster/kindcluster/kubetest"
)

// TestAgainstAPIServer runs the agent against a real kube-apiserver with
// the allocator's kubernetes backend writing the same objects.
func TestAgainstAPIServer(t *testing.T) {
	api := kubetest.Start(t, "fleetagent")
	c, dc := api.Cluster, api.Dynamic
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const ns = "games"
	api.Namespace(t, ctx, ns)
	fleets := api.Fleets(ns)
	if _, err := fleets.Create(ctx, &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "agones.dev/v1", "kind": "Fleet",
		"metadata": map[string]any{"name": "green"},
		"spec": map[string]any{"replicas": int64(5), "scheduling": "Packed", "template": map[string]any{
			"spec": map[string]any{
				"ports":    []any{map[string]any{"name": "default", "containerPort": int64(7654)}},
				"counters": map[string]any{"rooms": map[string]any{"count": int64(0), "capacity": int64(4)}},
				"template": map[string]any{"spec": map[string]any{"containers": []any{map[string]any{"name": "gs", "image": "example/gs:0.1"}}}},
			},
		}},
	}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	agent, err := fleetagent.New(fleetagent.Config{
		Client: dc, Namespace: ns, Nodes: 10, Startup: 300 * time.Millisecond, Session: 2 * time.Second, Interval: 100 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	actx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- agent.Run(actx) }()
	defer func() {
		stop()
		if err := <-done; err != nil {
			t.Errorf("agent: %v", err)
		}
	}()

	gss := api.GameServers(ns)
	waitFor(t, ctx, "5 Ready", func() (bool, string) { return counts(t, ctx, gss, "Ready", 5) })
	waitFor(t, ctx, "fleet status 5 ready", func() (bool, string) {
		f, err := fleets.Get(ctx, "green", metav1.GetOptions{})
		if err != nil {
			return false, err.Error()
		}
		r, _, _ := unstructured.NestedInt64(f.Object, "status", "readyReplicas")
		return r == 5, fmt.Sprint(f.Object["status"])
	})

	b, err := kube.New(kube.Config{REST: c.RESTConfig(), Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	if err := b.Start(ctx); err != nil {
		t.Fatal(err)
	}
	req, err := core.Normalize(&core.Request{Namespace: ns, Selectors: []core.Selector{{MatchLabels: map[string]string{core.FleetLabel: "green"}}}})
	if err != nil {
		t.Fatal(err)
	}
	alloc, err := b.Allocate(ctx, req, time.Now(), 1)
	if err != nil {
		t.Fatal(err)
	}
	// The session ends: the allocated server goes and a fresh one replaces it.
	waitFor(t, ctx, "allocated server replaced after its session", func() (bool, string) {
		_, err := gss.Get(ctx, alloc.GameServer.Name, metav1.GetOptions{})
		if err == nil {
			return false, alloc.GameServer.Name + " still there"
		}
		return counts(t, ctx, gss, "Ready", 5)
	})

	// Release sets Shutdown; the agent deletes and replaces it.
	alloc, err = b.Allocate(ctx, req, time.Now(), 2)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := b.Release(ctx, alloc.GameServer.Key(), ""); err != nil {
		t.Fatal(err)
	}
	waitFor(t, ctx, "released server replaced", func() (bool, string) {
		_, err := gss.Get(ctx, alloc.GameServer.Name, metav1.GetOptions{})
		if err == nil {
			return false, alloc.GameServer.Name + " still there"
		}
		return counts(t, ctx, gss, "Ready", 5)
	})

	for _, n := range []int64{9, 2} {
		// The agent writes the Fleet's status meanwhile: a conflict here is
		// expected, and answered like any client would, by reading again.
		err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
			f, err := fleets.Get(ctx, "green", metav1.GetOptions{})
			if err != nil {
				return err
			}
			if err := unstructured.SetNestedField(f.Object, n, "spec", "replicas"); err != nil {
				return err
			}
			_, err = fleets.Update(ctx, f, metav1.UpdateOptions{})
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
		waitFor(t, ctx, fmt.Sprintf("scaled to %d", n), func() (bool, string) { return counts(t, ctx, gss, "Ready", int(n)) })
	}
}

// counts reports whether exactly want servers exist, all in state st.
func counts(t *testing.T, ctx context.Context, gss dynamic.ResourceInterface, st string, want int) (bool, string) {
	t.Helper()
	l, err := gss.List(ctx, metav1.ListOptions{})
	if err != nil {
		return false, err.Error()
	}
	by := map[string]int{}
	for _, gs := range l.Items {
		s, _, _ := unstructured.NestedString(gs.Object, "status", "state")
		by[s]++
	}
	return len(l.Items) == want && by[st] == want, fmt.Sprint(by)
}

// waitFor waits for cond, for up to a minute.
func waitFor(t *testing.T, ctx context.Context, what string, cond func() (bool, string)) {
	t.Helper()
	kubetest.Eventually(t, ctx, time.Minute, what, cond)
}
