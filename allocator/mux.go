package allocator

import (
	"bytes"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"net"
	"sync"
	"time"

	"github.com/soheilhy/cmux"
)

// The shared port: gRPC and REST on one TLS listener, as Agones serves them
// on 8443. Agones routes every request through grpc-go's ServeHTTP, which
// its docs warn is markedly slower than grpc-go's own transport. Here the
// choice is made once per connection instead: after the TLS handshake
// soheilhy/cmux reads the start of the connection and hands it, bytes
// replayed, to grpc.Server's native HTTP/2 transport (gRPC: an HTTP/2
// connection whose first request has content-type application/grpc) or to
// net/http (REST over HTTP/1.1 or HTTP/2). After that the split is out of
// the path but for a buffered read, so gRPC on the shared port costs what
// it costs on a port of its own.
//
// gRPC clients wait for the server's SETTINGS before sending a request, so
// cmux's matcher sends an empty SETTINGS frame after the client's; the
// server a connection goes to sends its own as well, which HTTP/2 allows.
// grpc-go ignores the extra acknowledgement; net/http counts them, so on a
// REST connection the client's acknowledgement of the matcher's frame is
// removed from the stream (ackFilter).

const http2Preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

// routeTimeout bounds the handshake and the first bytes (the HTTP/2 preface,
// or enough of them to see it is HTTP/1): a client that connects and says
// nothing is dropped. It does not bound the wait for an HTTP/2 client's
// first request: a gRPC channel connects before its first call and may sit
// idle for as long as it likes, as it could on grpc-go's own port. (A var
// for tests.)
var routeTimeout = 10 * time.Second

const (
	frameSettings = 0x4
	flagAck       = 0x1
)

// splitter accepts connections on one listener and routes each to the
// gRPC or the REST listener.
type splitter struct {
	mux        cmux.CMux
	root       *routingListener
	grpc, rest net.Listener
	done       chan struct{}
}

// tracker registers a connection with its TLS state, so that it can be
// closed if its client CA is removed (mtls.Server.Track).
type tracker func(c io.Closer, state *tls.ConnectionState) (untrack func())

func newSplitter(ln net.Listener, cfg *tls.Config, track tracker, log *slog.Logger) *splitter {
	root := &routingListener{Listener: ln, tls: cfg, track: track, routing: map[*routedConn]struct{}{}}
	m := cmux.New(root)
	m.HandleError(func(err error) bool {
		var nm cmux.ErrNotMatched
		if !errors.As(err, &nm) {
			log.Debug("shared port", "err", err)
		}
		return true
	})
	grpcL := m.MatchWithWriters(cmux.HTTP2MatchHeaderFieldPrefixSendSettings("content-type", "application/grpc"))
	// REST is any connection that said something: one that failed its
	// handshake, or said nothing by the routing deadline, is closed.
	restL := m.Match(func(r io.Reader) bool {
		var b [1]byte
		n, _ := r.Read(b[:])
		return n == 1
	})
	return &splitter{
		mux:  m,
		root: root,
		grpc: routedListener{Listener: grpcL, root: root, grpc: true},
		rest: routedListener{Listener: restL, root: root},
		done: make(chan struct{}),
	}
}

// serve accepts until the listener is closed.
func (s *splitter) serve() {
	defer close(s.done)
	_ = s.mux.Serve()
}

// close stops accepting, drops connections still being routed (they have
// sent no complete request yet) and waits for routing to end, which closes
// the two listeners so their servers' Serve returns.
func (s *splitter) close() {
	s.mux.Close()
	_ = s.root.Close() // Serve returns once routing has ended
	s.root.dropRouting()
	<-s.done
}

// routingListener hands cmux connections with the routing deadline set,
// their TLS handshake done on the first read.
type routingListener struct {
	net.Listener
	tls   *tls.Config // nil: plaintext (--insecure-disable-tls)
	track tracker     // nil: connections are not tracked

	mu      sync.Mutex
	routing map[*routedConn]struct{} // accepted, not yet handed to a server
	closed  bool
}

// dropRouting closes the connections still being routed: they have sent
// no complete request yet.
func (l *routingListener) dropRouting() {
	l.mu.Lock()
	l.closed = true
	cs := make([]*routedConn, 0, len(l.routing))
	for c := range l.routing {
		cs = append(cs, c)
	}
	l.mu.Unlock()
	for _, c := range cs {
		_ = c.Close()
	}
}

// routed forgets c: handed to a server, or closed.
func (l *routingListener) routed(c *routedConn) {
	l.mu.Lock()
	delete(l.routing, c)
	l.mu.Unlock()
}

func (l *routingListener) Accept() (net.Conn, error) {
	raw, err := l.Listener.Accept()
	if err != nil {
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			// Out of file descriptors or similar: cmux tries again.
			time.Sleep(5 * time.Millisecond)
		}
		return nil, err
	}
	_ = raw.SetDeadline(time.Now().Add(routeTimeout))
	c := &routedConn{Conn: raw, raw: raw, track: l.track, from: l}
	if l.tls != nil {
		c.tc = tls.Server(raw, l.tls)
		c.Conn = c.tc
	}
	l.mu.Lock()
	if l.closed {
		l.mu.Unlock()
		raw.Close()
		return nil, net.ErrClosed
	}
	l.routing[c] = struct{}{}
	l.mu.Unlock()
	return c, nil
}

