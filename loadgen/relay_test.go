package loadgen

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"

	"github.com/quartermaster-dev/quartermaster/allocator/mtls"
	"github.com/quartermaster-dev/quartermaster/allocator/pb/allocation"
	"github.com/quartermaster-dev/quartermaster/certs"
)

// peerRecorder answers Allocate with the identity of the TLS client it
// saw, so a test can tell whose connection reached it.
type peerRecorder struct {
	allocation.UnimplementedAllocationServiceServer
	mu    sync.Mutex
	addrs map[string]bool // the client ends of the connections that reached it
}

func (p *peerRecorder) Allocate(ctx context.Context, _ *allocation.AllocationRequest) (*allocation.AllocationResponse, error) {
	pr, _ := peer.FromContext(ctx)
	info, ok := pr.AuthInfo.(credentials.TLSInfo)
	if !ok || len(info.State.PeerCertificates) == 0 {
		return nil, errors.New("no client certificate")
	}
	id, err := mtls.IdentityFromCertificate(info.State.PeerCertificates[0])
	if err != nil {
		return nil, err
	}
	p.mu.Lock()
	p.addrs[pr.Addr.String()] = true
	p.mu.Unlock()
	return &allocation.AllocationResponse{GameServerName: id}, nil
}

// relayRig is a `qm certs` directory, a gRPC server with its server
// certificate, and a relay in front of it.
type relayRig struct {
	dir    string
	remote *peerRecorder
	relay  *Relay
	served chan error
	cancel context.CancelFunc
}

func newRelayRig(t *testing.T) *relayRig {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "certs")
	if _, err := certs.Generate(certs.GenerateOptions{Dir: dir, Hosts: []string{"127.0.0.1"}, Clients: []string{"caller", "forwarder"}, Now: time.Now()}); err != nil {
		t.Fatal(err)
	}
	l := certs.Layout{Dir: dir}
	sc, err := tls.LoadX509KeyPair(l.ServerCert(), l.ServerKey())
	if err != nil {
		t.Fatal(err)
	}
	cas, err := readPool(l.ClientCACert())
	if err != nil {
		t.Fatal(err)
	}
	rec := &peerRecorder{addrs: map[string]bool{}}
	gs := grpc.NewServer(grpc.Creds(credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{sc}, ClientCAs: cas, ClientAuth: tls.RequireAndVerifyClientCert})))
	allocation.RegisterAllocationServiceServer(gs, rec)
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go gs.Serve(lis)
	t.Cleanup(gs.Stop)

	r, err := NewRelay(RelayConfig{Addr: "127.0.0.1:0", Remote: lis.Addr().String(), CertsDir: dir, Identity: "forwarder"})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	rig := &relayRig{dir: dir, remote: rec, relay: r, served: make(chan error, 1), cancel: cancel}
	go func() { rig.served <- r.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-rig.served
	})
	return rig
}

