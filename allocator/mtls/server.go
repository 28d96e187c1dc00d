package mtls

import (
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/quartermaster-dev/quartermaster/certs"
)

// DefaultPollInterval is how often Run looks at the certificate files. The
// files are small, so reading them is cheap; a Kubernetes secret update
// takes longer than this to reach a pod anyway.
const DefaultPollInterval = 2 * time.Second

// maxFileSize bounds what is read from a certificate file, so that a wrong
// path (a log file, a device) cannot make the server read without end.
const maxFileSize = 1 << 20

// ServerOptions configure a Server.
type ServerOptions struct {
	// Mode is ModeMTLS unless set.
	Mode Mode
	// CertDir holds tls.crt and tls.key. Needed unless Mode is
	// ModeInsecureDisableTLS.
	CertDir string
	// ClientCADir holds the trusted client CAs: every *.crt and *.pem file
	// in it (hidden files skipped, symlinks followed, so a mounted
	// Kubernetes secret works). Needed in ModeMTLS.
	ClientCADir string
	// DefaultIdentity is every caller's identity in the insecure modes;
	// DefaultIdentity ("anonymous") if empty.
	DefaultIdentity string
	// PollInterval is how often Run calls Reload; DefaultPollInterval if
	// zero.
	PollInterval time.Duration
	// NextProtos are the ALPN protocols offered; {"h2", "http/1.1"} if nil,
	// which suits both gRPC and REST on one listener.
	NextProtos []string
	// Logger receives reload outcomes; nothing is logged if nil.
	Logger *slog.Logger
}

// Server holds the server side of the allocator's transport security.
// Its methods are safe for concurrent use.
type Server struct {
	opts ServerOptions
	log  *slog.Logger

	// reloadMu serialises Reload, so the polling loop and a direct call do
	// not interleave their reads and reports.
	reloadMu sync.Mutex

	// mu guards the material handshakes read.
	mu        sync.RWMutex
	cert      *tls.Certificate
	pool      *x509.CertPool
	handshake *tls.Config // handed out by GetConfigForClient; rebuilt on change
	trust     *trust      // the CAs of pool, by file (trust.go)
	bind      *bindings   // identities tied to CA files; nil for none

	// connMu guards conns, the open connections Track registered.
	connMu sync.Mutex
	conns  map[*tracked]struct{}
	// certs counts the tracked connections by client certificate.
	certs *clientCerts

	// Owned by Reload (under reloadMu), copied into status under mu.
	certSeen, caSeen [sha256.Size]byte // digest of the last content examined
	certErr, caErr   error             // problem with that content, if any
	status           Status
}

// Status reports the reloader's state, for logs, metrics and readiness.
type Status struct {
	// Reloads counts changes applied after the initial load.
	Reloads uint64
	// Failures counts changed content that was rejected.
	Failures uint64
	// CertErr is why the server certificate files on disk are not in use,
	// nil when the served certificate is what the files hold.
	CertErr error
	// CAErr is the same for the client CA directory.
	CAErr error
	// Leaf is the certificate being served; nil in plaintext mode.
	Leaf *x509.Certificate
	// ClientCAs counts the certificates in the client CA pool.
	ClientCAs int
}

// NewServer loads the material mode needs and fails if it cannot: a server
// must not start without a usable certificate or client CA pool. Later
// failures keep the last good material instead.
func NewServer(opts ServerOptions) (*Server, error) {
	switch opts.Mode {
	case ModeMTLS:
		if opts.ClientCADir == "" {
			return nil, errors.New("mtls: no client CA directory given (it is required unless mTLS is disabled)")
		}
		fallthrough
	case ModeInsecureDisableMTLS:
		if opts.CertDir == "" {
			return nil, errors.New("mtls: no server certificate directory given (it is required unless TLS is disabled)")
		}
	case ModeInsecureDisableTLS:
	default:
		return nil, fmt.Errorf("mtls: unknown mode %d", int(opts.Mode))
	}
	if opts.DefaultIdentity == "" {
		opts.DefaultIdentity = DefaultIdentity
	}
	if opts.PollInterval <= 0 {
		opts.PollInterval = DefaultPollInterval
	}
	if opts.NextProtos == nil {
		opts.NextProtos = []string{"h2", "http/1.1"}
	}
	s := &Server{opts: opts, log: opts.Logger, certs: newClientCerts()}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if err := s.Reload(); err != nil {
		return nil, err
	}
	return s, nil
}

// Mode returns the server's mode.
func (s *Server) Mode() Mode { return s.opts.Mode }

