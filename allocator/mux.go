package allocator

import (
	"bytes"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"time"

	"golang.org/x/net/http2/hpack"
)

// The shared port: gRPC and REST on one TLS listener, as Agones serves them
// on 8443. Agones routes every request through grpc-go's ServeHTTP, which
// its docs warn is markedly slower than grpc-go's own transport. Here the
// choice is made once per connection instead: after the TLS handshake the
// splitter reads the start of the connection and hands it, bytes replayed,
// to grpc.Server's native HTTP/2 transport (gRPC) or to net/http (REST over
// HTTP/1.1 or HTTP/2). After that the splitter is out of the path, so gRPC
// on the shared port costs what it costs on a port of its own, plus one
// peek per connection.
//
// An HTTP/2 connection is gRPC when its first request's content-type is
// application/grpc (read by decoding the first HEADERS block with HPACK).
// gRPC clients wait for the server's SETTINGS before sending a request, so
// the splitter sends an empty SETTINGS frame after the client preface; the
// server a connection goes to sends its own as well, which HTTP/2 allows.
// grpc-go ignores the extra acknowledgement; net/http counts them, so on a
// REST connection the client's acknowledgement of the splitter's frame is
// removed from the stream.

const (
	http2Preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
	// maxPeek bounds what the splitter buffers before deciding.
	maxPeek = 64 << 10
)

// routeTimeout bounds the handshake and the first bytes (the HTTP/2 preface,
// or enough of them to see it is HTTP/1): a client that connects and says
// nothing is dropped. It does not bound the wait for an HTTP/2 client's
// first request: a gRPC channel connects before its first call and may sit
// idle for as long as it likes, as it could on grpc-go's own port. (A var
// for tests.)
var routeTimeout = 10 * time.Second

const (
	frameHeaders      = 0x1
	frameSettings     = 0x4
	framePing         = 0x6
	frameContinuation = 0x9
	flagAck           = 0x1
	flagEndHeaders    = 0x4
	flagPadded        = 0x8
	flagPriority      = 0x20
)

var emptySettings = []byte{0, 0, 0, frameSettings, 0, 0, 0, 0, 0}

// splitter accepts connections on one listener and routes each to the
// gRPC or the REST listener.
type splitter struct {
	ln      net.Listener
	tls     *tls.Config // nil: plaintext (--insecure-disable-tls)
	track   tracker     // nil: connections are not tracked
	grpc    *chanListener
	rest    *chanListener
	log     *slog.Logger
	wg      sync.WaitGroup
	mu      sync.Mutex
	routing map[net.Conn]struct{}
	closed  bool
}

// tracker registers a connection with its TLS state, so that it can be
// closed if its client CA is removed (mtls.Server.Track).
type tracker func(c io.Closer, state *tls.ConnectionState) (untrack func())

func newSplitter(ln net.Listener, cfg *tls.Config, track tracker, log *slog.Logger) *splitter {
	return &splitter{
		ln:      ln,
		tls:     cfg,
		track:   track,
		grpc:    newChanListener(ln.Addr()),
		rest:    newChanListener(ln.Addr()),
		log:     log,
		routing: map[net.Conn]struct{}{},
	}
}

// serve accepts until the listener is closed.
func (s *splitter) serve() {
	var delay time.Duration
	for {
		c, err := s.ln.Accept()
		if err != nil {
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				// Out of file descriptors or similar: back off, as
				// net/http does, rather than spin.
				delay = min(max(2*delay, 5*time.Millisecond), time.Second)
				time.Sleep(delay)
				continue
			}
			return
		}
		delay = 0
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			c.Close()
			return
		}
		s.routing[c] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go s.route(c)
	}
}

// close stops accepting, drops connections still being routed (they have
// sent no complete request yet) and waits for routing to end; then closes
// the two listeners so their servers' Serve returns.
func (s *splitter) close() {
	s.mu.Lock()
	s.closed = true
	s.ln.Close()
	for c := range s.routing {
		c.Close()
	}
	s.mu.Unlock()
	s.wg.Wait()
	s.grpc.Close()
	s.rest.Close()
}

