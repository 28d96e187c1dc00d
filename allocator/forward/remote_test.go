package forward

import (
	"context"
	"crypto/tls"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/quartermaster-dev/quartermaster/allocator/pb/allocation"
	"github.com/quartermaster-dev/quartermaster/core"
)

// fakeRemote is a remote allocator's AllocationService on a real grpc-go
// server: it answers by the request's namespace.
type fakeRemote struct {
	allocation.UnimplementedAllocationServiceServer
	hops     atomic.Value // the last call's HopsKey metadata
	canceled chan struct{}
	calls    atomic.Int64
}

const remoteFailMessage = "100% full: ünïcode\nand a second line"

func (f *fakeRemote) Allocate(ctx context.Context, in *allocation.AllocationRequest) (*allocation.AllocationResponse, error) {
	f.calls.Add(1)
	md, _ := metadata.FromIncomingContext(ctx)
	f.hops.Store(strings.Join(md.Get(HopsKey), ","))
	switch in.GetNamespace() {
	case "fail":
		return nil, status.Error(codes.ResourceExhausted, remoteFailMessage)
	case "hang":
		<-ctx.Done()
		f.canceled <- struct{}{}
		return nil, ctx.Err()
	case "slow":
		time.Sleep(300 * time.Millisecond)
	}
	return &allocation.AllocationResponse{GameServerName: "gs-" + in.GetNamespace(), Address: "10.0.0.1",
		Metadata: &allocation.AllocationResponse_GameServerMetadata{Labels: map[string]string{"ns": in.GetNamespace()}}}, nil
}

// serveRemote serves a fakeRemote with mutual TLS on loopback, with
// grpc-go's default settings unless opts change them, and returns its
// address and a Secret that reaches it.
func serveRemote(t *testing.T, pki *testPKI, opts ...grpc.ServerOption) (*fakeRemote, *grpc.Server, string, Secret) {
	t.Helper()
	srv := grpc.NewServer(append(opts, grpc.Creds(credentials.NewTLS(&tls.Config{
		Certificates: []tls.Certificate{pki.server}, ClientCAs: pki.ca.CertPool(), ClientAuth: tls.RequireAndVerifyClientCert,
	})))...)
	remote := &fakeRemote{canceled: make(chan struct{}, 16)}
	allocation.RegisterAllocationServiceServer(srv, remote)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	return remote, srv, ln.Addr().String(), pki.secret(t, "entry")
}

// routed builds a Forwarder (o, with its Source replaced) whose policies
// send a request selecting {to: NS} to routes[NS], into namespace NS.
func routed(t *testing.T, o Options, sec Secret, routes map[string]string) *Forwarder {
	t.Helper()
	var policies []core.Policy
	for ns, ep := range routes {
		policies = append(policies, core.Policy{
			Name: "to-" + ns, Priority: 1, Weight: 1, Labels: map[string]string{"to": ns},
			Connection: core.ConnectionInfo{ClusterName: ns, Endpoints: []string{ep}, SecretName: sec.Name, Namespace: ns},
		})
	}
	o.Source = NewStore(NewSet(map[string][]core.Policy{"default": policies}, []Secret{sec}))
	if o.Self == "" {
		o.Self = "entry"
	}
	f, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Close)
	return f
}

// to is a multi-cluster request that routed's policies send to ns.
func to(ns string, annotations map[string]string) *allocation.AllocationRequest {
	return &allocation.AllocationRequest{
		Namespace: "default",
		MultiClusterSetting: &allocation.MultiClusterSetting{
			Enabled: true, PolicySelector: &allocation.LabelSelector{MatchLabels: map[string]string{"to": ns}},
		},
		Metadata: &allocation.MetaPatch{Annotations: annotations},
	}
}

