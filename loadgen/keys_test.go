package loadgen

import (
	"context"
	"fmt"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"github.com/quartermaster-dev/quartermaster/allocator/pb/allocation"
	qmv1 "github.com/quartermaster-dev/quartermaster/allocator/pb/quartermaster/v1"
	"github.com/quartermaster-dev/quartermaster/allocator/wire"
)

// keyedFake is an allocator that keeps idempotency keys as Quartermaster
// does (the same key again answers the allocation it made) and loses
// answers on purpose: the allocation is written, then the caller is told
// Unavailable, for a key's first loseTries tries or for loseFor after its
// first try.
type keyedFake struct {
	allocation.UnimplementedAllocationServiceServer
	qmv1.UnimplementedAllocationAdminServer

	loseTries int
	loseFor   time.Duration

	mu       sync.Mutex
	byKey    map[string]*keyedAlloc
	tries    map[string]int
	unkeyed  int
	servers  int
	released int
}

type keyedAlloc struct {
	server   string
	first    time.Time
	released bool
}

func (f *keyedFake) Allocate(_ context.Context, q *allocation.AllocationRequest) (*allocation.AllocationResponse, error) {
	key := q.GetMetadata().GetAnnotations()[wire.AllocationKeyAnnotation]
	f.mu.Lock()
	defer f.mu.Unlock()
	if key == "" {
		f.unkeyed++
		f.servers++
		return &allocation.AllocationResponse{GameServerName: fmt.Sprintf("gs-%d", f.servers)}, nil
	}
	f.tries[key]++
	a, ok := f.byKey[key]
	if !ok {
		f.servers++
		a = &keyedAlloc{server: fmt.Sprintf("gs-%d", f.servers), first: time.Now()}
		f.byKey[key] = a
	}
	if a.released {
		return nil, status.Errorf(codes.FailedPrecondition, "key %q: released", key)
	}
	if f.tries[key] <= f.loseTries || time.Since(a.first) < f.loseFor {
		return nil, status.Error(codes.Unavailable, "the answer was lost on its way")
	}
	return &allocation.AllocationResponse{GameServerName: a.server}, nil
}

func (f *keyedFake) Release(_ context.Context, in *qmv1.ReleaseRequest) (*qmv1.ReleaseResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for k, a := range f.byKey {
		if !a.released && (a.server == in.GetGameServerName() || k == in.GetAllocationKey()) {
			a.released = true
			f.released++
			return &qmv1.ReleaseResponse{}, nil
		}
	}
	return nil, status.Error(codes.NotFound, "you hold no such allocation")
}

// held is how many keyed allocations are still held.
func (f *keyedFake) held() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, a := range f.byKey {
		if !a.released {
			n++
		}
	}
	return n
}

