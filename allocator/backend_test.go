package allocator_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/quartermaster-dev/quartermaster/allocator"
	"github.com/quartermaster-dev/quartermaster/allocator/pb/allocation"
	"github.com/quartermaster-dev/quartermaster/core"
)

// storeBackend is the shape of a store-backed backend (Kubernetes): an
// index that caches the store, and commits through CommitLoop.
type storeBackend struct {
	ix     *core.Index
	commit func(ctx context.Context, res *core.Result) (*core.GameServer, error)
}

func (b *storeBackend) Allocate(ctx context.Context, req *core.Request, now time.Time, seed uint64) (*allocator.Allocation, error) {
	return allocator.CommitLoop(ctx, b.ix, b, req, now, seed, 3)
}
func (b *storeBackend) Commit(ctx context.Context, res *core.Result) (*core.GameServer, error) {
	return b.commit(ctx, res)
}
func (b *storeBackend) Get(k core.Key) (*core.GameServer, bool) { return b.ix.Get(k) }
func (b *storeBackend) Allocated() []*core.GameServer           { return nil }
func (b *storeBackend) AllocatedTo(string) []*core.GameServer   { return nil }
func (b *storeBackend) CountAllocatedTo(string) int             { return 0 }
func (b *storeBackend) Release(context.Context, core.Key, string) (*core.GameServer, error) {
	return nil, allocator.ErrNotFound
}
func (b *storeBackend) Ready() bool { return true }

func newStoreBackend(n int) *storeBackend {
	b := &storeBackend{ix: core.NewIndex()}
	for i := range n {
		b.ix.Upsert(&core.GameServer{Namespace: "default", Name: "gs-" + string(rune('a'+i)), State: core.StateReady, NodeName: "n1", Version: "1"})
	}
	return b
}