// TLSConfig returns the configuration for a TLS listener, or nil in
// ModeInsecureDisableTLS. It reads the current material on every handshake,
// so it stays correct across reloads; use it with tls.NewListener,
// http.Server.TLSConfig or credentials.NewTLS.
func (s *Server) TLSConfig() *tls.Config {
	switch s.opts.Mode {
	case ModeInsecureDisableTLS:
		return nil
	case ModeInsecureDisableMTLS:
		return s.newConfig(nil)
	}
	cfg := s.newConfig(s.currentPool())
	// GetConfigForClient is what lets the client CA pool change: ClientCAs
	// on a config in use must not be modified, so each handshake is handed
	// the config built for the pool current at that moment.
	cfg.GetConfigForClient = s.getConfigForClient
	return cfg
}

func (s *Server) newConfig(pool *x509.CertPool) *tls.Config {
	cfg := &tls.Config{
		MinVersion:     tls.VersionTLS12,
		NextProtos:     s.opts.NextProtos,
		GetCertificate: s.getCertificate,
		ClientAuth:     tls.NoClientCert,
	}
	if s.opts.Mode == ModeMTLS {
		cfg.ClientAuth = tls.RequireAndVerifyClientCert
		cfg.ClientCAs = pool
	}
	return cfg
}

func (s *Server) getCertificate(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.cert, nil
}

func (s *Server) getConfigForClient(*tls.ClientHelloInfo) (*tls.Config, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.handshake, nil
}

func (s *Server) currentPool() *x509.CertPool {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.pool
}

// Status returns the reloader's current state.
func (s *Server) Status() Status {
	s.mu.RLock()
	defer s.mu.RUnlock()
	st := s.status
	if s.cert != nil {
		st.Leaf = s.cert.Leaf
	}
	return st
}

// Run calls Reload every PollInterval until ctx is done. Errors are logged
// by Reload and kept in Status; the last good material stays in use. It
// returns at once in plaintext mode, where there is nothing to watch.
func (s *Server) Run(ctx context.Context) {
	if s.opts.Mode == ModeInsecureDisableTLS {
		return
	}
	t := time.NewTicker(s.opts.PollInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			_ = s.Reload()
		}
	}
}

// Reload reads the certificate files and applies whatever changed. Content
// that does not parse is rejected and the previous material kept; the error
// is logged once per distinct bad content and returned, and Reload keeps
// returning it until the files are fixed.
func (s *Server) Reload() error {
	s.reloadMu.Lock()
	defer s.reloadMu.Unlock()
	if s.opts.Mode == ModeInsecureDisableTLS {
		return nil
	}
	initial := s.cert == nil
	certErr := s.reloadCert(initial)
	var caErr error
	if s.opts.Mode == ModeMTLS {
		caErr = s.reloadCA(initial)
	}
	s.mu.Lock()
	s.status.CertErr, s.status.CAErr = s.certErr, s.caErr
	s.mu.Unlock()
	return errors.Join(certErr, caErr)
}

// reloadCert applies CertDir's key pair if its content changed.
func (s *Server) reloadCert(initial bool) error {
	certFile := filepath.Join(s.opts.CertDir, certs.CertFile)
	keyFile := filepath.Join(s.opts.CertDir, certs.KeyFile)
	certPEM, err1 := readFile(certFile)
	keyPEM, err2 := readFile(keyFile)
	if err := errors.Join(err1, err2); err != nil {
		return s.reject("server certificate", &s.certSeen, &s.certErr, digestOf([]byte(err.Error())), err, initial)
	}
	d := digestOf(certPEM, keyPEM)
	if d == s.certSeen {
		return s.certErr
	}
	cert, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return s.reject("server certificate", &s.certSeen, &s.certErr, d,
			fmt.Errorf("%s, %s: %w", certFile, keyFile, err), initial)
	}
	s.mu.Lock()
	s.cert = &cert
	if !initial {
		s.status.Reloads++
	}
	s.mu.Unlock()
	s.certSeen, s.certErr = d, nil
	s.log.Info("mtls: serving certificate", "dir", s.opts.CertDir,
		"subject", cert.Leaf.Subject.String(), "dns", cert.Leaf.DNSNames,
		"not_after", cert.Leaf.NotAfter, "initial", initial)
	return nil
}

