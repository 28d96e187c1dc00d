package allocator_test

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/quartermaster-dev/quartermaster/allocator"
	"github.com/quartermaster-dev/quartermaster/allocator/forward"
	"github.com/quartermaster-dev/quartermaster/allocator/memory"
	"github.com/quartermaster-dev/quartermaster/allocator/pb/allocation"
	qmv1 "github.com/quartermaster-dev/quartermaster/allocator/pb/quartermaster/v1"
	"github.com/quartermaster-dev/quartermaster/allocator/wire"
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
// and only that; List shows the key; the key is then released (a request
// with it is refused, never given a new server), as is a key released
// before any allocation with it was made (a late request is refused too).
// Another identity's key of the same name is its own.
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
	_, err = h.grpcAllocate(dev, keyed("match-1"))
	wantCode(t, err, codes.FailedPrecondition)

	// A key released before it was used: a request with it arriving later
	// is refused.
	_, err = h.admin(dev).Release(ctx, &qmv1.ReleaseRequest{AllocationKey: "match-3"})
	wantCode(t, err, codes.NotFound)
	_, err = h.grpcAllocate(dev, keyed("match-3"))
	wantCode(t, err, codes.FailedPrecondition)

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

// keyClock is a service clock the test moves.
type keyClock struct{ ns atomic.Int64 }

func newKeyClock() *keyClock {
	c := &keyClock{}
	c.ns.Store(time.Unix(1_800_000_000, 0).UnixNano())
	return c
}
func (c *keyClock) now() time.Time                       { return time.Unix(0, c.ns.Load()) }
func (c *keyClock) advance(d time.Duration)              { c.ns.Add(int64(d)) }
func keyMetric(h *harness, c prometheus.Counter) float64 { return testutil.ToFloat64(c) }

// sameAnswer fails unless a and b name the same server, address and ports.
func sameAnswer(t *testing.T, a, b *allocation.AllocationResponse) {
	t.Helper()
	if a.GetGameServerName() != b.GetGameServerName() || a.GetAddress() != b.GetAddress() || !proto.Equal(&allocation.AllocationResponse{Ports: a.GetPorts()}, &allocation.AllocationResponse{Ports: b.GetPorts()}) {
		t.Fatalf("answers differ: %v and %v", a, b)
	}
}

func (h *harness) allocatedServers() int { return len(h.backend.Allocated()) }

// The same key again, from the same identity, while the allocation
// stands: the same answer (server, address, ports), no second server; the
// key is on the server. Without a key the same request takes another.
func TestKeyReplaysTheAllocation(t *testing.T) {
	h := startHarness(t, harnessOpts{})
	dev := h.dial(nil)
	first, err := h.grpcAllocate(dev, keyed("match-1"))
	if err != nil {
		t.Fatal(err)
	}
	again, err := h.grpcAllocate(dev, keyed("match-1"))
	if err != nil {
		t.Fatal(err)
	}
	sameAnswer(t, first, again)
	if n := h.allocatedServers(); n != 1 {
		t.Fatalf("%d servers allocated for one key, want 1", n)
	}
	gs, _ := h.backend.Get(keyOf("default", first.GameServerName))
	if gs.Annotations[allocator.AllocationKeyAnnotation] != "match-1" || gs.Annotations[allocator.OwnerAnnotation] != "dev" {
		t.Fatalf("server annotations %v: want the key and the owner", gs.Annotations)
	}
	m := h.svc.Metrics()
	if k, r := keyMetric(h, m.Keys), keyMetric(h, m.KeyReplays); k != 2 || r != 1 {
		t.Fatalf("keys seen %v, replays %v; want 2, 1", k, r)
	}
	// Another identity's key of the same name is another allocation.
	o, err := h.grpcAllocate(h.dial(h.pki.client(t, "other", nil, nil)), keyed("match-1"))
	if err != nil {
		t.Fatal(err)
	}
	if o.GameServerName == first.GameServerName {
		t.Fatalf("another identity's key %q was answered with dev's allocation", "match-1")
	}
	// No key: a new server each time.
	plain := keyed("x")
	plain.Metadata = nil
	a, err := h.grpcAllocate(dev, plain)
	if err != nil {
		t.Fatal(err)
	}
	if a.GameServerName == first.GameServerName || h.allocatedServers() != 3 {
		t.Fatalf("a request without a key got %s (%d allocated)", a.GameServerName, h.allocatedServers())
	}
}

