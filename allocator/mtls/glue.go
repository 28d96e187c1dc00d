package mtls

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/http"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

// Identify returns the identity of the gRPC caller whose call ctx belongs
// to: from its verified client certificate in ModeMTLS, the default
// identity in the insecure modes (never anything the caller sent).
func (s *Server) Identify(ctx context.Context) (string, error) {
	if s.opts.Mode != ModeMTLS {
		return s.opts.DefaultIdentity, nil
	}
	// As ConnectionStateFromContext, but the TLS state stays in this
	// frame: returning a pointer into it would move the whole
	// ConnectionState to the heap on every request.
	p, ok := peer.FromContext(ctx)
	if !ok || p.AuthInfo == nil {
		return "", ErrNoTLS
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok {
		return "", ErrNoTLS
	}
	return s.identifyState(&info.State)
}

// identifyState derives the identity of a verified connection and checks it
// against the CAs trusted now and the identity's CA binding (trust.go).
func (s *Server) identifyState(cs *tls.ConnectionState) (string, error) {
	id, err := IdentityFromConnectionState(*cs)
	if err != nil {
		return "", err
	}
	if err := s.checkTrust(id, cs); err != nil {
		return "", err
	}
	return id, nil
}

// IdentifyRequest is Identify for an HTTP request.
func (s *Server) IdentifyRequest(r *http.Request) (string, error) {
	if s.opts.Mode != ModeMTLS {
		return s.opts.DefaultIdentity, nil
	}
	if r.TLS == nil {
		return "", ErrNoTLS
	}
	return s.identifyState(r.TLS)
}

// GRPCCredentials returns transport credentials for a grpc.Server that owns
// its listener: TLS with this server's reloading configuration, or
// plaintext in ModeInsecureDisableTLS.
func (s *Server) GRPCCredentials() credentials.TransportCredentials {
	if s.opts.Mode == ModeInsecureDisableTLS {
		return insecure.NewCredentials()
	}
	return s.TrackingCredentials(credentials.NewTLS(s.TLSConfig()))
}

// UnaryServerInterceptor identifies every call (see Identify), refuses it
// with Unauthenticated when there is no identity, and otherwise passes the
// identity to the handler through the context (see IdentityFrom).
func (s *Server) UnaryServerInterceptor() grpc.UnaryServerInterceptor {
	return func(ctx context.Context, req any, _ *grpc.UnaryServerInfo, handler grpc.UnaryHandler) (any, error) {
		id, err := s.Identify(ctx)
		if err != nil {
			return nil, status.Error(codes.Unauthenticated, err.Error())
		}
		return handler(WithIdentity(ctx, id), req)
	}
}

// StreamServerInterceptor is UnaryServerInterceptor for streams.
func (s *Server) StreamServerInterceptor() grpc.StreamServerInterceptor {
	return func(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
		id, err := s.Identify(ss.Context())
		if err != nil {
			return status.Error(codes.Unauthenticated, err.Error())
		}
		return handler(srv, &identityStream{ServerStream: ss, ctx: WithIdentity(ss.Context(), id)})
	}
}

type identityStream struct {
	grpc.ServerStream
	ctx context.Context
}

func (s *identityStream) Context() context.Context { return s.ctx }

// HTTPMiddleware identifies every request (see IdentifyRequest), answers
// 401 when there is no identity, and otherwise passes the identity to next
// through the request context (see IdentityFrom).
func (s *Server) HTTPMiddleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, err := s.IdentifyRequest(r)
		if err != nil {
			http.Error(w, err.Error(), http.StatusUnauthorized)
			return
		}
		next.ServeHTTP(w, r.WithContext(WithIdentity(r.Context(), id)))
	})
}

// HandshakenCredentials returns gRPC transport credentials for connections
// that have already been through TLS, as when one TLS listener is shared by
// gRPC and REST and a connection is handed to grpc.Server after the
// handshake (through a listener that yields those connections). It does no
// handshake of its own (it completes one not yet done) and reports the
// connection's TLS state, so peer and identity lookups work as with
// GRPCCredentials. A connection must be a *tls.Conn or wrap one and expose
// its ConnectionState method; others are refused.
func HandshakenCredentials() credentials.TransportCredentials { return handshakenCreds{} }

// TLSStateConn is a connection that has been through a TLS handshake.
// *tls.Conn is one; a wrapper that has read ahead (to tell gRPC from REST)
// can be one by delegating these methods.
type TLSStateConn interface {
	net.Conn
	ConnectionState() tls.ConnectionState
}

type handshaker interface {
	HandshakeContext(context.Context) error
}

type handshakenCreds struct{}

func (handshakenCreds) ServerHandshake(c net.Conn) (net.Conn, credentials.AuthInfo, error) {
	tc, ok := c.(TLSStateConn)
	if !ok {
		return nil, nil, errors.New("mtls: connection is not TLS")
	}
	if h, ok := c.(handshaker); ok {
		if err := h.HandshakeContext(context.Background()); err != nil {
			return nil, nil, err
		}
	}
	return c, credentials.TLSInfo{
		State:          tc.ConnectionState(),
		CommonAuthInfo: credentials.CommonAuthInfo{SecurityLevel: credentials.PrivacyAndIntegrity},
	}, nil
}

func (handshakenCreds) ClientHandshake(context.Context, string, net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return nil, nil, errors.New("mtls: HandshakenCredentials are for servers only")
}

func (handshakenCreds) Info() credentials.ProtocolInfo {
	return credentials.ProtocolInfo{SecurityProtocol: "tls"}
}

func (c handshakenCreds) Clone() credentials.TransportCredentials { return c }

func (handshakenCreds) OverrideServerName(string) error { return nil }
