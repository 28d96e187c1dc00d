package forward

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/quartermaster-dev/quartermaster/allocator/pb/allocation"
)

// An h2Conn carries the forwarder's one call, AllocationService.Allocate,
// over HTTP/2 by itself: the gRPC unary protocol (a POST, a 5-byte prefixed
// message each way, the status in trailers) on one TLS connection. It
// exists for a lone request's latency. grpc-go's client hands each call to
// a writer goroutine and each answer through a reader goroutine and a
// buffer to the caller; here the caller writes its request itself (one
// write), and the reader goroutine hands it the answer. Anything unusual
// (a request larger than the remote's stream window, the connection's
// send window or stream limit exhausted, the connection going away) is
// left to grpc-go's client: invoke says so before sending anything.
//
// Every write has a deadline. A remote that stops reading (hung, or cut
// off without a reset) fills the socket's buffers, and a write without one
// would then wait as long as TCP keeps retrying, minutes, holding the
// write lock and with it every call on the connection, past their
// deadlines and out of the breaker's sight. A call's write gives up at its
// caller's deadline, but not before h2MinWriteTime nor after
// h2WriteTimeout; the connection's own frames after h2WriteTimeout. A
// write that gives up has left a frame half sent, so the connection fails:
// the calls on it end as Unavailable (the one whose write it was may see
// its own deadline first), and the next call dials again. Calls waiting
// for the write lock, or for an answer, give up at their own deadlines.
type h2Conn struct {
	endpoint string
	nc       net.Conn
	rfr      *http2.Framer // the reader goroutine's

	// wlock guards the write side and the peer's settings: a channel of
	// one rather than a mutex, so that a call can stop waiting for it when
	// its context ends.
	wlock   chan struct{}
	bw      *bufio.Writer
	wfr     *http2.Framer
	henc    *hpack.Encoder
	hbuf    bytes.Buffer
	nextID  uint32
	sendWin int64 // the connection's send window
	peer    h2Settings

	mu      sync.Mutex
	streams map[uint32]*h2Call
	closed  bool        // takes no new calls
	dead    atomic.Bool // closed, for usable without the lock
	err     error

	// The package's write and silence limits when the connection was
	// dialled (tests change them; calls and resets still running on an
	// older connection keep its own).
	writeTimeout, minWriteTime, silentFor time.Duration

	recvUnacked uint32        // connection-level bytes read and not yet returned (reader only)
	reads       atomic.Uint64 // frames read
}

// h2Settings are the remote's HTTP/2 settings that bound what is sent.
type h2Settings struct {
	streamWindow, maxFrame, maxStreams uint32
}

// h2Call is one call in flight. The reader goroutine fills it; the caller
// reads it once done is closed.
type h2Call struct {
	done        chan struct{}
	httpStatus  string
	contentType string
	grpcStatus  string
	grpcMessage string
	data        []byte
	recv        uint32 // stream-level bytes read and not yet returned
	err         error  // the connection failed or the stream was reset
}

const (
	allocateMethod = "/allocation.AllocationService/Allocate"
	// Windows are returned once half is used.
	h2ConnUpdateAt   = ConnWindowBytes / 2
	h2StreamUpdateAt = StreamWindowBytes / 2
	h2MaxStreamID    = 1<<31 - 1
)

// h2WriteTimeout bounds a write that no call's deadline bounds: the
// connection's own frames (settings and PING acknowledgements, window
// updates, a canceled call's reset). They are a few bytes; one that cannot
// leave in this long is queued behind a remote that stopped reading. A var
// for tests.
var h2WriteTimeout = 5 * time.Second

// h2MinWriteTime is the least time a call's write is given (see
// writeDeadline). A var for tests.
var h2MinWriteTime = time.Second

// h2SilentFor is how long a connection must have said nothing since a
// call went out for that call's deadline to fail it as dead. A var for
// tests.
var h2SilentFor = time.Second

