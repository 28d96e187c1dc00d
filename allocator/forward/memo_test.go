package forward_test

import (
	"context"
	"testing"
	"time"

	"github.com/quartermaster-dev/quartermaster/allocator/forward"
	"github.com/quartermaster-dev/quartermaster/allocator/pb/allocation"
	"github.com/quartermaster-dev/quartermaster/core"
)

// TestForwardWithMemo: a request forwarded with its Memo goes out as it
// was encoded the first time for that caller, so the remote makes the
// same allocation of it (a change to the request after that, which the
// allocator never makes to a prepared one, shows which encoding was sent);
// another caller gets an encoding of its own, with its own identity.
func TestForwardWithMemo(t *testing.T) {
	p := newRigPKI(t)
	a := startAllocator(t, p, "a", rigOptions{fleets: fleetsA})
	b := startAllocator(t, p, "b", rigOptions{fleets: fleetsB})
	a.store.Replace(forward.NewSet(map[string][]core.Policy{"default": {
		policy("to-b", "b", 0, 1, "b", "", "fwd", b.addr),
	}}, []forward.Secret{p.secret(t, "fwd", "fwd-1")}))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	in := multiRequest("b", nil)
	in.Metadata = &allocation.MetaPatch{Labels: map[string]string{"match": "first"}}
	var memo forward.Memo
	allocate := func(identity string) *core.GameServer {
		t.Helper()
		resp, err := a.fwd.AllocateFor(ctx, identity, in, &memo, 1, nil)
		if err != nil {
			t.Fatal(err)
		}
		gs, ok := b.backend.Get(core.Key{Namespace: "default", Name: resp.GetGameServerName()})
		if !ok || gs.State != core.StateAllocated {
			t.Fatalf("%s: b has no allocated server %s", identity, resp.GetGameServerName())
		}
		return gs
	}
	check := func(gs *core.GameServer, identity, match string) {
		t.Helper()
		if got := gs.Annotations[forward.ForwardedForAnnotation]; got != identity {
			t.Errorf("%s: forwarded for %q, want %q", gs.Name, got, identity)
		}
		if got := gs.Labels["match"]; got != match {
			t.Errorf("%s: label match=%q, want %q", gs.Name, got, match)
		}
	}
	check(allocate("alice"), "alice", "first")
	in.Metadata.Labels = map[string]string{"match": "second"}
	check(allocate("alice"), "alice", "first") // the Memo's encoding
	check(allocate("bob"), "bob", "second")    // a new caller: encoded now
	check(allocate("alice"), "alice", "first")

	// Without a Memo every forward is built from the request as it is.
	resp, err := a.fwd.AllocateFor(ctx, "alice", in, nil, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	gs, _ := b.backend.Get(core.Key{Namespace: "default", Name: resp.GetGameServerName()})
	check(gs, "alice", "second")
}