func (s *splitter) route(raw net.Conn) {
	defer func() {
		s.mu.Lock()
		delete(s.routing, raw)
		s.mu.Unlock()
		s.wg.Done()
	}()
	_ = raw.SetDeadline(time.Now().Add(routeTimeout))
	var conn = raw
	var state *tls.ConnectionState
	if s.tls != nil {
		tc := tls.Server(raw, s.tls)
		if err := tc.Handshake(); err != nil {
			s.log.Debug("TLS handshake failed", "remote", raw.RemoteAddr().String(), "err", err)
			raw.Close()
			return
		}
		cs := tc.ConnectionState()
		state, conn = &cs, tc
	}
	untrack := func() {}
	if s.track != nil && state != nil {
		untrack = s.track(conn, state)
	}
	isGRPC, peeked, injected, err := sniff(conn)
	if err != nil {
		s.log.Debug("connection dropped before its first request", "remote", raw.RemoteAddr().String(), "err", err)
		untrack()
		conn.Close()
		return
	}
	_ = raw.SetDeadline(time.Time{})
	pc := &peekedConn{Conn: conn, buf: peeked, untrack: untrack}
	var out net.Conn
	var dst *chanListener
	switch {
	case isGRPC && state != nil:
		out, dst = &tlsPeekedConn{peekedConn: pc, state: *state}, s.grpc
	case isGRPC:
		out, dst = pc, s.grpc
	default:
		rc := &restConn{peekedConn: pc, state: state}
		if injected {
			rc.filter = &ackFilter{r: pc}
		}
		out, dst = rc, s.rest
	}
	if !dst.deliver(out) {
		untrack()
		conn.Close()
	}
}

// sniff reads the start of a connection and tells whether it is gRPC. It
// returns the bytes read, to be replayed, and whether it wrote a SETTINGS
// frame to the client.
func sniff(c net.Conn) (isGRPC bool, peeked []byte, injected bool, err error) {
	buf := make([]byte, 0, 512)
	// The preface, or enough to see this is not HTTP/2.
	for len(buf) < len(http2Preface) {
		if !strings.HasPrefix(http2Preface, string(buf)) {
			return false, buf, false, nil
		}
		buf, err = readSome(c, buf)
		if err != nil {
			return false, nil, false, err
		}
	}
	if !strings.HasPrefix(string(buf), http2Preface) {
		return false, buf, false, nil
	}
	if _, err := c.Write(emptySettings); err != nil {
		return false, nil, false, err
	}
	// The preface came in time: from here the client may wait as long as
	// it likes before its first request.
	_ = c.SetDeadline(time.Time{})
	pos := len(http2Preface)
	var block []byte
	inHeaders := false
	for {
		for len(buf) < pos+9 {
			if buf, err = readSome(c, buf); err != nil {
				return false, nil, true, err
			}
		}
		h := buf[pos : pos+9]
		n := int(h[0])<<16 | int(h[1])<<8 | int(h[2])
		typ, flags := h[3], h[4]
		if pos+9+n > maxPeek {
			return false, nil, true, errors.New("first HTTP/2 request is too large to route")
		}
		for len(buf) < pos+9+n {
			if buf, err = readSome(c, buf); err != nil {
				return false, nil, true, err
			}
		}
		payload := buf[pos+9 : pos+9+n]
		if typ == framePing && flags&flagAck == 0 && n == 8 && !inHeaders {
			// A client's keepalive while it waits to send its first
			// request: answer it here (a client that hears nothing
			// closes the connection) and keep it out of the replay, so
			// the server the connection goes to does not answer again.
			ack := append([]byte{0, 0, 8, framePing, flagAck, 0, 0, 0, 0}, payload...)
			if _, err := c.Write(ack); err != nil {
				return false, nil, true, err
			}
			buf = append(buf[:pos], buf[pos+9+n:]...)
			continue
		}
		pos += 9 + n
		switch {
		case typ == frameHeaders && !inHeaders:
			frag, ok := headerFragment(payload, flags)
			if !ok {
				return false, buf, true, nil // malformed: let net/http answer it
			}
			block = append(block, frag...)
			inHeaders = true
		case typ == frameContinuation && inHeaders:
			block = append(block, payload...)
		case inHeaders:
			return false, buf, true, nil // protocol error: net/http will say so
		default:
			continue // SETTINGS, WINDOW_UPDATE, PRIORITY... before the request
		}
		if flags&flagEndHeaders != 0 {
			return isGRPCHeaders(block), buf, true, nil
		}
	}
}

