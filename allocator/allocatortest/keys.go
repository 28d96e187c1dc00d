// Package allocatortest checks a backend against the allocator's rules,
// for the tests of backends outside package allocator. KeyRules runs the
// rules of idempotency keys (allocator/README.md) through Services, one
// per replica, over the backend under test: what one process holds with its
// own table of keys, and, given several replicas over one store, what the
// backend must hold across them.
package allocatortest

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/quartermaster-dev/quartermaster/allocator"
	"github.com/quartermaster-dev/quartermaster/allocator/pb/allocation"
	qmv1 "github.com/quartermaster-dev/quartermaster/allocator/pb/quartermaster/v1"
	"github.com/quartermaster-dev/quartermaster/core"
)

// KeyEnv is what KeyRules runs against.
type KeyEnv struct {
	// Replicas are Services, each with its own backend over one shared
	// store (for the memory backend, or one replica: one). The rules
	// that need two replicas are skipped with one.
	Replicas []*allocator.Service
	// Request is a request that allocates one Ready server of a fleet
	// with at least six Ready servers; when Counter is set, a fleet whose
	// servers have that counter with room for two more.
	Request func() *allocation.AllocationRequest
	// Counter names a counter of the fleet for the rule that actions are
	// applied once; "" skips it.
	Counter string
	// Stored lists the store's servers in state Allocated as the store
	// has them now (for Kubernetes, from the API server, not a cache).
	Stored func(ctx context.Context) ([]*core.GameServer, error)
	// Settle, if set, waits until every replica's backend has seen the
	// writes made so far (informers catching up); nil: nothing to wait for.
	Settle func(ctx context.Context) error
	// Identity is the caller (default "keys-test").
	Identity string
}

// KeyRules runs the rules of idempotency keys against env, each as a
// subtest. Keys are made unique per run, so it may run on a store that
// other tests use.
func KeyRules(t *testing.T, env KeyEnv) {
	if env.Identity == "" {
		env.Identity = "keys-test"
	}
	run := fmt.Sprintf("%x", time.Now().UnixNano())
	k := func(name string) string { return name + "-" + run }
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	r := &rules{t: t, env: env, ctx: ctx}
	t.Run("replay", func(t *testing.T) { r.on(t).replay(k("replay")) })
	t.Run("conflict", func(t *testing.T) { r.on(t).conflict(k("conflict")) })
	t.Run("released", func(t *testing.T) { r.on(t).released(k("released")) })
	t.Run("at once", func(t *testing.T) { r.on(t).atOnce(k("at-once")) })
	if env.Counter != "" {
		t.Run("counter once", func(t *testing.T) { r.on(t).counterOnce(k("join"), run) })
	}
}

// replay: every replica answers a repeated key with the first answer, and
// the store holds one server with the key.
func (r *rules) replay(key string) {
	first := r.ok(0, r.keyed(key))
	for i := range r.env.Replicas {
		r.settle()
		r.same(first, r.ok(i, r.keyed(key)))
	}
	r.storedWithKey(key, 1)
}

// conflict: a key sent again with another request is refused by every
// replica, naming the key.
func (r *rules) conflict(key string) {
	r.ok(0, r.keyed(key))
	other := r.keyed(key)
	other.Metadata.Labels = map[string]string{"quartermaster.dev/keys-test": "other"}
	for i := range r.env.Replicas {
		r.settle()
		r.code(i, other, codes.InvalidArgument)
	}
	r.storedWithKey(key, 1)
}

// released: a key released (on another replica than the one that
// allocated) is refused afterwards, and its server is no longer held.
func (r *rules) released(key string) {
	t := r.t
	a := r.ok(0, r.keyed(key))
	r.settle()
	last := len(r.env.Replicas) - 1
	rel, err := r.env.Replicas[last].Release(r.ctx, r.env.Identity, &qmv1.ReleaseRequest{Namespace: r.env.Request().GetNamespace(), AllocationKey: key})
	if err != nil {
		t.Fatalf("release by key on replica %d: %v", last, err)
	}
	if rel.GetAllocation().GetGameServerName() != a.GetGameServerName() {
		t.Fatalf("release by key gave back %s, want %s", rel.GetAllocation().GetGameServerName(), a.GetGameServerName())
	}
	r.settle()
	for i := range r.env.Replicas {
		r.code(i, r.keyed(key), codes.FailedPrecondition)
	}
	r.storedWithKey(key, 0)
}

// atOnce: requests with one key sent to every replica at the same time
// get one server between them.
func (r *rules) atOnce(key string) {
	t := r.t
	const each = 4
	var wg sync.WaitGroup
	answers := make(chan result, each*len(r.env.Replicas))
	start := make(chan struct{})
	for i := range r.env.Replicas {
		for range each {
			wg.Go(func() {
				<-start
				a, err := r.env.Replicas[i].Allocate(r.ctx, r.env.Identity, r.keyed(key))
				answers <- result{i, a, err}
			})
		}
	}
	close(start)
	wg.Wait()
	close(answers)
	var first *allocation.AllocationResponse
	for a := range answers {
		if a.err != nil {
			// A replica may refuse a duplicate it could not settle
			// (contention, the store): never with a second server.
			if c := status.Code(a.err); c != codes.Aborted && c != codes.Unavailable {
				t.Errorf("replica %d: %v", a.replica, a.err)
			}
			continue
		}
		if first == nil {
			first = a.resp
		}
		r.same(first, a.resp)
	}
	if first == nil {
		t.Fatal("no request with the key was answered")
	}
	r.storedWithKey(key, 1)
}

