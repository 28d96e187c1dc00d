package mtls_test

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"net/http"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/quartermaster-dev/quartermaster/allocator/mtls"
	"github.com/quartermaster-dev/quartermaster/certs"
)

// clientCase is one client's material and what the server must make of it.
type clientCase struct {
	name string
	cfg  *tls.Config
	// want is the identity the server derives; empty means refused.
	want string
	// serverErr, for refused cases, checks the kind of error the server's
	// handshake failed with (nil: any error).
	serverErr func(error) bool
}

func isVerifyErr[T error](err error) bool {
	var cve *tls.CertificateVerificationError
	var target T
	return errors.As(err, &cve) && errors.As(cve.Err, &target)
}

func isExpired(err error) bool {
	var cve *tls.CertificateVerificationError
	var inv x509.CertificateInvalidError
	return errors.As(err, &cve) && errors.As(cve.Err, &inv) && inv.Reason == x509.Expired
}

func mtlsCases(f *fixture) []clientCase {
	other := f.newCA("some other CA")
	cnOnly, err := f.ca.IssueClientCNOnly("legacy-client", certs.ValidFor(f.now, time.Hour))
	if err != nil {
		f.t.Fatal(err)
	}
	valid := certs.ValidFor(f.now, time.Hour)
	return []clientCase{
		{name: "URI SAN", cfg: clientConfig(f.ca, f.issueClient(f.ca, "matchmaker", valid)), want: "matchmaker"},
		{name: "CN only", cfg: clientConfig(f.ca, cnOnly), want: "legacy-client"},
		{name: "no client certificate", cfg: clientConfig(f.ca, nil)},
		{name: "unknown CA", cfg: pushyClientConfig(f.ca, f.issueClient(other, "intruder", valid)),
			serverErr: isVerifyErr[x509.UnknownAuthorityError]},
		{name: "expired", cfg: clientConfig(f.ca, f.issueClient(f.ca, "late", certs.Expired(f.now))),
			serverErr: isExpired},
		{name: "not yet valid", cfg: clientConfig(f.ca, f.issueClient(f.ca, "early", certs.NotYetValid(f.now))),
			serverErr: isVerifyErr[x509.CertificateInvalidError]},
	}
}

func TestRawTLSHandshake(t *testing.T) {
	f := newFixture(t, mtls.ModeMTLS)
	rs := startRaw(t, f.srv)
	for _, tc := range mtlsCases(f) {
		t.Run(tc.name, func(t *testing.T) {
			if tc.want == "" {
				err := refused(t, rs, tc.cfg)
				if tc.serverErr != nil && !tc.serverErr(err) {
					t.Errorf("server handshake error %v (%T) is not of the expected kind", err, err)
				}
				return
			}
			c, got := connectAndAsk(t, rs, tc.cfg)
			if got != tc.want {
				t.Errorf("identity %q, want %q", got, tc.want)
			}
			if v := c.ConnectionState().Version; v < tls.VersionTLS12 {
				t.Errorf("negotiated TLS version %x, want 1.2 or later", v)
			}
		})
	}
}

func TestTLS11Refused(t *testing.T) {
	f := newFixture(t, mtls.ModeMTLS)
	rs := startRaw(t, f.srv)
	cfg := clientConfig(f.ca, f.issueClient(f.ca, "old", certs.ValidFor(f.now, time.Hour)))
	cfg.MinVersion, cfg.MaxVersion = tls.VersionTLS10, tls.VersionTLS11
	refused(t, rs, cfg)
}

func TestTLS12ClientAccepted(t *testing.T) {
	f := newFixture(t, mtls.ModeMTLS)
	rs := startRaw(t, f.srv)
	cfg := clientConfig(f.ca, f.issueClient(f.ca, "tls12", certs.ValidFor(f.now, time.Hour)))
	cfg.MaxVersion = tls.VersionTLS12
	_, got := connectAndAsk(t, rs, cfg)
	if got != "tls12" {
		t.Errorf("identity %q, want tls12", got)
	}
}

func TestGRPCHandshake(t *testing.T) {
	f := newFixture(t, mtls.ModeMTLS)
	addr := startGRPC(t, f.srv, f.srv.GRPCCredentials(), nil)
	for _, tc := range mtlsCases(f) {
		t.Run(tc.name, func(t *testing.T) {
			cc := grpcClient(t, addr, credentials.NewTLS(tc.cfg))
			if tc.want == "" {
				err := healthy(cc)
				if got := status.Code(err); got != codes.Unavailable {
					t.Fatalf("health check: code %v (%v), want Unavailable", got, err)
				}
				return
			}
			if err := healthy(cc); err != nil {
				t.Fatalf("health check: %v", err)
			}
			got, err := who(cc)
			if err != nil {
				t.Fatalf("WhoAmI: %v", err)
			}
			if got != tc.want {
				t.Errorf("identity %q, want %q", got, tc.want)
			}
		})
	}
}