// Forwarding through grpc-go's client to a grpc-go remote: answers, with
// and without a Memo; the hops metadata; the remote's error with its code
// and message; the caller's deadline (the remote sees its call canceled);
// and many calls at once on the one connection.
func TestForwardToRemote(t *testing.T) {
	pki := newTestPKI(t)
	remote, _, addr, sec := serveRemote(t, pki)
	f := routed(t, Options{}, sec, map[string]string{"a": addr, "fail": addr, "hang": addr, "b": addr})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	for _, memo := range []*Memo{nil, new(Memo), nil} {
		resp, err := f.AllocateFor(ctx, "caller", to("a", nil), memo, 1, nil)
		if err != nil || resp.GetGameServerName() != "gs-a" || resp.GetMetadata().GetLabels()["ns"] != "a" || resp.GetSource() != addr {
			t.Fatalf("memo %v: got %v, %v", memo != nil, resp, err)
		}
	}
	if got := remote.hops.Load(); got != "entry" {
		t.Errorf("the remote saw hops %q, want entry", got)
	}

	_, err := f.AllocateFor(ctx, "caller", to("fail", nil), nil, 1, nil)
	if st := status.Convert(err); st.Code() != codes.ResourceExhausted || !strings.Contains(st.Message(), remoteFailMessage) {
		t.Errorf("the remote's error came back as %v %q", st.Code(), st.Message())
	}

	short, cancelShort := context.WithTimeout(ctx, 200*time.Millisecond)
	_, err = f.AllocateFor(short, "caller", to("hang", nil), nil, 1, nil)
	cancelShort()
	if status.Code(err) != codes.DeadlineExceeded {
		t.Errorf("past the caller's deadline: %v, want DeadlineExceeded", err)
	}
	select {
	case <-remote.canceled:
	case <-time.After(10 * time.Second):
		t.Error("the remote's call was not canceled")
	}
	if st := f.BreakerState(addr); st != Closed {
		t.Errorf("the caller's own deadline counted against the remote: breaker %v", st)
	}

	var wg sync.WaitGroup
	var failed atomic.Int64
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 50 {
				resp, err := f.AllocateFor(ctx, "caller", to("b", nil), nil, 1, nil)
				if err != nil || resp.GetGameServerName() != "gs-b" {
					failed.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if n := failed.Load(); n > 0 {
		t.Errorf("%d of 1,600 concurrent calls were not answered", n)
	}
	if n := f.clients.count(); n != 1 {
		t.Errorf("%d cached clients for one remote, want 1", n)
	}
}

// A remote that dies under a call: the call ends at once as Unavailable,
// not at its deadline, and the endpoint's breaker counts it.
func TestForwardRemoteDies(t *testing.T) {
	pki := newTestPKI(t)
	remote, srv, addr, sec := serveRemote(t, pki)
	f := routed(t, Options{Retries: -1, Breaker: BreakerOptions{Failures: 1, OpenFor: time.Hour}}, sec, map[string]string{"hang": addr})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := f.AllocateFor(ctx, "caller", to("hang", nil), nil, 1, nil)
		done <- err
	}()
	for remote.calls.Load() == 0 { // the hanging call is in flight
		time.Sleep(time.Millisecond)
	}
	srv.Stop()
	select {
	case err := <-done:
		if status.Code(err) != codes.Unavailable {
			t.Errorf("the call in flight ended with %v, want Unavailable", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the call in flight waited on after the remote died")
	}
	if st := f.BreakerState(addr); st != Open {
		t.Errorf("after the remote died under a call its breaker is %v, want open", st)
	}
}

// deafRemote speaks HTTP/2 just enough to be connected to, with windows
// large enough for any call, and then never reads again: a remote that
// hung, or a path that went dark without a reset. It counts the
// connections made to it.
func deafRemote(t *testing.T, pki *testPKI) (addr string, accepted *atomic.Int64) {
	t.Helper()
	ln := pki.h2Listener(t, tls.RequireAnyClientCert)
	accepted = new(atomic.Int64)
	var mu sync.Mutex
	var conns []net.Conn
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			mu.Lock()
			conns = append(conns, conn)
			mu.Unlock()
			fr := http2.NewFramer(conn, nil)
			_ = fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1 << 30})
			_ = fr.WriteWindowUpdate(0, 1<<30)
		}
	}()
	return ln.Addr().String(), accepted
}

