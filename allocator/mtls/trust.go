package mtls

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"path/filepath"
	"sort"
	"strings"
	"sync"

	"google.golang.org/grpc/credentials"
)

// What a client CA change does to connections already open: a handshake
// checks the client's chain once, so without more a client whose CA was
// removed (a compromised or retired issuer) would keep its connections, and
// its requests would keep passing, for as long as it kept them open. So:
//   - every request checks that its connection's verified chain still ends
//     at a CA in the directory (Identify), whatever port it came on;
//   - connections registered with Track (the shared port's, and gRPC's own
//     port through GRPCCredentials) are closed as soon as a reload removes
//     their CA.
//
// And which CA may vouch for whom: by default any trusted CA may issue any
// identity. SetClientCABindings ties identities (an admin, say) to the CA
// file that must have issued their certificate, so a CA trusted for
// matchmakers cannot mint an admin.

// ErrUntrustedCA: the connection's client certificate chains to a CA that
// is no longer in the client CA directory.
var ErrUntrustedCA = errors.New("mtls: the client certificate's CA is no longer trusted")

// ErrWrongCA: the identity is bound to a CA file other than the one that
// issued its certificate.
var ErrWrongCA = errors.New("mtls: the identity's certificate is not from the CA it is bound to")

// trust is the client CA material a request is checked against, replaced
// whole on every reload.
type trust struct {
	// files maps a CA certificate's DER to the base names of the files
	// that hold it.
	files map[string][]string
}

func newTrust() *trust { return &trust{files: map[string][]string{}} }

func (t *trust) add(c *x509.Certificate, file string) {
	k := string(c.Raw)
	t.files[k] = append(t.files[k], filepath.Base(file))
}

// roots returns the CA files that a verified chain of cs ends at; none
// when every such CA has been removed.
func (t *trust) roots(cs *tls.ConnectionState) []string {
	var out []string
	for _, chain := range cs.VerifiedChains {
		if len(chain) == 0 {
			continue
		}
		out = append(out, t.files[string(chain[len(chain)-1].Raw)]...)
	}
	return out
}

// bindings are the CA files identities must come from.
type bindings struct {
	byIdentity map[string]string
	fallback   string // for identities not listed; "" for any CA
}

// SetClientCABindings ties identities to CA files of the client CA
// directory (base names, as "ops-ca.crt"): a request from an identity in
// byIdentity is refused unless its certificate chains to a CA in that file;
// one from any other identity, unless fallback is empty, must chain to a CA
// in fallback. An identity mapped to "" may come from any CA. Binding to a
// file that is not in the directory refuses those identities (and is
// logged): the safe reading of a typo. It applies from the next request.
func (s *Server) SetClientCABindings(byIdentity map[string]string, fallback string) {
	b := &bindings{byIdentity: map[string]string{}, fallback: fallback}
	for id, f := range byIdentity {
		b.byIdentity[id] = f
	}
	s.mu.Lock()
	s.bind = b
	present := s.trust
	s.mu.Unlock()
	s.warnMissingBindings(b, present)
}

// warnMissingBindings logs bindings to files the directory does not have.
func (s *Server) warnMissingBindings(b *bindings, t *trust) {
	if b == nil || t == nil {
		return
	}
	have := map[string]bool{}
	for _, fs := range t.files {
		for _, f := range fs {
			have[f] = true
		}
	}
	var missing []string
	for id, f := range b.byIdentity {
		if f != "" && !have[f] {
			missing = append(missing, fmt.Sprintf("%s -> %s", id, f))
		}
	}
	if b.fallback != "" && !have[b.fallback] {
		missing = append(missing, "(default) -> "+b.fallback)
	}
	if len(missing) > 0 {
		sort.Strings(missing)
		s.log.Error("mtls: identities are bound to client CA files that are not in the directory; they are refused",
			"dir", s.opts.ClientCADir, "bindings", missing)
	}
}

