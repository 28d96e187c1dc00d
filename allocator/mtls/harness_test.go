package mtls_test

// The harness: certificates made in the test, written where a Server reads
// them, and real servers (raw TLS, net/http and gRPC) on 127.0.0.1:0.

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"io"
	"log"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/quartermaster-dev/quartermaster/allocator/mtls"
	"github.com/quartermaster-dev/quartermaster/certs"
)

// waitFor bounds every wait in these tests; they normally take
// milliseconds, so it only matters when something hangs.
const waitFor = 10 * time.Second

// serverHosts are the names the test server certificate is for.
var serverHosts = []string{"127.0.0.1", "localhost"}

// fixture is a certificate directory pair and a Server reading it.
type fixture struct {
	t       *testing.T
	now     time.Time
	certDir string
	caDir   string
	ca      *certs.Authority // signs the server cert and the trusted clients
	srv     *mtls.Server
}

func newFixture(t *testing.T, mode mtls.Mode) *fixture {
	t.Helper()
	base := t.TempDir()
	f := &fixture{
		t:       t,
		now:     time.Now(),
		certDir: filepath.Join(base, "server"),
		caDir:   filepath.Join(base, "client-ca"),
	}
	f.ca = f.newCA("test CA")
	f.writeServerCert(f.issueServer(f.ca))
	f.writeClientCA("ca.crt", f.ca)
	srv, err := mtls.NewServer(mtls.ServerOptions{
		Mode:            mode,
		CertDir:         f.certDir,
		ClientCADir:     f.caDir,
		DefaultIdentity: "dev-default",
		Logger:          slog.New(slog.NewTextHandler(t.Output(), nil)),
	})
	if err != nil {
		t.Fatalf("NewServer: %v", err)
	}
	f.srv = srv
	return f
}

func (f *fixture) newCA(name string) *certs.Authority {
	f.t.Helper()
	ca, err := certs.NewCA(name, certs.ValidFor(f.now, time.Hour))
	if err != nil {
		f.t.Fatal(err)
	}
	return ca
}

func (f *fixture) issueServer(ca *certs.Authority) *certs.KeyPair {
	f.t.Helper()
	kp, err := ca.IssueServer(serverHosts, certs.ValidFor(f.now, time.Hour))
	if err != nil {
		f.t.Fatal(err)
	}
	return kp
}

func (f *fixture) issueClient(ca *certs.Authority, identity string, p certs.Period) *certs.KeyPair {
	f.t.Helper()
	kp, err := ca.IssueClient(identity, p)
	if err != nil {
		f.t.Fatal(err)
	}
	return kp
}

func (f *fixture) writeServerCert(kp *certs.KeyPair) {
	f.t.Helper()
	if err := certs.WriteKeyPair(f.certDir, kp); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) writeClientCA(name string, ca *certs.Authority) {
	f.t.Helper()
	if err := os.MkdirAll(f.caDir, 0o755); err != nil {
		f.t.Fatal(err)
	}
	if err := certs.WriteFileAtomic(filepath.Join(f.caDir, name), ca.CertPEM, 0o644); err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) reload() {
	f.t.Helper()
	if err := f.srv.Reload(); err != nil {
		f.t.Fatalf("Reload: %v", err)
	}
}

// clientConfig trusts serverCA and presents client, if not nil.
func clientConfig(serverCA *certs.Authority, client *certs.KeyPair) *tls.Config {
	cfg := &tls.Config{RootCAs: serverCA.CertPool(), MinVersion: tls.VersionTLS12}
	if client != nil {
		c, err := client.TLSCertificate()
		if err != nil {
			panic(err)
		}
		cfg.Certificates = []tls.Certificate{c}
	}
	return cfg
}

// pushyClientConfig presents client even when the server's list of
// acceptable CAs does not include its issuer (a Go client would otherwise
// send no certificate), so the server's own verification is what refuses it.
func pushyClientConfig(serverCA *certs.Authority, client *certs.KeyPair) *tls.Config {
	cfg := clientConfig(serverCA, client)
	c := cfg.Certificates[0]
	cfg.Certificates = nil
	cfg.GetClientCertificate = func(*tls.CertificateRequestInfo) (*tls.Certificate, error) { return &c, nil }
	return cfg
}

// rawServer is a TLS server with a line protocol: for each line received
// it answers with the caller's identity. Every server-side handshake result
// goes to handshakes, so tests can see why a connection was refused.
type rawServer struct {
	addr       string
	handshakes chan error
}

func startRaw(t *testing.T, srv *mtls.Server) *rawServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	rs := &rawServer{addr: ln.Addr().String(), handshakes: make(chan error, 64)}
	tln := tls.NewListener(ln, srv.TLSConfig())
	var (
		wg    sync.WaitGroup
		mu    sync.Mutex
		conns []net.Conn
	)
	wg.Go(func() {
		for {
			c, err := tln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			wg.Go(func() { rs.serve(srv, c.(*tls.Conn)) })
		}
	})
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		for _, c := range conns {
			c.Close()
		}
		mu.Unlock()
		wg.Wait()
	})
	return rs
}

func (rs *rawServer) serve(srv *mtls.Server, c *tls.Conn) {
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	err := c.HandshakeContext(ctx)
	cancel()
	rs.handshakes <- err
	if err != nil {
		return
	}
	r := bufio.NewReader(c)
	for {
		if _, err := r.ReadString('\n'); err != nil {
			return
		}
		cs := c.ConnectionState()
		id, err := mtls.IdentityFromConnectionState(cs)
		if srv.Mode() != mtls.ModeMTLS {
			id, err = srv.IdentifyRequest(&http.Request{TLS: &cs})
		}
		if err != nil {
			id = "error: " + err.Error()
		}
		if _, err := io.WriteString(c, id+"\n"); err != nil {
			return
		}
	}
}

