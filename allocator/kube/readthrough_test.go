package kube_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/quartermaster-dev/quartermaster/allocator"
	"github.com/quartermaster-dev/quartermaster/allocator/kube"
	"github.com/quartermaster-dev/quartermaster/allocator/pb/allocation"
	qmv1 "github.com/quartermaster-dev/quartermaster/allocator/pb/quartermaster/v1"
	"github.com/quartermaster-dev/quartermaster/core"
	"github.com/quartermaster-dev/quartermaster/kindcluster/kubetest"
)

// A release sent to a replica whose cache has not seen the allocation
// (another replica made it a moment ago) gives the server back: the
// replica reads the server from the API server before it answers that
// the caller holds nothing. The second replica here never starts its
// informer, so its cache is as far behind as a cache can be; the caller's
// ownership is still checked on what the API server holds.
func TestReleaseReadsThroughALaggingCache(t *testing.T) {
	api := kubetest.Start(t, "kube-release-read-through")
	c := api.Cluster
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const ns = "read-through"
	api.Namespace(t, ctx, ns)
	api.CreateFleet(t, ctx, ns, "blue", 0, 3)
	gss := api.GameServers(ns)
	service := func(start bool) *allocator.Service {
		b, err := kube.New(kube.Config{REST: c.RESTConfig(), Namespace: ns, KeyNamespace: ns})
		if err != nil {
			t.Fatal(err)
		}
		if start {
			if err := b.Start(ctx); err != nil {
				t.Fatal(err)
			}
		}
		svc, err := allocator.NewService(allocator.Options{Backend: b})
		if err != nil {
			t.Fatal(err)
		}
		return svc
	}
	made, behind := service(true), service(false)
	req := &allocation.AllocationRequest{Namespace: ns,
		GameServerSelectors: []*allocation.GameServerSelector{{MatchLabels: map[string]string{core.FleetLabel: "blue"}}}}
	var names []string
	for range 2 {
		resp, err := made.Allocate(ctx, "alice", req)
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, resp.GetGameServerName())
	}

	// Another caller is refused on what the API server says, as on the
	// cache: the same NotFound, and the server stays Allocated.
	_, err := behind.Release(ctx, "mallory", &qmv1.ReleaseRequest{Namespace: ns, GameServerName: names[1]})
	if status.Code(err) != codes.NotFound {
		t.Fatalf("release of alice's server by mallory on the lagging replica: %v, want NotFound", err)
	}
	if _, err := behind.Release(ctx, "alice", &qmv1.ReleaseRequest{Namespace: ns, GameServerName: names[0]}); err != nil {
		t.Fatalf("release on the replica that has not seen the allocation: %v", err)
	}
	_, err = behind.Release(ctx, "alice", &qmv1.ReleaseRequest{Namespace: ns, GameServerName: names[0]})
	if status.Code(err) != codes.NotFound {
		t.Fatalf("second release of the same server: %v, want NotFound", err)
	}

	// By idempotency key: the lagging replica has neither the server in its
	// cache nor the key in its table; the key's record names the server.
	keyed := &allocation.AllocationRequest{Namespace: ns,
		Metadata:            &allocation.MetaPatch{Annotations: map[string]string{allocator.AllocationKeyAnnotation: "match-7"}},
		GameServerSelectors: []*allocation.GameServerSelector{{MatchLabels: map[string]string{core.FleetLabel: "blue"}}}}
	resp, err := made.Allocate(ctx, "alice", keyed)
	if err != nil {
		t.Fatal(err)
	}
	names = append(names, resp.GetGameServerName())
	if _, err := behind.Release(ctx, "mallory", &qmv1.ReleaseRequest{Namespace: ns, AllocationKey: "match-7"}); status.Code(err) != codes.NotFound {
		t.Fatalf("release of alice's key by mallory on the lagging replica: %v, want NotFound", err)
	}
	if _, err := behind.Release(ctx, "alice", &qmv1.ReleaseRequest{Namespace: ns, AllocationKey: "match-7"}); err != nil {
		t.Fatalf("release by key on the replica that has not seen the allocation: %v", err)
	}
	// The replica that made it still has the key in its table, and may
	// not have seen the release yet: it reads the server through.
	if _, err := made.Allocate(ctx, "alice", keyed); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("the released key sent again to the replica that made it: %v, want FailedPrecondition", err)
	}

	left := map[string]string{}
	l, err := gss.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range l.Items {
		st, _, _ := unstructured.NestedString(o.Object, "status", "state")
		left[o.GetName()] = st
	}
	if left[names[0]] == string(core.StateAllocated) || left[names[1]] != string(core.StateAllocated) || left[names[2]] == string(core.StateAllocated) {
		t.Fatalf("states after the releases: %v; want %s and %s released, %s still Allocated", left, names[0], names[2], names[1])
	}
}
