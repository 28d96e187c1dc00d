package allocator

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/quartermaster-dev/quartermaster/allocator/forward"
	"github.com/quartermaster-dev/quartermaster/allocator/mtls"
	"github.com/quartermaster-dev/quartermaster/allocator/pb/allocation"
	qmv1 "github.com/quartermaster-dev/quartermaster/allocator/pb/quartermaster/v1"
	"github.com/quartermaster-dev/quartermaster/core"
)

// TestCodecDecodesRequests: the gRPC codec decodes an AllocationRequest
// into a *request, the second sending of the same bytes into the prepared
// request shared from then on; bytes that are not an AllocationRequest
// (truncated, a string that is not UTF-8) are an error; other messages go
// through grpc-go's codec; and what it writes decodes to what was written.
func TestCodecDecodesRequests(t *testing.T) {
	c := newCodec()
	sent := &allocation.AllocationRequest{Namespace: "ns", GameServerSelectors: []*allocation.GameServerSelector{{MatchLabels: map[string]string{"mode": "x"}}}}
	b, err := proto.Marshal(sent)
	if err != nil {
		t.Fatal(err)
	}
	var rs []*request
	for range 3 {
		r := new(request)
		if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(b)}, r); err != nil {
			t.Fatal(err)
		}
		if !r.decoded || r.sent != nil || !proto.Equal(r.message(), sent) {
			t.Fatalf("decoded %v (as a message: %v), want %v in the core's form", r.message(), r.sent != nil, sent)
		}
		rs = append(rs, r)
	}
	if rs[0].prep != nil || rs[1].prep == nil || rs[2].prep != rs[1].prep || !rs[2].prep.decoded {
		t.Fatal("kept the second time, and shared from then on")
	}
	// A request to forward, one the conversion refuses, and any while a
	// tracer wants them are decoded as messages.
	multi := &allocation.AllocationRequest{MultiClusterSetting: &allocation.MultiClusterSetting{Enabled: true}}
	invalid := &allocation.AllocationRequest{Namespace: "ns", Scheduling: 7}
	for name, m := range map[string]*allocation.AllocationRequest{"multi-cluster": multi, "invalid": invalid} {
		mb, _ := proto.Marshal(m)
		r := new(request)
		if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(mb)}, r); err != nil || r.decoded || !proto.Equal(r.sent, m) {
			t.Errorf("%s: decoded %v, %v (core form: %v)", name, r.sent, err, r.decoded)
		}
	}
	traced := newCodec()
	traced.wantsMessage = func() bool { return true }
	if r := new(request); traced.Unmarshal(mem.BufferSlice{mem.SliceBuffer(b)}, r) != nil || r.decoded || !proto.Equal(r.sent, sent) {
		t.Errorf("while traced: %v, core form %v", r.sent, r.decoded)
	}
	for name, bad := range map[string][]byte{"truncated": {0x0a, 0x07}, "not UTF-8": {0x0a, 0x01, 0xff}} {
		if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(bad)}, new(request)); err == nil {
			t.Errorf("%s: decoded", name)
		}
	}
	var other allocation.AllocationResponse
	if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer([]byte{0x12, 0x01, 'g'})}, &other); err != nil || other.GameServerName != "g" {
		t.Fatalf("a response through the proto library: %v, %v", &other, err)
	}
	resp := &allocation.AllocationResponse{GameServerName: "gs", Ports: []*allocation.AllocationResponse_GameServerStatusPort{{Name: "p", Port: 7}},
		Metadata: &allocation.AllocationResponse_GameServerMetadata{Labels: map[string]string{"a": "b"}}}
	out, err := c.Marshal(resp)
	if err != nil {
		t.Fatal(err)
	}
	defer out.Free()
	var back allocation.AllocationResponse
	if err := proto.Unmarshal(out.Materialize(), &back); err != nil || !proto.Equal(&back, resp) {
		t.Fatalf("wrote %v, read back %v (%v)", resp, &back, err)
	}
}

// decodeServe sends b through the codec and the service as identity, as
// the gRPC server does.
func decodeServe(t *testing.T, c *codec, svc *Service, b []byte, identity string) (*request, *allocation.AllocationResponse, error) {
	t.Helper()
	r := new(request)
	if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(b)}, r); err != nil {
		t.Fatal(err)
	}
	resp, err := svc.serve(context.Background(), identity, *r)
	return r, resp, err
}