// nextHandshake returns the server's result for the next handshake.
func (rs *rawServer) nextHandshake(t *testing.T) error {
	t.Helper()
	select {
	case err := <-rs.handshakes:
		return err
	case <-time.After(waitFor):
		t.Fatal("no handshake reached the server")
		return nil
	}
}

// dial connects and completes the client's side of the handshake.
func dial(addr string, cfg *tls.Config) (*tls.Conn, error) {
	d := &net.Dialer{Timeout: waitFor}
	c, err := tls.DialWithDialer(d, "tcp", addr, cfg)
	if err != nil {
		return nil, err
	}
	return c, nil
}

// ask sends one line and returns the server's answer (the identity it saw).
// Under TLS 1.3 a client learns that the server refused its certificate
// only here, on its first read.
func ask(c *tls.Conn) (string, error) {
	if err := c.SetDeadline(time.Now().Add(waitFor)); err != nil {
		return "", err
	}
	if _, err := io.WriteString(c, "who\n"); err != nil {
		return "", err
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return "", err
	}
	return line[:len(line)-1], nil
}

// connectAndAsk dials, asks once and keeps the connection open.
func connectAndAsk(t *testing.T, rs *rawServer, cfg *tls.Config) (*tls.Conn, string) {
	t.Helper()
	c, err := dial(rs.addr, cfg)
	if err != nil {
		t.Fatalf("dial: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	if err := rs.nextHandshake(t); err != nil {
		t.Fatalf("server handshake: %v", err)
	}
	id, err := ask(c)
	if err != nil {
		t.Fatalf("ask: %v", err)
	}
	return c, id
}

// refused checks that a connection with cfg fails for the client and
// returns the server's handshake error.
func refused(t *testing.T, rs *rawServer, cfg *tls.Config) error {
	t.Helper()
	c, err := dial(rs.addr, cfg)
	if err == nil {
		var id string
		id, err = ask(c)
		c.Close()
		if err == nil {
			t.Fatalf("connection accepted as %q, want it refused", id)
		}
	}
	serverErr := rs.nextHandshake(t)
	if serverErr == nil {
		t.Fatal("server completed the handshake, want it to fail")
	}
	return serverErr
}

// whoAmI is a one-method gRPC service, declared by hand so that the test
// needs no generated code: it answers with the identity the interceptor
// put in the context.
var whoAmI = grpc.ServiceDesc{
	ServiceName: "qmtest.WhoAmI",
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{{
		MethodName: "Who",
		Handler: func(srv any, ctx context.Context, dec func(any) error, icpt grpc.UnaryServerInterceptor) (any, error) {
			in := new(wrapperspb.StringValue)
			if err := dec(in); err != nil {
				return nil, err
			}
			h := func(ctx context.Context, _ any) (any, error) {
				id, ok := mtls.IdentityFrom(ctx)
				if !ok {
					return nil, errors.New("no identity in context")
				}
				return wrapperspb.String(id), nil
			}
			if icpt == nil {
				return h(ctx, in)
			}
			return icpt(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: "/qmtest.WhoAmI/Who"}, h)
		},
	}},
}

// startGRPC serves the health service and WhoAmI on ln (a fresh loopback
// listener if nil) with creds and the Server's interceptor.
func startGRPC(t *testing.T, srv *mtls.Server, creds credentials.TransportCredentials, ln net.Listener) string {
	t.Helper()
	if ln == nil {
		var err error
		if ln, err = net.Listen("tcp", "127.0.0.1:0"); err != nil {
			t.Fatal(err)
		}
	}
	gs := grpc.NewServer(grpc.Creds(creds), grpc.UnaryInterceptor(srv.UnaryServerInterceptor()))
	healthpb.RegisterHealthServer(gs, health.NewServer())
	gs.RegisterService(&whoAmI, struct{}{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = gs.Serve(ln)
	}()
	t.Cleanup(func() {
		gs.Stop()
		<-done
	})
	return ln.Addr().String()
}

func grpcClient(t *testing.T, addr string, creds credentials.TransportCredentials) *grpc.ClientConn {
	t.Helper()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

// who calls WhoAmI; healthy calls the standard health check.
func who(cc *grpc.ClientConn) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	out := new(wrapperspb.StringValue)
	err := cc.Invoke(ctx, "/qmtest.WhoAmI/Who", wrapperspb.String(""), out)
	return out.GetValue(), err
}

func healthy(cc *grpc.ClientConn) error {
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	_, err := healthpb.NewHealthClient(cc).Check(ctx, &healthpb.HealthCheckRequest{})
	return err
}

// startHTTP serves an identity echo through the Server's middleware on a
// TLS loopback listener.
func startHTTP(t *testing.T, srv *mtls.Server) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	hs := &http.Server{
		Handler: srv.HTTPMiddleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			id, _ := mtls.IdentityFrom(r.Context())
			io.WriteString(w, id)
		})),
		ReadHeaderTimeout: waitFor,
		ErrorLog:          log.New(t.Output(), "http: ", 0),
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = hs.Serve(tls.NewListener(ln, srv.TLSConfig()))
	}()
	t.Cleanup(func() {
		hs.Close()
		<-done
	})
	return "https://" + ln.Addr().String() + "/"
}

func httpGet(url string, cfg *tls.Config) (string, int, error) {
	tr := &http.Transport{TLSClientConfig: cfg, ForceAttemptHTTP2: true}
	defer tr.CloseIdleConnections()
	c := &http.Client{Transport: tr, Timeout: waitFor}
	resp, err := c.Get(url)
	if err != nil {
		return "", 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), resp.StatusCode, err
}