// startKeyedFake serves f over mutual TLS on loopback and returns a target
// for it.
func startKeyedFake(t *testing.T, f *keyedFake) Target {
	t.Helper()
	f.byKey, f.tries = map[string]*keyedAlloc{}, map[string]int{}
	base := newFake(t, false) // for its certificates
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer(grpc.Creds(credentials.NewTLS(base.serverTLS)))
	allocation.RegisterAllocationServiceServer(gs, f)
	qmv1.RegisterAllocationAdminServer(gs, f)
	go gs.Serve(ln)
	t.Cleanup(gs.Stop)
	cfg := TargetConfig{Name: "keyed", Addr: ln.Addr().String(), Protocol: "grpc", Call: "allocate"}
	c, err := NewCaller(context.Background(), Dial{Target: cfg, TLS: base.client, Request: &allocation.AllocationRequest{Namespace: "default"}, Sessions: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return Target{Config: cfg, Caller: c}
}

// A request whose answers are lost is sent again with its key, and the
// allocator's replay of that key is the one server it holds: as many
// servers as requests, all given back.
func TestKeyedRetriesReuseTheKey(t *testing.T) {
	f := &keyedFake{loseTries: 2}
	tg := startKeyedFake(t, f)
	res, err := Run(context.Background(), Config{}, []Target{tg},
		Options{NewPacer: constant(200), Requests: 40, Release: true, Timeout: 5 * time.Second, AllocationKeys: true})
	if err != nil {
		t.Fatal(err)
	}
	r := res.Targets[0]
	if r.OK != 40 || r.Retries != 80 {
		t.Errorf("ok %d, retries %d: want 40 answered after 80 tries sent again", r.OK, r.Retries)
	}
	f.mu.Lock()
	keys, servers, unkeyed := len(f.byKey), f.servers, f.unkeyed
	for k, n := range f.tries {
		if n != 3 {
			t.Errorf("key %s was sent %d times, want 3", k, n)
			break
		}
	}
	f.mu.Unlock()
	if keys != 40 || servers != 40 || unkeyed != 0 {
		t.Errorf("the allocator saw %d keys, made %d servers, %d requests without a key: want 40, 40, 0 (each retry with its request's key)", keys, servers, unkeyed)
	}
	if held := f.held(); held != 0 || r.Released != 40 {
		t.Errorf("%d servers still held, %d released: want 0 and 40", held, r.Released)
	}
	for k := range f.byKey {
		if !strings.HasPrefix(k, "load-") {
			t.Errorf("key %q: want the run's prefix load-", k)
		}
	}
}

// A request that runs out of its deadline without an answer is given up;
// its key is then asked about until the allocator answers, and the server
// the lost answers allocated is given back.
func TestGivenUpRequestsAreResolved(t *testing.T) {
	f := &keyedFake{loseFor: 1500 * time.Millisecond}
	tg := startKeyedFake(t, f)
	res, err := Run(context.Background(), Config{}, []Target{tg},
		Options{NewPacer: constant(100), Requests: 10, Release: true, Timeout: 400 * time.Millisecond, AllocationKeys: true, ResolveFor: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	r := res.Targets[0]
	if lost := r.Errors["Unavailable"] + r.Errors["DeadlineExceeded"]; r.OK != 0 || lost != 10 {
		t.Errorf("ok %d, errors %v: want 10 lost (every answer lost within the deadline)", r.OK, r.Errors)
	}
	if r.Resolved != 10 || r.ResolveFailed != 0 {
		t.Errorf("resolved %d, unresolved %d: want 10, 0", r.Resolved, r.ResolveFailed)
	}
	if held := f.held(); held != 0 || f.servers != 10 {
		t.Errorf("%d of %d servers still held: want 0 of 10", held, f.servers)
	}
}

// Without keys nothing is retried, and a caller that cannot send keys is
// refused before the run.
func TestNoKeysNoRetries(t *testing.T) {
	f := &keyedFake{loseTries: 1}
	tg := startKeyedFake(t, f)
	res, err := Run(context.Background(), Config{}, []Target{tg}, Options{NewPacer: constant(200), Requests: 10, Release: true})
	if err != nil {
		t.Fatal(err)
	}
	if r := res.Targets[0]; r.OK != 10 || r.Retries != 0 || f.unkeyed != 10 {
		t.Errorf("ok %d, retries %d, unkeyed %d: want 10, 0, 10", r.OK, r.Retries, f.unkeyed)
	}
	_, err = Run(context.Background(), Config{}, []Target{{Config: TargetConfig{Name: "plain"}, Caller: plainCaller{}}},
		Options{NewPacer: constant(200), Requests: 1, AllocationKeys: true})
	if err == nil || !strings.Contains(err.Error(), "cannot send them") {
		t.Errorf("keys with a caller that cannot send them: err %v", err)
	}
}

type plainCaller struct{}

func (plainCaller) Call(context.Context) (codes.Code, *Session) { return codes.OK, nil }
func (plainCaller) Release(context.Context, *Session) error     { return nil }
func (plainCaller) Close() error                                { return nil }

// countingCaller answers every call at once with a session, without a
// network, so a benchmark of the engine measures the engine.
type countingCaller struct{ sess Session }

func (c *countingCaller) Call(context.Context) (codes.Code, *Session) { return codes.OK, &c.sess }
func (c *countingCaller) CallKeyed(_ context.Context, _ Try) (codes.Code, *Session) {
	return codes.OK, &c.sess
}
func (c *countingCaller) Release(context.Context, *Session) error { return nil }
func (c *countingCaller) Close() error                            { return nil }

// BenchmarkEngineCall is the engine's own cost per request (one closed-loop
// caller, an answer at once, no release), without allocation keys and with
// them: run with -benchmem to see the allocations of each path.
func BenchmarkEngineCall(b *testing.B) {
	for _, keys := range []bool{false, true} {
		b.Run(fmt.Sprintf("keys=%v", keys), func(b *testing.B) {
			tg := Target{Config: TargetConfig{Name: "bench"}, Caller: &countingCaller{}}
			b.ReportAllocs()
			res, err := Run(context.Background(), Config{}, []Target{tg},
				Options{Closed: true, Workers: 1, Requests: int64(b.N), AllocationKeys: keys})
			if err != nil {
				b.Fatal(err)
			}
			if res.Targets[0].OK != int64(b.N) {
				b.Fatalf("ok %d of %d", res.Targets[0].OK, b.N)
			}
		})
	}
}
