package certs

import (
	"bytes"
	"crypto/x509"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"
)

// File names inside the directories of a Layout. They are the key names of a
// Kubernetes TLS secret, so a secret mounted as a volume has the same shape.
const (
	CertFile = "tls.crt"
	KeyFile  = "tls.key"
	CAFile   = "ca.crt"
)

// Defaults for Generate.
const (
	DefaultValidity   = 365 * 24 * time.Hour
	DefaultCAValidity = 10 * 365 * 24 * time.Hour
)

// Permissions: private keys are readable by their owner only; directories
// that hold keys are closed to others too.
const (
	keyPerm     fs.FileMode = 0o600
	certPerm    fs.FileMode = 0o644
	privDirPerm fs.FileMode = 0o700
	pubDirPerm  fs.FileMode = 0o755
)

// Layout names the files of a certificate directory:
//
//	DIR/ca.crt, DIR/ca.key                     the CA
//	DIR/server/tls.crt, DIR/server/tls.key     server certificate (qm serve --tls-dir)
//	DIR/client-ca/ca.crt                       trusted client CAs (qm serve --client-ca-dir)
//	DIR/clients/<identity>/tls.crt, tls.key    a client's certificate and key
//	DIR/clients/<identity>/ca.crt              the CA the client checks the server against
type Layout struct {
	Dir string
}

// CACert is the CA certificate.
func (l Layout) CACert() string { return filepath.Join(l.Dir, CAFile) }

// CAKey is the CA private key.
func (l Layout) CAKey() string { return filepath.Join(l.Dir, "ca.key") }

// ServerDir holds the server's tls.crt and tls.key.
func (l Layout) ServerDir() string { return filepath.Join(l.Dir, "server") }

// ServerCert is the server certificate.
func (l Layout) ServerCert() string { return filepath.Join(l.ServerDir(), CertFile) }

// ServerKey is the server private key.
func (l Layout) ServerKey() string { return filepath.Join(l.ServerDir(), KeyFile) }

// ClientCADir holds the CAs the server trusts for client certificates.
func (l Layout) ClientCADir() string { return filepath.Join(l.Dir, "client-ca") }

// ClientCACert is the CA this package manages inside ClientCADir. Other
// *.crt or *.pem files put there by hand are left alone.
func (l Layout) ClientCACert() string { return filepath.Join(l.ClientCADir(), CAFile) }

// ClientsDir holds one directory per client identity.
func (l Layout) ClientsDir() string { return filepath.Join(l.Dir, "clients") }

// ClientDir holds one client's certificate, key and server CA.
func (l Layout) ClientDir(identity string) string { return filepath.Join(l.ClientsDir(), identity) }

// ClientCert is a client's certificate.
func (l Layout) ClientCert(identity string) string {
	return filepath.Join(l.ClientDir(identity), CertFile)
}

// ClientKey is a client's private key.
func (l Layout) ClientKey(identity string) string {
	return filepath.Join(l.ClientDir(identity), KeyFile)
}

// ClientServerCA is the CA a client verifies the server against.
func (l Layout) ClientServerCA(identity string) string {
	return filepath.Join(l.ClientDir(identity), CAFile)
}

// GenerateOptions says what Generate makes.
type GenerateOptions struct {
	// Dir is the certificate directory; it is created if missing.
	Dir string
	// Hosts are the DNS names and IP addresses of the server certificate.
	// When empty, the server certificate is neither made nor checked.
	Hosts []string
	// Clients are the identities to make client certificates for.
	Clients []string
	// Validity of server and client certificates; DefaultValidity if zero.
	// A certificate never outlives the CA that signed it.
	Validity time.Duration
	// CAValidity of a newly made CA; DefaultCAValidity if zero.
	CAValidity time.Duration
	// Force makes a new CA even if one exists, and reissues every requested
	// certificate. Certificates already handed out under the old CA stop
	// being accepted once the server reloads the client CA directory.
	Force bool
	// Now is the time validity periods start from.
	Now time.Time
}

// Result says what Generate did. Paths are as Layout names them.
type Result struct {
	Layout    Layout
	CACreated bool
	// Written are the files created or replaced, in the order written.
	Written []string
	// Kept are the certificates left as they were because they are still
	// valid, signed by the CA and for the requested names.
	Kept []string
	// Stale are client identities under DIR/clients, not requested this
	// time, whose certificate no longer verifies against the CA (after
	// --force, for example). They need reissuing to be accepted again.
	Stale []string
}

