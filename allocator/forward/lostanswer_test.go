package forward

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	"github.com/quartermaster-dev/quartermaster/allocator/pb/allocation"
	qmv1 "github.com/quartermaster-dev/quartermaster/allocator/pb/quartermaster/v1"
	"github.com/quartermaster-dev/quartermaster/core"
)

// keyedRemote is a remote allocator with idempotency keys, as a
// Quartermaster's: a request with a key it has allocated for gets that
// allocation again; Release by key gives it back (NotFound when it holds
// none). It allocates without limit, naming servers in order.
type keyedRemote struct {
	allocation.UnimplementedAllocationServiceServer
	qmv1.UnimplementedAllocationAdminServer
	name string

	mu        sync.Mutex
	byKey     map[string]string // key → server, while allocated
	released  map[string]bool
	keysSeen  []string
	made      int
	onBehalf  []string
	allocated atomic.Int64 // servers allocated now
	// failReleases: Release answers Unavailable.
	failReleases atomic.Bool
	// full: Allocate answers ResourceExhausted.
	full atomic.Bool
}

func newKeyedRemote(name string) *keyedRemote {
	return &keyedRemote{name: name, byKey: map[string]string{}, released: map[string]bool{}}
}

func (r *keyedRemote) Allocate(_ context.Context, in *allocation.AllocationRequest) (*allocation.AllocationResponse, error) {
	key := in.GetMetadata().GetAnnotations()[allocationKeyAnnotation]
	//nolint:staticcheck // SA1019: the forwarder writes both forms; they must agree.
	if k2 := in.GetMetaPatch().GetAnnotations()[allocationKeyAnnotation]; k2 != key {
		return nil, status.Errorf(codes.InvalidArgument, "metadata key %q, metaPatch key %q", key, k2)
	}
	if r.full.Load() {
		return nil, status.Error(codes.ResourceExhausted, "no game server")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.keysSeen = append(r.keysSeen, key)
	if r.released[key] {
		return nil, status.Error(codes.FailedPrecondition, keyReleasedText)
	}
	gs, ok := r.byKey[key]
	if !ok || key == "" {
		r.made++
		gs = fmt.Sprintf("%s-gs-%d", r.name, r.made)
		r.allocated.Add(1)
		if key != "" {
			r.byKey[key] = gs
		}
	}
	return &allocation.AllocationResponse{GameServerName: gs, Address: "10.0.0.1",
		Metadata: &allocation.AllocationResponse_GameServerMetadata{Annotations: in.GetMetadata().GetAnnotations()}}, nil
}

func (r *keyedRemote) Release(ctx context.Context, in *qmv1.ReleaseRequest) (*qmv1.ReleaseResponse, error) {
	if r.failReleases.Load() {
		return nil, status.Error(codes.Unavailable, "releases fail here for now")
	}
	key := in.GetAllocationKey()
	r.mu.Lock()
	defer r.mu.Unlock()
	r.onBehalf = append(r.onBehalf, metadata.ValueFromIncomingContext(ctx, OnBehalfOfKey)...)
	if key == "" {
		return nil, status.Error(codes.InvalidArgument, "allocationKey: must not be empty")
	}
	r.released[key] = true
	gs, ok := r.byKey[key]
	if !ok {
		return nil, status.Errorf(codes.NotFound, "no allocation with key %q", key)
	}
	delete(r.byKey, key)
	r.allocated.Add(-1)
	return &qmv1.ReleaseResponse{Allocation: &qmv1.Allocation{GameServerName: gs, Namespace: in.GetNamespace()}}, nil
}

func (r *keyedRemote) seen() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.keysSeen...)
}

func (r *keyedRemote) holds(key string) bool { return r.serverOf(key) != "" }

func (r *keyedRemote) serverOf(key string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.byKey[key]
}