// routedConn is a connection being routed, and then served: it does the
// TLS handshake (and starts the tracking) on its first read, and lifts the
// routing deadline once the start of the connection is known (the HTTP/2
// preface whole, or bytes that are not it).
type routedConn struct {
	net.Conn
	raw     net.Conn
	from    *routingListener
	tc      *tls.Conn
	track   tracker
	state   *tls.ConnectionState
	untrack func()
	start   []byte // the connection's first bytes, up to the preface's length
	routed  bool   // the deadline is lifted
	h2      bool   // the connection began with the HTTP/2 preface
	mu      sync.Mutex
}

func (c *routedConn) Read(p []byte) (int, error) {
	if c.tc != nil && c.state == nil {
		if err := c.tc.Handshake(); err != nil {
			return 0, err
		}
		cs := c.tc.ConnectionState()
		c.mu.Lock()
		c.state = &cs
		if c.track != nil {
			c.untrack = c.track(c, c.state)
		}
		c.mu.Unlock()
	}
	n, err := c.Conn.Read(p)
	if !c.routed && n > 0 {
		c.start = append(c.start, p[:min(n, len(http2Preface)-len(c.start))]...)
		switch {
		case !bytes.HasPrefix([]byte(http2Preface), c.start):
			c.routed = true
		case len(c.start) == len(http2Preface):
			c.routed, c.h2 = true, true
		}
		if c.routed {
			// From here an HTTP/2 client may wait as long as it likes
			// before its first request.
			_ = c.raw.SetDeadline(time.Time{})
		}
	}
	return n, err
}

// Close ends the connection's tracking too.
func (c *routedConn) Close() error {
	c.mu.Lock()
	untrack := c.untrack
	c.untrack = nil
	c.mu.Unlock()
	if untrack != nil {
		untrack()
	}
	c.from.routed(c)
	return c.Conn.Close()
}

// routedListener hands a server the connections cmux matched for it,
// with what the server needs to know of them.
type routedListener struct {
	net.Listener
	root *routingListener
	grpc bool
}

// Close does nothing: the splitter owns the listener underneath, and its
// close ends Accept.
func (l routedListener) Close() error { return nil }

func (l routedListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if errors.Is(err, cmux.ErrServerClosed) || errors.Is(err, cmux.ErrListenerClosed) {
		// The splitter was closed: the end servers expect, not a failure.
		return nil, net.ErrClosed
	}
	if err != nil {
		return nil, err
	}
	mc, ok := c.(*cmux.MuxConn)
	if !ok {
		return c, nil
	}
	rc, _ := mc.Conn.(*routedConn)
	if rc == nil {
		return c, nil
	}
	l.root.routed(rc)
	// Whatever was routed is in cmux's buffer by now; the deadline may
	// still stand on a connection cmux decided on from fewer bytes.
	_ = rc.raw.SetDeadline(time.Time{})
	switch {
	case l.grpc && rc.state != nil:
		return &tlsRoutedConn{Conn: mc, state: *rc.state}, nil
	case l.grpc:
		return mc, nil
	}
	out := &restConn{Conn: mc, state: rc.state}
	if rc.h2 {
		out.filter = &ackFilter{r: mc}
	}
	return out, nil
}

// tlsRoutedConn is a gRPC connection; grpc.Server's credentials read the
// handshake's result from it (mtls.HandshakenCredentials).
type tlsRoutedConn struct {
	net.Conn
	state tls.ConnectionState
}

func (c *tlsRoutedConn) ConnectionState() tls.ConnectionState { return c.state }

// restConn is a REST connection. It deliberately has no ConnectionState
// method: net/http serves HTTP/2 on a connection it does not know as TLS
// only as "unencrypted HTTP/2", which is what this is from its point of
// view (TLS is done). The TLS state reaches handlers through ConnContext.
type restConn struct {
	net.Conn
	state  *tls.ConnectionState
	filter *ackFilter
}

func (c *restConn) Read(p []byte) (int, error) {
	if c.filter != nil {
		return c.filter.Read(p)
	}
	return c.Conn.Read(p)
}

// ackFilter passes an HTTP/2 byte stream through, less the first SETTINGS
// acknowledgement after the preface: the client's answer to the matcher's
// SETTINGS frame, which net/http did not send.
type ackFilter struct {
	r       io.Reader
	started bool
	done    bool
	remain  int    // payload bytes of the current frame still to pass
	pending []byte // bytes read but not yet returned
	hdr     [9]byte
}

func (f *ackFilter) Read(p []byte) (int, error) {
	if !f.started {
		f.started = true
		f.pending = make([]byte, len(http2Preface))
		if _, err := io.ReadFull(f.r, f.pending); err != nil {
			return 0, err
		}
	}
	for {
		if len(f.pending) > 0 {
			n := copy(p, f.pending)
			f.pending = f.pending[n:]
			return n, nil
		}
		if f.done {
			return f.r.Read(p)
		}
		if f.remain > 0 {
			n, err := f.r.Read(p[:min(len(p), f.remain)])
			f.remain -= n
			return n, err
		}
		if _, err := io.ReadFull(f.r, f.hdr[:]); err != nil {
			return 0, err
		}
		n := int(f.hdr[0])<<16 | int(f.hdr[1])<<8 | int(f.hdr[2])
		if f.hdr[3] == frameSettings && f.hdr[4]&flagAck != 0 && n == 0 &&
			binary.BigEndian.Uint32(f.hdr[5:])&0x7fffffff == 0 {
			f.done = true
			continue
		}
		f.pending = bytes.Clone(f.hdr[:])
		f.remain = n
	}
}