func TestHTTPHandshake(t *testing.T) {
	f := newFixture(t, mtls.ModeMTLS)
	url := startHTTP(t, f.srv)
	for _, tc := range mtlsCases(f) {
		t.Run(tc.name, func(t *testing.T) {
			got, code, err := httpGet(url, tc.cfg)
			if tc.want == "" {
				if err == nil {
					t.Fatalf("request answered %d %q, want the connection refused", code, got)
				}
				return
			}
			if err != nil || code != http.StatusOK {
				t.Fatalf("GET: %d %v", code, err)
			}
			if got != tc.want {
				t.Errorf("identity %q, want %q", got, tc.want)
			}
		})
	}
}

// TestDisableMTLS: TLS still protects the connection, no client
// certificate is asked for, and every caller is the default identity, even
// one that has a certificate naming someone else.
func TestDisableMTLS(t *testing.T) {
	f := newFixture(t, mtls.ModeInsecureDisableMTLS)
	admin := f.issueClient(f.ca, "admin", certs.ValidFor(f.now, time.Hour))
	for name, cfg := range map[string]*tls.Config{
		"no certificate":   clientConfig(f.ca, nil),
		"with certificate": clientConfig(f.ca, admin),
	} {
		t.Run(name, func(t *testing.T) {
			rs := startRaw(t, f.srv)
			c, got := connectAndAsk(t, rs, cfg)
			if got != "dev-default" {
				t.Errorf("raw TLS identity %q, want dev-default", got)
			}
			if n := len(c.ConnectionState().PeerCertificates); n == 0 {
				t.Error("server presented no certificate")
			}

			addr := startGRPC(t, f.srv, f.srv.GRPCCredentials(), nil)
			got, err := who(grpcClient(t, addr, credentials.NewTLS(cfg)))
			if err != nil || got != "dev-default" {
				t.Errorf("gRPC identity %q, %v; want dev-default", got, err)
			}

			body, code, err := httpGet(startHTTP(t, f.srv), cfg)
			if err != nil || code != http.StatusOK || body != "dev-default" {
				t.Errorf("HTTP identity %q, %d, %v; want dev-default", body, code, err)
			}
		})
	}
}

func TestDisableTLS(t *testing.T) {
	srv, err := mtls.NewServer(mtls.ServerOptions{Mode: mtls.ModeInsecureDisableTLS})
	if err != nil {
		t.Fatal(err)
	}
	if cfg := srv.TLSConfig(); cfg != nil {
		t.Fatal("TLSConfig is not nil in plaintext mode")
	}
	if err := srv.Reload(); err != nil {
		t.Fatalf("Reload: %v", err)
	}
	srv.Run(t.Context()) // returns at once: nothing to watch
	addr := startGRPC(t, srv, srv.GRPCCredentials(), nil)
	got, err := who(grpcClient(t, addr, insecure.NewCredentials()))
	if err != nil || got != mtls.DefaultIdentity {
		t.Errorf("identity %q, %v; want %q", got, err, mtls.DefaultIdentity)
	}
}

// TestHandshakenCredentials serves gRPC from a listener that has already
// done the TLS handshake, as a port shared with REST does.
func TestHandshakenCredentials(t *testing.T) {
	f := newFixture(t, mtls.ModeMTLS)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := startGRPC(t, f.srv, mtls.HandshakenCredentials(), tls.NewListener(ln, f.srv.TLSConfig()))

	good := clientConfig(f.ca, f.issueClient(f.ca, "shared-port", certs.ValidFor(f.now, time.Hour)))
	got, err := who(grpcClient(t, addr, credentials.NewTLS(good)))
	if err != nil || got != "shared-port" {
		t.Errorf("identity %q, %v; want shared-port", got, err)
	}
	err = healthy(grpcClient(t, addr, credentials.NewTLS(clientConfig(f.ca, nil))))
	if status.Code(err) != codes.Unavailable {
		t.Errorf("no client certificate: %v, want Unavailable", err)
	}
}

// TestInterceptorRefusesWithoutIdentity: a gRPC server whose transport did
// no TLS at all, but whose Server expects mTLS, must refuse every call with
// Unauthenticated rather than let it through unnamed.
func TestInterceptorRefusesWithoutIdentity(t *testing.T) {
	f := newFixture(t, mtls.ModeMTLS)
	addr := startGRPC(t, f.srv, insecure.NewCredentials(), nil)
	_, err := who(grpcClient(t, addr, insecure.NewCredentials()))
	if status.Code(err) != codes.Unauthenticated {
		t.Errorf("got %v, want Unauthenticated", err)
	}
}