// indexBackend is the memory backend's Allocate on a bare index (the
// memory package imports this one, so its tests cannot use it).
type indexBackend struct{ ix *core.Index }

func (b indexBackend) Allocate(ctx context.Context, req *core.Request, now time.Time, seed uint64) (*Allocation, error) {
	res, err := b.ix.AllocateAndCommitContext(ctx, req, now, seed)
	if err != nil {
		return nil, err
	}
	return &Allocation{GameServer: res.GameServer}, nil
}
func (b indexBackend) Get(k core.Key) (*core.GameServer, bool) { return b.ix.Get(k) }
func (b indexBackend) Allocated() []*core.GameServer           { return b.ix.ListState(core.StateAllocated) }
func (b indexBackend) Release(context.Context, core.Key, string) (*core.GameServer, error) {
	return nil, ErrNotFound
}
func (b indexBackend) AllocatedTo(o string) []*core.GameServer { return b.ix.ListAllocated(o) }
func (b indexBackend) CountAllocatedTo(o string) int           { return b.ix.CountAllocated(o) }
func (b indexBackend) Ready() bool                             { return true }
func (b indexBackend) Instant() bool                           { return true }

// raceEnabled is set in race builds (race_internal_test.go).
var raceEnabled bool

// TestServiceAllocationAllocations bounds the heap allocations of one
// allocation between the gRPC codec and the answer's encoding (decode,
// admission, normalization, the index, metrics, the answer), which the
// garbage collector pays for on top of what gRPC allocates for any call,
// for a request sent before (prepared.go: nothing to decode or normalize).
func TestServiceAllocationAllocations(t *testing.T) {
	ix := core.NewIndex()
	ix.SetCountedAnnotation(OwnerAnnotation)
	for i := range 3000 {
		ix.Upsert(&core.GameServer{Namespace: "default", Name: fmt.Sprintf("gs-%05d", i), NodeName: fmt.Sprintf("node-%02d", i%30),
			State: core.StateReady, Labels: map[string]string{core.FleetLabel: "load", "mode": "load"}, Address: "10.0.0.1",
			Ports: []core.Port{{Name: "default", Port: 7000}}})
	}
	svc, err := NewService(Options{Backend: indexBackend{ix}})
	if err != nil {
		t.Fatal(err)
	}
	c := newCodec()
	b, err := proto.Marshal(&allocation.AllocationRequest{GameServerSelectors: []*allocation.GameServerSelector{{MatchLabels: map[string]string{"mode": "load"}}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	serve := func() {
		r := requestPool.Get().(*request)
		if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(b)}, r); err != nil {
			t.Fatal(err)
		}
		ans, err := svc.serveAnswer(ctx, "dev", *r)
		if err != nil {
			t.Fatal(err)
		}
		*r = request{}
		requestPool.Put(r)
		out, err := c.Marshal(ans)
		if err != nil {
			t.Fatal(err)
		}
		out.Free()
	}
	serve()
	serve()
	n := allocsPerCall(1000, serve)
	t.Logf("%.2f heap allocations per allocation", n)
	// At most 8: the codec's buffers, the index's result and the
	// allocated server (and now and then a member list growing), the
	// backend's answer, the local answer and its buffer. Under the race detector
	// sync.Pool drops one Put in four at random, so the pooled request and
	// the answer's buffer (its array, the *[]byte and gRPC's buffer object)
	// are allocated afresh a quarter of the time: 1 more per call on
	// average. An allocation more per call fails either way.
	limit := limitAllocs
	if raceEnabled {
		limit += 1
	}
	if n >= limit {
		t.Fatalf("%.2f heap allocations per allocation, want under %.2f", n, limit)
	}
}

// limitAllocs is TestServiceAllocationAllocations' bound without -race.
const limitAllocs = 9.0

// allocsPerCall is testing.AllocsPerRun without its rounding down to a
// whole number, which would put an average of 19.95 at 19 or 20 by chance.
func allocsPerCall(runs int, f func()) float64 {
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(1))
	f() // warm up, as AllocsPerRun
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range runs {
		f()
	}
	runtime.ReadMemStats(&after)
	return float64(after.Mallocs-before.Mallocs) / float64(runs)
}