// dialH2 opens a connection to endpoint with cfg (mutual TLS, as the
// Secret says) and starts its reader.
func dialH2(ctx context.Context, endpoint string, cfg *tls.Config) (*h2Conn, error) {
	cfg = cfg.Clone()
	cfg.NextProtos = []string{"h2"}
	d := tls.Dialer{Config: cfg}
	nc, err := d.DialContext(ctx, "tcp", endpoint)
	if err != nil {
		return nil, err
	}
	if p := nc.(*tls.Conn).ConnectionState().NegotiatedProtocol; p != "h2" {
		_ = nc.Close()
		return nil, fmt.Errorf("%s does not speak HTTP/2 over TLS (ALPN %q)", endpoint, p)
	}
	c := &h2Conn{
		endpoint: endpoint,
		nc:       nc,
		bw:       bufio.NewWriterSize(nc, 16<<10),
		nextID:   1,
		sendWin:  65535, // HTTP/2's initial windows, until the remote says otherwise
		peer:     h2Settings{streamWindow: 65535, maxFrame: 16384, maxStreams: 1 << 31},
		streams:  map[uint32]*h2Call{},
		wlock:    make(chan struct{}, 1),

		writeTimeout: h2WriteTimeout,
		minWriteTime: h2MinWriteTime,
		silentFor:    h2SilentFor,
	}
	c.wfr = http2.NewFramer(c.bw, nil)
	c.henc = hpack.NewEncoder(&c.hbuf)
	c.henc.SetMaxDynamicTableSizeLimit(0)
	c.rfr = http2.NewFramer(nil, bufio.NewReaderSize(nc, 16<<10))
	c.rfr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	c.rfr.MaxHeaderListSize = 1 << 20

	dl, hasDL := ctx.Deadline()
	err = nc.SetWriteDeadline(c.writeDeadline(time.Now(), dl, hasDL))
	if err == nil {
		_, err = c.bw.WriteString(http2.ClientPreface)
	}
	if err == nil {
		err = c.wfr.WriteSettings(http2.Setting{ID: http2.SettingEnablePush, Val: 0},
			http2.Setting{ID: http2.SettingInitialWindowSize, Val: StreamWindowBytes})
	}
	if err == nil {
		err = c.wfr.WriteWindowUpdate(0, ConnWindowBytes-65535)
	}
	if err == nil {
		err = c.bw.Flush()
	}
	if err != nil {
		_ = nc.Close()
		return nil, err
	}
	go c.readLoop()
	return c, nil
}

// invoke sends framed (a gRPC message with its prefix) with the hops
// metadata and decodes the answer into resp. handled is false when the
// connection cannot take the call as it stands (see h2Conn); nothing was
// sent then. Errors are gRPC status errors.
func (c *h2Conn) invoke(ctx context.Context, hops string, framed []byte, resp *allocation.AllocationResponse) (handled bool, _ error) {
	call := &h2Call{done: make(chan struct{})}
	if !c.lockWrite(ctx) {
		return true, status.FromContextError(ctx.Err()).Err()
	}
	// One clock reading and one look at the deadline serve the
	// grpc-timeout header, the write's deadline and the silence below.
	now := time.Now()
	dl, hasDL := ctx.Deadline()
	block := c.headers(hops, dl.Sub(now), hasDL)
	c.mu.Lock()
	n := uint32(len(framed))
	if c.closed || uint32(len(c.streams)) >= c.peer.maxStreams || n > c.peer.streamWindow || int64(n) > c.sendWin ||
		uint32(len(block)) > c.peer.maxFrame || c.nextID > h2MaxStreamID {
		c.mu.Unlock()
		c.unlockWrite()
		return false, nil
	}
	id := c.nextID
	c.nextID += 2
	c.streams[id] = call
	c.mu.Unlock()
	c.sendWin -= int64(n)
	readsBefore := c.reads.Load()
	err := c.nc.SetWriteDeadline(c.writeDeadline(now, dl, hasDL))
	if err == nil {
		err = c.writeCall(id, block, framed)
	}
	c.unlockWrite()
	if err != nil {
		c.fail(err)
	}

	select {
	case <-call.done:
		if call.err != nil && status.Code(call.err) == codes.Canceled {
			// A remote resets the stream with CANCEL when the deadline
			// it was sent (grpc-timeout) passes, which can be seen here
			// before the caller's context says so: that is the caller's
			// deadline, as grpc-go's client reports it too.
			if hasDL && !dl.After(time.Now()) {
				return true, status.Error(codes.DeadlineExceeded, status.Convert(call.err).Message())
			}
		}
	case <-ctx.Done():
		c.cancel(id)
		if silent := time.Since(now); c.reads.Load() == readsBefore && silent >= c.silentFor {
			// Not a frame from the remote for a long while since the
			// call went out: the connection may be dead without knowing
			// it (no keepalives here); the next call dials a new one. A
			// call that merely ran out of time before a busy remote
			// answered (a short deadline) says nothing of the
			// connection, which other calls share.
			c.fail(fmt.Errorf("no answer, and nothing else, in the %v before the caller's deadline", silent.Round(time.Millisecond)))
		}
		return true, status.FromContextError(ctx.Err()).Err()
	}
	return true, call.result(c.endpoint, resp)
}