// serveKeyed serves r with mutual TLS on loopback, with fixed flow
// control windows as allocator.Server has them: the first bytes it sends
// back on a call are then the answer (no BDP ping ahead of it).
func serveKeyed(t *testing.T, pki *testPKI, r *keyedRemote) string {
	t.Helper()
	srv := grpc.NewServer(grpc.Creds(credentials.NewTLS(&tls.Config{
		Certificates: []tls.Certificate{pki.server}, ClientCAs: pki.ca.CertPool(), ClientAuth: tls.RequireAndVerifyClientCert,
	})), grpc.InitialWindowSize(StreamWindowBytes), grpc.InitialConnWindowSize(ConnWindowBytes))
	allocation.RegisterAllocationServiceServer(srv, r)
	qmv1.RegisterAllocationAdminServer(srv, r)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(srv.Stop)
	return ln.Addr().String()
}

// lossyLink is a TCP relay on loopback in front of an allocator that can
// lose answers as the rig's FaultAnswerLost does: what the caller sends
// goes through, and a connection is cut at the first bytes coming back.
type lossyLink struct {
	ln       net.Listener
	upstream string
	// lose: cut connections at their first bytes back; once: only the
	// next one (then lose goes off by itself).
	lose, once atomic.Bool
	cuts       atomic.Int64
	mu         sync.Mutex
	conns      map[net.Conn]bool
}

func newLossyLink(t *testing.T, upstream string) *lossyLink {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	l := &lossyLink{ln: ln, upstream: upstream, conns: map[net.Conn]bool{}}
	t.Cleanup(func() {
		ln.Close()
		l.mu.Lock()
		for c := range l.conns {
			c.Close()
		}
		l.mu.Unlock()
	})
	go l.accept()
	return l
}

func (l *lossyLink) addr() string { return l.ln.Addr().String() }

// Addr and LoseAnswers serve the external tests (NewLossyLinkForTest).
func (l *lossyLink) Addr() string { return l.addr() }

// LoseAnswers switches losing answers on or off.
func (l *lossyLink) LoseAnswers(on bool) { l.once.Store(false); l.lose.Store(on) }

func (l *lossyLink) accept() {
	for {
		down, err := l.ln.Accept()
		if err != nil {
			return
		}
		up, err := net.Dial("tcp", l.upstream)
		if err != nil {
			down.Close()
			continue
		}
		l.mu.Lock()
		l.conns[down], l.conns[up] = true, true
		l.mu.Unlock()
		go func() { _, _ = io.Copy(up, down); up.Close() }()
		go l.back(down, up)
	}
}

