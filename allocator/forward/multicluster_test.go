package forward_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/quartermaster-dev/quartermaster/allocator"
	"github.com/quartermaster-dev/quartermaster/allocator/forward"
	"github.com/quartermaster-dev/quartermaster/allocator/pb/allocation"
	"github.com/quartermaster-dev/quartermaster/core"
)

const fleetsA = `
apiVersion: quartermaster.dev/v1alpha1
kind: Fleets
nodes: 2
fleets:
- {name: home, replicas: 50, labels: {mode: x}}
- {name: games, namespace: games, replicas: 2, labels: {mode: x}}
`

const fleetsB = `
apiVersion: quartermaster.dev/v1alpha1
kind: Fleets
nodes: 4
fleets:
- {name: b-main, replicas: 3300, labels: {mode: x}}
- {name: b-arena, namespace: arena, replicas: 5, labels: {mode: x}}
`

const fleetsC = `
apiVersion: quartermaster.dev/v1alpha1
kind: Fleets
nodes: 2
fleets:
- {name: c-main, replicas: 1200, labels: {mode: x}}
`

func policy(name, set string, priority int32, weight int, cluster, ns, secret string, endpoints ...string) core.Policy {
	return core.Policy{
		Name: name, Priority: priority, Weight: weight, Labels: map[string]string{"set": set},
		Connection: core.ConnectionInfo{ClusterName: cluster, Endpoints: endpoints, SecretName: secret, Namespace: ns},
	}
}

func multiRequest(set string, selector map[string]string) *allocation.AllocationRequest {
	if selector == nil {
		selector = map[string]string{"mode": "x"}
	}
	return &allocation.AllocationRequest{
		Namespace: "default",
		MultiClusterSetting: &allocation.MultiClusterSetting{
			Enabled: true, PolicySelector: &allocation.LabelSelector{MatchLabels: map[string]string{"set": set}},
		},
		GameServerSelectors: []*allocation.GameServerSelector{{MatchLabels: selector}},
	}
}

