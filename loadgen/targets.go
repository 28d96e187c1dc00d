package loadgen

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/quartermaster-dev/quartermaster/allocator/pb/allocation"
	qmv1 "github.com/quartermaster-dev/quartermaster/allocator/pb/quartermaster/v1"
	"github.com/quartermaster-dev/quartermaster/allocator/wire"
)

// REST paths: Agones' allocation path, and Quartermaster's own Release.
const (
	allocatePath = "/gameserverallocation"
	releasePath  = "/v1/allocations:release"
)

// AllocationKeyHeader is the HTTP header (and gRPC metadata) a REST
// request's idempotency key travels in; gRPC requests carry the key as
// the annotation wire.AllocationKeyAnnotation.
const AllocationKeyHeader = "quartermaster-allocation-key"

var (
	_ KeyedCaller = (*grpcCaller)(nil)
	_ KeyedCaller = (*restCaller)(nil)
)

// Session is a game server an allocation handed out, to give back later.
type Session struct {
	Namespace, Name string
	// Source is the answer's source: "local", or the endpoint of the
	// cluster a multi-cluster request was forwarded to (for traces).
	Source string
	// Key is the idempotency key the allocation was made with, if any. A
	// Session with a Key and no Name stands for whatever the key's
	// allocation is: its Release releases by key.
	Key string
}

// A Caller sends one kind of request to one target.
type Caller interface {
	// Call sends one request and returns its gRPC code; for an allocation
	// that succeeded, also the session it started (nil otherwise).
	Call(ctx context.Context) (codes.Code, *Session)
	// Release gives a session back (Quartermaster's AllocationAdmin
	// Release). Targets without it answer Unimplemented.
	Release(ctx context.Context, s *Session) error
	Close() error
}

// Dial says how to reach a target.
type Dial struct {
	Target TargetConfig
	// TLS is the client's TLS configuration (with its certificate for
	// mTLS); nil means plaintext.
	TLS *tls.Config
	// Connections is the number of connections to spread requests over.
	Connections int
	// Request is what an allocate target sends.
	Request *allocation.AllocationRequest
	// Sessions asks for the allocated server's name back (REST answers
	// are decoded only then).
	Sessions bool
	// UniqueAnnotation, when set, is an annotation key every allocation
	// request carries with a value of its own (a sequence number), as a
	// match ID would: no two requests are the same bytes. gRPC only.
	UniqueAnnotation string
}

// NewCaller connects to a target and checks that it answers, so that an
// unreachable address or a certificate the server refuses fails before
// the run, with the reason.
func NewCaller(ctx context.Context, d Dial) (Caller, error) {
	if d.Connections < 1 {
		d.Connections = 1
	}
	var c Caller
	var err error
	switch d.Target.Protocol {
	case "grpc":
		c, err = newGRPCCaller(d)
	case "rest":
		if d.UniqueAnnotation != "" {
			return nil, fmt.Errorf("target %s: a unique annotation per request is for gRPC targets only", d.Target.Name)
		}
		if d.Target.Call == "echo" {
			return nil, fmt.Errorf("target %s: the echo is the gRPC health check; it has no REST form", d.Target.Name)
		}
		c, err = newRESTCaller(d)
	default:
		return nil, fmt.Errorf("target %s: protocol %q: want grpc or rest", d.Target.Name, d.Target.Protocol)
	}
	if err != nil {
		return nil, fmt.Errorf("target %s (%s): %w", d.Target.Name, d.Target.Addr, err)
	}
	if err := probe(ctx, c, d); err != nil {
		c.Close()
		return nil, fmt.Errorf("target %s (%s): %w", d.Target.Name, d.Target.Addr, err)
	}
	return c, nil
}

// probe makes sure every connection is up: a TCP connect and a TLS
// handshake the server accepts. It does not allocate anything.
func probe(ctx context.Context, c Caller, d Dial) error {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	switch c := c.(type) {
	case *grpcCaller:
		for _, conn := range c.conns {
			// A health check on the same connection: any answer, even
			// Unimplemented from a server without the health service,
			// proves the connection and the certificates work.
			_, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
			switch status.Code(err) {
			case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled:
				return fmt.Errorf("cannot reach it: %v", status.Convert(err).Message())
			case codes.Unauthenticated:
				return fmt.Errorf("it refuses our credentials: %v", status.Convert(err).Message())
			}
		}
	case *restCaller:
		for _, cl := range c.clients {
			// A GET of the allocation path allocates nothing; any HTTP
			// answer (405 here) means the TLS handshake, client
			// certificate included, went through.
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+allocatePath, nil)
			if err != nil {
				return err
			}
			resp, err := cl.Do(req)
			if err != nil {
				return fmt.Errorf("cannot reach it: %w", err)
			}
			io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
			resp.Body.Close()
			if resp.StatusCode == http.StatusUnauthorized {
				return fmt.Errorf("it refuses our credentials: HTTP %s", resp.Status)
			}
		}
	}
	return nil
}