// Generate makes or completes a certificate directory. It is idempotent: an
// existing CA is reused (unless Force), and an existing server or client
// certificate is kept when it still verifies against the CA, is valid at
// Now and names the requested hosts or identity. So adding a client later is
// another run with the new name, and the server keeps its certificate.
//
// Files are replaced atomically (written aside, then renamed), so a server
// polling the directory never reads half a file.
func Generate(opts GenerateOptions) (*Result, error) {
	if opts.Dir == "" {
		return nil, errors.New("certs: no directory given")
	}
	if opts.Now.IsZero() {
		return nil, errors.New("certs: GenerateOptions.Now is not set")
	}
	if opts.Validity == 0 {
		opts.Validity = DefaultValidity
	}
	if opts.CAValidity == 0 {
		opts.CAValidity = DefaultCAValidity
	}
	if opts.Validity < 0 || opts.CAValidity < 0 {
		return nil, errors.New("certs: validity must be positive")
	}
	for _, id := range opts.Clients {
		if err := ValidateIdentity(id); err != nil {
			return nil, err
		}
	}
	var hosts []string
	for _, h := range opts.Hosts {
		h = strings.TrimSpace(h)
		if h == "" {
			return nil, errors.New("certs: empty host name in host list")
		}
		if !slices.Contains(hosts, h) {
			hosts = append(hosts, h)
		}
	}

	l := Layout{Dir: opts.Dir}
	res := &Result{Layout: l}
	if err := os.MkdirAll(l.Dir, privDirPerm); err != nil {
		return nil, fmt.Errorf("certs: %w", err)
	}

	ca, err := loadOrMakeCA(l, opts, res)
	if err != nil {
		return nil, err
	}
	leaf := ValidFor(opts.Now, opts.Validity)
	if leaf.NotAfter.After(ca.Cert.NotAfter) {
		leaf.NotAfter = ca.Cert.NotAfter
	}

	if err := writeIfChanged(res, l.ClientCADir(), pubDirPerm, l.ClientCACert(), ca.CertPEM, certPerm); err != nil {
		return nil, err
	}

	if len(hosts) > 0 {
		keep := !opts.Force && !res.CACreated && serverCertFits(l, ca, hosts, opts.Now)
		if keep {
			res.Kept = append(res.Kept, l.ServerCert())
		} else {
			kp, err := ca.IssueServer(hosts, leaf)
			if err != nil {
				return nil, err
			}
			if err := writePair(res, l.ServerDir(), kp); err != nil {
				return nil, err
			}
		}
	}

	for _, id := range opts.Clients {
		keep := !opts.Force && !res.CACreated && clientCertFits(l, ca, id, opts.Now)
		if keep {
			res.Kept = append(res.Kept, l.ClientCert(id))
		} else {
			kp, err := ca.IssueClient(id, leaf)
			if err != nil {
				return nil, err
			}
			if err := writePair(res, l.ClientDir(id), kp); err != nil {
				return nil, err
			}
		}
		if err := writeIfChanged(res, l.ClientDir(id), privDirPerm, l.ClientServerCA(id), ca.CertPEM, certPerm); err != nil {
			return nil, err
		}
	}

	res.Stale = staleClients(l, ca, opts.Clients, opts.Now)
	return res, nil
}

// LoadAuthority reads the CA of a certificate directory.
func LoadAuthority(l Layout) (*Authority, error) {
	certPEM, err := os.ReadFile(l.CACert())
	if err != nil {
		return nil, fmt.Errorf("certs: %w", err)
	}
	keyPEM, err := os.ReadFile(l.CAKey())
	if err != nil {
		return nil, fmt.Errorf("certs: %w", err)
	}
	ca, err := ParseAuthority(certPEM, keyPEM)
	if err != nil {
		return nil, fmt.Errorf("certs: CA in %s: %w", l.Dir, err)
	}
	return ca, nil
}

// WriteKeyPair writes kp as dir/tls.key and dir/tls.crt, each atomically,
// creating dir if needed. The key goes first: a reader that sees the new
// certificate with the old key rejects the mismatch and tries again later.
func WriteKeyPair(dir string, kp *KeyPair) error {
	if err := os.MkdirAll(dir, privDirPerm); err != nil {
		return fmt.Errorf("certs: %w", err)
	}
	if err := WriteFileAtomic(filepath.Join(dir, KeyFile), kp.KeyPEM, keyPerm); err != nil {
		return err
	}
	return WriteFileAtomic(filepath.Join(dir, CertFile), kp.CertPEM, certPerm)
}

// WriteFileAtomic replaces path with data by writing a temporary file in
// the same directory and renaming it over path, so that readers see either
// the old or the new content, never a mix. The temporary name does not end
// in .crt or .pem, so a server scanning the directory for CAs skips it.
func WriteFileAtomic(path string, data []byte, perm fs.FileMode) error {
	dir, base := filepath.Split(path)
	if dir == "" {
		dir = "."
	}
	f, err := os.CreateTemp(dir, "."+base+".tmp-*")
	if err != nil {
		return fmt.Errorf("certs: %w", err)
	}
	tmp := f.Name()
	fail := func(err error) error {
		f.Close()
		os.Remove(tmp)
		return fmt.Errorf("certs: writing %s: %w", path, err)
	}
	if err := f.Chmod(perm); err != nil {
		return fail(err)
	}
	if _, err := f.Write(data); err != nil {
		return fail(err)
	}
	if err := f.Sync(); err != nil {
		return fail(err)
	}
	if err := f.Close(); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("certs: writing %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		os.Remove(tmp)
		return fmt.Errorf("certs: %w", err)
	}
	return nil
}

