package allocator_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	"github.com/quartermaster-dev/quartermaster/allocator"
	"github.com/quartermaster-dev/quartermaster/allocator/memory"
	"github.com/quartermaster-dev/quartermaster/allocator/mtls"
	"github.com/quartermaster-dev/quartermaster/allocator/pb/allocation"
	qmv1 "github.com/quartermaster-dev/quartermaster/allocator/pb/quartermaster/v1"
	"github.com/quartermaster-dev/quartermaster/allocator/wire"
	"github.com/quartermaster-dev/quartermaster/certs"
	"github.com/quartermaster-dev/quartermaster/core"
)

// pki is a test's certificates: a CA, a server certificate for loopback,
// and client certificates on demand, written where mtls.Server reads them.
type pki struct {
	ca       *certs.Authority
	certDir  string
	clientCA string
}

func newPKI(t testing.TB) *pki {
	t.Helper()
	now := time.Now()
	ca, err := certs.NewCA("test CA", certs.ValidFor(now, time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	p := &pki{ca: ca, certDir: filepath.Join(dir, "server"), clientCA: filepath.Join(dir, "client-ca")}
	for _, d := range []string{p.certDir, p.clientCA} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	p.writeServer(t, ca)
	p.writeClientCA(t, ca)
	return p
}

func (p *pki) writeServer(t testing.TB, ca *certs.Authority) {
	t.Helper()
	kp, err := ca.IssueServer([]string{"localhost", "127.0.0.1"}, certs.ValidFor(time.Now(), time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if err := certs.WriteKeyPair(p.certDir, kp); err != nil {
		t.Fatal(err)
	}
}

func (p *pki) writeClientCA(t testing.TB, ca *certs.Authority) {
	t.Helper()
	if err := certs.WriteFileAtomic(filepath.Join(p.clientCA, "ca.crt"), ca.CertPEM, 0o644); err != nil {
		t.Fatal(err)
	}
}

// client returns a client TLS config for identity, signed by ca (the
// test's CA when nil), trusting the test CA.
func (p *pki) client(t testing.TB, identity string, ca *certs.Authority, period *certs.Period) *tls.Config {
	t.Helper()
	if ca == nil {
		ca = p.ca
	}
	per := certs.ValidFor(time.Now(), time.Hour)
	if period != nil {
		per = *period
	}
	kp, err := ca.IssueClient(identity, per)
	if err != nil {
		t.Fatal(err)
	}
	c, err := kp.TLSCertificate()
	if err != nil {
		t.Fatal(err)
	}
	return &tls.Config{Certificates: []tls.Certificate{c}, RootCAs: p.roots(), ServerName: "localhost", MinVersion: tls.VersionTLS12}
}

func (p *pki) roots() *x509.CertPool { return p.ca.CertPool() }

// testFleets are small fleets whose servers are the same for the same seed.
const testFleets = `
apiVersion: quartermaster.dev/v1alpha1
kind: Fleets
nodes: 2
fleets:
- name: simple
  replicas: 4
  labels: {mode: deathmatch}
- name: rooms
  replicas: 2
  labels: {mode: lobby}
  counters: {rooms: {capacity: 3}}
  lists: {players: {capacity: 2}}
- name: other
  namespace: other
  replicas: 2
`

type harness struct {
	t        testing.TB
	pki      *pki
	tls      *mtls.Server
	backend  *memory.Backend
	svc      *allocator.Service
	srv      *allocator.Server
	reg      *prometheus.Registry
	grpcAddr string
	restAddr string
	httpAddr string
	logs     *syncBuffer
}

type harnessOpts struct {
	fleets   string
	limits   string
	mode     mtls.Mode
	restAddr string // "127.0.0.1:0" for REST on a port of its own
	now      func() time.Time
	drain    time.Duration
	pki      *pki
	pprof    bool
	// keyWindow and maxKeys are the service's Options.KeyWindow and
	// MaxKeys; wrap, if set, wraps the memory backend the service uses.
	keyWindow time.Duration
	maxKeys   int
	wrap      func(allocator.Backend) allocator.Backend
}

func startHarness(t testing.TB, o harnessOpts) *harness {
	t.Helper()
	h := &harness{t: t, pki: o.pki, logs: &syncBuffer{}}
	if h.pki == nil {
		h.pki = newPKI(t)
	}
	log := slog.New(slog.NewTextHandler(h.logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
	var err error
	h.tls, err = mtls.NewServer(mtls.ServerOptions{Mode: o.mode, CertDir: h.pki.certDir, ClientCADir: h.pki.clientCA, PollInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if o.fleets == "" {
		o.fleets = testFleets
	}
	cfg, err := memory.ParseConfig([]byte(o.fleets))
	if err != nil {
		t.Fatal(err)
	}
	h.backend = memory.New(cfg, memory.Options{Seed: 1, Clock: memory.NewFakeClock(time.Unix(1_800_000_000, 0))})
	var limits *allocator.LimitsConfig
	if o.limits != "" {
		if limits, err = allocator.ParseLimits([]byte(o.limits)); err != nil {
			t.Fatal(err)
		}
	}
	h.reg = prometheus.NewRegistry()
	m := allocator.NewMetrics()
	if err := m.Register(h.reg); err != nil {
		t.Fatal(err)
	}
	var backend allocator.Backend = h.backend
	if o.wrap != nil {
		backend = o.wrap(backend)
	}
	h.svc, err = allocator.NewService(allocator.Options{
		Backend: backend, Limits: limits, Logger: log, Metrics: m, Now: o.now, Seed: 7,
		KeyWindow: o.keyWindow, MaxKeys: o.maxKeys,
	})
	if err != nil {
		t.Fatal(err)
	}
	h.srv, err = allocator.NewServer(allocator.ServerOptions{
		Service: h.svc, TLS: h.tls, Addr: "127.0.0.1:0", RESTAddr: o.restAddr, HTTPAddr: "127.0.0.1:0",
		Gatherer: h.reg, Logger: log, DrainDelay: o.drain, Pprof: o.pprof,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.srv.Listen(); err != nil {
		t.Fatal(err)
	}
	h.srv.Start()
	h.grpcAddr, h.restAddr, h.httpAddr = h.srv.Addrs()
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = h.srv.Shutdown(ctx)
	})
	return h
}

// dial returns a gRPC connection with cfg (nil: the "dev" identity).
func (h *harness) dial(cfg *tls.Config) *grpc.ClientConn {
	h.t.Helper()
	if cfg == nil {
		cfg = h.pki.client(h.t, "dev", nil, nil)
	}
	conn, err := grpc.NewClient(h.grpcAddr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { conn.Close() })
	return conn
}

func (h *harness) grpcAllocate(conn *grpc.ClientConn, req *allocation.AllocationRequest) (*allocation.AllocationResponse, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	return allocation.NewAllocationServiceClient(conn).Allocate(ctx, req)
}

func (h *harness) admin(conn *grpc.ClientConn) qmv1.AllocationAdminClient {
	return qmv1.NewAllocationAdminClient(conn)
}

// httpClient returns a REST client with cfg (nil: the "dev" identity).
func (h *harness) httpClient(cfg *tls.Config, http2 bool) *http.Client {
	if cfg == nil {
		cfg = h.pki.client(h.t, "dev", nil, nil)
	}
	tr := &http.Transport{TLSClientConfig: cfg, ForceAttemptHTTP2: http2, MaxIdleConnsPerHost: 100}
	if !http2 {
		tr.TLSClientConfig = cfg.Clone()
		tr.TLSClientConfig.NextProtos = []string{"http/1.1"}
	}
	c := &http.Client{Transport: tr, Timeout: 5 * time.Second}
	h.t.Cleanup(c.CloseIdleConnections)
	return c
}

// post sends body to path and returns the HTTP status and response body.
func (h *harness) post(c *http.Client, path string, body []byte) (int, []byte, error) {
	resp, err := c.Post("https://"+h.restAddr+path, "application/json", bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

func (h *harness) restAllocate(c *http.Client, req *allocation.AllocationRequest) (int, []byte) {
	h.t.Helper()
	body, err := wire.MarshalJSON(req)
	if err != nil {
		h.t.Fatal(err)
	}
	code, b, err := h.post(c, allocator.AllocatePath, body)
	if err != nil {
		h.t.Fatal(err)
	}
	return code, b
}

func wantCode(t testing.TB, err error, want codes.Code) {
	t.Helper()
	if got := status.Code(err); got != want {
		t.Fatalf("got code %v (%v), want %v", got, err, want)
	}
}

func mustJSON(t testing.TB, m proto.Message) []byte {
	t.Helper()
	b, err := wire.MarshalJSON(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// syncBuffer collects the server's log lines for tests to read.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func keyOf(ns, name string) core.Key { return core.Key{Namespace: ns, Name: name} }
