package allocator_test

import (
	"context"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/quartermaster-dev/quartermaster/allocator"
	"github.com/quartermaster-dev/quartermaster/allocator/pb/allocation"
	qmv1 "github.com/quartermaster-dev/quartermaster/allocator/pb/quartermaster/v1"
	"github.com/quartermaster-dev/quartermaster/core"
)

// keyed is an allocation request of fleet simple carrying key as Agones'
// clients can send it: an annotation in its metadata.
func keyed(key string) *allocation.AllocationRequest {
	return &allocation.AllocationRequest{
		Namespace:           "default",
		GameServerSelectors: []*allocation.GameServerSelector{{MatchLabels: map[string]string{core.FleetLabel: "simple"}}},
		Metadata:            &allocation.MetaPatch{Annotations: map[string]string{allocator.AllocationKeyAnnotation: key}},
	}
}

// Release by key gives back the allocation the caller made with the key,
// and only that; List shows the key. Another identity's key of the same
// name is its own.
func TestReleaseByKey(t *testing.T) {
	h := startHarness(t, harnessOpts{})
	dev, other := h.dial(nil), h.dial(h.pki.client(t, "other", nil, nil))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	a, err := h.grpcAllocate(dev, keyed("match-1"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := h.grpcAllocate(dev, keyed("match-2"))
	if err != nil {
		t.Fatal(err)
	}
	o, err := h.grpcAllocate(other, keyed("match-1"))
	if err != nil {
		t.Fatal(err)
	}
	list, err := h.admin(dev).List(ctx, &qmv1.ListRequest{})
	if err != nil {
		t.Fatal(err)
	}
	keys := map[string]string{}
	for _, al := range list.GetAllocations() {
		keys[al.GetGameServerName()] = al.GetAllocationKey()
	}
	if keys[a.GameServerName] != "match-1" || keys[b.GameServerName] != "match-2" || len(keys) != 2 {
		t.Fatalf("List: keys by server %v, want %s: match-1, %s: match-2", keys, a.GameServerName, b.GameServerName)
	}

	// Both a name and a key: refused.
	_, err = h.admin(dev).Release(ctx, &qmv1.ReleaseRequest{GameServerName: a.GameServerName, AllocationKey: "match-1"})
	wantCode(t, err, codes.InvalidArgument)

	rel, err := h.admin(dev).Release(ctx, &qmv1.ReleaseRequest{AllocationKey: "match-1"})
	if err != nil {
		t.Fatal(err)
	}
	if rel.GetAllocation().GetGameServerName() != a.GameServerName || rel.GetAllocation().GetAllocationKey() != "match-1" {
		t.Fatalf("released %v, want %s with key match-1", rel.GetAllocation(), a.GameServerName)
	}
	if _, ok := h.backend.Get(keyOf("default", a.GameServerName)); ok {
		t.Fatalf("%s still exists after its release", a.GameServerName)
	}
	for name, who := range map[string]string{b.GameServerName: "dev's match-2", o.GameServerName: "other's match-1"} {
		if gs, ok := h.backend.Get(keyOf("default", name)); !ok || gs.State != core.StateAllocated {
			t.Fatalf("%s (%s) is no longer allocated", name, who)
		}
	}
	// Released: again NotFound, and a request with the key is refused.
	_, err = h.admin(dev).Release(ctx, &qmv1.ReleaseRequest{AllocationKey: "match-1"})
	wantCode(t, err, codes.NotFound)

	// A key released before it was used: a request with it arriving later
	// is refused.
	_, err = h.admin(dev).Release(ctx, &qmv1.ReleaseRequest{AllocationKey: "match-3"})
	wantCode(t, err, codes.NotFound)

	// A key in another namespace than the one named is not released.
	_, err = h.admin(dev).Release(ctx, &qmv1.ReleaseRequest{Namespace: "other", AllocationKey: "match-2"})
	wantCode(t, err, codes.NotFound)
	if gs, ok := h.backend.Get(keyOf("default", b.GameServerName)); !ok || gs.State != core.StateAllocated {
		t.Fatalf("%s released by a Release naming another namespace", b.GameServerName)
	}
	// A key that is no key.
	_, err = h.admin(dev).Release(ctx, &qmv1.ReleaseRequest{AllocationKey: "has space"})
	wantCode(t, err, codes.InvalidArgument)
}