func readSome(c net.Conn, buf []byte) ([]byte, error) {
	if len(buf) == cap(buf) {
		if cap(buf) >= maxPeek {
			return nil, errors.New("too much data before the first request")
		}
		buf = append(buf, make([]byte, cap(buf))...)[:len(buf)]
	}
	n, err := c.Read(buf[len(buf):cap(buf)])
	buf = buf[:len(buf)+n]
	if n > 0 {
		return buf, nil
	}
	if err == nil {
		err = io.ErrNoProgress
	}
	return nil, err
}

// headerFragment strips a HEADERS frame's padding and priority fields.
func headerFragment(p []byte, flags byte) ([]byte, bool) {
	pad := 0
	if flags&flagPadded != 0 {
		if len(p) < 1 {
			return nil, false
		}
		pad = int(p[0])
		p = p[1:]
	}
	if flags&flagPriority != 0 {
		if len(p) < 5 {
			return nil, false
		}
		p = p[5:]
	}
	if pad > len(p) {
		return nil, false
	}
	return p[:len(p)-pad], true
}

func isGRPCHeaders(block []byte) bool {
	found := false
	d := hpack.NewDecoder(4096, func(f hpack.HeaderField) {
		if f.Name == "content-type" && strings.HasPrefix(f.Value, "application/grpc") {
			found = true
		}
	})
	d.SetMaxStringLength(maxPeek)
	if _, err := d.Write(block); err != nil {
		return false
	}
	return found
}

// peekedConn replays the bytes the splitter read, then reads the
// connection.
type peekedConn struct {
	net.Conn
	buf     []byte
	untrack func()
}

// Close ends the connection's tracking too.
func (c *peekedConn) Close() error {
	if c.untrack != nil {
		c.untrack()
	}
	return c.Conn.Close()
}

func (c *peekedConn) Read(p []byte) (int, error) {
	if len(c.buf) > 0 {
		n := copy(p, c.buf)
		c.buf = c.buf[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}

// tlsPeekedConn is a gRPC connection; grpc.Server's credentials read the
// handshake's result from it (mtls.HandshakenCredentials).
type tlsPeekedConn struct {
	*peekedConn
	state tls.ConnectionState
}

func (c *tlsPeekedConn) ConnectionState() tls.ConnectionState { return c.state }

// restConn is a REST connection. It deliberately has no ConnectionState
// method: net/http serves HTTP/2 on a connection it does not know as TLS
// only as "unencrypted HTTP/2", which is what this is from its point of
// view (TLS is done). The TLS state reaches handlers through ConnContext.
type restConn struct {
	*peekedConn
	state  *tls.ConnectionState
	filter *ackFilter
}

func (c *restConn) Read(p []byte) (int, error) {
	if c.filter != nil {
		return c.filter.Read(p)
	}
	return c.peekedConn.Read(p)
}

// ackFilter passes an HTTP/2 byte stream through, less the first SETTINGS
// acknowledgement after the preface: the client's answer to the splitter's
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

// chanListener is a net.Listener fed by the splitter.
type chanListener struct {
	addr net.Addr
	ch   chan net.Conn
	done chan struct{}
	once sync.Once
}

func newChanListener(addr net.Addr) *chanListener {
	return &chanListener{addr: addr, ch: make(chan net.Conn), done: make(chan struct{})}
}

func (l *chanListener) deliver(c net.Conn) bool {
	select {
	case l.ch <- c:
		return true
	case <-l.done:
		return false
	}
}

func (l *chanListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.ch:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *chanListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *chanListener) Addr() net.Addr { return l.addr }