// roomsRequest re-allocates the caller's own rooms server (state
// Allocated) adding a room and a player, or allocates a Ready one.
func roomsRequest(key string, state allocation.GameServerSelector_GameServerState) *allocation.AllocationRequest {
	r := &allocation.AllocationRequest{
		GameServerSelectors: []*allocation.GameServerSelector{{MatchLabels: map[string]string{core.FleetLabel: "rooms"}, GameServerState: state}},
		Counters:            map[string]*allocation.CounterAction{"rooms": {Action: wrapperspb.String("Increment"), Amount: wrapperspb.Int64(1)}},
		Lists:               map[string]*allocation.ListAction{"players": {AddValues: []string{"p1"}}},
	}
	if key != "" {
		r.Metadata = &allocation.MetaPatch{Annotations: map[string]string{allocator.AllocationKeyAnnotation: key}}
	}
	return r
}

// A counter increment and a list append are applied once per key: a
// re-allocation of one's own session (a player joining) sent twice with a
// key adds one room and one player.
func TestKeyAppliesCounterAndListOnce(t *testing.T) {
	h := startHarness(t, harnessOpts{})
	dev := h.dial(nil)
	first, err := h.grpcAllocate(dev, roomsRequest("", allocation.GameServerSelector_READY))
	if err != nil {
		t.Fatal(err)
	}
	key := keyOf("default", first.GameServerName)
	var answers []*allocation.AllocationResponse
	for range 3 {
		a, err := h.grpcAllocate(dev, roomsRequest("join-p1", allocation.GameServerSelector_ALLOCATED))
		if err != nil {
			t.Fatal(err)
		}
		answers = append(answers, a)
	}
	gs, _ := h.backend.Get(key)
	if c := gs.Counters["rooms"].Count; c != 2 {
		t.Fatalf("rooms = %d after one allocation and one keyed re-allocation sent three times, want 2", c)
	}
	if got := gs.Lists["players"].Values; len(got) != 1 || got[0] != "p1" {
		t.Fatalf("players = %v, want [p1]", got)
	}
	for _, a := range answers {
		sameAnswer(t, answers[0], a)
		if a.GameServerName != first.GameServerName || a.Counters["rooms"].GetCount().GetValue() != 2 {
			t.Fatalf("answer %v: want %s with 2 rooms", a, first.GameServerName)
		}
	}
}

// The same key with a different request: InvalidArgument naming the key,
// and nothing allocated.
func TestKeyConflict(t *testing.T) {
	h := startHarness(t, harnessOpts{})
	dev := h.dial(nil)
	if _, err := h.grpcAllocate(dev, keyed("match-1")); err != nil {
		t.Fatal(err)
	}
	other := keyed("match-1")
	other.GameServerSelectors[0].MatchLabels = map[string]string{"mode": "lobby"}
	_, err := h.grpcAllocate(dev, other)
	wantCode(t, err, codes.InvalidArgument)
	if !strings.Contains(err.Error(), `"match-1"`) {
		t.Fatalf("conflict %v does not name the key", err)
	}
	if n := h.allocatedServers(); n != 1 {
		t.Fatalf("%d servers allocated, want 1", n)
	}
	if c := keyMetric(h, h.svc.Metrics().KeyConflicts); c != 1 {
		t.Fatalf("conflicts %v, want 1", c)
	}
}