// checkTrust is what Identify adds to a verified identity in ModeMTLS: the
// chain's CA must still be trusted, and be the one id is bound to.
func (s *Server) checkTrust(id string, cs *tls.ConnectionState) error {
	s.mu.RLock()
	t, b := s.trust, s.bind
	s.mu.RUnlock()
	roots := t.roots(cs)
	if len(roots) == 0 {
		return ErrUntrustedCA
	}
	if b == nil {
		return nil
	}
	want, listed := b.byIdentity[id]
	if !listed {
		want = b.fallback
	}
	if want == "" {
		return nil
	}
	for _, r := range roots {
		if r == want {
			return nil
		}
	}
	return fmt.Errorf("%w: %q must be issued by the CA in %s, and this certificate chains to %s",
		ErrWrongCA, id, want, strings.Join(roots, ", "))
}

// tracked is an open connection and the TLS state it was accepted with.
type tracked struct {
	c     io.Closer
	state *tls.ConnectionState
}

// Track registers an open connection that completed its handshake with
// state, so that a reload removing its client CA closes it, and counts it in
// qm_mtls_client_connections. Call the returned func when the connection
// closes. In the insecure modes it does nothing.
func (s *Server) Track(c io.Closer, state *tls.ConnectionState) (untrack func()) {
	if s.opts.Mode != ModeMTLS || state == nil {
		return func() {}
	}
	tc := &tracked{c: c, state: state}
	s.connMu.Lock()
	if s.conns == nil {
		s.conns = map[*tracked]struct{}{}
	}
	s.conns[tc] = struct{}{}
	s.connMu.Unlock()
	uncount := s.certs.opened(state)
	var once sync.Once
	return func() {
		once.Do(func() {
			s.connMu.Lock()
			delete(s.conns, tc)
			s.connMu.Unlock()
			uncount()
		})
	}
}

// closeUntrusted closes the tracked connections whose chain no longer ends
// at a CA of t.
func (s *Server) closeUntrusted(t *trust) {
	var drop []*tracked
	s.connMu.Lock()
	for tc := range s.conns {
		if len(t.roots(tc.state)) == 0 {
			drop = append(drop, tc)
			delete(s.conns, tc)
		}
	}
	s.connMu.Unlock()
	for _, tc := range drop {
		id := "?"
		if len(tc.state.VerifiedChains) > 0 && len(tc.state.VerifiedChains[0]) > 0 {
			id, _ = IdentityFromCertificate(tc.state.VerifiedChains[0][0])
		}
		s.log.Warn("mtls: closing a connection whose client CA was removed", "identity", id)
		_ = tc.c.Close()
	}
}

// trackingCreds registers every connection its inner credentials accept.
type trackingCreds struct {
	credentials.TransportCredentials
	s *Server
}

// TrackingCredentials wraps gRPC server credentials so that the
// connections they accept are tracked (see Track).
func (s *Server) TrackingCredentials(inner credentials.TransportCredentials) credentials.TransportCredentials {
	if s.opts.Mode != ModeMTLS {
		return inner
	}
	return trackingCreds{TransportCredentials: inner, s: s}
}

func (c trackingCreds) ServerHandshake(raw net.Conn) (net.Conn, credentials.AuthInfo, error) {
	conn, info, err := c.TransportCredentials.ServerHandshake(raw)
	if err != nil {
		return conn, info, err
	}
	ti, ok := info.(credentials.TLSInfo)
	if !ok {
		return conn, info, err
	}
	state := ti.State
	tc := &trackedConn{Conn: conn}
	tc.untrack = c.s.Track(conn, &state)
	return tc, info, nil
}

func (c trackingCreds) Clone() credentials.TransportCredentials {
	return trackingCreds{TransportCredentials: c.TransportCredentials.Clone(), s: c.s}
}

// trackedConn stops tracking when closed.
type trackedConn struct {
	net.Conn
	untrack func()
}

func (c *trackedConn) Close() error {
	c.untrack()
	return c.Conn.Close()
}