// grpcCaller sends over gRPC, round-robin over its connections.
type grpcCaller struct {
	call  string
	conns []*grpc.ClientConn
	admin []qmv1.AllocationAdminClient
	next  atomic.Uint64
	ns    string // the allocation request's namespace, for sessions
	// The two requests in wire form (leanCodec).
	allocQ, healthQ *encodedRequest
	// unique is Dial.UniqueAnnotation; seq numbers its values.
	unique string
	seq    atomic.Uint64
}

// leanCall sends a call through leanCodec (made once: a CallOption built per
// call would be an allocation per call).
var leanCall = []grpc.CallOption{grpc.ForceCodecV2(leanCodec{})}

func newGRPCCaller(d Dial) (*grpcCaller, error) {
	creds := insecure.NewCredentials()
	if d.TLS != nil {
		creds = credentials.NewTLS(d.TLS)
	}
	g := &grpcCaller{call: d.Target.Call, ns: d.Request.GetNamespace(), unique: d.UniqueAnnotation}
	var err error
	if g.healthQ, err = encodeRequest(&healthpb.HealthCheckRequest{}); err != nil {
		return nil, err
	}
	if d.Request != nil {
		if g.allocQ, err = encodeRequest(d.Request); err != nil {
			return nil, fmt.Errorf("encode the request: %w", err)
		}
	}
	for i := 0; i < d.Connections; i++ {
		// Each connection needs its own ClientConn: grpc-go keeps one
		// HTTP/2 connection per address per ClientConn.
		conn, err := grpc.NewClient(d.Target.Addr, grpc.WithTransportCredentials(creds))
		if err != nil {
			g.Close()
			return nil, err
		}
		g.conns = append(g.conns, conn)
		g.admin = append(g.admin, qmv1.NewAllocationAdminClient(conn))
	}
	return g, nil
}

func (g *grpcCaller) pick() int { return int(g.next.Add(1) % uint64(len(g.conns))) }

func (g *grpcCaller) Call(ctx context.Context) (codes.Code, *Session) {
	conn := g.conns[g.pick()]
	if g.call == "echo" {
		err := conn.Invoke(ctx, healthpb.Health_Check_FullMethodName, g.healthQ, &ignoredAnswer{}, leanCall...)
		return status.Code(err), nil
	}
	q := g.allocQ
	if g.unique != "" {
		q = g.allocQ.withAnnotation(g.unique, g.seq.Add(1))
	}
	var a allocAnswer
	if err := conn.Invoke(ctx, allocation.AllocationService_Allocate_FullMethodName, q, &a, leanCall...); err != nil {
		return status.Code(err), nil
	}
	return codes.OK, &Session{Namespace: g.ns, Name: a.name, Source: a.source}
}

// CallKeyed implements KeyedCaller: the key rides in the request's
// annotations, as an unchanged Agones client sends it.
func (g *grpcCaller) CallKeyed(ctx context.Context, t Try) (codes.Code, *Session) {
	if g.call == "echo" {
		return g.Call(ctx)
	}
	q := g.allocQ.withKey(t.Key)
	if g.unique != "" {
		q = q.withAnnotation(g.unique, g.seq.Add(1))
	}
	var a allocAnswer
	if err := g.conns[g.pick()].Invoke(ctx, allocation.AllocationService_Allocate_FullMethodName, q, &a, leanCall...); err != nil {
		return status.Code(err), nil
	}
	return codes.OK, &Session{Namespace: g.ns, Name: a.name, Source: a.source, Key: t.Key}
}

func (g *grpcCaller) Release(ctx context.Context, s *Session) error {
	_, err := g.admin[g.pick()].Release(ctx, releaseRequest(s))
	return err
}

// releaseRequest names a session's server, or its key when the session
// stands for a key's allocation.
func releaseRequest(s *Session) *qmv1.ReleaseRequest {
	if s.Name == "" && s.Key != "" {
		return &qmv1.ReleaseRequest{Namespace: s.Namespace, AllocationKey: s.Key, Source: s.Source}
	}
	return &qmv1.ReleaseRequest{Namespace: s.Namespace, GameServerName: s.Name, Source: s.Source}
}

func (g *grpcCaller) Close() error {
	var errs []error
	for _, c := range g.conns {
		errs = append(errs, c.Close())
	}
	return errors.Join(errs...)
}

// restCaller POSTs JSON as Agones' REST API takes it.
type restCaller struct {
	base     string
	clients  []*http.Client
	next     atomic.Uint64
	body     []byte
	ns       string
	sessions bool
}

func newRESTCaller(d Dial) (*restCaller, error) {
	body, err := wire.MarshalJSON(d.Request)
	if err != nil {
		return nil, err
	}
	scheme := "https"
	if d.TLS == nil {
		scheme = "http"
	}
	r := &restCaller{base: scheme + "://" + d.Target.Addr, body: body, ns: d.Request.GetNamespace(), sessions: d.Sessions}
	for i := 0; i < d.Connections; i++ {
		// One transport per connection: over HTTP/2 a transport
		// multiplexes every request on one connection.
		tr := &http.Transport{
			TLSClientConfig:     d.TLS,
			ForceAttemptHTTP2:   true,
			MaxIdleConnsPerHost: 1024,
			DialContext:         (&net.Dialer{Timeout: 10 * time.Second}).DialContext,
		}
		if d.TLS != nil {
			tr.TLSClientConfig = d.TLS.Clone()
		}
		r.clients = append(r.clients, &http.Client{Transport: tr})
	}
	return r, nil
}