// A key whose allocation was released (by name, by key, or its server
// gone, as when its session ends): a clear refusal, never a new server.
func TestKeyReleasedIsRefused(t *testing.T) {
	h := startHarness(t, harnessOpts{})
	dev := h.dial(nil)
	ctx := context.Background()
	for _, release := range []struct {
		name string
		do   func(*allocation.AllocationResponse, string) error
	}{
		{"by name", func(a *allocation.AllocationResponse, _ string) error {
			_, err := h.admin(dev).Release(ctx, &qmv1.ReleaseRequest{GameServerName: a.GameServerName})
			return err
		}},
		{"by key", func(_ *allocation.AllocationResponse, key string) error {
			_, err := h.admin(dev).Release(ctx, &qmv1.ReleaseRequest{AllocationKey: key})
			return err
		}},
		{"server gone", func(a *allocation.AllocationResponse, _ string) error {
			_, err := h.backend.Release(ctx, keyOf("default", a.GameServerName), "")
			return err
		}},
	} {
		key := "k-" + strings.ReplaceAll(release.name, " ", "-")
		a, err := h.grpcAllocate(dev, keyed(key))
		if err != nil {
			t.Fatal(err)
		}
		if err := release.do(a, key); err != nil {
			t.Fatalf("%s: %v", release.name, err)
		}
		before := h.allocatedServers()
		_, err = h.grpcAllocate(dev, keyed(key))
		wantCode(t, err, codes.FailedPrecondition)
		if !strings.Contains(err.Error(), strconv.Quote(key)) || !strings.Contains(err.Error(), "released") {
			t.Fatalf("%s: refusal %v does not name the key and say it was released", release.name, err)
		}
		if n := h.allocatedServers(); n != before {
			t.Fatalf("%s: %d servers allocated after the refusal, %d before", release.name, n, before)
		}
	}
	if c := keyMetric(h, h.svc.Metrics().KeyReleased); c != 3 {
		t.Fatalf("released-key refusals %v, want 3", c)
	}
}

// gateBackend holds an allocation after the memory backend has committed
// it: the test hears of the commit (committed) and chooses when Allocate
// answers (hold), the window in which a duplicate arrives or a caller
// leaves.
type gateBackend struct {
	allocator.Backend
	calls     atomic.Int32
	committed chan *core.GameServer
	hold      func(ctx context.Context)
	// before, if set, runs before the memory backend is called; an error
	// is Allocate's answer.
	before func(ctx context.Context) error
}

func gate(hold func(ctx context.Context)) (*gateBackend, func(allocator.Backend) allocator.Backend) {
	g := &gateBackend{committed: make(chan *core.GameServer, 16), hold: hold}
	return g, func(b allocator.Backend) allocator.Backend { g.Backend = b; return g }
}

func (g *gateBackend) Allocate(ctx context.Context, req *core.Request, now time.Time, seed uint64) (*allocator.Allocation, error) {
	g.calls.Add(1)
	if g.before != nil {
		if err := g.before(ctx); err != nil {
			return nil, err
		}
	}
	a, err := g.Backend.Allocate(ctx, req, now, seed)
	if err == nil {
		g.committed <- a.GameServer
		g.hold(ctx)
	}
	return a, err
}

// waitFor polls cond until it holds, failing the test after a generous
// while (a wait for an event, not a bound on speed).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(10 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// Two requests with one key in flight at once: one allocation (the
// backend is called once), and both get its answer.
func TestKeyInFlightOnce(t *testing.T) {
	open := make(chan struct{})
	g, wrap := gate(func(ctx context.Context) {
		select {
		case <-open:
		case <-ctx.Done():
		}
	})
	h := startHarness(t, harnessOpts{wrap: wrap})
	dev := h.dial(nil)
	type answer struct {
		a   *allocation.AllocationResponse
		err error
	}
	answers := make(chan answer, 2)
	send := func() {
		a, err := h.grpcAllocate(dev, keyed("match-1"))
		answers <- answer{a, err}
	}
	go send()
	<-g.committed
	go send()
	waitFor(t, "the second request to wait for the first", func() bool { return allocator.KeyWaiters(h.svc) == 1 })
	// A third whose deadline passes while it waits gives up alone.
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err := allocation.NewAllocationServiceClient(dev).Allocate(ctx, keyed("match-1"))
	wantCode(t, err, codes.DeadlineExceeded)
	waitFor(t, "the service to stop waiting for the third's caller", func() bool {
		return testutil.ToFloat64(h.svc.Metrics().InFlight) == 2
	})
	close(open)
	x, y := <-answers, <-answers
	if x.err != nil || y.err != nil {
		t.Fatalf("answers: %v, %v", x.err, y.err)
	}
	sameAnswer(t, x.a, y.a)
	if c := g.calls.Load(); c != 1 {
		t.Fatalf("the backend allocated %d times for one key, want 1", c)
	}
	if n := h.allocatedServers(); n != 1 {
		t.Fatalf("%d servers allocated, want 1", n)
	}
}