// TestPooledRequestsDoNotLeak sends requests through allocateHandler one
// after another, so that each reuses the request struct the one before gave
// back: a later request without selectors or metadata must not inherit the
// earlier one's.
func TestPooledRequestsDoNotLeak(t *testing.T) {
	ix := core.NewIndex()
	for _, mode := range []string{"a", "b"} {
		ix.Upsert(&core.GameServer{Namespace: "default", Name: "gs-" + mode, NodeName: "node-1", State: core.StateReady,
			Labels: map[string]string{"mode": mode}, Address: "10.0.0.1"})
	}
	svc, err := NewService(Options{Backend: indexBackend{ix}})
	if err != nil {
		t.Fatal(err)
	}
	tlsSrv, err := mtls.NewServer(mtls.ServerOptions{Mode: mtls.ModeInsecureDisableTLS})
	if err != nil {
		t.Fatal(err)
	}
	g := &grpcAllocation{svc: svc, tls: tlsSrv}
	g.handle = g.serve
	c := newCodec()
	send := func(req *allocation.AllocationRequest) *core.GameServer {
		t.Helper()
		b, err := proto.Marshal(req)
		if err != nil {
			t.Fatal(err)
		}
		dec := func(v any) error { return c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(b)}, v) }
		out, err := allocateHandler(g, context.Background(), dec, nil)
		if err != nil {
			t.Fatalf("%v: %v", req, err)
		}
		gs, ok := ix.Get(core.Key{Namespace: "default", Name: out.(*localAnswer).gs.Name})
		if !ok {
			t.Fatalf("allocated %v, not in the index", out)
		}
		return gs
	}
	for range 20 { // sync.Pool may drop what it is given: try a few times
		first := send(&allocation.AllocationRequest{
			GameServerSelectors: []*allocation.GameServerSelector{{MatchLabels: map[string]string{"mode": "a"}}},
			Metadata:            &allocation.MetaPatch{Labels: map[string]string{"match": "first"}},
		})
		second := send(&allocation.AllocationRequest{})
		if first.Name != "gs-a" || second.Name != "gs-b" {
			t.Fatalf("allocated %s then %s, want gs-a then gs-b", first.Name, second.Name)
		}
		if _, ok := second.Labels["match"]; ok {
			t.Fatalf("the second request's server got the first's metadata: %v", second.Labels)
		}
		for _, gs := range []*core.GameServer{first, second} {
			ready := *gs
			ready.State = core.StateReady
			ready.Labels = map[string]string{"mode": strings.TrimPrefix(gs.Name, "gs-")}
			ix.Upsert(&ready)
		}
	}
}