// lockWrite takes the write lock for ctx's call. It gives up (false)
// when ctx has ended, before or while it waits: a call that starts its
// write with no time left would only time that write out, and with it the
// connection every other call shares.
func (c *h2Conn) lockWrite(ctx context.Context) bool {
	select {
	case c.wlock <- struct{}{}:
	default:
		select {
		case c.wlock <- struct{}{}:
		case <-ctx.Done():
			return false
		}
	}
	if ctx.Err() != nil {
		c.unlockWrite()
		return false
	}
	return true
}

func (c *h2Conn) unlockWrite() { <-c.wlock }

// writeDeadline is when a write for a call gives up: at its deadline dl
// (if hasDL), but no sooner than h2MinWriteTime from now and no later than
// h2WriteTimeout from now. The floor is there because a write that gives
// up ends the connection for every call on it: only a write that has been
// stuck that long says the remote stopped reading, not one begun in a
// caller's last microseconds.
func (c *h2Conn) writeDeadline(now, dl time.Time, hasDL bool) time.Time {
	d := now.Add(c.writeTimeout)
	if hasDL && dl.Before(d) {
		d = dl
		if least := now.Add(c.minWriteTime); d.Before(least) {
			d = least
		}
	}
	return d
}

// control writes frames of the connection's own (write adds them to the
// framer) and flushes them, under the write lock, within h2WriteTimeout.
// The reader calls it, and a canceled call's reset.
func (c *h2Conn) control(write func() error) error {
	c.wlock <- struct{}{}
	defer c.unlockWrite()
	err := c.nc.SetWriteDeadline(time.Now().Add(c.writeTimeout))
	if err == nil {
		err = write()
	}
	if err == nil {
		err = c.bw.Flush()
	}
	return err
}

// headers encodes a call's header block into hbuf, under the write lock,
// with grpc-timeout when the call has a deadline (timeout from now). The
// encoder keeps no dynamic table (dialH2 sets its size to 0), so its
// blocks never refer to earlier ones, and one left unsent (invoke may
// still decline the call) puts nothing out of step.
func (c *h2Conn) headers(hops string, timeout time.Duration, hasDL bool) []byte {
	c.hbuf.Reset()
	field := func(name, value string) { _ = c.henc.WriteField(hpack.HeaderField{Name: name, Value: value}) }
	field(":method", "POST")
	field(":scheme", "https")
	field(":path", allocateMethod)
	field(":authority", c.endpoint)
	field("content-type", "application/grpc")
	field("te", "trailers")
	if hasDL {
		field("grpc-timeout", grpcTimeout(timeout))
	}
	field(HopsKey, hops)
	return c.hbuf.Bytes()
}

// writeCall writes a call's header block and message, under the write
// lock.
func (c *h2Conn) writeCall(id uint32, block, framed []byte) error {
	if err := c.wfr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, BlockFragment: block, EndHeaders: true}); err != nil {
		return err
	}
	for rest := framed; ; {
		chunk := rest[:min(uint32(len(rest)), c.peer.maxFrame)]
		rest = rest[len(chunk):]
		if err := c.wfr.WriteData(id, len(rest) == 0, chunk); err != nil {
			return err
		}
		if len(rest) == 0 {
			break
		}
	}
	return c.bw.Flush()
}

// grpcTimeout writes d as gRPC's timeout header: at most eight digits and
// a unit, rounded up.
func grpcTimeout(d time.Duration) string {
	if d <= 0 {
		return "1n"
	}
	for _, u := range []struct {
		unit time.Duration
		tag  string
	}{{time.Nanosecond, "n"}, {time.Microsecond, "u"}, {time.Millisecond, "m"}, {time.Second, "S"}, {time.Minute, "M"}} {
		if v := (d + u.unit - 1) / u.unit; v < 1e8 {
			return strconv.FormatInt(int64(v), 10) + u.tag
		}
	}
	return strconv.FormatInt(int64((d+time.Hour-1)/time.Hour), 10) + "H"
}