// A key is remembered for the window after its allocation: a request
// with it after the window is a new allocation.
func TestKeyWindow(t *testing.T) {
	clock := newKeyClock()
	h := startHarness(t, harnessOpts{now: clock.now, keyWindow: time.Minute})
	dev := h.dial(nil)
	first, err := h.grpcAllocate(dev, keyed("match-1"))
	if err != nil {
		t.Fatal(err)
	}
	clock.advance(time.Minute - time.Nanosecond)
	again, err := h.grpcAllocate(dev, keyed("match-1"))
	if err != nil {
		t.Fatal(err)
	}
	sameAnswer(t, first, again)
	clock.advance(time.Nanosecond)
	later, err := h.grpcAllocate(dev, keyed("match-1"))
	if err != nil {
		t.Fatal(err)
	}
	if later.GameServerName == first.GameServerName || h.allocatedServers() != 2 {
		t.Fatalf("after the window: %s (%d allocated), want a new allocation", later.GameServerName, h.allocatedServers())
	}
}

// The table is bounded: past MaxKeys the oldest key is forgotten (its
// duplicate is a new allocation) and counted; newer keys still replay.
func TestKeyEvictionBound(t *testing.T) {
	h := startHarness(t, harnessOpts{maxKeys: 2})
	dev := h.dial(nil)
	var first []*allocation.AllocationResponse
	for _, k := range []string{"k1", "k2", "k3"} {
		a, err := h.grpcAllocate(dev, keyed(k))
		if err != nil {
			t.Fatal(err)
		}
		first = append(first, a)
	}
	if e := keyMetric(h, h.svc.Metrics().KeyEvictions); e != 1 {
		t.Fatalf("evictions %v, want 1", e)
	}
	k3, err := h.grpcAllocate(dev, keyed("k3"))
	if err != nil {
		t.Fatal(err)
	}
	sameAnswer(t, first[2], k3)
	k1, err := h.grpcAllocate(dev, keyed("k1"))
	if err != nil {
		t.Fatal(err)
	}
	if k1.GameServerName == first[0].GameServerName {
		t.Fatalf("k1, evicted, was replayed: the table holds more than its bound")
	}
}

// The key in a gRPC header works as the annotation does, and lands on the
// server; both forms with different keys, or a key that is no key, are
// refused naming it.
func TestKeyHeader(t *testing.T) {
	h := startHarness(t, harnessOpts{})
	dev := h.dial(nil)
	plain := keyed("x")
	plain.Metadata = nil
	call := func(key string, req *allocation.AllocationRequest) (*allocation.AllocationResponse, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		ctx = metadata.AppendToOutgoingContext(ctx, allocator.AllocationKeyHeader, key)
		return allocation.NewAllocationServiceClient(dev).Allocate(ctx, req)
	}
	first, err := call("match-h", plain)
	if err != nil {
		t.Fatal(err)
	}
	again, err := call("match-h", plain)
	if err != nil {
		t.Fatal(err)
	}
	sameAnswer(t, first, again)
	// The same key as an annotation is the same request.
	ann, err := h.grpcAllocate(dev, keyed("match-h"))
	if err != nil {
		t.Fatal(err)
	}
	sameAnswer(t, first, ann)
	both, err := call("match-h", keyed("match-h"))
	if err != nil {
		t.Fatal(err)
	}
	sameAnswer(t, first, both)
	if gs, _ := h.backend.Get(keyOf("default", first.GameServerName)); gs.Annotations[allocator.AllocationKeyAnnotation] != "match-h" {
		t.Fatalf("server annotations %v: want the header's key", gs.Annotations)
	}
	if n := h.allocatedServers(); n != 1 {
		t.Fatalf("%d servers allocated, want 1", n)
	}
	_, err = call("match-h", keyed("match-other"))
	wantCode(t, err, codes.InvalidArgument)
	if !strings.Contains(err.Error(), `"match-h"`) || !strings.Contains(err.Error(), `"match-other"`) {
		t.Fatalf("%v does not name both keys", err)
	}
	for _, bad := range []string{strings.Repeat("k", allocator.MaxAllocationKeyLength+1), "two words", "tab\there"} {
		_, err = h.grpcAllocate(dev, keyed(bad))
		wantCode(t, err, codes.InvalidArgument)
		if !strings.Contains(err.Error(), "idempotency key") {
			t.Fatalf("%v does not say what was wrong", err)
		}
	}
	if _, err := h.grpcAllocate(dev, keyed(strings.Repeat("k", allocator.MaxAllocationKeyLength))); err != nil {
		t.Fatalf("a key of the greatest length: %v", err)
	}
}

