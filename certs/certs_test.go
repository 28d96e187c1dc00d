package certs_test

import (
	"bytes"
	"crypto/x509"
	"io/fs"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/quartermaster-dev/quartermaster/certs"
)

var now = time.Date(2026, 8, 1, 12, 0, 0, 0, time.UTC)

func mustCA(t *testing.T) *certs.Authority {
	t.Helper()
	ca, err := certs.NewCA("test CA", certs.ValidFor(now, 24*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

func verify(c *x509.Certificate, ca *certs.Authority, at time.Time, usage x509.ExtKeyUsage) error {
	_, err := c.Verify(x509.VerifyOptions{Roots: ca.CertPool(), CurrentTime: at, KeyUsages: []x509.ExtKeyUsage{usage}})
	return err
}

func TestChainVerifies(t *testing.T) {
	ca := mustCA(t)
	if !ca.Cert.IsCA || !ca.Cert.MaxPathLenZero {
		t.Error("CA is not a CA limited to signing leaves")
	}
	srv, err := ca.IssueServer([]string{"allocator.example.com", "127.0.0.1", "::1", "localhost"}, certs.ValidFor(now, time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if err := verify(srv.Cert, ca, now, x509.ExtKeyUsageServerAuth); err != nil {
		t.Errorf("server certificate: %v", err)
	}
	for _, host := range []string{"allocator.example.com", "localhost", "127.0.0.1", "::1"} {
		if err := srv.Cert.VerifyHostname(host); err != nil {
			t.Errorf("server certificate for %s: %v", host, err)
		}
	}
	if err := srv.Cert.VerifyHostname("other.example.com"); err == nil {
		t.Error("server certificate valid for a host it was not made for")
	}
	if srv.Cert.Subject.CommonName != "allocator.example.com" {
		t.Errorf("CN %q, want the first host", srv.Cert.Subject.CommonName)
	}
	if err := verify(srv.Cert, ca, now, x509.ExtKeyUsageClientAuth); err == nil {
		t.Error("server certificate usable as a client certificate")
	}

	cl, err := ca.IssueClient("matchmaker", certs.ValidFor(now, time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	if err := verify(cl.Cert, ca, now, x509.ExtKeyUsageClientAuth); err != nil {
		t.Errorf("client certificate: %v", err)
	}
	if err := verify(cl.Cert, ca, now, x509.ExtKeyUsageServerAuth); err == nil {
		t.Error("client certificate usable as a server certificate")
	}
	if err := verify(cl.Cert, mustCA(t), now, x509.ExtKeyUsageClientAuth); err == nil {
		t.Error("client certificate verifies against another CA")
	}
	if _, err := cl.TLSCertificate(); err != nil {
		t.Errorf("TLSCertificate: %v", err)
	}
	if _, err := certs.ParseKeyPair(cl.CertPEM, srv.KeyPEM); err == nil {
		t.Error("ParseKeyPair accepted a key that is not the certificate's")
	}
	if _, err := certs.ParseAuthority(cl.CertPEM, cl.KeyPEM); err == nil {
		t.Error("ParseAuthority accepted a leaf")
	}
}

func TestValidityPeriods(t *testing.T) {
	ca := mustCA(t)
	for name, tc := range map[string]struct {
		p  certs.Period
		ok bool
	}{
		"valid":         {certs.ValidFor(now, time.Hour), true},
		"expired":       {certs.Expired(now), false},
		"not yet valid": {certs.NotYetValid(now), false},
	} {
		kp, err := ca.IssueClient("x", tc.p)
		if err != nil {
			t.Fatal(err)
		}
		if err := verify(kp.Cert, ca, now, x509.ExtKeyUsageClientAuth); (err == nil) != tc.ok {
			t.Errorf("%s: verify at now: %v", name, err)
		}
	}
	if got := certs.ValidFor(now, time.Hour); !got.NotBefore.Before(now) {
		t.Error("ValidFor does not backdate for clock skew")
	}
	if _, err := ca.IssueClient("x", certs.Period{NotBefore: now, NotAfter: now.Add(-time.Second)}); err == nil {
		t.Error("accepted a period that ends before it starts")
	}
	if _, err := ca.IssueClient("x", certs.Period{}); err == nil {
		t.Error("accepted an empty period")
	}
}

func TestIdentityRoundTrip(t *testing.T) {
	ca := mustCA(t)
	for _, id := range []string{"matchmaker", "admin", "team-a.director_2", "A", strings.Repeat("x", 64)} {
		kp, err := ca.IssueClient(id, certs.ValidFor(now, time.Hour))
		if err != nil {
			t.Fatalf("%q: %v", id, err)
		}
		if len(kp.Cert.URIs) != 1 || kp.Cert.Subject.CommonName != id {
			t.Fatalf("%q: URIs %v, CN %q", id, kp.Cert.URIs, kp.Cert.Subject.CommonName)
		}
		if got := kp.Cert.URIs[0].String(); got != "spiffe://quartermaster/"+id {
			t.Errorf("URI %q", got)
		}
		got, ok := certs.IdentityFromURI(kp.Cert.URIs[0])
		if !ok || got != id {
			t.Errorf("round trip %q -> %q, %v", id, got, ok)
		}
	}
	for _, bad := range []string{"", "../etc", "a/b", ".hidden", "-x", "with space", "ünï", "a%2fb", strings.Repeat("x", 65)} {
		if _, err := ca.IssueClient(bad, certs.ValidFor(now, time.Hour)); err == nil {
			t.Errorf("identity %q accepted", bad)
		}
	}
	for _, other := range []string{"spiffe://other/mm", "spiffe://quartermaster/a/b", "spiffe://quartermaster/mm?x=1", "https://quartermaster/mm", "spiffe://quartermaster/"} {
		u, err := url.Parse(other)
		if err != nil {
			t.Fatal(err)
		}
		if id, ok := certs.IdentityFromURI(u); ok {
			t.Errorf("%s read as our identity %q", other, id)
		}
	}
}

func mode(t *testing.T, path string) fs.FileMode {
	t.Helper()
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return fi.Mode().Perm()
}

func read(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func loadPair(t *testing.T, dir string) *certs.KeyPair {
	t.Helper()
	kp, err := certs.ParseKeyPair(read(t, filepath.Join(dir, certs.CertFile)), read(t, filepath.Join(dir, certs.KeyFile)))
	if err != nil {
		t.Fatal(err)
	}
	return kp
}

func TestGenerateLayout(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "certs")
	res, err := certs.Generate(certs.GenerateOptions{
		Dir: dir, Hosts: []string{"localhost", "127.0.0.1"}, Clients: []string{"matchmaker", "admin"},
		Validity: 2 * time.Hour, Now: now,
	})
	if err != nil {
		t.Fatal(err)
	}
	l := certs.Layout{Dir: dir}
	if !res.CACreated {
		t.Error("CACreated is false on a fresh directory")
	}
	wantFiles := map[string]fs.FileMode{
		"ca.crt":                     0o644,
		"ca.key":                     0o600,
		"server/tls.crt":             0o644,
		"server/tls.key":             0o600,
		"client-ca/ca.crt":           0o644,
		"clients/matchmaker/tls.crt": 0o644,
		"clients/matchmaker/tls.key": 0o600,
		"clients/matchmaker/ca.crt":  0o644,
		"clients/admin/tls.crt":      0o644,
		"clients/admin/tls.key":      0o600,
		"clients/admin/ca.crt":       0o644,
	}
	var found []string
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			rel, _ := filepath.Rel(dir, p)
			found = append(found, filepath.ToSlash(rel))
		}
		return err
	})
	for rel, perm := range wantFiles {
		if !slices.Contains(found, rel) {
			t.Errorf("missing %s", rel)
			continue
		}
		if got := mode(t, filepath.Join(dir, rel)); got != perm {
			t.Errorf("%s has mode %v, want %v", rel, got, perm)
		}
	}
	if len(found) != len(wantFiles) {
		t.Errorf("files %v, want exactly %d (no temporary files left)", found, len(wantFiles))
	}
	if len(res.Written) != len(wantFiles) {
		t.Errorf("Written lists %d files, want %d: %v", len(res.Written), len(wantFiles), res.Written)
	}
	for _, p := range []string{dir, l.ServerDir(), l.ClientDir("admin")} {
		if got := mode(t, p); got&0o077 != 0 {
			t.Errorf("directory %s holding a key is open to others: %v", p, got)
		}
	}

	ca, err := certs.LoadAuthority(l)
	if err != nil {
		t.Fatal(err)
	}
	srv := loadPair(t, l.ServerDir())
	if err := verify(srv.Cert, ca, now, x509.ExtKeyUsageServerAuth); err != nil {
		t.Error(err)
	}
	if !srv.Cert.IPAddresses[0].Equal(net.ParseIP("127.0.0.1")) || srv.Cert.DNSNames[0] != "localhost" {
		t.Errorf("server SANs %v %v", srv.Cert.DNSNames, srv.Cert.IPAddresses)
	}
	if got := srv.Cert.NotAfter.Sub(now); got != 2*time.Hour {
		t.Errorf("server validity from now %v, want 2h", got)
	}
	for _, id := range []string{"matchmaker", "admin"} {
		kp := loadPair(t, l.ClientDir(id))
		if err := verify(kp.Cert, ca, now, x509.ExtKeyUsageClientAuth); err != nil {
			t.Errorf("%s: %v", id, err)
		}
		if got, ok := certs.IdentityFromURI(kp.Cert.URIs[0]); !ok || got != id {
			t.Errorf("%s: identity %q", id, got)
		}
		if !bytes.Equal(read(t, l.ClientServerCA(id)), ca.CertPEM) {
			t.Errorf("%s: ca.crt is not the CA", id)
		}
	}
	if !bytes.Equal(read(t, l.ClientCACert()), ca.CertPEM) {
		t.Error("client-ca/ca.crt is not the CA")
	}
}

func TestGenerateIsIdempotentAndAddsClients(t *testing.T) {
	dir := t.TempDir()
	l := certs.Layout{Dir: dir}
	opts := certs.GenerateOptions{Dir: dir, Hosts: []string{"localhost"}, Clients: []string{"a"}, Now: now}
	if _, err := certs.Generate(opts); err != nil {
		t.Fatal(err)
	}
	caPEM, srvPEM, aPEM := read(t, l.CACert()), read(t, l.ServerCert()), read(t, l.ClientCert("a"))

	// The same run again writes nothing.
	res, err := certs.Generate(opts)
	if err != nil {
		t.Fatal(err)
	}
	if res.CACreated || len(res.Written) != 0 || len(res.Kept) != 2 {
		t.Errorf("rerun: created %v, wrote %v, kept %v", res.CACreated, res.Written, res.Kept)
	}

	// Adding a client later reuses the CA and keeps the others.
	opts.Clients = []string{"a", "b"}
	opts.Now = now.Add(time.Hour)
	res, err = certs.Generate(opts)
	if err != nil {
		t.Fatal(err)
	}
	if res.CACreated || !bytes.Equal(read(t, l.CACert()), caPEM) {
		t.Error("adding a client replaced the CA")
	}
	if !bytes.Equal(read(t, l.ServerCert()), srvPEM) || !bytes.Equal(read(t, l.ClientCert("a")), aPEM) {
		t.Error("adding a client reissued other certificates")
	}
	ca, _ := certs.LoadAuthority(l)
	if err := verify(loadPair(t, l.ClientDir("b")).Cert, ca, opts.Now, x509.ExtKeyUsageClientAuth); err != nil {
		t.Errorf("new client: %v", err)
	}

	// Other hosts reissue the server certificate under the same CA.
	opts.Hosts = []string{"localhost", "allocator.example.com"}
	if _, err := certs.Generate(opts); err != nil {
		t.Fatal(err)
	}
	srv := loadPair(t, l.ServerDir())
	if bytes.Equal(srv.CertPEM, srvPEM) || srv.Cert.VerifyHostname("allocator.example.com") != nil {
		t.Error("server certificate not reissued for the new hosts")
	}
	if !bytes.Equal(read(t, l.CACert()), caPEM) {
		t.Error("new hosts replaced the CA")
	}

	// Without hosts, the server certificate is left alone.
	opts.Hosts = nil
	if res, err := certs.Generate(opts); err != nil || slices.Contains(res.Written, l.ServerCert()) {
		t.Errorf("no hosts: wrote %v, %v", res.Written, err)
	}

	// A certificate past its expiry is reissued.
	opts.Now = now.Add(2 * certs.DefaultValidity)
	res, err = certs.Generate(opts)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(res.Written, l.ClientCert("a")) {
		t.Errorf("expired client certificate not reissued: %v", res.Written)
	}
}

func TestGenerateForce(t *testing.T) {
	dir := t.TempDir()
	l := certs.Layout{Dir: dir}
	opts := certs.GenerateOptions{Dir: dir, Hosts: []string{"localhost"}, Clients: []string{"a", "b"}, Now: now}
	if _, err := certs.Generate(opts); err != nil {
		t.Fatal(err)
	}
	oldCA := read(t, l.CACert())
	oldA := read(t, l.ClientCert("a"))

	opts.Force = true
	opts.Clients = []string{"a"}
	res, err := certs.Generate(opts)
	if err != nil {
		t.Fatal(err)
	}
	if !res.CACreated || bytes.Equal(read(t, l.CACert()), oldCA) {
		t.Fatal("--force kept the CA")
	}
	if bytes.Equal(read(t, l.ClientCert("a")), oldA) {
		t.Error("--force kept client a's certificate")
	}
	if !bytes.Equal(read(t, l.ClientCACert()), read(t, l.CACert())) || !bytes.Equal(read(t, l.ClientServerCA("a")), read(t, l.CACert())) {
		t.Error("CA copies not updated")
	}
	if !slices.Equal(res.Stale, []string{"b"}) {
		t.Errorf("Stale = %v, want [b]", res.Stale)
	}
	ca, _ := certs.LoadAuthority(l)
	for _, dir := range []string{l.ServerDir(), l.ClientDir("a")} {
		if err := verify(loadPair(t, dir).Cert, ca, now, x509.ExtKeyUsageAny); err != nil {
			t.Errorf("%s after --force: %v", dir, err)
		}
	}
}

func TestGenerateRefusesBrokenCA(t *testing.T) {
	dir := t.TempDir()
	l := certs.Layout{Dir: dir}
	opts := certs.GenerateOptions{Dir: dir, Clients: []string{"a"}, Now: now}
	if _, err := certs.Generate(opts); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(l.CAKey(), []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := certs.Generate(opts); err == nil {
		t.Fatal("a garbage CA key was accepted")
	}
	os.Remove(l.CAKey())
	if _, err := certs.Generate(opts); err == nil {
		t.Fatal("a CA certificate without its key was accepted")
	}
	opts.Force = true
	if _, err := certs.Generate(opts); err != nil {
		t.Fatalf("--force over a broken CA: %v", err)
	}
}

func TestGenerateOptionErrors(t *testing.T) {
	dir := t.TempDir()
	for name, opts := range map[string]certs.GenerateOptions{
		"no dir":         {Now: now},
		"no now":         {Dir: dir},
		"bad identity":   {Dir: dir, Now: now, Clients: []string{"../x"}},
		"empty host":     {Dir: dir, Now: now, Hosts: []string{"localhost", " "}},
		"negative valid": {Dir: dir, Now: now, Validity: -time.Hour},
	} {
		if _, err := certs.Generate(opts); err == nil {
			t.Errorf("%s: Generate succeeded", name)
		}
	}
}

func TestLeafNeverOutlivesCA(t *testing.T) {
	dir := t.TempDir()
	_, err := certs.Generate(certs.GenerateOptions{
		Dir: dir, Clients: []string{"a"}, Now: now, CAValidity: time.Hour, Validity: 100 * time.Hour,
	})
	if err != nil {
		t.Fatal(err)
	}
	l := certs.Layout{Dir: dir}
	ca, _ := certs.LoadAuthority(l)
	if got := loadPair(t, l.ClientDir("a")).Cert.NotAfter; got.After(ca.Cert.NotAfter) {
		t.Errorf("client valid until %v, after its CA (%v)", got, ca.Cert.NotAfter)
	}
}