// result is the call's answer, as grpc-go's client reads it: the HTTP
// status and content type first, then grpc-status, then the message.
func (call *h2Call) result(endpoint string, resp *allocation.AllocationResponse) error {
	if call.err != nil {
		return call.err
	}
	if call.httpStatus != "200" {
		return status.Errorf(httpStatusCode(call.httpStatus), "unexpected HTTP status %s from %s", call.httpStatus, endpoint)
	}
	if ct := call.contentType; ct != "application/grpc" && !strings.HasPrefix(ct, "application/grpc+") && !strings.HasPrefix(ct, "application/grpc;") {
		return status.Errorf(codes.Unknown, "unexpected content-type %q from %s", ct, endpoint)
	}
	if call.grpcStatus == "" {
		return status.Errorf(codes.Internal, "%s ended the call without a grpc-status", endpoint)
	}
	code, err := strconv.ParseUint(call.grpcStatus, 10, 32)
	if err != nil {
		return status.Errorf(codes.Internal, "%s sent grpc-status %q", endpoint, call.grpcStatus)
	}
	if codes.Code(code) != codes.OK {
		return status.Error(codes.Code(code), decodeGRPCMessage(call.grpcMessage))
	}
	b := call.data
	if len(b) < 5 || b[0] != 0 || binary.BigEndian.Uint32(b[1:5]) != uint32(len(b)-5) {
		return status.Errorf(codes.Internal, "%s sent a malformed or compressed message (%d bytes)", endpoint, len(b))
	}
	if err := decodeAnswer(b[5:], resp); err != nil {
		return status.Errorf(codes.Internal, "decoding the answer of %s: %v", endpoint, err)
	}
	return nil
}

// httpStatusCode maps an HTTP status other than 200 to a gRPC code, as
// gRPC's HTTP-to-gRPC status mapping does.
func httpStatusCode(s string) codes.Code {
	switch s {
	case "400":
		return codes.Internal
	case "401":
		return codes.Unauthenticated
	case "403":
		return codes.PermissionDenied
	case "404":
		return codes.Unimplemented
	case "429", "502", "503", "504":
		return codes.Unavailable
	}
	return codes.Unknown
}