// A remote that stopped reading, sent more than the sockets' buffers
// hold: every call to it ends by its try timeout, as a transport failure
// its breaker counts; calls to another remote go on meanwhile; and once
// the breaker is open, a probe that hears nothing drops the connection,
// so the next one is dialled afresh.
func TestForwardDeafRemote(t *testing.T) {
	pki := newTestPKI(t)
	_, _, okAddr, sec := serveRemote(t, pki)
	deaf, accepted := deafRemote(t, pki)
	f := routed(t, Options{TryTimeout: 3 * time.Second, Retries: -1, Breaker: BreakerOptions{Failures: 3, OpenFor: 100 * time.Millisecond}},
		sec, map[string]string{"deaf": deaf, "ok": okAddr})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if _, err := f.AllocateFor(ctx, "caller", to("ok", nil), nil, 1, nil); err != nil {
		t.Fatal(err) // connected before the deaf calls take the CPU
	}

	// 16 calls of 1 MiB: more than loopback's socket buffers hold.
	big := map[string]string{"big": strings.Repeat("x", 1<<20)}
	const calls = 16
	errs := make(chan error, calls)
	start := time.Now()
	for range calls {
		go func() {
			_, err := f.AllocateFor(ctx, "caller", to("deaf", big), nil, 1, nil)
			errs <- err
		}()
	}
	// Meanwhile the other remote answers, each call well within its own
	// deadline.
	for range 20 {
		octx, ocancel := context.WithTimeout(ctx, 5*time.Second)
		resp, err := f.AllocateFor(octx, "caller", to("ok", nil), nil, 1, nil)
		ocancel()
		if err != nil || resp.GetGameServerName() != "gs-ok" {
			t.Fatalf("a call to the other remote, while one is deaf: %v, %v", resp, err)
		}
	}
	for i := range calls {
		select {
		case err := <-errs:
			if c := status.Code(err); c != codes.DeadlineExceeded && c != codes.Unavailable {
				t.Errorf("call: %v; want DeadlineExceeded or Unavailable", err)
			}
		case <-time.After(15 * time.Second):
			t.Fatalf("%d of %d calls still waiting %v after they began, with 3 s try timeouts", calls-i, calls, time.Since(start).Round(time.Millisecond))
		}
	}
	if st := f.BreakerState(deaf); st != Open {
		t.Fatalf("the deaf remote's breaker is %v, want open", st)
	}
	deadline := time.Now().Add(15 * time.Second)
	for accepted.Load() < 2 {
		if time.Now().After(deadline) {
			t.Fatal("15 s after the breaker opened on a deaf connection, no probe had dialled a new one")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A call whose deadline comes before a slow remote's answer fails alone:
// the next call on the connection is answered, and the caller's own
// deadline does not count against the remote's breaker.
func TestForwardSlowRemote(t *testing.T) {
	pki := newTestPKI(t)
	_, _, addr, sec := serveRemote(t, pki, grpc.InitialWindowSize(StreamWindowBytes), grpc.InitialConnWindowSize(ConnWindowBytes))
	f := routed(t, Options{Breaker: BreakerOptions{Failures: 1}}, sec, map[string]string{"slow": addr, "b": addr})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for range 3 {
		short, cancelShort := context.WithTimeout(ctx, 50*time.Millisecond)
		_, err := f.AllocateFor(short, "caller", to("slow", nil), nil, 1, nil)
		cancelShort()
		if status.Code(err) != codes.DeadlineExceeded {
			t.Fatalf("a call with 50 ms for a 300 ms answer: %v, want DeadlineExceeded", err)
		}
	}
	resp, err := f.AllocateFor(ctx, "caller", to("b", nil), nil, 1, nil)
	if err != nil || resp.GetGameServerName() != "gs-b" {
		t.Fatalf("the next call: %v (%v)", err, resp)
	}
	if st := f.BreakerState(addr); st != Closed {
		t.Errorf("callers' short deadlines opened the remote's breaker (%v)", st)
	}
}

// deadlinePast is a context whose deadline has passed but whose Done has
// not fired yet, as a caller's is for a moment.
type deadlinePast struct{ context.Context }

func (deadlinePast) Deadline() (time.Time, bool) { return time.Now().Add(-time.Millisecond), true }

// A call that fails as its caller's deadline passes, before the caller's
// context says so (a remote resets it with CANCEL at the deadline it was
// sent), is the caller's deadline: DeadlineExceeded, and not a failure of
// the remote for its breaker to count.
func TestForwardDeadlinePassing(t *testing.T) {
	pki := newTestPKI(t)
	_, _, addr, sec := serveRemote(t, pki)
	f := routed(t, Options{Breaker: BreakerOptions{Failures: 1}}, sec, map[string]string{"a": addr})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := f.AllocateFor(ctx, "caller", to("a", nil), nil, 1, nil); err != nil {
		t.Fatal(err)
	}
	_, err := f.AllocateFor(deadlinePast{ctx}, "caller", to("a", nil), nil, 1, nil)
	if status.Code(err) != codes.DeadlineExceeded {
		t.Errorf("a call at its caller's deadline: %v, want DeadlineExceeded", err)
	}
	if st := f.BreakerState(addr); st != Closed {
		t.Errorf("the caller's deadline counted against the remote: breaker %v", st)
	}
}