// TestMultiCluster runs three allocators (a, the entry; b and c, remotes)
// on loopback mTLS, plus endpoints that are down or hang, and checks the
// rules of multi-cluster allocation one by one. The subtests share the rig
// and run in order.
func TestMultiCluster(t *testing.T) {
	p := newRigPKI(t)
	clk := &rigClock{now: time.Unix(1_800_000_000, 0)}
	a := startAllocator(t, p, "a", rigOptions{fleets: fleetsA, clock: clk, tryTimeout: 5 * time.Second,
		breaker: forward.BreakerOptions{Failures: 3, OpenFor: time.Second}})
	b := startAllocator(t, p, "b", rigOptions{fleets: fleetsB})
	c := startAllocator(t, p, "c", rigOptions{fleets: fleetsC})
	down := freeAddr(t)
	hang := blackHole(t)
	breakerAddr := freeAddr(t)

	fwd := p.secret(t, "fwd", "fwd-1")
	policies := []core.Policy{
		policy("w-b", "weights", 1, 300, "b", "", "fwd", b.addr),
		policy("w-c", "weights", 1, 100, "c", "", "fwd", c.addr),
		policy("o-here", "order", 0, 0, "a", "games", ""),
		policy("o-b", "order", 1, 1, "b", "default", "fwd", b.addr),
		policy("r-b", "rewrite", 0, 1, "b", "arena", "fwd", b.addr),
		policy("l-self", "loop", 0, 1, "a-self", "", "fwd", a.addr),
		policy("s-nosecret", "nosecret", 0, 1, "b", "", "nope", b.addr),
		policy("s-b", "summary", 0, 1, "b", "", "fwd", b.addr),
		policy("s-down", "summary", 1, 1, "d", "", "fwd", down),
		policy("u-down", "unreachable", 0, 1, "d", "", "fwd", down),
		policy("n-b", "nomatch", 0, 1, "b", "", "fwd", b.addr),
		policy("n-c", "nomatch", 0, 1, "c", "", "fwd", c.addr),
		policy("d-hang", "deadline", 0, 1, "h", "", "fwd", hang),
		policy("d-b", "deadline", 1, 1, "b", "", "fwd", b.addr),
		policy("b-e", "breaker", 0, 1, "e", "", "fwd", breakerAddr),
		policy("b-here", "breaker", 1, 1, "a", "", ""),
		policy("rot-b", "rotate", 0, 1, "b", "", "rot", b.addr),
	}
	rot1 := p.secret(t, "rot", "rot-1")
	a.store.Replace(forward.NewSet(map[string][]core.Policy{"default": policies}, []forward.Secret{fwd, rot1}))
	client := dial(t, p, a.addr, "dev")
	call := func(req *allocation.AllocationRequest, timeout time.Duration) (*allocation.AllocationResponse, error) {
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		return client.Allocate(ctx, req)
	}
	must := func(t *testing.T, req *allocation.AllocationRequest) *allocation.AllocationResponse {
		t.Helper()
		resp, err := call(req, 10*time.Second)
		if err != nil {
			t.Fatalf("allocate: %v", err)
		}
		return resp
	}
	wantStatus := func(t *testing.T, err error, code codes.Code, says ...string) {
		t.Helper()
		if status.Code(err) != code {
			t.Fatalf("got %v, want code %v", err, code)
		}
		for _, s := range says {
			if !strings.Contains(status.Convert(err).Message(), s) {
				t.Errorf("message %q does not say %q", status.Convert(err).Message(), s)
			}
		}
	}

	t.Run("weights 300:100 within 2 points over 4000", func(t *testing.T) {
		const n, workers = 4000, 16
		var mu sync.Mutex
		bySource := map[string]int{}
		var wg sync.WaitGroup
		errs := make(chan error, workers)
		for w := range workers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := w; i < n; i += workers {
					resp, err := call(multiRequest("weights", nil), 10*time.Second)
					if err != nil {
						errs <- err
						return
					}
					mu.Lock()
					bySource[resp.GetSource()]++
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		share := float64(bySource[b.addr]) / n
		t.Logf("b %d, c %d: b's share %.4f", bySource[b.addr], bySource[c.addr], share)
		if bySource[b.addr]+bySource[c.addr] != n {
			t.Fatalf("sources %v: not all from b and c", bySource)
		}
		if share < 0.73 || share > 0.77 {
			t.Errorf("b's share %.4f, want 0.75 ± 0.02", share)
		}
		// The entry's allocation metrics name the cluster that allocated
		// (the policy's clusterName, not the endpoint); the remote counts
		// the same requests as its own.
		for _, r := range []struct {
			reg    *prometheus.Registry
			source string
			want   int
		}{{a.reg, "b", bySource[b.addr]}, {a.reg, "c", bySource[c.addr]}, {b.reg, "local", bySource[b.addr]}, {c.reg, "local", bySource[c.addr]}} {
			got := counter(t, r.reg, "qm_allocator_allocations_total", map[string]string{"source": r.source, "code": "OK", "namespace": "default"})
			if got != float64(r.want) {
				t.Errorf("allocations_total{source=%q,code=OK} = %v, want %d", r.source, got, r.want)
			}
		}
		if got := counter(t, a.reg, "qm_allocator_allocations_total", map[string]string{"source": "local"}); got != 0 {
			t.Errorf("the entry counted %v allocations as its own, want 0", got)
		}
	})

	t.Run("priority order, local entry in its namespace", func(t *testing.T) {
		for i := range 2 {
			resp := must(t, multiRequest("order", nil))
			if resp.GetSource() != "local" {
				t.Fatalf("request %d: source %q, want local (priority 0 is this cluster)", i, resp.GetSource())
			}
			gs, ok := a.backend.Get(core.Key{Namespace: "games", Name: resp.GetGameServerName()})
			if !ok || gs.State != core.StateAllocated {
				t.Fatalf("request %d: %s not allocated in namespace games (connectionInfo.namespace)", i, resp.GetGameServerName())
			}
		}
		// games is used up: the next priority, b, serves.
		resp := must(t, multiRequest("order", nil))
		if resp.GetSource() != b.addr {
			t.Fatalf("source %q, want b at %s", resp.GetSource(), b.addr)
		}
		if got := counter(t, a.reg, "qm_allocator_allocations_total", map[string]string{"source": "local", "code": "OK", "namespace": "default"}); got != 2 {
			t.Errorf("allocations_total{source=local,code=OK} = %v, want 2 (the local entries)", got)
		}
	})

	t.Run("remote namespace rewritten, source is the endpoint", func(t *testing.T) {
		resp := must(t, multiRequest("rewrite", nil))
		if resp.GetSource() != b.addr {
			t.Errorf("source %q, want %q", resp.GetSource(), b.addr)
		}
		gs, ok := b.backend.Get(core.Key{Namespace: "arena", Name: resp.GetGameServerName()})
		if !ok || gs.State != core.StateAllocated {
			t.Fatalf("%s is not allocated in b's namespace arena", resp.GetGameServerName())
		}
		if owner := gs.Annotations[allocator.OwnerAnnotation]; owner != "fwd-1" {
			t.Errorf("b saw the caller as %q, want the Secret's identity fwd-1", owner)
		}
	})

	t.Run("policy pointing back is refused, not looped", func(t *testing.T) {
		_, err := call(multiRequest("loop", nil), 10*time.Second)
		wantStatus(t, err, codes.FailedPrecondition, `cluster "a-self"`, "forwarding loop", "passed through this allocator")
	})

	t.Run("hops naming the allocator are refused", func(t *testing.T) {
		bc := dial(t, p, b.addr, "dev")
		req := &allocation.AllocationRequest{GameServerSelectors: []*allocation.GameServerSelector{{MatchLabels: map[string]string{"mode": "x"}}}}
		ctx := metadata.AppendToOutgoingContext(context.Background(), forward.HopsKey, "a,b")
		_, err := bc.Allocate(ctx, req)
		wantStatus(t, err, codes.FailedPrecondition, "forwarding loop", "a -> b")
		ctx = metadata.AppendToOutgoingContext(context.Background(), forward.HopsKey, "a")
		if _, err := bc.Allocate(ctx, req); err != nil {
			t.Errorf("a forwarded request that did not cross b: %v", err)
		}
	})

	t.Run("no policy matches", func(t *testing.T) {
		_, err := call(multiRequest("none", nil), 10*time.Second)
		wantStatus(t, err, codes.InvalidArgument, `namespace "default"`, "set=none")
	})

	t.Run("missing Secret", func(t *testing.T) {
		_, err := call(multiRequest("nosecret", nil), 10*time.Second)
		wantStatus(t, err, codes.FailedPrecondition, "Secret default/nope", `cluster "b"`)
	})

	t.Run("per-cluster error summary", func(t *testing.T) {
		none := map[string]string{"mode": "none"}
		_, err := call(multiRequest("summary", none), 10*time.Second)
		// b answered "no game server", d could not be reached: the code
		// follows b's answer, the message names both.
		wantStatus(t, err, codes.ResourceExhausted, `cluster "b" (`+b.addr+`)`, "no game server available", `cluster "d" (`+down+`)`, "Unavailable")
		_, err = call(multiRequest("nomatch", none), 10*time.Second)
		wantStatus(t, err, codes.ResourceExhausted, `cluster "b"`, `cluster "c"`)
		_, err = call(multiRequest("unreachable", nil), 10*time.Second)
		wantStatus(t, err, codes.Unavailable, `cluster "d"`)
	})

	t.Run("the caller's deadline bounds a hanging remote", func(t *testing.T) {
		start := time.Now()
		_, err := call(multiRequest("deadline", nil), 400*time.Millisecond)
		elapsed := time.Since(start)
		wantStatus(t, err, codes.DeadlineExceeded)
		if elapsed > 1500*time.Millisecond {
			t.Errorf("took %v with a 400ms deadline (try timeout 5s)", elapsed)
		}
		// The entry allocator itself stopped at the deadline, not at its
		// 5 s try timeout: it recorded the try as a deadline.
		deadline := time.Now().Add(2 * time.Second)
		for counter(t, a.reg, "qm_forward_tries_total", map[string]string{"cluster": "h", "outcome": "deadline"}) != 1 {
			if time.Now().After(deadline) {
				t.Fatal("the entry allocator did not end its try at the caller's deadline")
			}
			time.Sleep(10 * time.Millisecond)
		}
		if n := counter(t, a.reg, "qm_forward_tries_total", map[string]string{"cluster": "b", "outcome": "deadline"}); n != 0 {
			t.Errorf("b was tried after the deadline passed (%v)", n)
		}
	})

	t.Run("breaker opens on a down remote; a background probe closes it when it is back", func(t *testing.T) {
		resp := must(t, multiRequest("breaker", nil))
		if resp.GetSource() != "local" {
			t.Fatalf("source %q, want local after e failed", resp.GetSource())
		}
		if st := a.fwd.BreakerState(breakerAddr); st != forward.Open {
			t.Fatalf("after 3 failed tries e's breaker is %v, want open; logs:\n%s", st, a.logs.String())
		}
		if g := counter(t, a.reg, "qm_forward_breaker_state", map[string]string{"endpoint": breakerAddr}); g != float64(forward.Open) {
			t.Errorf("breaker gauge %v, want %d", g, forward.Open)
		}
		start := time.Now()
		resp = must(t, multiRequest("breaker", nil))
		if resp.GetSource() != "local" {
			t.Fatalf("source %q", resp.GetSource())
		}
		if n := counter(t, a.reg, "qm_forward_tries_total", map[string]string{"cluster": "e", "outcome": "breaker_open"}); n != 1 {
			t.Errorf("e not skipped while open: breaker_open tries %v", n)
		}
		t.Logf("fall-through with the breaker open: %v", time.Since(start))

		probes := func(outcome string) float64 {
			return counter(t, a.reg, "qm_forward_probes_total", map[string]string{"endpoint": breakerAddr, "outcome": outcome})
		}
		waitFor := func(what string, cond func() bool) {
			t.Helper()
			for deadline := time.Now().Add(5 * time.Second); !cond(); time.Sleep(5 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("no %s within 5s; logs:\n%s", what, a.logs.String())
				}
			}
		}
		// The open period ends: the prober (not a request) checks e,
		// still down, and the breaker opens again for twice as long.
		clk.Advance(time.Second)
		waitFor("failed probe", func() bool { return probes("down") == 1 })
		if st := a.fwd.BreakerState(breakerAddr); st != forward.Open {
			t.Fatalf("after a failed probe the breaker is %v, want open", st)
		}

		// e comes up. Half the doubled period later nothing has probed it.
		startAllocator(t, p, "e", rigOptions{fleets: fleetsC, addr: breakerAddr})
		clk.Advance(time.Second)
		time.Sleep(50 * time.Millisecond) // room for a wrong early probe
		if up, down := probes("up"), probes("down"); up != 0 || down != 1 {
			t.Fatalf("probes up %v, down %v before the doubled open period ended; want 0, 1", up, down)
		}
		if resp = must(t, multiRequest("breaker", nil)); resp.GetSource() != "local" {
			t.Fatalf("a request tried e while its breaker was open: source %q", resp.GetSource())
		}
		// The doubled period ends: the probe finds e and closes the
		// breaker with no request sent.
		clk.Advance(time.Second)
		waitFor("closed breaker", func() bool { return a.fwd.BreakerState(breakerAddr) == forward.Closed })
		if up := probes("up"); up != 1 {
			t.Errorf("probes up %v, want 1", up)
		}
		// No request paid for the probes: e's tries by requests are the
		// first request's (3 failures, one try outcome) and two skips.
		if n := counter(t, a.reg, "qm_forward_tries_total", map[string]string{"cluster": "e", "outcome": "unavailable"}); n != 1 {
			t.Errorf("unavailable tries of e %v, want 1", n)
		}
		if n := counter(t, a.reg, "qm_forward_tries_total", map[string]string{"cluster": "e", "outcome": "breaker_open"}); n != 2 {
			t.Errorf("breaker_open tries of e %v, want 2", n)
		}
		resp = must(t, multiRequest("breaker", nil))
		if resp.GetSource() != breakerAddr {
			t.Fatalf("source %q, want e (%s) once its breaker closed", resp.GetSource(), breakerAddr)
		}
		if !strings.Contains(a.logs.String(), "to=open") || !strings.Contains(a.logs.String(), "to=closed") {
			t.Errorf("no log line for the breaker's changes:\n%s", a.logs.String())
		}
	})

	t.Run("a rotated Secret gets a new client", func(t *testing.T) {
		resp := must(t, multiRequest("rotate", nil))
		if got := resp.GetMetadata().GetAnnotations()[allocator.OwnerAnnotation]; got != "rot-1" {
			t.Fatalf("b saw %q, want rot-1", got)
		}
		rot2 := p.secret(t, "rot", "rot-2")
		a.store.Replace(forward.NewSet(map[string][]core.Policy{"default": policies}, []forward.Secret{fwd, rot2}))
		resp = must(t, multiRequest("rotate", nil))
		if got := resp.GetMetadata().GetAnnotations()[allocator.OwnerAnnotation]; got != "rot-2" {
			t.Fatalf("after rotation b saw %q, want rot-2", got)
		}
	})
}