// decodeGRPCMessage undoes grpc-message's percent-encoding.
func decodeGRPCMessage(s string) string {
	if !strings.Contains(s, "%") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '%' && i+2 < len(s) {
			if v, err := strconv.ParseUint(s[i+1:i+3], 16, 8); err == nil {
				b.WriteByte(byte(v))
				i += 2
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// readLoop reads the connection until it fails: answers to their calls,
// and the connection's own frames (settings, pings, windows, GOAWAY).
func (c *h2Conn) readLoop() {
	for {
		f, err := c.rfr.ReadFrame()
		if err != nil {
			c.fail(fmt.Errorf("connection to %s: %w", c.endpoint, err))
			return
		}
		c.reads.Add(1)
		switch f := f.(type) {
		case *http2.MetaHeadersFrame:
			if call := c.stream(f.StreamID); call != nil {
				for _, hf := range f.Fields {
					switch hf.Name {
					case ":status":
						call.httpStatus = hf.Value
					case "content-type":
						call.contentType = hf.Value
					case "grpc-status":
						call.grpcStatus = hf.Value
					case "grpc-message":
						call.grpcMessage = hf.Value
					}
				}
				if f.StreamEnded() {
					c.finish(f.StreamID, nil)
				}
			}
		case *http2.DataFrame:
			err = c.data(f)
		case *http2.RSTStreamFrame:
			code := codes.Internal
			switch f.ErrCode {
			case http2.ErrCodeRefusedStream:
				code = codes.Unavailable
			case http2.ErrCodeCancel:
				code = codes.Canceled
			}
			c.finish(f.StreamID, status.Errorf(code, "%s reset the stream: %v", c.endpoint, f.ErrCode))
		case *http2.SettingsFrame:
			if !f.IsAck() {
				err = c.control(func() error {
					_ = f.ForeachSetting(func(s http2.Setting) error {
						switch s.ID {
						case http2.SettingInitialWindowSize:
							c.peer.streamWindow = s.Val
						case http2.SettingMaxFrameSize:
							c.peer.maxFrame = s.Val
						case http2.SettingMaxConcurrentStreams:
							c.peer.maxStreams = s.Val
						}
						return nil
					})
					return c.wfr.WriteSettingsAck()
				})
			}
		case *http2.PingFrame:
			if !f.IsAck() {
				err = c.control(func() error { return c.wfr.WritePing(true, f.Data) })
			}
		case *http2.WindowUpdateFrame:
			if f.StreamID == 0 {
				c.wlock <- struct{}{}
				c.sendWin += int64(f.Increment)
				c.unlockWrite()
			}
		case *http2.GoAwayFrame:
			c.goAway(f.LastStreamID)
		}
		if err != nil {
			c.fail(fmt.Errorf("connection to %s: %w", c.endpoint, err))
			return
		}
	}
}

// data takes a DATA frame: the message bytes to its call, and the windows
// returned once half used.
func (c *h2Conn) data(f *http2.DataFrame) error {
	var update [2]uint32 // connection, stream
	c.recvUnacked += f.Length
	if c.recvUnacked >= h2ConnUpdateAt {
		update[0], c.recvUnacked = c.recvUnacked, 0
	}
	if call := c.stream(f.StreamID); call != nil {
		call.data = append(call.data, f.Data()...)
		call.recv += f.Length
		if call.recv >= h2StreamUpdateAt && !f.StreamEnded() {
			update[1], call.recv = call.recv, 0
		}
		if f.StreamEnded() {
			c.finish(f.StreamID, nil)
		}
	}
	if update[0] == 0 && update[1] == 0 {
		return nil
	}
	return c.control(func() error {
		if update[0] > 0 {
			if err := c.wfr.WriteWindowUpdate(0, update[0]); err != nil {
				return err
			}
		}
		if update[1] > 0 {
			return c.wfr.WriteWindowUpdate(f.StreamID, update[1])
		}
		return nil
	})
}

func (c *h2Conn) stream(id uint32) *h2Call {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.streams[id]
}

// finish ends call id, with err if the stream failed.
func (c *h2Conn) finish(id uint32, err error) {
	c.mu.Lock()
	call := c.streams[id]
	delete(c.streams, id)
	drained := c.closed && len(c.streams) == 0
	c.mu.Unlock()
	if call != nil {
		call.err = err
		close(call.done)
	}
	if drained {
		_ = c.nc.Close() // gone away, and nothing left in flight
	}
}

// cancel gives up on call id (its caller's context ended) and tells the
// remote, unless the answer came first.
func (c *h2Conn) cancel(id uint32) {
	c.mu.Lock()
	_, open := c.streams[id]
	delete(c.streams, id)
	drained := c.closed && len(c.streams) == 0
	c.mu.Unlock()
	if drained {
		_ = c.nc.Close() // gone away, and nothing left in flight
		return
	}
	if !open {
		return
	}
	// The caller is leaving at its deadline: the reset goes out without
	// it, since it may have to wait for the lock or the socket.
	go func() {
		if err := c.control(func() error { return c.wfr.WriteRSTStream(id, http2.ErrCodeCancel) }); err != nil {
			c.fail(err)
		}
	}()
}

// goAway stops new calls; those the remote will not process fail as
// Unavailable (a later try or the next endpoint takes them).
func (c *h2Conn) goAway(last uint32) {
	c.mu.Lock()
	c.closed = true
	c.dead.Store(true)
	var refused []*h2Call
	for id, call := range c.streams {
		if id > last {
			refused = append(refused, call)
			delete(c.streams, id)
		}
	}
	drained := len(c.streams) == 0
	c.mu.Unlock()
	for _, call := range refused {
		call.err = status.Errorf(codes.Unavailable, "%s is going away and did not take the call", c.endpoint)
		close(call.done)
	}
	if drained {
		_ = c.nc.Close()
	}
}

// fail closes the connection after an error: every call in flight fails
// as Unavailable, as grpc-go's do when their transport breaks.
func (c *h2Conn) fail(err error) {
	c.mu.Lock()
	if c.err == nil {
		c.err = err
	}
	c.closed = true
	c.dead.Store(true)
	calls := c.streams
	c.streams = map[uint32]*h2Call{}
	c.mu.Unlock()
	_ = c.nc.Close()
	for _, call := range calls {
		call.err = status.Errorf(codes.Unavailable, "%v", err)
		close(call.done)
	}
}

// usable reports whether the connection takes new calls.
func (c *h2Conn) usable() bool { return !c.dead.Load() }

// close ends the connection (its client was retired).
func (c *h2Conn) close() { c.fail(errors.New("the client was closed")) }