func (r *restCaller) post(ctx context.Context, path string, body []byte, key string) (codes.Code, []byte) {
	cl := r.clients[r.next.Add(1)%uint64(len(r.clients))]
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, r.base+path, bytes.NewReader(body))
	if err != nil {
		return codes.Internal, nil
	}
	req.Header.Set("Content-Type", "application/json")
	if key != "" {
		req.Header.Set(AllocationKeyHeader, key)
	}
	resp, err := cl.Do(req)
	if err != nil {
		if ctx.Err() == context.DeadlineExceeded {
			return codes.DeadlineExceeded, nil
		}
		if ctx.Err() != nil {
			return codes.Canceled, nil
		}
		return codes.Unavailable, nil
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return codes.Unavailable, nil
	}
	if resp.StatusCode == http.StatusOK {
		return codes.OK, b
	}
	var e struct {
		Code int `json:"code"`
	}
	if json.Unmarshal(b, &e) == nil && e.Code > 0 && e.Code <= int(codes.Unauthenticated) {
		return codes.Code(e.Code), nil
	}
	return codeForHTTP(resp.StatusCode), nil
}

// codeForHTTP maps an HTTP status without a gRPC code in its body (Agones'
// REST errors are plain text) to the gRPC code of the same meaning.
func codeForHTTP(s int) codes.Code {
	switch s {
	case http.StatusBadRequest:
		return codes.InvalidArgument
	case http.StatusUnauthorized:
		return codes.Unauthenticated
	case http.StatusForbidden:
		return codes.PermissionDenied
	case http.StatusNotFound:
		return codes.NotFound
	case http.StatusConflict:
		return codes.Aborted
	case http.StatusTooManyRequests:
		return codes.ResourceExhausted
	case http.StatusNotImplemented, http.StatusMethodNotAllowed:
		return codes.Unimplemented
	case http.StatusServiceUnavailable:
		return codes.Unavailable
	case http.StatusGatewayTimeout:
		return codes.DeadlineExceeded
	case http.StatusInternalServerError:
		return codes.Internal
	}
	return codes.Unknown
}

func (r *restCaller) Call(ctx context.Context) (codes.Code, *Session) {
	return r.call(ctx, "")
}

// CallKeyed implements KeyedCaller: the key goes in the
// quartermaster-allocation-key header.
func (r *restCaller) CallKeyed(ctx context.Context, t Try) (codes.Code, *Session) {
	return r.call(ctx, t.Key)
}

func (r *restCaller) call(ctx context.Context, key string) (codes.Code, *Session) {
	code, b := r.post(ctx, allocatePath, r.body, key)
	if code != codes.OK || !r.sessions {
		return code, nil
	}
	var resp allocation.AllocationResponse
	if err := wire.UnmarshalJSON(b, &resp); err != nil {
		return codes.Internal, nil
	}
	return codes.OK, &Session{Namespace: r.ns, Name: resp.GetGameServerName(), Source: resp.GetSource(), Key: key}
}

func (r *restCaller) Release(ctx context.Context, s *Session) error {
	body, err := wire.MarshalJSON(releaseRequest(s))
	if err != nil {
		return err
	}
	if code, _ := r.post(ctx, releasePath, body, ""); code != codes.OK {
		return status.Error(code, "release")
	}
	return nil
}

func (r *restCaller) Close() error {
	for _, c := range r.clients {
		c.CloseIdleConnections()
	}
	return nil
}

// ParseTarget reads NAME=ADDR, NAME=grpc://ADDR or NAME=rest://ADDR; a
// bare ADDR is named after itself. protocol is the default protocol.
func ParseTarget(s, protocol string) (TargetConfig, error) {
	name, addr, named := strings.Cut(s, "=")
	if !named {
		addr = s
	}
	t := TargetConfig{Name: name, Addr: addr, Protocol: protocol, Call: "allocate"}
	if p, rest, ok := strings.Cut(addr, "://"); ok {
		if p != "grpc" && p != "rest" {
			return t, fmt.Errorf("target %q: scheme %q: want grpc:// or rest://", s, p)
		}
		t.Protocol, t.Addr = p, rest
	}
	if !named {
		t.Name = t.Addr
	}
	if t.Name == "" {
		return t, fmt.Errorf("target %q: empty name (want NAME=HOST:PORT)", s)
	}
	if _, port, err := net.SplitHostPort(t.Addr); err != nil || port == "" {
		return t, fmt.Errorf("target %q: address %q: want HOST:PORT", s, t.Addr)
	}
	return t, nil
}
