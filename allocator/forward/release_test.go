package forward_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"github.com/quartermaster-dev/quartermaster/allocator"
	"github.com/quartermaster-dev/quartermaster/allocator/forward"
	qmv1 "github.com/quartermaster-dev/quartermaster/allocator/pb/quartermaster/v1"
	"github.com/quartermaster-dev/quartermaster/core"
)

func dialAdmin(t testing.TB, p *rigPKI, addr, identity string) qmv1.AllocationAdminClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(p.clientTLS(t, identity))))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return qmv1.NewAllocationAdminClient(conn)
}

// TestForwardedRelease allocates through an entry allocator on two remote
// ones and gives the servers back through the entry, with the response's
// source: only the caller the allocation was forwarded for may, only at
// the allocator that made it.
func TestForwardedRelease(t *testing.T) {
	p := newRigPKI(t)
	a := startAllocator(t, p, "a", rigOptions{fleets: fleetsA})
	// b and c have the same fleets and seed, so their servers have the
	// same names: only the source tells them apart.
	b := startAllocator(t, p, "b", rigOptions{fleets: fleetsC})
	c := startAllocator(t, p, "c", rigOptions{fleets: fleetsC})
	a.store.Replace(forward.NewSet(map[string][]core.Policy{"default": {
		policy("to-b", "b", 0, 1, "b", "", "fwd", b.addr),
		policy("to-c", "c", 0, 1, "c", "", "fwd", c.addr),
	}}, []forward.Secret{p.secret(t, "fwd", "fwd-1")}))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	dev := dial(t, p, a.addr, "dev")
	rb, err := dev.Allocate(ctx, multiRequest("b", nil))
	if err != nil {
		t.Fatal(err)
	}
	rc, err := dev.Allocate(ctx, multiRequest("c", nil))
	if err != nil {
		t.Fatal(err)
	}
	if rb.GetSource() != b.addr || rc.GetSource() != c.addr || rb.GetGameServerName() != rc.GetGameServerName() {
		t.Fatalf("b answered %s from %s, c %s from %s: want one name from each", rb.GetGameServerName(), rb.GetSource(), rc.GetGameServerName(), rc.GetSource())
	}
	name := rb.GetGameServerName()
	key := core.Key{Namespace: "default", Name: name}
	allocated := func(r *rigAllocator) bool {
		gs, ok := r.backend.Get(key)
		return ok && gs.State == core.StateAllocated
	}
	if gs, _ := b.backend.Get(key); gs.Annotations[forward.ForwardedForAnnotation] != "dev" || gs.Annotations[allocator.OwnerAnnotation] != "fwd-1" {
		t.Fatalf("b's server: forwarded-for %q, owner %q; want dev, fwd-1", gs.Annotations[forward.ForwardedForAnnotation], gs.Annotations[allocator.OwnerAnnotation])
	}

	release := func(identity, source string) (*qmv1.ReleaseResponse, error) {
		return dialAdmin(t, p, a.addr, identity).Release(ctx, &qmv1.ReleaseRequest{GameServerName: name, Source: source})
	}
	wantCode := func(err error, code codes.Code, says string) {
		t.Helper()
		if status.Code(err) != code || !strings.Contains(status.Convert(err).Message(), says) {
			t.Fatalf("got %v, want %v saying %q", err, code, says)
		}
	}
	// Another caller of the entry is refused, though the entry's
	// connection identity owns the server at b.
	_, err = release("eve", rb.GetSource())
	wantCode(err, codes.NotFound, "you hold no allocation")
	// Without a source the entry looks only at its own servers.
	_, err = release("dev", "")
	wantCode(err, codes.NotFound, "you hold no allocation")
	_, err = release("dev", "127.0.0.1:1")
	wantCode(err, codes.FailedPrecondition, "not an endpoint of any GameServerAllocationPolicy")
	_, err = release("dev", "not an endpoint")
	wantCode(err, codes.InvalidArgument, "source")
	if !allocated(b) || !allocated(c) {
		t.Fatal("a refused Release gave a server back")
	}

	resp, err := release("dev", rb.GetSource())
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetAllocation().GetGameServerName() != name || resp.GetAllocation().GetOwner() != "dev" {
		t.Errorf("released %s owned by %q, want %s owned by dev", resp.GetAllocation().GetGameServerName(), resp.GetAllocation().GetOwner(), name)
	}
	if allocated(b) || !allocated(c) {
		t.Fatalf("after releasing at b: b allocated %v (want false), c %v (want true)", allocated(b), allocated(c))
	}
	_, err = release("dev", rb.GetSource())
	wantCode(err, codes.NotFound, "you hold no allocation")
	if _, err := release("dev", rc.GetSource()); err != nil || allocated(c) {
		t.Fatalf("release at c: %v (allocated after: %v)", err, allocated(c))
	}
}