// REST: the key as an annotation in the JSON body or as an HTTP header.
func TestKeyREST(t *testing.T) {
	h := startHarness(t, harnessOpts{})
	c := h.httpClient(nil, false)
	post := func(key string, req *allocation.AllocationRequest) (int, *allocation.AllocationResponse) {
		t.Helper()
		hr, err := http.NewRequest(http.MethodPost, "https://"+h.restAddr+allocator.AllocatePath, bytes.NewReader(mustJSON(t, req)))
		if err != nil {
			t.Fatal(err)
		}
		if key != "" {
			hr.Header.Set(allocator.AllocationKeyHeader, key)
		}
		resp, err := c.Do(hr)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		out := &allocation.AllocationResponse{}
		if resp.StatusCode == http.StatusOK {
			if err := wire.UnmarshalJSON(b, out); err != nil {
				t.Fatal(err)
			}
		}
		return resp.StatusCode, out
	}
	code, a := post("", keyed("rest-1"))
	if code != http.StatusOK {
		t.Fatalf("status %d", code)
	}
	code, b := post("", keyed("rest-1"))
	if code != http.StatusOK {
		t.Fatalf("status %d", code)
	}
	sameAnswer(t, a, b)
	plain := keyed("x")
	plain.Metadata = nil
	code, hd := post("rest-2", plain)
	if code != http.StatusOK {
		t.Fatalf("status %d", code)
	}
	code, hd2 := post("rest-2", plain)
	if code != http.StatusOK {
		t.Fatalf("status %d", code)
	}
	sameAnswer(t, hd, hd2)
	if hd.GameServerName == a.GameServerName || h.allocatedServers() != 2 {
		t.Fatalf("two keys, %d servers allocated", h.allocatedServers())
	}
	other := keyed("rest-1")
	other.GameServerSelectors[0].MatchLabels = map[string]string{"mode": "lobby"}
	if code, _ := post("", other); code != http.StatusBadRequest {
		t.Fatalf("conflict over REST: status %d, want 400", code)
	}
}

// A caller that gives up: without a key, an allocation that committed
// after the caller cancelled (or passed its deadline) is given back and
// counted; with a key it stays, and the retry gets it.
func TestCallerThatGivesUp(t *testing.T) {
	g, wrap := gate(func(ctx context.Context) { <-ctx.Done() })
	h := startHarness(t, harnessOpts{wrap: wrap})
	dev := h.dial(nil)
	plain := keyed("x")
	plain.Metadata = nil
	for i, c := range []struct {
		name string
		req  *allocation.AllocationRequest
		want codes.Code
	}{
		{"cancelled", plain, codes.Canceled},
		{"deadline", plain, codes.DeadlineExceeded},
		{"cancelled, with a key", keyed("keep-me"), codes.Canceled},
	} {
		ctx, cancel := context.WithCancel(context.Background())
		if c.want == codes.DeadlineExceeded {
			ctx, cancel = context.WithTimeout(context.Background(), 200*time.Millisecond)
		}
		errs := make(chan error, 1)
		go func() {
			_, err := allocation.NewAllocationServiceClient(dev).Allocate(ctx, c.req)
			errs <- err
		}()
		gs := <-g.committed
		if c.want == codes.Canceled {
			cancel()
		}
		wantCode(t, <-errs, c.want)
		cancel()
		keyed := c.req.Metadata != nil
		if !keyed {
			want := float64(i + 1)
			waitFor(t, c.name+": the allocation given back", func() bool {
				return keyMetric(h, h.svc.Metrics().AbandonedGiven) == want
			})
			if _, ok := h.backend.Get(gs.Key()); ok {
				t.Fatalf("%s: %s still exists", c.name, gs.Name)
			}
			continue
		}
		// With a key: kept (the handler has returned once the release
		// metric would have moved; it has not).
		waitFor(t, c.name+": the service to finish the call", func() bool { return testutil.ToFloat64(h.svc.Metrics().InFlight) == 0 })
		if got := keyMetric(h, h.svc.Metrics().AbandonedGiven); got != 2 {
			t.Fatalf("%s: abandoned allocations given back %v, want still 2", c.name, got)
		}
		if cur, ok := h.backend.Get(gs.Key()); !ok || cur.State != core.StateAllocated {
			t.Fatalf("%s: %s was given back", c.name, gs.Name)
		}
		g.hold = func(context.Context) {}
		again, err := h.grpcAllocate(dev, c.req)
		if err != nil {
			t.Fatal(err)
		}
		if again.GameServerName != gs.Name || g.calls.Load() != 3 {
			t.Fatalf("%s: the retry got %s (backend called %d times), want %s replayed", c.name, again.GameServerName, g.calls.Load(), gs.Name)
		}
	}
}

