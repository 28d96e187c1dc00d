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

	t.Run("replay", func(t *testing.T) {
		r := r.on(t)
		first := r.ok(0, r.keyed(k("replay")))
		for i := range env.Replicas {
			r.settle()
			r.same(first, r.ok(i, r.keyed(k("replay"))))
		}
		r.storedWithKey(k("replay"), 1)
	})
	t.Run("conflict", func(t *testing.T) {
		r := r.on(t)
		r.ok(0, r.keyed(k("conflict")))
		other := r.keyed(k("conflict"))
		other.Metadata.Labels = map[string]string{"quartermaster.dev/keys-test": "other"}
		for i := range env.Replicas {
			r.settle()
			r.code(i, other, codes.InvalidArgument)
		}
		r.storedWithKey(k("conflict"), 1)
	})
	t.Run("released", func(t *testing.T) {
		r := r.on(t)
		a := r.ok(0, r.keyed(k("released")))
		r.settle()
		last := len(env.Replicas) - 1
		rel, err := env.Replicas[last].Release(ctx, env.Identity, &qmv1.ReleaseRequest{Namespace: env.Request().GetNamespace(), AllocationKey: k("released")})
		if err != nil {
			t.Fatalf("release by key on replica %d: %v", last, err)
		}
		if rel.GetAllocation().GetGameServerName() != a.GetGameServerName() {
			t.Fatalf("release by key gave back %s, want %s", rel.GetAllocation().GetGameServerName(), a.GetGameServerName())
		}
		r.settle()
		for i := range env.Replicas {
			r.code(i, r.keyed(k("released")), codes.FailedPrecondition)
		}
		r.storedWithKey(k("released"), 0)
	})
	t.Run("at once", func(t *testing.T) {
		r := r.on(t)
		const each = 4
		var wg sync.WaitGroup
		answers := make(chan result, each*len(env.Replicas))
		start := make(chan struct{})
		for i := range env.Replicas {
			for range each {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-start
					a, err := env.Replicas[i].Allocate(ctx, env.Identity, r.keyed(k("at-once")))
					answers <- result{i, a, err}
				}()
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
		r.storedWithKey(k("at-once"), 1)
	})
	if env.Counter != "" {
		t.Run("counter once", func(t *testing.T) {
			r := r.on(t)
			// The session is labelled, so that the re-allocation finds it
			// among the caller's other servers.
			session := map[string]string{"quartermaster.dev/keys-test-session": run}
			start := env.Request()
			start.Metadata = &allocation.MetaPatch{Labels: session}
			first := r.ok(0, start)
			join := func() *allocation.AllocationRequest {
				req := r.keyed(k("join"))
				req.GameServerSelectors = []*allocation.GameServerSelector{{
					GameServerState: allocation.GameServerSelector_ALLOCATED,
					MatchLabels:     session,
				}}
				req.Counters = map[string]*allocation.CounterAction{env.Counter: {Action: wrapperspb.String("Increment"), Amount: wrapperspb.Int64(1)}}
				return req
			}
			j := r.ok(0, join())
			if j.GetGameServerName() != first.GetGameServerName() {
				t.Fatalf("the re-allocation went to %s, want the caller's %s", j.GetGameServerName(), first.GetGameServerName())
			}
			want := j.GetCounters()[env.Counter].GetCount().GetValue()
			for i := range env.Replicas {
				r.settle()
				again := r.ok(i, join())
				r.same(j, again)
				if got := again.GetCounters()[env.Counter].GetCount().GetValue(); got != want {
					t.Fatalf("replica %d: counter %s = %d after a duplicate, want %d", i, env.Counter, got, want)
				}
			}
			stored := r.stored()
			for _, gs := range stored {
				if gs.Name == first.GetGameServerName() {
					if got := gs.Counters[env.Counter].Count; got != want {
						t.Fatalf("stored counter %s = %d, want %d", env.Counter, got, want)
					}
				}
			}
		})
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
