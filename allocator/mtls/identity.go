package mtls

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net/http"

	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"

	"github.com/quartermaster-dev/quartermaster/certs"
)

// DefaultIdentity is the identity every caller gets in the insecure modes
// unless ServerOptions.DefaultIdentity says otherwise.
const DefaultIdentity = "anonymous"

// Errors from deriving an identity. Callers map all of them to
// Unauthenticated (gRPC) or 401 (HTTP).
var (
	// ErrNoTLS: the connection carries no TLS state.
	ErrNoTLS = errors.New("mtls: connection is not TLS")
	// ErrNoClientCertificate: the handshake verified no client certificate.
	ErrNoClientCertificate = errors.New("mtls: no verified client certificate")
	// ErrNoIdentity: the certificate has neither a URI SAN nor a CN.
	ErrNoIdentity = errors.New("mtls: client certificate names no identity")
)

// IdentityFromCertificate derives a caller identity from a client
// certificate: its URI SAN, else its CN. A URI of the form
// spiffe://quartermaster/<id> yields <id>, as certs.IssueClient writes it;
// any other URI yields the whole URI string, so that identities from another
// issuer are still distinct and stable. When there are several URIs, one of
// our form is preferred, then the first.
//
// It does not verify the certificate; see IdentityFromConnectionState.
func IdentityFromCertificate(c *x509.Certificate) (string, error) {
	if c == nil {
		return "", ErrNoClientCertificate
	}
	for _, u := range c.URIs {
		if id, ok := certs.IdentityFromURI(u); ok {
			return id, nil
		}
	}
	if len(c.URIs) > 0 {
		return c.URIs[0].String(), nil
	}
	if c.Subject.CommonName != "" {
		return c.Subject.CommonName, nil
	}
	return "", ErrNoIdentity
}

// IdentityFromConnectionState derives the caller identity from a completed
// handshake. Only a certificate the handshake verified counts: a peer
// certificate without a verified chain (as with tls.RequireAnyClientCert)
// is refused with ErrNoClientCertificate.
func IdentityFromConnectionState(cs tls.ConnectionState) (string, error) {
	if len(cs.VerifiedChains) == 0 || len(cs.VerifiedChains[0]) == 0 {
		return "", ErrNoClientCertificate
	}
	return IdentityFromCertificate(cs.VerifiedChains[0][0])
}

// ConnectionStateFromContext returns the TLS state of the gRPC connection a
// call arrived on.
func ConnectionStateFromContext(ctx context.Context) (*tls.ConnectionState, bool) {
	p, ok := peer.FromContext(ctx)
	if !ok || p.AuthInfo == nil {
		return nil, false
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok {
		return nil, false
	}
	return &info.State, true
}

// IdentityFromContext derives the identity of a gRPC caller from its
// connection's verified client certificate. It ignores Mode; see
// Server.Identify for the mode-aware version services should call.
func IdentityFromContext(ctx context.Context) (string, error) {
	cs, ok := ConnectionStateFromContext(ctx)
	if !ok {
		return "", ErrNoTLS
	}
	return IdentityFromConnectionState(*cs)
}

// IdentityFromRequest derives the identity of an HTTP caller from its
// connection's verified client certificate. Headers are never consulted.
// See Server.IdentifyRequest for the mode-aware version.
func IdentityFromRequest(r *http.Request) (string, error) {
	if r.TLS == nil {
		return "", ErrNoTLS
	}
	return IdentityFromConnectionState(*r.TLS)
}

type identityKey struct{}

// WithIdentity returns ctx carrying identity, as the server's interceptors
// and middleware store it for handlers.
func WithIdentity(ctx context.Context, identity string) context.Context {
	return context.WithValue(ctx, identityKey{}, identity)
}

// IdentityFrom returns the identity WithIdentity stored in ctx.
func IdentityFrom(ctx context.Context) (string, bool) {
	id, ok := ctx.Value(identityKey{}).(string)
	return id, ok
}
