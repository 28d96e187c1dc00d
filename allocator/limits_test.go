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
