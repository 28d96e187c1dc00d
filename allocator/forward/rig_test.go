package forward_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/quartermaster-dev/quartermaster/allocator"
	"github.com/quartermaster-dev/quartermaster/allocator/forward"
	"github.com/quartermaster-dev/quartermaster/allocator/memory"
	"github.com/quartermaster-dev/quartermaster/allocator/mtls"
	"github.com/quartermaster-dev/quartermaster/allocator/pb/allocation"
	"github.com/quartermaster-dev/quartermaster/certs"
)

// rigPKI is one CA for every allocator of a test: a server certificate for
// loopback (shared by all), the CA as the trusted client CA, and client
// certificates on demand.
type rigPKI struct {
	ca                *certs.Authority
	certDir, clientCA string
}

func newRigPKI(t testing.TB) *rigPKI {
	t.Helper()
	now := time.Now()
	ca, err := certs.NewCA("rig CA", certs.ValidFor(now, time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	p := &rigPKI{ca: ca, certDir: filepath.Join(dir, "server"), clientCA: filepath.Join(dir, "client-ca")}
	for _, d := range []string{p.certDir, p.clientCA} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	kp, err := ca.IssueServer([]string{"localhost", "127.0.0.1"}, certs.ValidFor(now, time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if err := certs.WriteKeyPair(p.certDir, kp); err != nil {
		t.Fatal(err)
	}
	if err := certs.WriteFileAtomic(filepath.Join(p.clientCA, "ca.crt"), ca.CertPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// secret is a connection Secret in namespace default presenting identity.
func (p *rigPKI) secret(t testing.TB, name, identity string) forward.Secret {
	t.Helper()
	kp, err := p.ca.IssueClient(identity, certs.ValidFor(time.Now(), time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	return forward.Secret{Namespace: "default", Name: name, Data: map[string][]byte{
		forward.SecretCertKey: kp.CertPEM, forward.SecretKeyKey: kp.KeyPEM, forward.SecretCAKey: p.ca.CertPEM,
	}}
}

func (p *rigPKI) clientTLS(t testing.TB, identity string) *tls.Config {
	t.Helper()
	kp, err := p.ca.IssueClient(identity, certs.ValidFor(time.Now(), time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	c, err := kp.TLSCertificate()
	if err != nil {
		t.Fatal(err)
	}
	return &tls.Config{Certificates: []tls.Certificate{c}, RootCAs: p.ca.CertPool(), ServerName: "localhost", MinVersion: tls.VersionTLS12}
}

// rigClock is a forward.Clock the test moves; waits between retries pass
// at once.
type rigClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *rigClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *rigClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func (c *rigClock) Sleep(ctx context.Context, d time.Duration) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	c.Advance(d)
	return nil
}

// rigAllocator is one cluster's allocator: a real allocator.Server on a
// loopback port with mTLS, a memory backend and a forwarder.
type rigAllocator struct {
	name    string
	addr    string
	backend *memory.Backend
	store   *forward.Store
	fwd     *forward.Forwarder
	reg     *prometheus.Registry
	logs    *lockedBuffer
	srv     *allocator.Server
}

type rigOptions struct {
	fleets     string
	addr       string // listen address; 127.0.0.1:0 when empty
	clock      forward.Clock
	tryTimeout time.Duration
	breaker    forward.BreakerOptions
	// reconcileBackoff and ownKeys: forward.Options.ReconcileBackoff
	// and OwnKeys.
	reconcileBackoff time.Duration
	ownKeys          bool
}

func startAllocator(t testing.TB, p *rigPKI, name string, o rigOptions) *rigAllocator {
	t.Helper()
	a := &rigAllocator{name: name, logs: &lockedBuffer{}, store: forward.NewStore(forward.NewSet(nil, nil))}
	log := slog.New(slog.NewTextHandler(a.logs, &slog.HandlerOptions{Level: slog.LevelInfo})).With("allocator", name)
	tlsSrv, err := mtls.NewServer(mtls.ServerOptions{CertDir: p.certDir, ClientCADir: p.clientCA, PollInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := memory.ParseConfig([]byte(o.fleets))
	if err != nil {
		t.Fatal(err)
	}
	a.backend = memory.New(cfg, memory.Options{Seed: 1})
	a.reg = prometheus.NewRegistry()
	m := allocator.NewMetrics()
	if err := m.Register(a.reg); err != nil {
		t.Fatal(err)
	}
	a.fwd, err = forward.New(forward.Options{
		Source: a.store, Self: name, Clock: o.clock, Logger: log, Registerer: a.reg,
		TryTimeout: o.tryTimeout, Breaker: o.breaker, ReconcileBackoff: o.reconcileBackoff, OwnKeys: o.ownKeys,
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(a.fwd.Close)
	svc, err := allocator.NewService(allocator.Options{Backend: a.backend, Logger: log, Metrics: m, Seed: 7, MultiCluster: a.fwd})
	if err != nil {
		t.Fatal(err)
	}
	if o.addr == "" {
		o.addr = "127.0.0.1:0"
	}
	a.srv, err = allocator.NewServer(allocator.ServerOptions{Service: svc, TLS: tlsSrv, Addr: o.addr, Logger: log})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.srv.Listen(); err != nil {
		t.Fatal(err)
	}
	a.srv.Start()
	a.addr, _, _ = a.srv.Addrs()
	t.Cleanup(func() { a.stop() })
	return a
}

func (a *rigAllocator) stop() {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = a.srv.Shutdown(ctx)
}

// dial returns an AllocationService client presenting identity.
func dial(t testing.TB, p *rigPKI, addr, identity string) allocation.AllocationServiceClient {
	t.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(p.clientTLS(t, identity))))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return allocation.NewAllocationServiceClient(conn)
}

// freeAddr returns a loopback address nothing listens on (yet).
func freeAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

// blackHole accepts connections and never answers: a remote that hangs.
func blackHole(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
	})
	return ln.Addr().String()
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// counter reads a counter of the forwarder's metrics.
func counter(t testing.TB, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			got := map[string]string{}
			for _, lp := range m.GetLabel() {
				got[lp.GetName()] = lp.GetValue()
			}
			for k, v := range labels {
				if got[k] != v {
					continue next
				}
			}
			switch {
			case m.GetCounter() != nil:
				return m.GetCounter().GetValue()
			case m.GetGauge() != nil:
				return m.GetGauge().GetValue()
			}
		}
	}
	return 0
}
