// Package certs makes the certificates the allocator's mutual TLS runs on: a
// certificate authority, a server certificate for the allocator's host names
// and addresses, and one client certificate per caller identity.
//
// It replaces the openssl scripts Agones users run by hand. Everything can be
// made in memory (NewCA, Authority.IssueServer, Authority.IssueClient), which
// is what tests use, or written into a directory in the layout `qm serve`
// reads (Generate and Layout).
//
// Keys are ECDSA P-256: small, fast to handshake with, and accepted by every
// TLS stack an Agones client is likely to use. A caller's identity travels in
// its certificate as a URI SAN of the form spiffe://quartermaster/<identity>
// (see IdentityURI), and also as the subject CN so that tools which only show
// the CN still name the caller.
//
// Validity is always passed in as a Period rather than read from the clock
// here, so tests can make certificates that are expired or not yet valid.
package certs

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/url"
	"strings"
	"time"
)

// TrustDomain is the authority part of the identity URIs this package puts
// in client certificates: spiffe://quartermaster/<identity>.
const TrustDomain = "quartermaster"

// IdentityScheme is the URI scheme of identity URIs. SPIFFE's form is used so
// that the same certificates can later come from a SPIFFE issuer unchanged.
const IdentityScheme = "spiffe"

// maxIdentityLen keeps identities inside the 64-character limit X.509 puts on
// a CommonName.
const maxIdentityLen = 64

// backdate is how far before "now" a fresh certificate starts to be valid, so
// a peer whose clock runs a little behind does not reject it.
const backdate = 5 * time.Minute

// Period is a certificate's validity window.
type Period struct {
	NotBefore time.Time
	NotAfter  time.Time
}

// ValidFor returns a period that starts slightly before now (to tolerate
// clock skew between machines) and lasts d from now.
func ValidFor(now time.Time, d time.Duration) Period {
	return Period{NotBefore: now.Add(-backdate), NotAfter: now.Add(d)}
}

// Expired returns a period that ended an hour before now: for tests that
// need a certificate a verifier must reject.
func Expired(now time.Time) Period {
	return Period{NotBefore: now.Add(-48 * time.Hour), NotAfter: now.Add(-time.Hour)}
}

// NotYetValid returns a period that starts an hour after now: for tests that
// need a certificate a verifier must reject.
func NotYetValid(now time.Time) Period {
	return Period{NotBefore: now.Add(time.Hour), NotAfter: now.Add(48 * time.Hour)}
}

func (p Period) validate() error {
	if p.NotBefore.IsZero() || p.NotAfter.IsZero() {
		return errors.New("certs: validity period needs both NotBefore and NotAfter")
	}
	if !p.NotAfter.After(p.NotBefore) {
		return fmt.Errorf("certs: validity period ends (%s) before it starts (%s)",
			p.NotAfter.Format(time.RFC3339), p.NotBefore.Format(time.RFC3339))
	}
	return nil
}

// KeyPair is a certificate with its private key, both parsed and PEM-encoded.
type KeyPair struct {
	Cert    *x509.Certificate
	Key     *ecdsa.PrivateKey
	CertPEM []byte
	KeyPEM  []byte
}

// TLSCertificate returns the pair in the form crypto/tls serves.
func (kp *KeyPair) TLSCertificate() (tls.Certificate, error) {
	return tls.X509KeyPair(kp.CertPEM, kp.KeyPEM)
}

// Authority is a certificate authority that signs server and client
// certificates.
type Authority struct {
	KeyPair
}

// CertPool returns a pool holding only this authority, for use as RootCAs on
// a client or ClientCAs on a server.
func (a *Authority) CertPool() *x509.CertPool {
	p := x509.NewCertPool()
	p.AddCert(a.Cert)
	return p
}

// NewCA makes a self-signed certificate authority named name.
func NewCA(name string, p Period) (*Authority, error) {
	if name == "" {
		name = "Quartermaster CA"
	}
	if err := p.validate(); err != nil {
		return nil, err
	}
	key, err := newKey()
	if err != nil {
		return nil, err
	}
	tmpl, err := template(name, p)
	if err != nil {
		return nil, err
	}
	tmpl.Subject.Organization = []string{"Quartermaster"}
	tmpl.IsCA = true
	tmpl.BasicConstraintsValid = true
	// The CA signs leaves only; a path length of zero stops anyone holding a
	// leaf key from minting further certificates under it.
	tmpl.MaxPathLen = 0
	tmpl.MaxPathLenZero = true
	tmpl.KeyUsage = x509.KeyUsageCertSign | x509.KeyUsageCRLSign | x509.KeyUsageDigitalSignature
	kp, err := sign(tmpl, nil, key, key)
	if err != nil {
		return nil, err
	}
	return &Authority{*kp}, nil
}

// ParseAuthority reads a CA from PEM, checking that the key belongs to the
// certificate and that the certificate is a CA.
func ParseAuthority(certPEM, keyPEM []byte) (*Authority, error) {
	kp, err := ParseKeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, err
	}
	if !kp.Cert.IsCA {
		return nil, errors.New("certs: certificate is not a CA")
	}
	return &Authority{*kp}, nil
}

// ParseKeyPair reads a certificate and its ECDSA private key from PEM.
func ParseKeyPair(certPEM, keyPEM []byte) (*KeyPair, error) {
	tc, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("certs: %w", err)
	}
	key, ok := tc.PrivateKey.(*ecdsa.PrivateKey)
	if !ok {
		return nil, fmt.Errorf("certs: private key is %T, want ECDSA", tc.PrivateKey)
	}
	cert := tc.Leaf
	if cert == nil {
		if cert, err = x509.ParseCertificate(tc.Certificate[0]); err != nil {
			return nil, fmt.Errorf("certs: %w", err)
		}
	}
	return &KeyPair{Cert: cert, Key: key, CertPEM: certPEM, KeyPEM: keyPEM}, nil
}