func loadOrMakeCA(l Layout, opts GenerateOptions, res *Result) (*Authority, error) {
	_, certErr := os.Stat(l.CACert())
	_, keyErr := os.Stat(l.CAKey())
	certMissing, keyMissing := errors.Is(certErr, fs.ErrNotExist), errors.Is(keyErr, fs.ErrNotExist)
	if !opts.Force && !(certMissing && keyMissing) {
		if certMissing != keyMissing {
			return nil, fmt.Errorf("certs: %s has only half a CA (%s or %s is missing); use --force to make a new CA",
				l.Dir, filepath.Base(l.CACert()), filepath.Base(l.CAKey()))
		}
		ca, err := LoadAuthority(l)
		if err != nil {
			return nil, fmt.Errorf("%w; use --force to replace it with a new CA", err)
		}
		return ca, nil
	}
	ca, err := NewCA("Quartermaster CA", ValidFor(opts.Now, opts.CAValidity))
	if err != nil {
		return nil, err
	}
	// The key goes first so that a CA certificate on disk always has its
	// key beside it.
	if err := WriteFileAtomic(l.CAKey(), ca.KeyPEM, keyPerm); err != nil {
		return nil, err
	}
	if err := WriteFileAtomic(l.CACert(), ca.CertPEM, certPerm); err != nil {
		return nil, err
	}
	res.CACreated = true
	res.Written = append(res.Written, l.CAKey(), l.CACert())
	return ca, nil
}

func writePair(res *Result, dir string, kp *KeyPair) error {
	if err := WriteKeyPair(dir, kp); err != nil {
		return err
	}
	res.Written = append(res.Written, filepath.Join(dir, KeyFile), filepath.Join(dir, CertFile))
	return nil
}

func writeIfChanged(res *Result, dir string, dirPerm fs.FileMode, path string, data []byte, perm fs.FileMode) error {
	if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, data) {
		return nil
	}
	if err := os.MkdirAll(dir, dirPerm); err != nil {
		return fmt.Errorf("certs: %w", err)
	}
	if err := WriteFileAtomic(path, data, perm); err != nil {
		return err
	}
	res.Written = append(res.Written, path)
	return nil
}

// loadLeaf reads a certificate and key pair from dir and verifies it
// against ca for usage at now. Any failure means "reissue".
func loadLeaf(dir string, ca *Authority, usage x509.ExtKeyUsage, now time.Time) (*KeyPair, bool) {
	certPEM, err := os.ReadFile(filepath.Join(dir, CertFile))
	if err != nil {
		return nil, false
	}
	keyPEM, err := os.ReadFile(filepath.Join(dir, KeyFile))
	if err != nil {
		return nil, false
	}
	kp, err := ParseKeyPair(certPEM, keyPEM)
	if err != nil {
		return nil, false
	}
	_, err = kp.Cert.Verify(x509.VerifyOptions{
		Roots:       ca.CertPool(),
		CurrentTime: now,
		KeyUsages:   []x509.ExtKeyUsage{usage},
	})
	return kp, err == nil
}

func serverCertFits(l Layout, ca *Authority, hosts []string, now time.Time) bool {
	kp, ok := loadLeaf(l.ServerDir(), ca, x509.ExtKeyUsageServerAuth, now)
	if !ok {
		return false
	}
	var have []string
	have = append(have, kp.Cert.DNSNames...)
	for _, ip := range kp.Cert.IPAddresses {
		have = append(have, ip.String())
	}
	return slices.Equal(normalizeHosts(have), normalizeHosts(hosts))
}

func clientCertFits(l Layout, ca *Authority, identity string, now time.Time) bool {
	kp, ok := loadLeaf(l.ClientDir(identity), ca, x509.ExtKeyUsageClientAuth, now)
	if !ok || len(kp.Cert.URIs) != 1 {
		return false
	}
	id, ok := IdentityFromURI(kp.Cert.URIs[0])
	return ok && id == identity
}

func staleClients(l Layout, ca *Authority, requested []string, now time.Time) []string {
	entries, err := os.ReadDir(l.ClientsDir())
	if err != nil {
		return nil
	}
	var stale []string
	for _, e := range entries {
		id := e.Name()
		if !e.IsDir() || slices.Contains(requested, id) || ValidateIdentity(id) != nil {
			continue
		}
		if _, ok := loadLeaf(l.ClientDir(id), ca, x509.ExtKeyUsageClientAuth, now); !ok {
			stale = append(stale, id)
		}
	}
	return stale
}

// normalizeHosts puts hosts in a canonical order and spelling, so that a
// certificate's SANs can be compared with a requested host list.
func normalizeHosts(hosts []string) []string {
	out := make([]string, 0, len(hosts))
	for _, h := range hosts {
		h = strings.TrimSpace(h)
		if ip := net.ParseIP(h); ip != nil {
			h = ip.String()
		} else {
			h = strings.ToLower(h)
		}
		if !slices.Contains(out, h) {
			out = append(out, h)
		}
	}
	sort.Strings(out)
	return out
}
