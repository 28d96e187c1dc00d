package mtls_test

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/credentials"

	"github.com/quartermaster-dev/quartermaster/allocator/mtls"
	"github.com/quartermaster-dev/quartermaster/certs"
)

func mustURL(s string) *url.URL {
	u, err := url.Parse(s)
	if err != nil {
		panic(err)
	}
	return u
}

func TestIdentityFromCertificate(t *testing.T) {
	for _, tc := range []struct {
		name string
		uris []string
		cn   string
		want string
		err  error
	}{
		{name: "our URI", uris: []string{"spiffe://quartermaster/matchmaker"}, cn: "ignored", want: "matchmaker"},
		{name: "our URI preferred", uris: []string{"https://example.com/x", "spiffe://quartermaster/mm"}, want: "mm"},
		{name: "other trust domain", uris: []string{"spiffe://elsewhere/mm"}, want: "spiffe://elsewhere/mm"},
		{name: "nested path", uris: []string{"spiffe://quartermaster/ns/default/sa/mm"}, want: "spiffe://quartermaster/ns/default/sa/mm"},
		{name: "CN only", cn: "legacy", want: "legacy"},
		{name: "nothing", err: mtls.ErrNoIdentity},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &x509.Certificate{Subject: pkix.Name{CommonName: tc.cn}}
			for _, u := range tc.uris {
				c.URIs = append(c.URIs, mustURL(u))
			}
			got, err := mtls.IdentityFromCertificate(c)
			if !errors.Is(err, tc.err) || got != tc.want {
				t.Errorf("got %q, %v; want %q, %v", got, err, tc.want, tc.err)
			}
		})
	}
}