// TestPreparedRequests sends the same bytes as several callers: each gets
// its own owner annotation and its own re-allocation rights, what one
// caller's restriction did to its copy does not reach the next, a change of
// limits is seen at once, and the cache stays within its bound.
func TestPreparedRequests(t *testing.T) {
	ix := core.NewIndex()
	ix.SetCountedAnnotation(OwnerAnnotation)
	for i := range 4 {
		ix.Upsert(&core.GameServer{Namespace: "default", Name: fmt.Sprintf("ready-%d", i), NodeName: "node-1",
			State: core.StateReady, Labels: map[string]string{"mode": "a"}})
	}
	// A live session bob holds.
	ix.Upsert(&core.GameServer{Namespace: "default", Name: "bobs", NodeName: "node-1", State: core.StateAllocated,
		Labels: map[string]string{"mode": "a"}, Annotations: map[string]string{OwnerAnnotation: "bob"}})
	limits := func(aliceAdmin bool) *LimitsConfig {
		return &LimitsConfig{Default: &IdentityLimits{}, Identities: map[string]IdentityLimits{
			"alice": {Admin: aliceAdmin}, "root": {Admin: true}}}
	}
	svc, err := NewService(Options{Backend: indexBackend{ix}, Limits: limits(false)})
	if err != nil {
		t.Fatal(err)
	}
	c := newCodec()
	marshal := func(req *allocation.AllocationRequest) []byte {
		b, err := proto.Marshal(req)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	fresh := marshal(&allocation.AllocationRequest{GameServerSelectors: []*allocation.GameServerSelector{{MatchLabels: map[string]string{"mode": "a"}}}})
	again := marshal(&allocation.AllocationRequest{GameServerSelectors: []*allocation.GameServerSelector{
		{MatchLabels: map[string]string{"mode": "a"}, GameServerState: allocation.GameServerSelector_ALLOCATED}}})
	send := func(b []byte, identity string) (*core.GameServer, error) {
		t.Helper()
		_, resp, err := decodeServe(t, c, svc, b, identity)
		if err != nil {
			return nil, err
		}
		gs, _ := ix.Get(core.Key{Namespace: "default", Name: resp.GameServerName})
		return gs, nil
	}
	owner := func(gs *core.GameServer) string { v, _ := gs.Annotation(OwnerAnnotation); return v }

	for _, who := range []string{"alice", "bob", "alice", "carol"} {
		gs, err := send(fresh, who)
		if err != nil {
			t.Fatalf("%s: %v", who, err)
		}
		if owner(gs) != who {
			t.Fatalf("%s's allocation of the same bytes is owned by %q", who, owner(gs))
		}
	}
	// alice may re-allocate only her own; bob's session is not hers. Her
	// restriction must not stay on the shared request for root after her,
	// nor root's freedom for alice after root.
	if gs, err := send(again, "alice"); err == nil && gs.Name == "bobs" {
		t.Fatal("alice re-allocated bob's session")
	}
	if gs, err := send(again, "root"); err != nil || gs.Name != "bobs" {
		t.Fatalf("root (admin) re-allocating bob's session: %v, %v", gs, err)
	}
	// Give it back to bob, and try alice again after root.
	cur, _ := ix.Get(core.Key{Namespace: "default", Name: "bobs"})
	back := *cur
	back.Annotations = map[string]string{OwnerAnnotation: "bob"}
	ix.Upsert(&back)
	if gs, err := send(again, "alice"); err == nil && gs.Name == "bobs" {
		t.Fatal("alice re-allocated bob's session after root did")
	}
	// New limits make alice an admin: the kept normalization is not hers
	// any more.
	svc.SetLimits(limits(true))
	if gs, err := send(again, "alice"); err != nil || gs.Name != "bobs" {
		t.Fatalf("alice, now admin, re-allocating bob's session: %v, %v", gs, err)
	}

	// A request with annotations of its own: the first time its decoded
	// map takes the owner, later its prepared one must not.
	tagged := marshal(&allocation.AllocationRequest{
		GameServerSelectors: []*allocation.GameServerSelector{{MatchLabels: map[string]string{"mode": "a"}}},
		Metadata:            &allocation.MetaPatch{Annotations: map[string]string{"example.com/match": "m1"}}})
	for i, who := range []string{"dave", "erin", "dave", "frank"} {
		ix.Upsert(&core.GameServer{Namespace: "default", Name: fmt.Sprintf("more-%d", i), NodeName: "node-1",
			State: core.StateReady, Labels: map[string]string{"mode": "a"}})
		gs, err := send(tagged, who)
		if err != nil {
			t.Fatalf("%s: %v", who, err)
		}
		if m, _ := gs.Annotation("example.com/match"); owner(gs) != who || m != "m1" {
			t.Fatalf("sent %d: %s's server has annotations %v", i, who, gs.AllAnnotations())
		}
	}
	if p := c.requests.get(tagged); p == nil || len(p.conv.Metadata.Annotations) != 1 {
		t.Fatalf("the prepared request's annotations: %v", p)
	}

	for i := range 3 * maxPreparedRequests {
		b := marshal(&allocation.AllocationRequest{GameServerSelectors: []*allocation.GameServerSelector{
			{MatchLabels: map[string]string{"match": strconv.Itoa(i)}}}})
		// Kept the second time it comes, not the first.
		for sent := range 2 {
			r := new(request)
			if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(b)}, r); err != nil || (r.prep != nil) != (sent == 1) {
				t.Fatalf("request %d sent %d times before: %v, prepared %v", i, sent, err, r.prep != nil)
			}
		}
		if n := len(c.requests.m); n > maxPreparedRequests {
			t.Fatalf("%d requests kept, at most %d", n, maxPreparedRequests)
		}
	}
	// A stream of requests that all differ keeps none.
	c = newCodec()
	for i := range 2 * seenSlots {
		b := marshal(&allocation.AllocationRequest{Metadata: &allocation.MetaPatch{Annotations: map[string]string{"match": strconv.Itoa(i)}}})
		if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(b)}, new(request)); err != nil {
			t.Fatal(err)
		}
	}
	if n := len(c.requests.m); n != 0 {
		t.Fatalf("%d requests sent once each were kept", n)
	}
	big := marshal(&allocation.AllocationRequest{Metadata: &allocation.MetaPatch{Labels: map[string]string{"x": strings.Repeat("y", maxPreparedBytes)}}})
	r := new(request)
	_ = c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(big)}, new(request))
	if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(big)}, r); err != nil || r.prep != nil {
		t.Fatalf("a request over %d bytes: %v, prepared %v", maxPreparedBytes, err, r.prep != nil)
	}
}