// IssueServer signs a server certificate for hosts: each entry that parses
// as an IP address becomes an IP SAN, every other one a DNS SAN. The first
// host is also the subject CN, which old clients still look at.
func (a *Authority) IssueServer(hosts []string, p Period) (*KeyPair, error) {
	if len(hosts) == 0 {
		return nil, errors.New("certs: a server certificate needs at least one host name or IP address")
	}
	if err := p.validate(); err != nil {
		return nil, err
	}
	tmpl, err := template(hosts[0], p)
	if err != nil {
		return nil, err
	}
	for _, h := range hosts {
		h = strings.TrimSpace(h)
		if h == "" {
			return nil, errors.New("certs: empty host name")
		}
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}
	key, err := newKey()
	if err != nil {
		return nil, err
	}
	return sign(tmpl, a.Cert, key, a.Key)
}

// IssueClient signs a client certificate for identity, carried both as the
// URI SAN spiffe://quartermaster/<identity> and as the subject CN.
func (a *Authority) IssueClient(identity string, p Period) (*KeyPair, error) {
	u, err := IdentityURI(identity)
	if err != nil {
		return nil, err
	}
	if err := p.validate(); err != nil {
		return nil, err
	}
	tmpl, err := template(identity, p)
	if err != nil {
		return nil, err
	}
	tmpl.URIs = []*url.URL{u}
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	key, err := newKey()
	if err != nil {
		return nil, err
	}
	return sign(tmpl, a.Cert, key, a.Key)
}

// IssueClientCNOnly signs a client certificate that names its caller only in
// the subject CN, as certificates made with openssl by Agones users do. The
// server must still derive the identity from it.
func (a *Authority) IssueClientCNOnly(commonName string, p Period) (*KeyPair, error) {
	if commonName == "" {
		return nil, errors.New("certs: empty common name")
	}
	if err := p.validate(); err != nil {
		return nil, err
	}
	tmpl, err := template(commonName, p)
	if err != nil {
		return nil, err
	}
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature
	tmpl.ExtKeyUsage = []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}
	key, err := newKey()
	if err != nil {
		return nil, err
	}
	return sign(tmpl, a.Cert, key, a.Key)
}

// ValidateIdentity reports whether identity can name a client. Identities
// become a directory name, a URI path segment and a CN, so they are limited
// to letters, digits, '.', '_' and '-', start with a letter or digit, and are
// at most 64 characters.
func ValidateIdentity(identity string) error {
	if identity == "" {
		return errors.New("certs: empty identity")
	}
	if len(identity) > maxIdentityLen {
		return fmt.Errorf("certs: identity %q is longer than %d characters", identity, maxIdentityLen)
	}
	for i, r := range identity {
		alnum := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9'
		if alnum || (i > 0 && (r == '.' || r == '_' || r == '-')) {
			continue
		}
		return fmt.Errorf("certs: identity %q: character %q not allowed (use letters, digits, '.', '_', '-'; start with a letter or digit)", identity, r)
	}
	return nil
}

// IdentityURI returns the URI SAN that names identity in a client
// certificate: spiffe://quartermaster/<identity>.
func IdentityURI(identity string) (*url.URL, error) {
	if err := ValidateIdentity(identity); err != nil {
		return nil, err
	}
	return &url.URL{Scheme: IdentityScheme, Host: TrustDomain, Path: "/" + identity}, nil
}

// IdentityFromURI is the inverse of IdentityURI. It reports false for a URI
// that is not of that form (another trust domain, several path segments,
// a query), which callers then treat as an opaque identity of its own.
func IdentityFromURI(u *url.URL) (string, bool) {
	if u == nil || u.Scheme != IdentityScheme || u.Host != TrustDomain || u.User != nil ||
		u.RawQuery != "" || u.Fragment != "" || u.Opaque != "" {
		return "", false
	}
	id, ok := strings.CutPrefix(u.Path, "/")
	if !ok || ValidateIdentity(id) != nil {
		return "", false
	}
	return id, true
}

func newKey() (*ecdsa.PrivateKey, error) {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("certs: generating key: %w", err)
	}
	return k, nil
}

func template(cn string, p Period) (*x509.Certificate, error) {
	// 128 random bits: serials must be unique per CA, and random ones need no
	// state kept between runs.
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 128))
	if err != nil {
		return nil, fmt.Errorf("certs: serial number: %w", err)
	}
	return &x509.Certificate{
		SerialNumber: serial,
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    p.NotBefore.UTC(),
		NotAfter:     p.NotAfter.UTC(),
	}, nil
}

// sign creates tmpl signed by parentKey (self-signed when parent is nil) and
// returns it with its key in both forms.
func sign(tmpl, parent *x509.Certificate, key, parentKey *ecdsa.PrivateKey) (*KeyPair, error) {
	if parent == nil {
		parent = tmpl
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, &key.PublicKey, parentKey)
	if err != nil {
		return nil, fmt.Errorf("certs: signing certificate: %w", err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, fmt.Errorf("certs: %w", err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return nil, fmt.Errorf("certs: encoding key: %w", err)
	}
	return &KeyPair{
		Cert:    cert,
		Key:     key,
		CertPEM: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		KeyPEM:  pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER}),
	}, nil
}
