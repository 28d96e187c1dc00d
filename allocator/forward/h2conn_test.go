package forward

import (
	"bufio"
	"context"
	"crypto/tls"
	"io"
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

// startRemote serves a fakeRemote with mutual TLS on loopback, with
// grpc-go's default settings unless opts change them (dynamic windows: it
// probes the link with PINGs, which the direct connection must answer),
// and returns a client for it as the forwarder builds one.
func startRemote(t *testing.T, opts ...grpc.ServerOption) (*fakeRemote, *grpc.Server, *client) {
	remote, srv, addr, sec := serveRemote(t, opts...)
	cs := newClients(5*time.Second, nil)
	t.Cleanup(cs.close)
	c, err := cs.get(addr, sec, nil, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cs.put(c) })
	return remote, srv, c
}

// serveRemote starts the fakeRemote, with opts, and returns its address
// and a Secret that reaches it.
func serveRemote(t *testing.T, opts ...grpc.ServerOption) (*fakeRemote, *grpc.Server, string, Secret) {
	t.Helper()
	pki := newTestPKI(t)
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

// The forwarder sends over its own connection by default, and through
// grpc-go's client only with GRPCClient; the remote answers both alike.
func TestForwarderUsesDirectConn(t *testing.T) {
	for _, grpcOnly := range []bool{false, true} {
		remote, _, addr, sec := serveRemote(t)
		store := NewStore(NewSet(map[string][]core.Policy{"default": {{
			Name: "to-remote", Priority: 1, Weight: 1,
			Connection: core.ConnectionInfo{ClusterName: "remote", Endpoints: []string{addr}, SecretName: sec.Name},
		}}}, []Secret{sec}))
		f, err := New(Options{Source: store, Self: "entry", GRPCClient: grpcOnly})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		for _, memo := range []*Memo{nil, new(Memo)} {
			resp, err := f.AllocateFor(ctx, "caller", &allocation.AllocationRequest{
				Namespace: "default", MultiClusterSetting: &allocation.MultiClusterSetting{Enabled: true},
			}, memo, 1, nil)
			if err != nil || resp.GetGameServerName() != "gs-default" || resp.GetSource() != addr {
				t.Fatalf("GRPCClient %v: %v, %v", grpcOnly, resp, err)
			}
		}
		if got := remote.hops.Load(); got != "entry" {
			t.Errorf("GRPCClient %v: the remote saw hops %q, want entry", grpcOnly, got)
		}
		f.clients.mu.Lock()
		var direct *h2Conn
		for _, c := range f.clients.byRef {
			direct = c.h2.Load()
		}
		f.clients.mu.Unlock()
		if (direct != nil) == grpcOnly {
			t.Errorf("GRPCClient %v: direct connection %v", grpcOnly, direct != nil)
		}
		cancel()
		f.Close()
	}
}

func framedRequest(t *testing.T, ns string) []byte {
	t.Helper()
	b, err := frame(&allocation.AllocationRequest{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The direct connection against a grpc-go server: answers, the remote's
// errors with their messages, the hops metadata, the caller's deadline
// (the remote sees the call canceled), and many calls at once.
func TestDirectConn(t *testing.T) {
	remote, _, c := startRemote(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	h, err := c.direct(ctx, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	call := func(ctx context.Context, ns string) (*allocation.AllocationResponse, error) {
		resp := new(allocation.AllocationResponse)
		handled, err := h.invoke(ctx, "here,there", framedRequest(t, ns), resp)
		if !handled {
			t.Fatalf("%s: the direct connection did not take the call", ns)
		}
		return resp, err
	}

	resp, err := call(ctx, "a")
	if err != nil || resp.GetGameServerName() != "gs-a" || resp.GetMetadata().GetLabels()["ns"] != "a" {
		t.Fatalf("got %v, %v", resp, err)
	}
	if got := remote.hops.Load(); got != "here,there" {
		t.Errorf("the remote saw hops %q, want here,there", got)
	}

	_, err = call(ctx, "fail")
	if st := status.Convert(err); st.Code() != codes.ResourceExhausted || st.Message() != remoteFailMessage {
		t.Errorf("the remote's error came back as %v %q", st.Code(), st.Message())
	}

	short, cancelShort := context.WithTimeout(ctx, 200*time.Millisecond)
	_, err = call(short, "hang")
	cancelShort()
	if status.Code(err) != codes.DeadlineExceeded {
		t.Errorf("past the caller's deadline: %v, want DeadlineExceeded", err)
	}
	select {
	case <-remote.canceled:
	case <-time.After(10 * time.Second):
		t.Error("the remote's call was not canceled")
	}

	var wg sync.WaitGroup
	var failed atomic.Int64
	for range 32 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 50 {
				resp := new(allocation.AllocationResponse)
				handled, err := h.invoke(ctx, "here", framedRequest(t, "b"), resp)
				if !handled || err != nil || resp.GetGameServerName() != "gs-b" {
					failed.Add(1)
				}
			}
		}()
	}
	wg.Wait()
	if n := failed.Load(); n > 0 {
		t.Errorf("%d of 1,600 concurrent calls were not answered", n)
	}
	if !h.usable() {
		t.Error("the connection is no longer usable")
	}
	again, err := c.direct(ctx, 5*time.Second)
	if err != nil || again != h {
		t.Errorf("a second call dialled again (%v)", err)
	}
}

// connected starts a remote and returns its client, with its direct
// connection after one call answered (the remote's settings are in by
// then), and a context for the test.
func connected(t *testing.T) (*fakeRemote, *grpc.Server, *client, *h2Conn, context.Context) {
	t.Helper()
	remote, srv, c := startRemote(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	h, err := c.direct(ctx, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := h.invoke(ctx, "here", framedRequest(t, "a"), new(allocation.AllocationResponse)); err != nil {
		t.Fatal(err)
	}
	return remote, srv, c, h, ctx
}

// What the direct connection cannot send it leaves to grpc-go's client,
// sending nothing: here a request larger than the remote's stream window.
func TestDirectConnLeavesLargeRequests(t *testing.T) {
	remote, _, _, h, ctx := connected(t)
	big, err := frame(&allocation.AllocationRequest{Namespace: "a", Metadata: &allocation.MetaPatch{
		Annotations: map[string]string{"big": strings.Repeat("x", 70_000)}}})
	if err != nil {
		t.Fatal(err)
	}
	before := remote.calls.Load()
	if handled, _ := h.invoke(ctx, "here", big, new(allocation.AllocationResponse)); handled {
		t.Fatal("a request over the remote's 64 KiB stream window was taken")
	}
	h.mu.Lock()
	inFlight := len(h.streams)
	h.mu.Unlock()
	if remote.calls.Load() != before || inFlight != 0 {
		t.Error("a call left to grpc-go was sent or kept")
	}
}

// A remote that goes away: the connection takes no new calls (the next
// dials again); a remote that dies fails the calls in flight at once, as
// Unavailable, instead of leaving them to their deadline.
func TestDirectConnRemoteGoesAway(t *testing.T) {
	_, srv, c, h, ctx := connected(t)
	done := make(chan error, 1)
	go func() {
		_, err := h.invoke(ctx, "here", framedRequest(t, "hang"), new(allocation.AllocationResponse))
		done <- err
	}()
	for h.stream(3) == nil { // the hanging call is in flight
		time.Sleep(time.Millisecond)
	}
	srv.Stop() // GOAWAY, then the connection closes under the call
	select {
	case err := <-done:
		if status.Code(err) != codes.Unavailable {
			t.Errorf("the call in flight ended with %v, want Unavailable", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the call in flight waited on after the remote died")
	}
	if h.usable() {
		t.Error("the connection still takes calls")
	}
	if handled, _ := h.invoke(ctx, "here", framedRequest(t, "a"), new(allocation.AllocationResponse)); handled {
		t.Error("a dead connection took a call")
	}
	if _, err := c.direct(ctx, time.Second); status.Code(err) != codes.Unavailable {
		t.Errorf("dialling a remote that is gone: %v, want Unavailable", err)
	}
}

func TestGRPCTimeout(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0: "1n", -time.Second: "1n", 1500 * time.Nanosecond: "1500n", 10 * time.Second: "10000000u",
		150 * time.Second: "150000m", 30 * time.Hour: "108000S", 30000 * time.Hour: "1800000M",
	} {
		if got := grpcTimeout(d); got != want {
			t.Errorf("grpcTimeout(%v) = %q, want %q", d, got, want)
		}
	}
}

// An answer that is not a gRPC answer fails with the code grpc-go's
// client gives it.
func TestDirectCallResult(t *testing.T) {
	ok := func(c h2Call) h2Call {
		if c.httpStatus == "" {
			c.httpStatus = "200"
		}
		if c.contentType == "" {
			c.contentType = "application/grpc"
		}
		return c
	}
	msg, _ := frame(&allocation.AllocationRequest{}) // an empty message decodes as an empty answer
	for _, c := range []struct {
		name string
		call h2Call
		want codes.Code
		says string
	}{
		{"answer", ok(h2Call{grpcStatus: "0", data: msg}), codes.OK, ""},
		{"error", ok(h2Call{grpcStatus: "5", grpcMessage: "no %25 such%0Athing"}), codes.NotFound, "no % such\nthing"},
		{"transport", h2Call{err: status.Error(codes.Unavailable, "gone")}, codes.Unavailable, "gone"},
		{"HTTP 503", ok(h2Call{httpStatus: "503"}), codes.Unavailable, "HTTP status 503"},
		{"HTTP 404", ok(h2Call{httpStatus: "404"}), codes.Unimplemented, "HTTP status 404"},
		{"not gRPC", ok(h2Call{contentType: "text/html", grpcStatus: "0"}), codes.Unknown, "content-type"},
		{"no status", ok(h2Call{data: msg}), codes.Internal, "without a grpc-status"},
		{"bad status", ok(h2Call{grpcStatus: "x"}), codes.Internal, "grpc-status"},
		{"compressed", ok(h2Call{grpcStatus: "0", data: append([]byte{1}, msg[1:]...)}), codes.Internal, "compressed"},
		{"short", ok(h2Call{grpcStatus: "0", data: msg[:3]}), codes.Internal, "malformed"},
	} {
		err := c.call.result("remote:443", new(allocation.AllocationResponse))
		st := status.Convert(err)
		if st.Code() != c.want || !strings.Contains(st.Message(), c.says) {
			t.Errorf("%s: %v %q, want %v saying %q", c.name, st.Code(), st.Message(), c.want, c.says)
		}
	}
}

// A connection that says nothing at all while a call waits out its
// deadline is taken for dead (there are no keepalives to tell): the next
// call dials a new one. The remote here speaks HTTP/2 by hand: its
// settings, then silence.
func TestDirectConnSilentRemote(t *testing.T) {
	defer func(d time.Duration) { h2SilentFor = d }(h2SilentFor)
	h2SilentFor = 50 * time.Millisecond
	pki := newTestPKI(t)
	ln := pki.h2Listener(t, tls.NoClientCert)
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				_ = http2.NewFramer(conn, nil).WriteSettings()
				_, _ = io.Copy(io.Discard, conn)
			}()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	h, err := dialH2(ctx, ln.Addr().String(), &tls.Config{RootCAs: pki.ca.CertPool()})
	if err != nil {
		t.Fatal(err)
	}
	defer h.close()
	for h.reads.Load() == 0 { // the remote's settings
		time.Sleep(time.Millisecond)
	}
	short, cancelShort := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancelShort()
	handled, err := h.invoke(short, "here", framedRequest(t, "a"), new(allocation.AllocationResponse))
	if !handled || status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("handled %v, %v; want DeadlineExceeded", handled, err)
	}
	if h.usable() {
		t.Error("a connection that said nothing until the deadline still takes calls")
	}
}

// handRemote is a remote that speaks HTTP/2 by hand: it sends its
// settings and windows, large enough for any call, then hands the
// connection to after. With after nil it never reads from it again (a
// remote that stopped reading). It returns the direct connection to it,
// with those settings in.
func handRemote(t *testing.T, after func(*tls.Conn)) (*h2Conn, context.Context) {
	t.Helper()
	pki := newTestPKI(t)
	ln := pki.h2Listener(t, tls.NoClientCert)
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
			mu.Lock()
			conns = append(conns, conn)
			mu.Unlock()
			fr := http2.NewFramer(conn, nil)
			_ = fr.WriteSettings(http2.Setting{ID: http2.SettingInitialWindowSize, Val: 1 << 30})
			_ = fr.WriteWindowUpdate(0, 1<<30)
			if after != nil {
				go after(conn.(*tls.Conn))
			}
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	h, err := dialH2(ctx, ln.Addr().String(), &tls.Config{RootCAs: pki.ca.CertPool()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.close)
	for {
		h.lockWrite(ctx)
		ready := h.peer.streamWindow == 1<<30 && h.sendWin > 1<<29
		h.unlockWrite()
		if ready {
			break
		}
		time.Sleep(time.Millisecond)
	}
	return h, ctx
}

// bigRequest is a framed request of about size bytes.
func bigRequest(t *testing.T, size int) []byte {
	t.Helper()
	b, err := frame(&allocation.AllocationRequest{Namespace: "a", Metadata: &allocation.MetaPatch{
		Annotations: map[string]string{"big": strings.Repeat("x", size)}}})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// One call to a remote that stopped reading, larger than loopback's
// socket buffers hold: its write gives up at the caller's deadline, and
// the connection, which now holds half a frame, fails. Without a write
// deadline the call waited as long as TCP retried.
func TestDirectConnDeafRemoteOneCall(t *testing.T) {
	h, ctx := handRemote(t, nil)
	big := bigRequest(t, 80<<20) // (slow under the race detector: before the clock starts)
	cctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	done := make(chan error, 1)
	go func() {
		_, err := h.invoke(cctx, "here", big, new(allocation.AllocationResponse))
		done <- err
	}()
	select {
	case err := <-done:
		if c := status.Code(err); c != codes.DeadlineExceeded && c != codes.Unavailable {
			t.Errorf("call: %v; want DeadlineExceeded or Unavailable", err)
		}
	case <-time.After(15 * time.Second):
		t.Fatal("an 80 MiB call to a remote that never reads still writing 15 s after it began, with a 1 s deadline")
	}
	if h.usable() {
		t.Error("a connection whose write gave up half way still takes calls")
	}
}

// Many calls to a remote that stopped reading: every call ends by its own
// deadline, as DeadlineExceeded or Unavailable, instead of waiting behind
// a write that TCP would keep retrying for minutes (with the write lock
// held, that was every call on the connection, and each canceled call's
// reset too), and the connection takes no more calls (a call that finds
// it failed is declined: it goes to grpc-go's client, and the next call
// dials a new direct connection).
func TestDirectConnDeafRemote(t *testing.T) {
	h, ctx := handRemote(t, nil)
	// 48 calls of 1 MiB: more than loopback's socket buffers hold.
	big := bigRequest(t, 1<<20)
	const calls = 48
	errs := make(chan error, calls)
	start := time.Now()
	for range calls {
		go func() {
			cctx, cancel := context.WithTimeout(ctx, time.Second)
			defer cancel()
			handled, err := h.invoke(cctx, "here", big, new(allocation.AllocationResponse))
			if !handled && !h.usable() {
				// Declined before sending: the connection had failed.
				err = status.Error(codes.Unavailable, "declined")
			}
			errs <- err
		}()
	}
	for i := range calls {
		select {
		case err := <-errs:
			if c := status.Code(err); c != codes.DeadlineExceeded && c != codes.Unavailable {
				t.Errorf("call: %v; want DeadlineExceeded or Unavailable", err)
			}
		case <-time.After(15 * time.Second):
			t.Fatalf("%d of %d calls still waiting %v after they began, with 1 s deadlines", calls-i, calls, time.Since(start).Round(time.Millisecond))
		}
	}
	if h.usable() {
		t.Error("a connection whose remote stopped reading still takes calls")
	}
}

// The connection's own frames have a deadline too: a remote that floods
// PINGs and reads none of the acknowledgements fills the (here small)
// socket buffers, and the reader's acknowledgement gives up after
// h2WriteTimeout and fails the connection, instead of the reader blocking
// for as long as TCP retries, holding the write lock.
func TestDirectConnDeafRemoteControlFrames(t *testing.T) {
	defer func(d time.Duration) { h2WriteTimeout = d }(h2WriteTimeout)
	h2WriteTimeout = 200 * time.Millisecond
	flood := make(chan *tls.Conn, 1)
	h, _ := handRemote(t, func(c *tls.Conn) { flood <- c })
	c := <-flood
	_ = c.NetConn().(*net.TCPConn).SetReadBuffer(4096)
	_ = h.nc.(*tls.Conn).NetConn().(*net.TCPConn).SetWriteBuffer(4096)
	go func() {
		bw := bufio.NewWriterSize(c, 64<<10)
		fr := http2.NewFramer(bw, nil)
		for i := range 200_000 {
			if fr.WritePing(false, [8]byte{byte(i), byte(i >> 8), byte(i >> 16)}) != nil {
				return
			}
			if i%1000 == 999 && bw.Flush() != nil {
				return
			}
		}
		_ = bw.Flush()
	}()
	deadline := time.Now().Add(15 * time.Second)
	for h.usable() {
		if time.Now().After(deadline) {
			t.Fatal("15 s into a PING flood whose acknowledgements are never read, the connection still takes calls")
		}
		time.Sleep(10 * time.Millisecond)
	}
	h.mu.Lock()
	err := h.err
	h.mu.Unlock()
	if err == nil || !strings.Contains(err.Error(), "timeout") {
		t.Errorf("the connection failed with %v, want a write timeout", err)
	}
}

// A call that reaches the write lock with its deadline already passed
// sends nothing: it does not time a write out and fail the connection that
// other calls share. (The forwarder gives the next endpoint whatever time
// is left, which may be none.)
func TestDirectConnExpiredCallLeavesConnection(t *testing.T) {
	remote, _, _, h, ctx := connected(t)
	hung := make(chan error, 1)
	hctx, cancelHung := context.WithCancel(ctx)
	go func() {
		_, err := h.invoke(hctx, "here", framedRequest(t, "hang"), new(allocation.AllocationResponse))
		hung <- err
	}()
	for h.stream(3) == nil { // the hanging call is in flight
		time.Sleep(time.Millisecond)
	}
	expired, cancel := context.WithDeadline(ctx, time.Now().Add(-time.Millisecond))
	defer cancel()
	h.lockWrite(ctx)
	nextID := h.nextID
	h.unlockWrite()
	handled, err := h.invoke(expired, "here", framedRequest(t, "a"), new(allocation.AllocationResponse))
	if !handled || status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("a call past its deadline: handled %v, %v; want DeadlineExceeded", handled, err)
	}
	if !h.usable() || h.stream(3) == nil {
		t.Fatal("a call past its deadline failed the connection, or the call in flight on it")
	}
	h.lockWrite(ctx)
	sent := h.nextID != nextID
	h.unlockWrite()
	if sent {
		t.Error("a call past its deadline was sent (it took a stream)")
	}
	resp := new(allocation.AllocationResponse)
	if _, err := h.invoke(ctx, "here", framedRequest(t, "b"), resp); err != nil || resp.GameServerName != "gs-b" {
		t.Fatalf("the next call: %v (%v)", err, resp)
	}
	cancelHung()
	<-hung
	<-remote.canceled
}

// A call whose deadline comes before a slow remote's answer fails alone:
// the connection, which other calls share, stays. The remote here uses
// fixed flow-control windows, as this repository's allocator does, so it
// sends nothing at all before its answer; the connection used to take a
// call's deadline passing in that silence for a dead connection, fail
// every call on it, and count them against the endpoint's breaker.
func TestDirectConnSlowRemoteKeepsConnection(t *testing.T) {
	remote, _, c := startRemote(t, grpc.InitialWindowSize(StreamWindowBytes), grpc.InitialConnWindowSize(ConnWindowBytes))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	h, err := c.direct(ctx, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	resp := new(allocation.AllocationResponse)
	if _, err := h.invoke(ctx, "here", framedRequest(t, "a"), resp); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		short, cancelShort := context.WithTimeout(ctx, 50*time.Millisecond)
		_, err := h.invoke(short, "here", framedRequest(t, "slow"), resp)
		cancelShort()
		if status.Code(err) != codes.DeadlineExceeded {
			t.Fatalf("a call with 50 ms for a 300 ms answer: %v, want DeadlineExceeded", err)
		}
		if !h.usable() {
			t.Fatal("a call's short deadline failed the connection it shares")
		}
	}
	if _, err := h.invoke(ctx, "here", framedRequest(t, "b"), resp); err != nil || resp.GameServerName != "gs-b" {
		t.Fatalf("the next call: %v (%v)", err, resp)
	}
	if got := remote.calls.Load(); got != 5 {
		t.Errorf("the remote saw %d calls, want 5", got)
	}
}

// deadlinePast is a context whose deadline has passed but whose Done has
// not fired yet, as a caller's is between the two.
type deadlinePast struct{ context.Context }

func (deadlinePast) Deadline() (time.Time, bool) { return time.Now().Add(-time.Millisecond), true }

// A remote resets a stream with CANCEL when the deadline it was sent
// passes; seen before the caller's own context says so, that is still the
// caller's deadline (DeadlineExceeded, as grpc-go's client reports it),
// while a reset before the deadline is the remote's cancel (Canceled).
func TestDirectConnResetAtDeadline(t *testing.T) {
	h, ctx := handRemote(t, func(c *tls.Conn) {
		if _, err := io.ReadFull(c, make([]byte, len(http2.ClientPreface))); err != nil {
			return
		}
		fr := http2.NewFramer(c, c)
		for {
			f, err := fr.ReadFrame()
			if err != nil {
				return
			}
			if hf, ok := f.(*http2.HeadersFrame); ok {
				_ = fr.WriteRSTStream(hf.StreamID, http2.ErrCodeCancel)
			}
		}
	})
	for _, tc := range []struct {
		name string
		ctx  context.Context
		want codes.Code
	}{
		{"deadline passed", deadlinePast{ctx}, codes.DeadlineExceeded},
		{"deadline to come", ctx, codes.Canceled},
	} {
		handled, err := h.invoke(tc.ctx, "here", framedRequest(t, "a"), new(allocation.AllocationResponse))
		if !handled || status.Code(err) != tc.want {
			t.Errorf("%s: handled %v, %v; want %v", tc.name, handled, err, tc.want)
		}
	}
}
