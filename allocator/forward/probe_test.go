package forward_test

import (
	"context"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/quartermaster-dev/quartermaster/allocator/forward"
	"github.com/quartermaster-dev/quartermaster/allocator/mtls"
	"github.com/quartermaster-dev/quartermaster/core"
)

// TestBackgroundProbeRealRemote stops a real remote allocator, lets its
// breaker open, starts it again on the same address and checks, on the
// wall clock and with no request sent meanwhile, that the background
// probe closes the breaker; the next request goes to the remote again.
func TestBackgroundProbeRealRemote(t *testing.T) {
	p := newRigPKI(t)
	a := startAllocator(t, p, "a", rigOptions{fleets: fleetsA, tryTimeout: time.Second,
		breaker: forward.BreakerOptions{Failures: 3, OpenFor: 100 * time.Millisecond}})
	r := startAllocator(t, p, "r", rigOptions{fleets: fleetsB})
	addr := r.addr
	a.store.Replace(forward.NewSet(map[string][]core.Policy{"default": {
		policy("p-r", "probe", 0, 1, "r", "", "fwd", addr),
		policy("p-here", "probe", 1, 1, "a", "", ""),
	}}, []forward.Secret{p.secret(t, "fwd", "fwd-1")}))
	client := dial(t, p, a.addr, "dev")
	source := func() string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		resp, err := client.Allocate(ctx, multiRequest("probe", nil))
		if err != nil {
			t.Fatal(err)
		}
		return resp.GetSource()
	}
	if s := source(); s != addr {
		t.Fatalf("source %q, want the remote %s", s, addr)
	}

	r.stop()
	if s := source(); s != "local" {
		t.Fatalf("with the remote down: source %q, want local", s)
	}
	if st := a.fwd.BreakerState(addr); st != forward.Open && st != forward.HalfOpen {
		t.Fatalf("breaker %v after the remote went down, want open", st)
	}

	// While it stays down, the probes fail and the breaker stays open.
	for deadline := time.Now().Add(10 * time.Second); counter(t, a.reg, "qm_forward_probes_total", map[string]string{"endpoint": addr, "outcome": "down"}) < 1; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no failed probe of the down remote within 10s; logs:\n%s", a.logs.String())
		}
	}
	if st := a.fwd.BreakerState(addr); st == forward.Closed {
		t.Fatal("the breaker closed while the remote was down")
	}

	// Back on the same address; no request is sent until the breaker
	// has closed on its own.
	back := time.Now()
	startAllocator(t, p, "r", rigOptions{fleets: fleetsB, addr: addr})
	for a.fwd.BreakerState(addr) != forward.Closed {
		if time.Since(back) > 10*time.Second {
			t.Fatalf("the breaker did not close within 10s of the remote's return; logs:\n%s", a.logs.String())
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Logf("closed %v after the remote came back (probes: %v up, %v down)", time.Since(back).Round(time.Millisecond),
		counter(t, a.reg, "qm_forward_probes_total", map[string]string{"endpoint": addr, "outcome": "up"}),
		counter(t, a.reg, "qm_forward_probes_total", map[string]string{"endpoint": addr, "outcome": "down"}))
	if n := counter(t, a.reg, "qm_forward_probes_total", map[string]string{"endpoint": addr, "outcome": "up"}); n != 1 {
		t.Errorf("%v successful probes, want 1", n)
	}
	if s := source(); s != addr {
		t.Fatalf("after the probe: source %q, want the remote %s", s, addr)
	}
}

// TestBackgroundProbeNotServing checks that a remote whose health service
// answers NOT_SERVING (an allocator draining before it stops) keeps its
// breaker open, and that the breaker closes once it answers SERVING.
func TestBackgroundProbeNotServing(t *testing.T) {
	p := newRigPKI(t)
	a := startAllocator(t, p, "a", rigOptions{fleets: fleetsA, tryTimeout: time.Second,
		breaker: forward.BreakerOptions{Failures: 3, OpenFor: 50 * time.Millisecond, MaxOpenFor: 100 * time.Millisecond}})
	addr := freeAddr(t)
	a.store.Replace(forward.NewSet(map[string][]core.Policy{"default": {
		policy("p-r", "probe", 0, 1, "r", "", "fwd", addr),
		policy("p-here", "probe", 1, 1, "a", "", ""),
	}}, []forward.Secret{p.secret(t, "fwd", "fwd-1")}))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := dial(t, p, a.addr, "dev").Allocate(ctx, multiRequest("probe", nil)); err != nil {
		t.Fatal(err)
	}
	if st := a.fwd.BreakerState(addr); st == forward.Closed {
		t.Fatal("the breaker of a refusing endpoint stayed closed")
	}

	// A server on that address whose health service says NOT_SERVING.
	tlsSrv, err := mtls.NewServer(mtls.ServerOptions{CertDir: p.certDir, ClientCADir: p.clientCA, PollInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer(grpc.Creds(tlsSrv.GRPCCredentials()))
	hs := health.NewServer()
	hs.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	healthpb.RegisterHealthServer(srv, hs)
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Stop()

	probes := func(outcome string) float64 {
		return counter(t, a.reg, "qm_forward_probes_total", map[string]string{"endpoint": addr, "outcome": outcome})
	}
	// Probes that reached it (it answered the TLS handshake) but were told
	// NOT_SERVING: at least two more failed probes, breaker not closed.
	down := probes("down")
	for deadline := time.Now().Add(5 * time.Second); probes("down") < down+2; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("no failed probes of the NOT_SERVING remote within 5s; logs:\n%s", a.logs.String())
		}
	}
	if st := a.fwd.BreakerState(addr); st == forward.Closed || probes("up") != 0 {
		t.Fatalf("a NOT_SERVING remote closed the breaker (state %v, up probes %v)", st, probes("up"))
	}
	hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	for deadline := time.Now().Add(5 * time.Second); a.fwd.BreakerState(addr) != forward.Closed; time.Sleep(5 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the breaker did not close once the remote said SERVING; logs:\n%s", a.logs.String())
		}
	}
}
