package allocator_test

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/quartermaster-dev/quartermaster/allocator"
	"github.com/quartermaster-dev/quartermaster/allocator/pb/allocation"
	qmv1 "github.com/quartermaster-dev/quartermaster/allocator/pb/quartermaster/v1"
)

const ownershipLimits = `
apiVersion: quartermaster.dev/v1alpha1
kind: AllocatorLimits
default:
  namespaces: [default]
  maxAllocations: 1
identities:
  ops: {admin: true}
  slow: {requestsPerSecond: 1, burst: 2}
`

func TestLimitsAndOwnership(t *testing.T) {
	h := startHarness(t, harnessOpts{limits: ownershipLimits})
	ctx := context.Background()
	alice := h.dial(h.pki.client(t, "alice", nil, nil))
	bob := h.dial(h.pki.client(t, "bob", nil, nil))
	ops := h.dial(h.pki.client(t, "ops", nil, nil))

	a, err := h.grpcAllocate(alice, &allocation.AllocationRequest{})
	if err != nil {
		t.Fatal(err)
	}
	// Seed 004's "one instance per user": a second is refused.
	_, err = h.grpcAllocate(alice, &allocation.AllocationRequest{})
	wantCode(t, err, codes.ResourceExhausted)
	if !strings.Contains(err.Error(), "already holds 1 of its 1 allowed allocations") {
		t.Errorf("unclear message: %v", err)
	}
	// Namespaces not allowed are PermissionDenied.
	_, err = h.grpcAllocate(bob, &allocation.AllocationRequest{Namespace: "other"})
	wantCode(t, err, codes.PermissionDenied)
	b, err := h.grpcAllocate(bob, &allocation.AllocationRequest{})
	if err != nil {
		t.Fatal(err)
	}

	// Each sees only its own.
	la, err := h.admin(alice).List(ctx, &qmv1.ListRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if len(la.Allocations) != 1 || la.Allocations[0].GameServerName != a.GameServerName || la.Allocations[0].Owner != "alice" {
		t.Fatalf("alice's list = %v, want only %s", la, a.GameServerName)
	}
	// Alice may not look at Bob's, nor release his.
	_, err = h.admin(alice).List(ctx, &qmv1.ListRequest{Owner: "bob"})
	wantCode(t, err, codes.PermissionDenied)
	_, err = h.admin(alice).Release(ctx, &qmv1.ReleaseRequest{GameServerName: b.GameServerName})
	wantCode(t, err, codes.NotFound)
	// The same answer as for a server that does not exist: no probing.
	_, err = h.admin(alice).Release(ctx, &qmv1.ReleaseRequest{GameServerName: "no-such-server"})
	wantCode(t, err, codes.NotFound)
	if gs, _ := h.backend.Get(keyOf("default", b.GameServerName)); gs == nil || gs.State != "Allocated" {
		t.Fatalf("bob's server after alice's release attempt: %+v", gs)
	}

	// The admin sees both and may release Bob's.
	all, err := h.admin(ops).List(ctx, &qmv1.ListRequest{AllOwners: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(all.Allocations) != 2 {
		t.Fatalf("admin list has %d allocations, want 2", len(all.Allocations))
	}
	if _, err := h.admin(ops).Release(ctx, &qmv1.ReleaseRequest{GameServerName: b.GameServerName}); err != nil {
		t.Fatal(err)
	}

	// Alice releases hers and may allocate again.
	rel, err := h.admin(alice).Release(ctx, &qmv1.ReleaseRequest{GameServerName: a.GameServerName})
	if err != nil {
		t.Fatal(err)
	}
	if rel.Allocation.GetGameServerName() != a.GameServerName {
		t.Errorf("released %v", rel)
	}
	if _, err := h.grpcAllocate(alice, &allocation.AllocationRequest{}); err != nil {
		t.Fatalf("after releasing: %v", err)
	}
	// Released twice: gone.
	_, err = h.admin(alice).Release(ctx, &qmv1.ReleaseRequest{GameServerName: a.GameServerName})
	wantCode(t, err, codes.NotFound)

	// Rate: a burst of 2, then refused.
	slow := h.dial(h.pki.client(t, "slow", nil, nil))
	for i := range 3 {
		_, err := h.grpcAllocate(slow, &allocation.AllocationRequest{})
		if i < 2 && err != nil {
			t.Fatal(err)
		}
		if i == 2 {
			wantCode(t, err, codes.ResourceExhausted)
			if !strings.Contains(err.Error(), "request rate") {
				t.Errorf("unclear message: %v", err)
			}
		}
	}

	m := h.svc.Metrics()
	for reason, want := range map[string]float64{"max_allocations": 1, "namespace": 1, "rate": 1} {
		if got := testutil.ToFloat64(m.Rejections.WithLabelValues(reason)); got != want {
			t.Errorf("rejections{reason=%s} = %v, want %v", reason, got, want)
		}
	}
	if got := testutil.ToFloat64(m.AdminCalls.WithLabelValues("Release", "NotFound")); got != 3 {
		t.Errorf("Release NotFound = %v, want 3", got)
	}
}

// A caller cannot claim another's ownership through its own metadata.
func TestOwnerCannotBeForged(t *testing.T) {
	h := startHarness(t, harnessOpts{})
	resp, err := h.grpcAllocate(h.dial(nil), &allocation.AllocationRequest{
		Metadata: &allocation.MetaPatch{Annotations: map[string]string{allocator.OwnerAnnotation: "someone-else"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.Metadata.Annotations[allocator.OwnerAnnotation]; got != "dev" {
		t.Errorf("owner = %q, want dev", got)
	}
}

func TestParseLimitsErrors(t *testing.T) {
	for name, in := range map[string]string{
		"unknown field": "apiVersion: quartermaster.dev/v1alpha1\nkind: AllocatorLimits\nidentities: {a: {maxAllocation: 1}}\n",
		"negative":      "apiVersion: quartermaster.dev/v1alpha1\nkind: AllocatorLimits\ndefault: {maxAllocations: -1}\n",
		"bad namespace": "apiVersion: quartermaster.dev/v1alpha1\nkind: AllocatorLimits\ndefault: {namespaces: [Bad_NS]}\n",
		"wrong kind":    "apiVersion: quartermaster.dev/v1alpha1\nkind: Limits\n",
		"not yaml":      "{{{",
	} {
		if _, err := allocator.ParseLimits([]byte(in)); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

func TestLimitsFixtures(t *testing.T) {
	files, _ := filepath.Glob("testdata/*limits*.yaml")
	if len(files) < 2 {
		t.Fatal("no fixtures")
	}
	for _, f := range files {
		_, err := allocator.LoadLimits(f)
		if valid := strings.HasPrefix(filepath.Base(f), "valid-"); valid != (err == nil) {
			t.Errorf("%s: %v", f, err)
		}
	}
}

// Limits edited while the allocator runs take effect without a restart; an
// edit that does not validate is reported and changes nothing.
func TestLimitsReload(t *testing.T) {
	h := startHarness(t, harnessOpts{limits: ownershipLimits})
	alice := h.dial(h.pki.client(t, "alice", nil, nil))
	_, err := h.grpcAllocate(alice, &allocation.AllocationRequest{Namespace: "other"})
	wantCode(t, err, codes.PermissionDenied)

	path := filepath.Join(t.TempDir(), "limits.yaml")
	if err := os.WriteFile(path, []byte(ownershipLimits), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var logs syncBuffer
	applied := make(chan *allocator.LimitsConfig, 4)
	lf, err := allocator.OpenLimitsFile(path)
	if err != nil {
		t.Fatal(err)
	}
	go lf.Watch(ctx, 5*time.Millisecond, slog.New(slog.NewTextHandler(&logs, nil)), func(c *allocator.LimitsConfig) {
		h.svc.SetLimits(c)
		applied <- c
	})
	write := func(s string) {
		t.Helper()
		// Through a rename, as a ConfigMap volume updates.
		tmp := path + ".tmp"
		if err := os.WriteFile(tmp, []byte(s), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, path); err != nil {
			t.Fatal(err)
		}
	}
	write("apiVersion: quartermaster.dev/v1alpha1\nkind: AllocatorLimits\ndefault: {namespaces: [default], maxAlocations: 1}\n")
	for deadline := time.Now().Add(5 * time.Second); !strings.Contains(logs.String(), "limits file invalid"); time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("an invalid edit was not reported:\n%s", logs.String())
		}
	}
	if !strings.Contains(logs.String(), "maxAlocations") {
		t.Errorf("the report does not name the bad key:\n%s", logs.String())
	}
	_, err = h.grpcAllocate(alice, &allocation.AllocationRequest{Namespace: "other"})
	wantCode(t, err, codes.PermissionDenied) // the old limits still hold

	write("apiVersion: quartermaster.dev/v1alpha1\nkind: AllocatorLimits\ndefault: {namespaces: [default, other]}\n")
	select {
	case <-applied:
	case <-time.After(5 * time.Second):
		t.Fatalf("the edit was not applied:\n%s", logs.String())
	}
	if _, err := h.grpcAllocate(alice, &allocation.AllocationRequest{Namespace: "other"}); err != nil {
		t.Fatalf("after the reload: %v", err)
	}
	if len(applied) != 0 {
		t.Fatal("the invalid edit was applied")
	}
}

// TestReallocationAtTheLimit: an identity at its maxAllocations may still
// re-allocate a server it holds (a counter action on its own session, with
// gameServerState Allocated), which adds nothing to what it holds; a request
// that could take a new server is still refused, and so is re-allocating
// when it holds nothing that matches.
func TestReallocationAtTheLimit(t *testing.T) {
	h := startHarness(t, harnessOpts{limits: ownershipLimits})
	alice := h.dial(h.pki.client(t, "alice", nil, nil))
	bob := h.dial(h.pki.client(t, "bob", nil, nil))
	lobby := func(state allocation.GameServerSelector_GameServerState) *allocation.AllocationRequest {
		return &allocation.AllocationRequest{
			GameServerSelectors: []*allocation.GameServerSelector{{
				MatchLabels:     map[string]string{"mode": "lobby"},
				GameServerState: state,
			}},
			Counters: map[string]*allocation.CounterAction{"rooms": {
				Action: wrapperspb.String("Increment"), Amount: wrapperspb.Int64(1),
			}},
		}
	}
	first, err := h.grpcAllocate(alice, lobby(allocation.GameServerSelector_READY))
	if err != nil {
		t.Fatal(err)
	}
	// Bob, at his limit with nothing of his in state Allocated, is refused
	// for the limit, not told that nothing matched.
	if _, err := h.grpcAllocate(bob, &allocation.AllocationRequest{}); err != nil {
		t.Fatal(err)
	}
	_, err = h.grpcAllocate(bob, lobby(allocation.GameServerSelector_ALLOCATED))
	wantCode(t, err, codes.ResourceExhausted)

	// Alice re-allocates her own lobby twice more: rooms 1 -> 2 -> 3.
	for want := 2; want <= 3; want++ {
		again, err := h.grpcAllocate(alice, lobby(allocation.GameServerSelector_ALLOCATED))
		if err != nil {
			t.Fatalf("re-allocation %d at the limit: %v", want, err)
		}
		if again.GameServerName != first.GameServerName {
			t.Fatalf("re-allocated %s, want her own %s", again.GameServerName, first.GameServerName)
		}
		if got := h.backend.Index().CountAllocated("alice"); got != 1 {
			t.Fatalf("alice holds %d servers, want 1", got)
		}
	}
	// Preferring a new server first is still refused at the limit... unless
	// an Allocated selector of hers follows, which is then the one tried.
	mixed := lobby(allocation.GameServerSelector_READY)
	_, err = h.grpcAllocate(alice, mixed)
	wantCode(t, err, codes.ResourceExhausted)
	mixed.GameServerSelectors = append(mixed.GameServerSelectors, &allocation.GameServerSelector{
		MatchLabels: map[string]string{"mode": "lobby"}, GameServerState: allocation.GameServerSelector_ALLOCATED,
	})
	// Her lobby is full now (3 of 3 rooms): the counter action cannot
	// apply, but the server still matches the selector; what matters is
	// that she gets her own server and not a new one.
	got, err := h.grpcAllocate(alice, mixed)
	if err != nil || got.GameServerName != first.GameServerName {
		t.Fatalf("mixed request at the limit: %v, %v; want her own %s", got, err, first.GameServerName)
	}
}