// reloadCA applies ClientCADir's certificates if their content changed.
func (s *Server) reloadCA(initial bool) error {
	files, contents, err := readCADir(s.opts.ClientCADir)
	if err != nil {
		return s.reject("client CAs", &s.caSeen, &s.caErr, digestOf([]byte(err.Error())), err, initial)
	}
	parts := make([][]byte, 0, 2*len(files))
	for i := range files {
		parts = append(parts, []byte(files[i]), contents[i])
	}
	d := digestOf(parts...)
	if d == s.caSeen {
		return s.caErr
	}
	pool := x509.NewCertPool()
	tr := newTrust()
	n := 0
	for i, f := range files {
		found, err := addPEMCerts(pool, contents[i])
		if err != nil {
			return s.reject("client CAs", &s.caSeen, &s.caErr, d, fmt.Errorf("%s: %w", f, err), initial)
		}
		for _, c := range found {
			tr.add(c, f)
		}
		n += len(found)
	}
	if n == 0 && initial {
		// Starting with nobody trusted is a mistake in the setup, not an
		// intent: say so rather than serve a port nobody can use.
		return s.reject("client CAs", &s.caSeen, &s.caErr, d,
			fmt.Errorf("no *.crt or *.pem file in %s", s.opts.ClientCADir), initial)
	}
	// Files that do not parse were refused above (a file caught half
	// written keeps the old pool). A directory with no CA files left is
	// different: someone removed them (a secret update is atomic), and
	// keeping the old pool would keep trusting what was removed. So an
	// empty directory trusts nobody, loudly.
	s.mu.Lock()
	s.pool = pool
	s.trust = tr
	s.handshake = s.newConfig(pool)
	if !initial {
		s.status.Reloads++
	}
	s.status.ClientCAs = n
	bind := s.bind
	s.mu.Unlock()
	s.caSeen, s.caErr = d, nil
	if n == 0 {
		s.log.Error("mtls: the client CA directory holds no CA files: REFUSING EVERY CLIENT until one is added",
			"dir", s.opts.ClientCADir)
	} else {
		s.log.Info("mtls: trusting client CAs", "dir", s.opts.ClientCADir,
			"files", files, "certificates", n, "initial", initial)
	}
	s.closeUntrusted(tr)
	s.warnMissingBindings(bind, tr)
	return nil
}

// reject records content that could not be used. It logs only when the
// content differs from what was last examined, so a bad file sitting on
// disk is reported once rather than on every poll.
func (s *Server) reject(what string, seen *[sha256.Size]byte, lastErr *error, d [sha256.Size]byte, err error, initial bool) error {
	err = fmt.Errorf("mtls: %s: %w", what, err)
	if d != *seen || *lastErr == nil {
		if !initial {
			s.mu.Lock()
			s.status.Failures++
			s.mu.Unlock()
			s.log.Error("mtls: keeping the previous "+what+"; the files on disk cannot be used", "err", err)
		}
		*seen, *lastErr = d, err
	}
	return *lastErr
}

// readCADir returns the client CA files of dir, sorted, with their contents.
func readCADir(dir string) ([]string, [][]byte, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, nil, err
	}
	var files []string
	for _, e := range entries {
		name := e.Name()
		if strings.HasPrefix(name, ".") || !(strings.HasSuffix(name, ".crt") || strings.HasSuffix(name, ".pem")) {
			continue
		}
		path := filepath.Join(dir, name)
		// Stat follows symlinks: a mounted secret's files are links.
		if fi, err := os.Stat(path); err != nil || !fi.Mode().IsRegular() {
			continue
		}
		files = append(files, path)
	}
	sort.Strings(files)
	contents := make([][]byte, len(files))
	for i, f := range files {
		if contents[i], err = readFile(f); err != nil {
			return nil, nil, err
		}
	}
	return files, contents, nil
}

// addPEMCerts adds every CERTIFICATE block of data to pool and returns
// them. Blocks of other types (a key kept in a .pem bundle) are skipped;
// anything that is not PEM at all, or a certificate that does not parse, is
// an error, because it usually means the file was caught half written.
func addPEMCerts(pool *x509.CertPool, data []byte) ([]*x509.Certificate, error) {
	var out []*x509.Certificate
	rest := data
	for {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		if b.Type != "CERTIFICATE" {
			continue
		}
		c, err := x509.ParseCertificate(b.Bytes)
		if err != nil {
			return nil, err
		}
		pool.AddCert(c)
		out = append(out, c)
	}
	if len(bytes.TrimSpace(rest)) > 0 {
		return nil, errors.New("data that is not PEM")
	}
	if len(out) == 0 {
		return nil, errors.New("no certificate in file")
	}
	return out, nil
}

func readFile(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxFileSize+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxFileSize {
		return nil, fmt.Errorf("%s: larger than %d bytes", path, maxFileSize)
	}
	return b, nil
}

// digestOf hashes parts with their lengths, so that moving bytes from one
// part to the next changes the digest.
func digestOf(parts ...[]byte) [sha256.Size]byte {
	h := sha256.New()
	var n [8]byte
	for _, p := range parts {
		binary.BigEndian.PutUint64(n[:], uint64(len(p)))
		h.Write(n[:])
		h.Write(p)
	}
	var d [sha256.Size]byte
	h.Sum(d[:0])
	return d
}