func newServiceFor(t *testing.T, b allocator.Backend) *allocator.Service {
	t.Helper()
	s, err := allocator.NewService(allocator.Options{Backend: b})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// The caller's deadline bounds the work: a commit that would hang is cut
// off when the deadline passes, and the answer is DeadlineExceeded.
func TestDeadlineBoundsWork(t *testing.T) {
	b := newStoreBackend(2)
	b.commit = func(ctx context.Context, res *core.Result) (*core.GameServer, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	}
	svc := newServiceFor(t, b)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := svc.Allocate(ctx, "dev", &allocation.AllocationRequest{})
	wantCode(t, err, codes.DeadlineExceeded)
	if d := time.Since(start); d > time.Second {
		t.Fatalf("took %v after a 50ms deadline", d)
	}
	// The hold was dropped: both servers are candidates again.
	b.commit = func(_ context.Context, res *core.Result) (*core.GameServer, error) { return res.GameServer, nil }
	for range 2 {
		if _, err := svc.Allocate(context.Background(), "dev", &allocation.AllocationRequest{}); err != nil {
			t.Fatal(err)
		}
	}
	// A deadline already passed does no work at all.
	done, cancel2 := context.WithCancel(context.Background())
	cancel2()
	_, err = svc.Allocate(done, "dev", &allocation.AllocationRequest{})
	wantCode(t, err, codes.Canceled)
}

// Commits that keep losing races end as Aborted (Agones' Contention) after
// the retries, with the fresh state put back into the index each time.
func TestContentionIsAborted(t *testing.T) {
	b := newStoreBackend(3)
	var commits atomic.Int32
	b.commit = func(_ context.Context, res *core.Result) (*core.GameServer, error) {
		commits.Add(1)
		fresh := *res.Previous
		fresh.Version = "2" // someone else wrote it; still Ready
		return nil, &allocator.ConflictError{Key: res.Previous.Key(), Fresh: &fresh}
	}
	svc := newServiceFor(t, b)
	_, err := svc.Allocate(context.Background(), "dev", &allocation.AllocationRequest{})
	wantCode(t, err, codes.Aborted)
	if !strings.Contains(status.Convert(err).Message(), "contention") {
		t.Errorf("unclear message: %v", err)
	}
	if got := commits.Load(); got != 4 {
		t.Errorf("%d commits, want 4 (1 + 3 retries)", got)
	}
	if got := testutil.ToFloat64(svc.Metrics().Retries.WithLabelValues("default", "")); got != 3 {
		t.Errorf("retries = %v, want 3", got)
	}

	// A conflict then a success: allocated, one retry counted.
	var n atomic.Int32
	b.commit = func(_ context.Context, res *core.Result) (*core.GameServer, error) {
		if n.Add(1) == 1 {
			return nil, &allocator.ConflictError{Key: res.Previous.Key()} // gone
		}
		return res.GameServer, nil
	}
	if _, err := svc.Allocate(context.Background(), "dev", &allocation.AllocationRequest{}); err != nil {
		t.Fatal(err)
	}
	if got := testutil.ToFloat64(svc.Metrics().Retries.WithLabelValues("default", "")); got != 4 {
		t.Errorf("retries = %v, want 4 (3 + 1)", got)
	}
	if _, ok := b.ix.Get(core.Key{Namespace: "default", Name: "gs-a"}); ok {
		t.Errorf("a server reported gone by the store is still in the index")
	}
	// Any other commit error is Internal, and the hold is dropped.
	b.commit = func(context.Context, *core.Result) (*core.GameServer, error) { return nil, errors.New("store down") }
	_, err = svc.Allocate(context.Background(), "dev", &allocation.AllocationRequest{})
	wantCode(t, err, codes.Internal)
}

// --unallocated-code: "nothing matches" answers with the configured code.
func TestUnallocatedCode(t *testing.T) {
	b := newStoreBackend(0)
	svc, err := allocator.NewService(allocator.Options{Backend: b, UnallocatedCode: codes.Unavailable})
	if err != nil {
		t.Fatal(err)
	}
	_, err = svc.Allocate(context.Background(), "dev", &allocation.AllocationRequest{})
	wantCode(t, err, codes.Unavailable)
	if allocator.HTTPStatus(codes.Unavailable) != 503 || allocator.HTTPStatus(codes.ResourceExhausted) != 429 || allocator.HTTPStatus(codes.Aborted) != 409 {
		t.Error("HTTP status mapping")
	}
}

// Re-allocating a live server makes the caller its owner, so a non-admin may
// only re-allocate servers it owns: otherwise one identity could take over,
// then release, another's running session.
func TestReallocationIsScopedToTheOwner(t *testing.T) {
	b := newStoreBackend(1)
	b.commit = func(_ context.Context, res *core.Result) (*core.GameServer, error) { return res.GameServer, nil }
	s := newServiceFor(t, b)
	ctx := context.Background()
	live := &allocation.AllocationRequest{GameServerSelectors: []*allocation.GameServerSelector{
		{GameServerState: allocation.GameServerSelector_ALLOCATED}}}
	first, err := s.Allocate(ctx, "bob", &allocation.AllocationRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Allocate(ctx, "mallory", live); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("mallory re-allocating bob's server: %v, want ResourceExhausted", err)
	}
	// The deprecated required selector is scoped the same way.
	deprecated := &allocation.AllocationRequest{RequiredGameServerSelector: &allocation.GameServerSelector{GameServerState: allocation.GameServerSelector_ALLOCATED}}
	if _, err := s.Allocate(ctx, "mallory", deprecated); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("mallory via the required selector: %v, want ResourceExhausted", err)
	}
	again, err := s.Allocate(ctx, "bob", live)
	if err != nil || again.GameServerName != first.GameServerName {
		t.Fatalf("bob re-allocating his own server: %v, %v", again, err)
	}
	if got := again.Metadata.Annotations[allocator.OwnerAnnotation]; got != "bob" {
		t.Fatalf("owner after bob's re-allocation = %q", got)
	}
}

// A committer that keeps the index itself answers Reconciled: CommitLoop
// then leaves the index alone, so what the committer (its informer) put
// there while the commit was failing stands, and the next choice is made on
// it. Here the informer delivers a newer state of the server the write lost
// on: CommitLoop must neither drop it nor overwrite it.
func TestCommitLoopLeavesReconciledIndexAlone(t *testing.T) {
	b := newStoreBackend(1)
	tries := 0
	b.commit = func(_ context.Context, res *core.Result) (*core.GameServer, error) {
		tries++
		if tries == 1 {
			newer := *res.Previous
			newer.Version = "2"
			b.ix.Upsert(&newer)
			return nil, &allocator.ConflictError{Key: res.Previous.Key(), Reconciled: true}
		}
		if res.Previous.Version != "2" {
			t.Errorf("second choice made on version %s, want the informer's 2", res.Previous.Version)
		}
		return res.GameServer, nil
	}
	a, err := b.Allocate(context.Background(), mustNormalize(t, &core.Request{}), time.Now(), 1)
	if err != nil {
		t.Fatal(err)
	}
	if a.Retries != 1 {
		t.Fatalf("%d retries, want 1", a.Retries)
	}
}

func mustNormalize(t *testing.T, r *core.Request) *core.Request {
	t.Helper()
	n, err := core.Normalize(r)
	if err != nil {
		t.Fatal(err)
	}
	return n
}