// TestIdentityNeedsVerifiedChain: a peer certificate that no handshake
// verified names nobody.
func TestIdentityNeedsVerifiedChain(t *testing.T) {
	now := time.Now()
	ca, err := certs.NewCA("", certs.ValidFor(now, time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	kp, err := ca.IssueClient("mallory", certs.ValidFor(now, time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	unverified := tls.ConnectionState{PeerCertificates: []*x509.Certificate{kp.Cert}}
	if _, err := mtls.IdentityFromConnectionState(unverified); !errors.Is(err, mtls.ErrNoClientCertificate) {
		t.Errorf("unverified peer: %v, want ErrNoClientCertificate", err)
	}
	verified := tls.ConnectionState{
		PeerCertificates: []*x509.Certificate{kp.Cert},
		VerifiedChains:   [][]*x509.Certificate{{kp.Cert, ca.Cert}},
	}
	if id, err := mtls.IdentityFromConnectionState(verified); err != nil || id != "mallory" {
		t.Errorf("verified peer: %q, %v", id, err)
	}
}

func TestModes(t *testing.T) {
	for _, m := range []mtls.Mode{mtls.ModeMTLS, mtls.ModeInsecureDisableMTLS, mtls.ModeInsecureDisableTLS} {
		got, err := mtls.ParseMode(m.String())
		if err != nil || got != m {
			t.Errorf("ParseMode(%q) = %v, %v", m.String(), got, err)
		}
	}
	if _, err := mtls.ParseMode("tls"); err == nil {
		t.Error("ParseMode accepted an unknown mode")
	}
	for _, tc := range []struct {
		mtls, tls bool
		want      mtls.Mode
	}{
		{false, false, mtls.ModeMTLS},
		{true, false, mtls.ModeInsecureDisableMTLS},
		{false, true, mtls.ModeInsecureDisableTLS},
		{true, true, mtls.ModeInsecureDisableTLS},
	} {
		if got := mtls.ModeFromFlags(tc.mtls, tc.tls); got != tc.want {
			t.Errorf("ModeFromFlags(%v, %v) = %v, want %v", tc.mtls, tc.tls, got, tc.want)
		}
	}
}

func TestInsecureWarning(t *testing.T) {
	var b bytes.Buffer
	if err := mtls.WriteInsecureWarning(&b, mtls.ModeMTLS); err != nil || b.Len() != 0 {
		t.Errorf("mTLS mode wrote %q, %v; want nothing", b.String(), err)
	}
	for m, flag := range map[mtls.Mode]string{
		mtls.ModeInsecureDisableMTLS: "--insecure-disable-mtls",
		mtls.ModeInsecureDisableTLS:  "--insecure-disable-tls",
	} {
		b.Reset()
		if err := mtls.WriteInsecureWarning(&b, m); err != nil {
			t.Fatal(err)
		}
		out := b.String()
		if lines := strings.Count(out, "\n"); lines < 4 || !strings.Contains(out, flag) || !strings.Contains(out, "INSECURE") {
			t.Errorf("%v warning is not loud enough:\n%s", m, out)
		}
		t.Logf("%v:\n%s", m, out)
	}
}

func TestNewServerErrors(t *testing.T) {
	f := newFixture(t, mtls.ModeMTLS)
	empty := t.TempDir()
	if err := os.WriteFile(filepath.Join(empty, "notes.txt"), []byte("not a CA"), 0o644); err != nil {
		t.Fatal(err)
	}
	for name, opts := range map[string]mtls.ServerOptions{
		"no client CA dir":     {CertDir: f.certDir},
		"no cert dir":          {ClientCADir: f.caDir},
		"no cert dir, no mTLS": {Mode: mtls.ModeInsecureDisableMTLS},
		"missing cert files":   {CertDir: empty, ClientCADir: f.caDir},
		"no CA in CA dir":      {CertDir: f.certDir, ClientCADir: empty},
		"unknown mode":         {Mode: mtls.Mode(9), CertDir: f.certDir, ClientCADir: f.caDir},
	} {
		if _, err := mtls.NewServer(opts); err == nil {
			t.Errorf("%s: NewServer succeeded", name)
		}
	}
	// With mTLS off, no client CA directory is needed.
	if _, err := mtls.NewServer(mtls.ServerOptions{Mode: mtls.ModeInsecureDisableMTLS, CertDir: f.certDir}); err != nil {
		t.Errorf("disable-mtls without a client CA dir: %v", err)
	}
}

// TestCertsDirectoryEndToEnd: the directory certs.Generate writes is
// what NewServer and ClientConfigFromDir read, and the identity a client
// was issued for is the identity the server derives.
func TestCertsDirectoryEndToEnd(t *testing.T) {
	dir := t.TempDir()
	_, err := certs.Generate(certs.GenerateOptions{
		Dir: dir, Hosts: serverHosts, Clients: []string{"matchmaker", "admin"}, Now: time.Now(),
	})
	if err != nil {
		t.Fatal(err)
	}
	l := certs.Layout{Dir: dir}
	srv, err := mtls.NewServer(mtls.ServerOptions{CertDir: l.ServerDir(), ClientCADir: l.ClientCADir()})
	if err != nil {
		t.Fatal(err)
	}
	addr := startGRPC(t, srv, srv.GRPCCredentials(), nil)
	for _, id := range []string{"matchmaker", "admin"} {
		cfg, err := mtls.ClientConfigFromDir(dir, id)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := who(grpcClient(t, addr, credentials.NewTLS(cfg))); err != nil || got != id {
			t.Errorf("identity %q, %v; want %q", got, err, id)
		}
	}
	// The Agones client's flags: --cert, --key, --cacert.
	cfg, err := mtls.ClientConfig(mtls.ClientFiles{
		CertFile: l.ClientCert("admin"), KeyFile: l.ClientKey("admin"), CAFile: l.CACert(), ServerName: "localhost",
	})
	if err != nil {
		t.Fatal(err)
	}
	if got, err := who(grpcClient(t, addr, credentials.NewTLS(cfg))); err != nil || got != "admin" {
		t.Errorf("identity %q, %v; want admin", got, err)
	}
}

func TestClientConfigErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := certs.Generate(certs.GenerateOptions{Dir: dir, Clients: []string{"a"}, Now: time.Now()}); err != nil {
		t.Fatal(err)
	}
	l := certs.Layout{Dir: dir}
	garbage := filepath.Join(dir, "garbage.crt")
	if err := os.WriteFile(garbage, []byte("nope"), 0o644); err != nil {
		t.Fatal(err)
	}
	for name, f := range map[string]mtls.ClientFiles{
		"cert without key": {CertFile: l.ClientCert("a")},
		"key without cert": {KeyFile: l.ClientKey("a")},
		"missing CA":       {CAFile: filepath.Join(dir, "nope.crt")},
		"garbage CA":       {CAFile: garbage},
		"key mismatch":     {CertFile: l.ClientCert("a"), KeyFile: l.CAKey()},
	} {
		if _, err := mtls.ClientConfig(f); err == nil {
			t.Errorf("%s: ClientConfig succeeded", name)
		}
	}
	if _, err := mtls.ClientConfigFromDir(dir, "../a"); err == nil {
		t.Error("ClientConfigFromDir accepted a path as identity")
	}
	if _, err := mtls.ClientConfigFromDir(dir, "unknown"); err == nil {
		t.Error("ClientConfigFromDir accepted an identity with no files")
	}
}