// back copies the allocator's bytes to the caller unless answers are
// being lost: then the first chunk is dropped and both sides closed.
func (l *lossyLink) back(down, up net.Conn) {
	defer down.Close()
	defer up.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := up.Read(buf)
		if n > 0 {
			if l.lose.Load() {
				if l.once.Load() {
					l.lose.Store(false)
				}
				l.cuts.Add(1)
				return
			}
			if _, werr := down.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

// keyedForwarder forwards {to: keyed} to the endpoints, priority in the
// given order, into namespace default of the remote, with OwnKeys on
// (set it in o for off).
func keyedForwarder(t *testing.T, o Options, sec Secret, endpoints ...string) (*Forwarder, *prometheus.Registry) {
	t.Helper()
	var policies []core.Policy
	for i, ep := range endpoints {
		policies = append(policies, core.Policy{
			Name: fmt.Sprintf("c%d", i), Priority: int32(i + 1), Weight: 1, Labels: map[string]string{"to": "keyed"},
			Connection: core.ConnectionInfo{ClusterName: fmt.Sprintf("c%d", i), Endpoints: []string{ep}, SecretName: sec.Name},
		})
	}
	reg := prometheus.NewRegistry()
	o.Source = NewStore(NewSet(map[string][]core.Policy{"default": policies}, []Secret{sec}))
	o.Self = "entry"
	o.OwnKeys = !o.OwnKeys // keyed here unless a test says otherwise
	o.Registerer = reg
	f, err := New(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Close)
	return f, reg
}

// A remote allocates and the connection drops before the answer reaches
// the forwarder: the forwarder sends the request to the same endpoint
// again with the same key and gets the same server; one server is
// allocated for the request, and nothing is left to reconcile.
func TestLostAnswerRetriedWithKey(t *testing.T) {
	pki := newTestPKI(t)
	remote := newKeyedRemote("a")
	link := newLossyLink(t, serveKeyed(t, pki, remote))
	f, reg := keyedForwarder(t, Options{Retries: -1}, pki.secret(t, "entry"), link.addr())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// A first request opens the connection (and allocates a server).
	if _, err := f.AllocateFor(ctx, "caller", to("keyed", nil), nil, 1, nil); err != nil {
		t.Fatal(err)
	}
	for _, memo := range []*Memo{nil, new(Memo)} {
		before := remote.allocated.Load()
		seen := len(remote.seen())
		link.once.Store(true)
		link.lose.Store(true)
		resp, err := f.AllocateFor(ctx, "caller", to("keyed", nil), memo, 1, nil)
		if err != nil {
			t.Fatalf("memo %v: %v", memo != nil, err)
		}
		if link.cuts.Load() == 0 {
			t.Fatal("the link lost no answer: the test tested nothing")
		}
		keys := remote.seen()[seen:]
		if len(keys) != 2 || keys[0] == "" || keys[0] != keys[1] {
			t.Fatalf("memo %v: the remote saw keys %q, want the same key twice", memo != nil, keys)
		}
		if got := remote.allocated.Load() - before; got != 1 {
			t.Errorf("memo %v: %d servers allocated for one request, want 1", memo != nil, got)
		}
		if want := remote.serverOf(keys[0]); resp.GetGameServerName() != want {
			t.Errorf("memo %v: answered %q, the key's server is %q", memo != nil, resp.GetGameServerName(), want)
		}
	}
	if n := testutil.ToFloat64(f.m.lost.WithLabelValues("c0")); n != 2 {
		t.Errorf("qm_forward_answers_lost_total = %v, want 2", n)
	}
	if n := f.rec.pendingCount(); n != 0 {
		t.Errorf("%d releases queued for requests the remote served", n)
	}
	if n := counterOf(t, reg, "qm_forward_reconciliations_total", "queued"); n != 0 {
		t.Errorf("reconciliations queued: %v, want 0", n)
	}
}

// counterOf reads qm_forward_reconciliations_total-like counters by their
// outcome label.
func counterOf(t *testing.T, reg *prometheus.Registry, name, outcome string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "outcome" && lp.GetValue() == outcome {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// The first cluster allocates and then stays unreachable: the forwarder
// serves the request from the next cluster and, once the first is
// reachable again, releases the allocation there, by key, for the caller
// it was forwarded for.
func TestLostAnswerReconciled(t *testing.T) {
	pki := newTestPKI(t)
	first, second := newKeyedRemote("first"), newKeyedRemote("second")
	link := newLossyLink(t, serveKeyed(t, pki, first))
	f, reg := keyedForwarder(t, Options{
		Retries: -1, ReconcileBackoff: 20 * time.Millisecond,
		Breaker: BreakerOptions{Failures: 1, OpenFor: 50 * time.Millisecond, MaxOpenFor: 100 * time.Millisecond},
	}, pki.secret(t, "entry"), link.addr(), serveKeyed(t, pki, second))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	if _, err := f.AllocateFor(ctx, "caller", to("keyed", nil), nil, 1, nil); err != nil {
		t.Fatal(err)
	}
	warm := first.seen()[0]
	link.lose.Store(true) // every answer, and every new connection's handshake
	resp, err := f.AllocateFor(ctx, "caller", to("keyed", nil), nil, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetGameServerName() != "second-gs-1" {
		t.Fatalf("served by %q, want the second cluster's server", resp.GetGameServerName())
	}
	keys := first.seen()
	if len(keys) != 2 {
		t.Fatalf("the first cluster saw %d requests, want 2", len(keys))
	}
	lost := keys[1]
	if !first.holds(lost) {
		t.Fatal("the first cluster holds no allocation for the lost answer: the test tested nothing")
	}
	if k := second.seen(); len(k) != 1 || k[0] != lost {
		t.Errorf("the second cluster saw keys %q, want the request's key %q", k, lost)
	}
	// Unreachable: the release waits.
	time.Sleep(200 * time.Millisecond)
	if !first.holds(lost) || f.rec.pendingCount() != 1 {
		t.Fatalf("while the first cluster is unreachable: holds %v, %d releases queued", first.holds(lost), f.rec.pendingCount())
	}

	link.lose.Store(false)
	deadline := time.Now().Add(20 * time.Second)
	for first.holds(lost) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if first.holds(lost) {
		t.Fatal("the first cluster still holds the allocation whose answer was lost")
	}
	if !first.holds(warm) {
		t.Error("the reconciliation released another request's allocation")
	}
	for f.rec.pendingCount() != 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	for outcome, want := range map[string]float64{"queued": 1, "released": 1, "nothing_there": 0, "given_up": 0} {
		if n := counterOf(t, reg, "qm_forward_reconciliations_total", outcome); n != want {
			t.Errorf("qm_forward_reconciliations_total{outcome=%q} = %v, want %v", outcome, n, want)
		}
	}
	if n := counterOf(t, reg, "qm_forward_reconciliations_total", "attempted"); n < 1 {
		t.Errorf("no release attempted")
	}
	first.mu.Lock()
	onBehalf := append([]string(nil), first.onBehalf...)
	first.mu.Unlock()
	if len(onBehalf) == 0 || onBehalf[len(onBehalf)-1] != "caller" {
		t.Errorf("the release was sent on behalf of %q, want the caller", onBehalf)
	}
}

// The caller's key travels as a key of the caller's own: the same caller
// sending it again (as annotation or gRPC header) gets the same forwarded
// key, and the same server; another caller with the same key gets another
// key, and another server. A request without a key gets a fresh key.
func TestCallerKeyForwarded(t *testing.T) {
	pki := newTestPKI(t)
	remote := newKeyedRemote("r")
	addr := serveKeyed(t, pki, remote)
	f, _ := keyedForwarder(t, Options{}, pki.secret(t, "entry"), addr)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	keyed := map[string]string{allocationKeyAnnotation: "match-1"}
	header := metadata.NewIncomingContext(ctx, metadata.Pairs(allocationKeyHeader, "match-1"))
	calls := []struct {
		ctx      context.Context
		identity string
		ann      map[string]string
	}{
		{ctx, "alice", keyed}, {ctx, "alice", keyed}, {header, "alice", nil}, {ctx, "bob", keyed}, {ctx, "alice", nil}, {ctx, "alice", nil},
	}
	var servers []string
	for i, c := range calls {
		resp, err := f.AllocateFor(c.ctx, c.identity, to("keyed", c.ann), nil, 1, nil)
		if err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
		servers = append(servers, resp.GetGameServerName())
	}
	k := remote.seen()
	if k[0] != k[1] || k[0] != k[2] || servers[0] != servers[1] || servers[0] != servers[2] {
		t.Errorf("one caller's key sent three times: keys %q, servers %q; want one key and one server", k[:3], servers[:3])
	}
	if k[3] == k[0] || servers[3] == servers[0] {
		t.Errorf("two callers with the same key met at the remote: keys %q and %q, servers %q and %q", k[0], k[3], servers[0], servers[3])
	}
	for _, key := range k[:4] {
		if key == "match-1" || key[:4] != "qmk-" {
			t.Errorf("forwarded key %q, want a key derived from the caller's", key)
		}
	}
	if k[4] == k[5] || k[4][:4] != "qmf-" || servers[4] == servers[5] {
		t.Errorf("requests without a key: keys %q, %q, servers %q, %q; want two fresh keys and two servers", k[4], k[5], servers[4], servers[5])
	}

	// Released by the caller's key through the forwarder: the caller's
	// allocation, not the other caller's with the same key.
	resp, err := f.Release(ctx, "alice", &qmv1.ReleaseRequest{Source: addr, AllocationKey: "match-1"})
	if err != nil || resp.GetAllocation().GetGameServerName() != servers[0] || resp.GetAllocation().GetOwner() != "alice" {
		t.Fatalf("release by key: %v, %v", resp, err)
	}
	if remote.holds(k[0]) || !remote.holds(k[3]) {
		t.Errorf("after alice's release by key: alice's held %v, bob's held %v; want false, true", remote.holds(k[0]), remote.holds(k[3]))
	}
	if _, err := f.Release(ctx, "alice", &qmv1.ReleaseRequest{Source: addr, AllocationKey: "match-1", GameServerName: "x"}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("release naming a server and a key: %v, want InvalidArgument", err)
	}
}

// A request refused before anything of it left (nothing listens at the
// endpoint) is no lost answer: the forwarder moves on at once, and queues
// nothing to release there.
func TestRefusedIsNotLost(t *testing.T) {
	pki := newTestPKI(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	down := ln.Addr().String()
	ln.Close()
	remote := newKeyedRemote("r")
	f, reg := keyedForwarder(t, Options{Retries: -1}, pki.secret(t, "entry"), down, serveKeyed(t, pki, remote))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for range 3 {
		if _, err := f.AllocateFor(ctx, "caller", to("keyed", nil), nil, 1, nil); err != nil {
			t.Fatal(err)
		}
	}
	if n := testutil.ToFloat64(f.m.lost.WithLabelValues("c0")); n != 0 {
		t.Errorf("%v answers counted lost at an endpoint nothing listens on", n)
	}
	if n := counterOf(t, reg, "qm_forward_reconciliations_total", "queued"); n != 0 {
		t.Errorf("%v releases queued at an endpoint nothing listens on", n)
	}
}

// Without OwnKeys a request without a key is forwarded as it came: no key
// reaches the remote, and a lost answer to it is not sent to the same
// endpoint again (it could allocate twice); it fails over as before.
func TestNoOwnKeys(t *testing.T) {
	pki := newTestPKI(t)
	remote := newKeyedRemote("r")
	link := newLossyLink(t, serveKeyed(t, pki, remote))
	f, reg := keyedForwarder(t, Options{Retries: -1, OwnKeys: true}, pki.secret(t, "entry"), link.addr())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := f.AllocateFor(ctx, "caller", to("keyed", nil), nil, 1, nil); err != nil {
		t.Fatal(err)
	}
	link.once.Store(true)
	link.lose.Store(true)
	if _, err := f.AllocateFor(ctx, "caller", to("keyed", nil), nil, 1, nil); status.Code(err) != codes.Unavailable {
		t.Fatalf("a lost answer to a request without a key: %v, want Unavailable", err)
	}
	if k := remote.seen(); len(k) != 2 || k[0] != "" || k[1] != "" {
		t.Errorf("the remote saw keys %q, want two requests without one", k)
	}
	if n := counterOf(t, reg, "qm_forward_reconciliations_total", "queued"); n != 0 {
		t.Errorf("%v releases queued for a request without a key", n)
	}
}

// waitReady waits until the forwarder's connection to endpoint is ready
// (out of grpc-go's reconnect backoff).
func waitReady(t *testing.T, f *Forwarder, endpoint string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		f.clients.mu.Lock()
		var cc *grpc.ClientConn
		for ref, c := range f.clients.byRef {
			if ref.endpoint == endpoint {
				cc = c.cc
			}
		}
		f.clients.mu.Unlock()
		if cc != nil {
			cc.Connect()
			if cc.GetState() == connectivity.Ready {
				return
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	t.Fatalf("the connection to %s is not ready", endpoint)
}

// A keyed request's clusters come in its key's order, whatever the seed
// of the request (another replica, another try): the caller's retry meets
// first the cluster that may hold its allocation from a lost answer. Two
// clusters in one tier, each key sent with four seeds: one server per key,
// and the keys spread over both clusters. A request without a key still
// draws its order from the seed.
func TestKeyedOrderFollowsTheKey(t *testing.T) {
	pki := newTestPKI(t)
	sec := pki.secret(t, "entry")
	remotes := []*keyedRemote{newKeyedRemote("a"), newKeyedRemote("b")}
	var policies []core.Policy
	for i, r := range remotes {
		policies = append(policies, core.Policy{
			Name: r.name, Priority: 1, Weight: 1, Labels: map[string]string{"to": "keyed"},
			Connection: core.ConnectionInfo{ClusterName: r.name, Endpoints: []string{serveKeyed(t, pki, remotes[i])}, SecretName: sec.Name},
		})
	}
	f, err := New(Options{Source: NewStore(NewSet(map[string][]core.Policy{"default": policies}, []Secret{sec})),
		Self: "entry", Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	const keys = 16
	for k := range keys {
		key := fmt.Sprintf("match-%d", k)
		var servers []string
		for seed := uint64(1); seed <= 4; seed++ {
			resp, err := f.AllocateFor(ctx, "caller", to("keyed", map[string]string{allocationKeyAnnotation: key}), nil, seed, nil)
			if err != nil {
				t.Fatalf("key %s, seed %d: %v", key, seed, err)
			}
			servers = append(servers, resp.GetGameServerName())
		}
		for _, s := range servers[1:] {
			if s != servers[0] {
				t.Fatalf("key %s sent with four seeds was answered %q: its tries went to different clusters", key, servers)
			}
		}
	}
	a, b := remotes[0].allocated.Load(), remotes[1].allocated.Load()
	if a+b != keys || a == 0 || b == 0 {
		t.Errorf("%d keys allocated %d servers at a and %d at b; want one per key, on both clusters", keys, a, b)
	}

	// Without a key the seed still chooses.
	clusters := map[string]bool{}
	for seed := uint64(1); seed <= 16; seed++ {
		resp, err := f.AllocateFor(ctx, "caller", to("keyed", nil), nil, seed, nil)
		if err != nil {
			t.Fatal(err)
		}
		clusters[resp.GetGameServerName()[:1]] = true
	}
	if len(clusters) != 2 {
		t.Errorf("requests without a key, sixteen seeds, went only to %v", clusters)
	}
}

// A keyed request whose answer was lost at one cluster, which the other
// cluster could not serve, is answered Unavailable (a caller retries
// that), not the other's "no game server" (a caller gives up, and the
// server held for the key would stay Allocated for nobody). The retry
// with the key gets the allocation held for it; the other cluster, able
// to allocate by then, allocates nothing.
func TestHeldKeyAnswersRetry(t *testing.T) {
	pki := newTestPKI(t)
	a, b := newKeyedRemote("a"), newKeyedRemote("b")
	link := newLossyLink(t, serveKeyed(t, pki, a))
	// (a's breaker stays closed: the retry is to reach a, as it would once
	// a was reachable again.)
	f, _ := keyedForwarder(t, Options{Retries: -1, Breaker: BreakerOptions{Failures: 100}}, pki.secret(t, "entry"), link.addr(), serveKeyed(t, pki, b))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// A first request opens the connection to a (and allocates there).
	if _, err := f.AllocateFor(ctx, "caller", to("keyed", nil), nil, 1, nil); err != nil {
		t.Fatal(err)
	}

	b.full.Store(true)
	link.lose.Store(true) // every answer from a lost, and every new connection cut
	keyed := map[string]string{allocationKeyAnnotation: "match-1"}
	_, err := f.AllocateFor(ctx, "caller", to("keyed", keyed), nil, 1, nil)
	if link.cuts.Load() == 0 || a.allocated.Load() != 2 {
		t.Fatalf("a lost %d answers and holds %d servers: the test tested nothing", link.cuts.Load(), a.allocated.Load())
	}
	if status.Code(err) != codes.Unavailable || !strings.Contains(status.Convert(err).Message(), "send it again with the same key") {
		t.Fatalf("a held key, the other cluster full: %v; want Unavailable saying to send it again with the key", err)
	}

	held := a.serverOf(a.seen()[1])
	link.lose.Store(false)
	b.full.Store(false)
	// The caller retries once a answers again (grpc-go dials it anew
	// after a backoff of its own): requests without a key until one is.
	for {
		resp, err := f.AllocateFor(ctx, "caller", to("keyed", nil), nil, 1, nil)
		if err != nil {
			t.Fatal(err)
		}
		if strings.HasPrefix(resp.GetGameServerName(), "a-") {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	atA, atB := a.allocated.Load(), b.allocated.Load()
	resp, err := f.AllocateFor(ctx, "caller", to("keyed", keyed), nil, 1, nil)
	if err != nil {
		t.Fatal(err)
	}
	if resp.GetGameServerName() != held || a.allocated.Load() != atA || b.allocated.Load() != atB {
		t.Errorf("the retry got %q (a holds %q for the key); servers allocated by it: %d at a, %d at b; want the held one, 0 and 0",
			resp.GetGameServerName(), held, a.allocated.Load()-atA, b.allocated.Load()-atB)
	}
}