// dial connects to the relay as identity.
func (r *relayRig) dial(t *testing.T, identity string) allocation.AllocationServiceClient {
	t.Helper()
	cfg, err := mtls.ClientConfigFromDir(r.dir, identity)
	if err != nil {
		t.Fatal(err)
	}
	cc, err := grpc.NewClient(r.relay.Addr().String(), grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return allocation.NewAllocationServiceClient(cc)
}

// TestRelayCarriesGRPC: calls through the relay reach the remote as the
// relay's own identity (the relay ended the caller's TLS and began its
// own), each caller connection on one remote connection of its own.
func TestRelayCarriesGRPC(t *testing.T) {
	rig := newRelayRig(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for range 2 {
		c := rig.dial(t, "caller")
		for i := range 20 {
			resp, err := c.Allocate(ctx, &allocation.AllocationRequest{Namespace: "default"})
			if err != nil {
				t.Fatalf("call %d through the relay: %v", i, err)
			}
			if resp.GameServerName != "forwarder" {
				t.Fatalf("the remote saw identity %q, want the relay's own, forwarder", resp.GameServerName)
			}
		}
	}
	rig.remote.mu.Lock()
	n := len(rig.remote.addrs)
	rig.remote.mu.Unlock()
	if n != 2 {
		t.Errorf("two caller connections reached the remote over %d connections, want 2", n)
	}
}

// TestRelayRefusesStrangers: a caller whose certificate the client CA did
// not sign is refused at the handshake, and the relay goes on serving.
func TestRelayRefusesStrangers(t *testing.T) {
	rig := newRelayRig(t)
	other := filepath.Join(t.TempDir(), "other")
	if _, err := certs.Generate(certs.GenerateOptions{Dir: other, Clients: []string{"caller"}, Now: time.Now()}); err != nil {
		t.Fatal(err)
	}
	cfg, err := mtls.ClientConfigFromDir(other, "caller")
	if err != nil {
		t.Fatal(err)
	}
	// The stranger trusts the relay's server certificate; only its own is wrong.
	cfg.RootCAs, err = readPool(certs.Layout{Dir: rig.dir}.CACert())
	if err != nil {
		t.Fatal(err)
	}
	cfg.NextProtos = []string{"h2"}
	conn, err := tls.Dial("tcp", rig.relay.Addr().String(), cfg)
	if err == nil {
		// TLS 1.3 reports the server's refusal on the first read.
		conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		_, err = conn.Read(make([]byte, 1))
		conn.Close()
	}
	if err == nil || !strings.Contains(err.Error(), "certificate") {
		t.Fatalf("a stranger's connection: err %v, want a certificate error", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if _, err := rig.dial(t, "caller").Allocate(ctx, &allocation.AllocationRequest{}); err != nil {
		t.Fatalf("after a stranger, a caller: %v", err)
	}
}

// TestRelayStops: ending Serve's context closes the open connections and
// Serve returns without an error.
func TestRelayStops(t *testing.T) {
	rig := newRelayRig(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	c := rig.dial(t, "caller")
	if _, err := c.Allocate(ctx, &allocation.AllocationRequest{}); err != nil {
		t.Fatal(err)
	}
	rig.cancel()
	select {
	case err := <-rig.served:
		if err != nil {
			t.Fatalf("Serve: %v", err)
		}
		rig.served <- nil // for the cleanup
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return after its context ended")
	}
	if _, err := c.Allocate(ctx, &allocation.AllocationRequest{}, grpc.WaitForReady(false)); err == nil {
		t.Fatal("a call after the relay stopped succeeded")
	}
}

func TestNewRelayRefusesBadConfig(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "certs")
	if _, err := certs.Generate(certs.GenerateOptions{Dir: dir, Hosts: []string{"127.0.0.1"}, Clients: []string{"forwarder"}, Now: time.Now()}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		c    RelayConfig
		want string
	}{
		{"no remote", RelayConfig{Addr: "127.0.0.1:0", CertsDir: dir, Identity: "forwarder"}, "no remote"},
		{"remote without port", RelayConfig{Addr: "127.0.0.1:0", Remote: "example.com", CertsDir: dir, Identity: "forwarder"}, `"example.com" is not host:port`},
		{"no certificates", RelayConfig{Addr: "127.0.0.1:0", Remote: "127.0.0.1:1", Identity: "forwarder"}, "no certificate directory"},
		{"unknown identity", RelayConfig{Addr: "127.0.0.1:0", Remote: "127.0.0.1:1", CertsDir: dir, Identity: "nobody"}, `client certificate of "nobody"`},
		{"bad address", RelayConfig{Addr: "127.0.0.1:http-ish", Remote: "127.0.0.1:1", CertsDir: dir, Identity: "forwarder"}, "listen on 127.0.0.1:http-ish"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := NewRelay(tc.c)
			if err == nil {
				r.close()
				t.Fatal("accepted")
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %q does not say %q", err, tc.want)
			}
		})
	}
}
