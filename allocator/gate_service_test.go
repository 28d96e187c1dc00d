//go:build unix

package allocator_test

// BenchmarkGateService is the allocation service as the performance gate
// measures it (mk/report.sh, reports/README.md): the server's CPU time per
// allocation, with its heap allocations and bytes per allocation.
//
// The server is the real one (allocator.NewServer on a memory backend,
// gRPC over mutual TLS on loopback), run in a child process of this test
// binary (TestGateServiceChild), so that its getrusage is the server's
// alone: the caller's CPU, in this process, is not in the figure. One
// caller sends one request at a time, so every request finds the server
// idle and costs it the same wake-up, read, allocation and write, however
// busy the machine is; with many callers a server's CPU per request
// follows how many requests each wake-up finds waiting, which the
// machine's load decides.
//
//	go test -run '^$' -bench GateService -benchtime 2000x ./allocator/
//
// Metrics: cpu-ns/op (over batches of gateServiceBatch operations, the lower
// quartile of the server's user and system CPU per allocation;
// cpu-mean-ns/op is the same over the whole sample, reported only),
// server-allocs/op and server-B/op (the server's heap allocations and
// bytes per allocation, from its runtime/metrics; -benchmem's would count
// the caller).

import (
	"context"
	"crypto/tls"
	"fmt"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/quartermaster-dev/quartermaster/allocator"
	"github.com/quartermaster-dev/quartermaster/allocator/memory"
	"github.com/quartermaster-dev/quartermaster/allocator/mtls"
	"github.com/quartermaster-dev/quartermaster/allocator/pb/allocation"
	"github.com/quartermaster-dev/quartermaster/certs"
	"github.com/quartermaster-dev/quartermaster/internal/gatebench"
)

// gateServiceChildEnv names the directory holding the child server's
// certificates; set only in the child.
const gateServiceChildEnv = "QM_GATE_SERVICE_CHILD"

// gateServiceServers is the child's fleet: more servers than a sample
// allocates with its warm-up, so no request finds the fleet empty.
const gateServiceServers = 20000

const gateServiceFleet = `
apiVersion: quartermaster.dev/v1alpha1
kind: Fleets
nodes: 64
fleets:
- name: gate
  replicas: %d
  labels: {mode: gate}
`

var gateServiceRequest = &allocation.AllocationRequest{
	Namespace: "default",
	GameServerSelectors: []*allocation.GameServerSelector{
		{MatchLabels: map[string]string{"agones.dev/fleet": "gate"}},
	},
}

// TestGateServiceChild is BenchmarkGateService's server. It runs only in
// the child process the benchmark starts.
func TestGateServiceChild(t *testing.T) {
	dir := os.Getenv(gateServiceChildEnv)
	if dir == "" {
		t.Skip("the server side of BenchmarkGateService: runs only in the benchmark's child process")
	}
	tlsSrv, err := mtls.NewServer(mtls.ServerOptions{CertDir: filepath.Join(dir, "server"), ClientCADir: filepath.Join(dir, "client-ca"), PollInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := memory.ParseConfig(fmt.Appendf(nil, gateServiceFleet, gateServiceServers))
	if err != nil {
		t.Fatal(err)
	}
	svc, err := allocator.NewService(allocator.Options{Backend: memory.New(cfg, memory.Options{Seed: 1})})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := allocator.NewServer(allocator.ServerOptions{Service: svc, TLS: tlsSrv, Addr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Listen(); err != nil {
		t.Fatal(err)
	}
	srv.Start()
	defer srv.Shutdown(context.Background())
	addr, _, _ := srv.Addrs()
	if err := gatebench.ServeUsage(addr, os.Stdin, os.Stdout); err != nil {
		t.Fatal(err)
	}
}

// gatePKI writes a CA, a server key pair and the client CA to dir and
// returns a client TLS configuration for identity "dev".
func gatePKI(b *testing.B, dir string) *tls.Config {
	valid := certs.ValidFor(time.Now(), 24*time.Hour)
	ca, err := certs.NewCA("gate CA", valid)
	if err != nil {
		b.Fatal(err)
	}
	kp, err := ca.IssueServer([]string{"localhost", "127.0.0.1"}, valid)
	if err != nil {
		b.Fatal(err)
	}
	for _, d := range []string{"server", "client-ca"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o700); err != nil {
			b.Fatal(err)
		}
	}
	if err := certs.WriteKeyPair(filepath.Join(dir, "server"), kp); err != nil {
		b.Fatal(err)
	}
	if err := certs.WriteFileAtomic(filepath.Join(dir, "client-ca", "ca.crt"), ca.CertPEM, 0o644); err != nil {
		b.Fatal(err)
	}
	ckp, err := ca.IssueClient("dev", valid)
	if err != nil {
		b.Fatal(err)
	}
	cert, err := ckp.TLSCertificate()
	if err != nil {
		b.Fatal(err)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: ca.CertPool(), ServerName: "localhost", MinVersion: tls.VersionTLS12}
}

func BenchmarkGateService(b *testing.B) {
	dir := b.TempDir()
	clientTLS := gatePKI(b, dir)
	child := gatebench.StartChild(b, "TestGateServiceChild", gateServiceChildEnv+"="+dir)
	conn, err := grpc.NewClient(child.Addr, grpc.WithTransportCredentials(credentials.NewTLS(clientTLS)))
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	client := allocation.NewAllocationServiceClient(conn)
	ctx := context.Background()
	// The connection, the server's caches and its heap warm up off the
	// measurement.
	for range 200 {
		if _, err := client.Allocate(ctx, gateServiceRequest); err != nil {
			b.Fatal(err)
		}
	}
	sample := gatebench.NewSampler(b, gateServiceBatch, child.Usage)
	for b.Loop() {
		if sample.Ops()+200 >= gateServiceServers {
			b.Fatalf("more allocations than the child's %d servers: use a smaller -benchtime", gateServiceServers)
		}
		if _, err := client.Allocate(ctx, gateServiceRequest); err != nil {
			b.Fatal(err)
		}
		sample.Done()
	}
	sample.Report(b)
}

// gateServiceBatch is how many allocations one reading of the server's
// CPU covers (gatebench.Sampler).
const gateServiceBatch = 100