// The first request with a key whose caller goes away before anything is
// allocated does not take the others with it: a request waiting on the
// key tries itself, and is allocated.
func TestKeyWaiterOutlivesAFirstCallerThatLeft(t *testing.T) {
	g, wrap := gate(func(context.Context) {})
	var started atomic.Bool
	g.before = func(ctx context.Context) error {
		if started.CompareAndSwap(false, true) {
			<-ctx.Done() // the first caller's allocation waits until it leaves
			return ctx.Err()
		}
		return nil
	}
	h := startHarness(t, harnessOpts{wrap: wrap})
	dev := h.dial(nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errs := make(chan error, 1)
	go func() {
		_, err := allocation.NewAllocationServiceClient(dev).Allocate(ctx, keyed("match-1"))
		errs <- err
	}()
	waitFor(t, "the first request to reach the backend", func() bool { return g.calls.Load() == 1 })
	answers := make(chan *allocation.AllocationResponse, 1)
	go func() {
		a, err := h.grpcAllocate(dev, keyed("match-1"))
		if err != nil {
			t.Error(err)
		}
		answers <- a
	}()
	waitFor(t, "the second request to wait for the first", func() bool { return allocator.KeyWaiters(h.svc) == 1 })
	cancel()
	wantCode(t, <-errs, codes.Canceled)
	a := <-answers
	if a == nil {
		t.FailNow()
	}
	gs := <-g.committed
	if a.GameServerName != gs.Name || h.allocatedServers() != 1 || g.calls.Load() != 2 {
		t.Fatalf("the waiter got %v; committed %s, %d allocated, %d backend calls", a, gs.Name, h.allocatedServers(), g.calls.Load())
	}
}

// localMulti forwards every multi-cluster request to this cluster's own
// entry (the forwarder's local path), in the request's namespace.
type localMulti struct{}

func (localMulti) Forward(ctx context.Context, c forward.Call, local forward.Local) (*allocation.AllocationResponse, error) {
	return local(ctx, &allocation.AllocationRequest{Namespace: c.Decoded.Namespace})
}
func (localMulti) Release(context.Context, string, *qmv1.ReleaseRequest) (*qmv1.ReleaseResponse, error) {
	return nil, status.Error(codes.Unimplemented, "no remotes")
}
func (localMulti) Crossed(context.Context) error { return nil }
func (localMulti) ClusterOf(string) string       { return "" }

// A multi-cluster request with a key that this cluster served is this
// cluster's server: a duplicate is answered from the server as it stands,
// so once it is released the key is refused, not answered with the old
// answer.
func TestKeyMultiClusterServedHere(t *testing.T) {
	cfg, err := memory.ParseConfig([]byte(testFleets))
	if err != nil {
		t.Fatal(err)
	}
	b := memory.New(cfg, memory.Options{Seed: 1, Clock: memory.NewFakeClock(time.Unix(1_800_000_000, 0))})
	svc, err := allocator.NewService(allocator.Options{Backend: b, MultiCluster: localMulti{}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	req := keyed("mc-1")
	req.MultiClusterSetting = &allocation.MultiClusterSetting{Enabled: true}
	first, err := svc.Allocate(ctx, "dev", req)
	if err != nil {
		t.Fatal(err)
	}
	again, err := svc.Allocate(ctx, "dev", req)
	if err != nil {
		t.Fatal(err)
	}
	sameAnswer(t, first, again)
	if _, err := b.Release(ctx, keyOf("default", first.GameServerName), ""); err != nil {
		t.Fatal(err)
	}
	_, err = svc.Allocate(ctx, "dev", req)
	wantCode(t, err, codes.FailedPrecondition)
}