// counterOnce: a keyed re-allocation that increments the env's counter
// counts once, however often it is repeated. run labels the session.
func (r *rules) counterOnce(key, run string) {
	t, counter := r.t, r.env.Counter
	// The session is labelled, so that the re-allocation finds it among
	// the caller's other servers.
	session := map[string]string{"quartermaster.dev/keys-test-session": run}
	start := r.env.Request()
	start.Metadata = &allocation.MetaPatch{Labels: session}
	first := r.ok(0, start)
	join := func() *allocation.AllocationRequest {
		req := r.keyed(key)
		req.GameServerSelectors = []*allocation.GameServerSelector{{
			GameServerState: allocation.GameServerSelector_ALLOCATED,
			MatchLabels:     session,
		}}
		req.Counters = map[string]*allocation.CounterAction{counter: {Action: wrapperspb.String("Increment"), Amount: wrapperspb.Int64(1)}}
		return req
	}
	j := r.ok(0, join())
	if j.GetGameServerName() != first.GetGameServerName() {
		t.Fatalf("the re-allocation went to %s, want the caller's %s", j.GetGameServerName(), first.GetGameServerName())
	}
	want := j.GetCounters()[counter].GetCount().GetValue()
	for i := range r.env.Replicas {
		r.settle()
		again := r.ok(i, join())
		r.same(j, again)
		if got := again.GetCounters()[counter].GetCount().GetValue(); got != want {
			t.Fatalf("replica %d: counter %s = %d after a duplicate, want %d", i, counter, got, want)
		}
	}
	for _, gs := range r.stored() {
		if gs.Name == first.GetGameServerName() {
			if got := gs.Counters[counter].Count; got != want {
				t.Fatalf("stored counter %s = %d, want %d", counter, got, want)
			}
		}
	}
}

type result struct {
	replica int
	resp    *allocation.AllocationResponse
	err     error
}

type rules struct {
	t   testing.TB
	env KeyEnv
	ctx context.Context
}

func (r *rules) on(t testing.TB) *rules { c := *r; c.t = t; return &c }

func (r *rules) keyed(key string) *allocation.AllocationRequest {
	req := proto.Clone(r.env.Request()).(*allocation.AllocationRequest)
	if req.Metadata == nil {
		req.Metadata = &allocation.MetaPatch{}
	}
	if req.Metadata.Annotations == nil {
		req.Metadata.Annotations = map[string]string{}
	}
	req.Metadata.Annotations[allocator.AllocationKeyAnnotation] = key
	return req
}

func (r *rules) ok(replica int, req *allocation.AllocationRequest) *allocation.AllocationResponse {
	r.t.Helper()
	a, err := r.env.Replicas[replica].Allocate(r.ctx, r.env.Identity, req)
	if err != nil {
		r.t.Fatalf("replica %d: %v", replica, err)
	}
	return a
}

func (r *rules) code(replica int, req *allocation.AllocationRequest, want codes.Code) {
	r.t.Helper()
	_, err := r.env.Replicas[replica].Allocate(r.ctx, r.env.Identity, req)
	if status.Code(err) != want {
		r.t.Fatalf("replica %d: %v, want %v", replica, err, want)
	}
	key := req.GetMetadata().GetAnnotations()[allocator.AllocationKeyAnnotation]
	if !strings.Contains(err.Error(), key) {
		r.t.Fatalf("replica %d: %v does not name the key %q", replica, err, key)
	}
}

func (r *rules) same(a, b *allocation.AllocationResponse) {
	r.t.Helper()
	if a.GetGameServerName() != b.GetGameServerName() || a.GetAddress() != b.GetAddress() ||
		!proto.Equal(&allocation.AllocationResponse{Ports: a.GetPorts()}, &allocation.AllocationResponse{Ports: b.GetPorts()}) {
		r.t.Fatalf("one key, two answers: %v and %v", a, b)
	}
}

func (r *rules) settle() {
	r.t.Helper()
	if r.env.Settle == nil {
		return
	}
	if err := r.env.Settle(r.ctx); err != nil {
		r.t.Fatal(err)
	}
}

func (r *rules) stored() []*core.GameServer {
	r.t.Helper()
	r.settle()
	s, err := r.env.Stored(r.ctx)
	if err != nil {
		r.t.Fatal(err)
	}
	return s
}

// storedWithKey fails unless the store holds want Allocated servers
// carrying key.
func (r *rules) storedWithKey(key string, want int) {
	r.t.Helper()
	var names []string
	for _, gs := range r.stored() {
		if gs.Annotations[allocator.AllocationKeyAnnotation] == key {
			names = append(names, gs.Namespace+"/"+gs.Name)
		}
	}
	if len(names) != want {
		r.t.Fatalf("%d servers Allocated with key %q (%v), want %d", len(names), key, names, want)
	}
}