// TestPreparedMultiClusterRequests: a multi-cluster request that fails
// validation is refused every time, before the forwarder sees it, and
// nothing normalized is kept for it.
func TestPreparedMultiClusterRequests(t *testing.T) {
	rec := &memoRecorder{}
	svc, err := NewService(Options{Backend: indexBackend{core.NewIndex()}, MultiCluster: rec})
	if err != nil {
		t.Fatal(err)
	}
	c := newCodec()
	bad, err := proto.Marshal(&allocation.AllocationRequest{
		MultiClusterSetting: &allocation.MultiClusterSetting{Enabled: true},
		GameServerSelectors: []*allocation.GameServerSelector{{MatchLabels: map[string]string{"bad key!": "a"}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		r, _, err := decodeServe(t, c, svc, bad, "dev")
		if status.Code(err) != codes.InvalidArgument {
			t.Fatalf("send %d: %v, want InvalidArgument", i, err)
		}
		if r.prep != nil && r.prep.norm.Load() != nil {
			t.Fatalf("send %d: an invalid request's normalization was kept", i)
		}
	}
	if len(rec.memos) != 0 {
		t.Fatalf("%d invalid requests reached the forwarder", len(rec.memos))
	}
}

// memoRecorder is a MultiCluster that records the Memo each request came
// with and answers with a server of its own.
type memoRecorder struct {
	mu    sync.Mutex
	memos []*forward.Memo
}

func (m *memoRecorder) Forward(_ context.Context, c forward.Call, _ forward.Local) (*allocation.AllocationResponse, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.memos = append(m.memos, c.Memo)
	return &allocation.AllocationResponse{GameServerName: "remote-1", Source: "127.0.0.1:9"}, nil
}
func (m *memoRecorder) Release(context.Context, string, *qmv1.ReleaseRequest) (*qmv1.ReleaseResponse, error) {
	return nil, nil
}
func (m *memoRecorder) Crossed(context.Context) error { return nil }
func (m *memoRecorder) ClusterOf(string) string       { return "" }

// TestPreparedRequestsCarryTheirMemo: a multi-cluster request sent again
// reaches the forwarder with its prepared request's Memo, the same one
// every time, so that it is forwarded as encoded the first time; one not
// (yet) prepared comes with none.
func TestPreparedRequestsCarryTheirMemo(t *testing.T) {
	rec := &memoRecorder{}
	svc, err := NewService(Options{Backend: indexBackend{core.NewIndex()}, MultiCluster: rec})
	if err != nil {
		t.Fatal(err)
	}
	c := newCodec()
	b, err := proto.Marshal(&allocation.AllocationRequest{
		MultiClusterSetting: &allocation.MultiClusterSetting{Enabled: true},
		GameServerSelectors: []*allocation.GameServerSelector{{MatchLabels: map[string]string{"mode": "a"}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	var preps []*preparedRequest
	for i := range 3 {
		r, _, err := decodeServe(t, c, svc, b, "dev")
		if err != nil {
			t.Fatalf("send %d: %v", i+1, err)
		}
		preps = append(preps, r.prep)
	}
	if len(rec.memos) != 3 {
		t.Fatalf("%d requests reached the forwarder, want 3", len(rec.memos))
	}
	if rec.memos[0] != nil {
		t.Error("the first sending, not prepared, came with a Memo")
	}
	if preps[1] == nil || rec.memos[1] != &preps[1].memo || rec.memos[2] != rec.memos[1] {
		t.Error("the prepared request's sendings did not come with its Memo, the same each time")
	}
}
