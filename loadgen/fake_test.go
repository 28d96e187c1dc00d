package loadgen

import (
	"context"
	"crypto/tls"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/quartermaster-dev/quartermaster/allocator/pb/allocation"
	qmv1 "github.com/quartermaster-dev/quartermaster/allocator/pb/quartermaster/v1"
	"github.com/quartermaster-dev/quartermaster/certs"
)

// fake is a real gRPC server on a loopback socket with mutual TLS that
// answers Allocate at once, unless stalled (as a server stalls in a long
// GC pause or on a lock): then every request waits for the stall to end.
type fake struct {
	addr   string
	client *tls.Config
	// serverTLS is the server's side, for other fakes of one test.
	serverTLS *tls.Config
	stall     sync.RWMutex
	allocs    atomic.Int64
	releases  atomic.Int64
	// fail, when set, makes Allocate answer with this code.
	fail atomic.Int32
	allocation.UnimplementedAllocationServiceServer
	qmv1.UnimplementedAllocationAdminServer
}

func (f *fake) Allocate(ctx context.Context, _ *allocation.AllocationRequest) (*allocation.AllocationResponse, error) {
	f.stall.RLock()
	f.stall.RUnlock() //nolint:staticcheck // SA2001: waits out a stall, which holds the write lock.
	if c := codes.Code(f.fail.Load()); c != codes.OK {
		return nil, status.Error(c, "told to fail")
	}
	n := f.allocs.Add(1)
	return &allocation.AllocationResponse{GameServerName: "gs-" + time.Duration(n).String()}, nil
}

func (f *fake) Release(ctx context.Context, in *qmv1.ReleaseRequest) (*qmv1.ReleaseResponse, error) {
	f.releases.Add(1)
	return &qmv1.ReleaseResponse{}, nil
}

// stallFor holds every request for d, starting now.
func (f *fake) stallFor(d time.Duration) {
	f.stall.Lock()
	time.AfterFunc(d, f.stall.Unlock)
}

func newFake(t testing.TB, admin bool) *fake {
	t.Helper()
	now := time.Now()
	ca, err := certs.NewCA("loadgen test CA", certs.ValidFor(now, time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	srv, err := ca.IssueServer([]string{"localhost", "127.0.0.1"}, certs.ValidFor(now, time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	cli, err := ca.IssueClient("loadgen", certs.ValidFor(now, time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	sc, err := srv.TLSCertificate()
	if err != nil {
		t.Fatal(err)
	}
	cc, err := cli.TLSCertificate()
	if err != nil {
		t.Fatal(err)
	}
	f := &fake{client: &tls.Config{Certificates: []tls.Certificate{cc}, RootCAs: ca.CertPool(), ServerName: "localhost"}}
	serverTLS := &tls.Config{Certificates: []tls.Certificate{sc}, ClientCAs: ca.CertPool(), ClientAuth: tls.RequireAndVerifyClientCert}
	f.serverTLS = serverTLS
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	gs := grpc.NewServer(grpc.Creds(credentials.NewTLS(serverTLS)))
	allocation.RegisterAllocationServiceServer(gs, f)
	if admin {
		qmv1.RegisterAllocationAdminServer(gs, f)
	}
	healthpb.RegisterHealthServer(gs, health.NewServer())
	go gs.Serve(lis)
	t.Cleanup(gs.Stop)
	f.addr = lis.Addr().String()
	return f
}

// target connects to the fake over gRPC.
func (f *fake) target(t testing.TB, name, call string) Target {
	t.Helper()
	cfg := TargetConfig{Name: name, Addr: f.addr, Protocol: "grpc", Call: call}
	c, err := NewCaller(context.Background(), Dial{Target: cfg, TLS: f.client, Request: &allocation.AllocationRequest{}, Sessions: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return Target{Config: cfg, Caller: c}
}
