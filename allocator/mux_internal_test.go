package allocator

import (
	"bytes"
	"io"
	"net"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
)

// bytesConn is a net.Conn reading from a fixed input and discarding writes.
type bytesConn struct {
	net.Conn
	r io.Reader
}

func (c *bytesConn) Read(p []byte) (int, error)  { return c.r.Read(p) }
func (c *bytesConn) Write(p []byte) (int, error) { return len(p), nil }

// SetDeadline: sniff lifts the routing deadline once the preface is in.
func (c *bytesConn) SetDeadline(time.Time) error { return nil }

// h2Start builds the start of an HTTP/2 connection: preface, SETTINGS, and
// a HEADERS frame with the given content-type.
func h2Start(t testing.TB, contentType string, padded bool) []byte {
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for _, f := range []hpack.HeaderField{
		{Name: ":method", Value: "POST"}, {Name: ":scheme", Value: "https"},
		{Name: ":path", Value: "/allocation.AllocationService/Allocate"}, {Name: ":authority", Value: "x"},
		{Name: "content-type", Value: contentType},
	} {
		if err := enc.WriteField(f); err != nil {
			t.Fatal(err)
		}
	}
	var out bytes.Buffer
	out.WriteString(http2Preface)
	fr := http2.NewFramer(&out, nil)
	_ = fr.WriteSettings()
	_ = fr.WriteWindowUpdate(0, 1000)
	p := http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb.Bytes(), EndHeaders: true}
	if padded {
		p.PadLength = 3
		p.Priority = http2.PriorityParam{Weight: 10}
	}
	if err := fr.WriteHeaders(p); err != nil {
		t.Fatal(err)
	}
	return out.Bytes()
}

func TestSniff(t *testing.T) {
	for _, c := range []struct {
		name     string
		in       []byte
		grpc     bool
		injected bool
	}{
		{"grpc", h2Start(t, "application/grpc", false), true, true},
		{"grpc+proto padded with priority", h2Start(t, "application/grpc+proto", true), true, true},
		{"rest over h2", h2Start(t, "application/json", false), false, true},
		{"rest over http/1.1", []byte("POST /gameserverallocation HTTP/1.1\r\nHost: x\r\n\r\n{}"), false, false},
		{"short http/1.1", []byte("GET / HTTP/1.1\r\n\r\n"), false, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			isGRPC, peeked, injected, err := sniff(&bytesConn{r: bytes.NewReader(c.in)})
			if err != nil {
				t.Fatal(err)
			}
			if isGRPC != c.grpc || injected != c.injected {
				t.Errorf("grpc=%v injected=%v, want %v %v", isGRPC, injected, c.grpc, c.injected)
			}
			if !bytes.HasPrefix(c.in, peeked) {
				t.Errorf("peeked bytes are not the start of the input")
			}
		})
	}
}

// The ACK filter removes exactly the first empty SETTINGS ACK after the
// preface and passes everything else through.
func TestAckFilter(t *testing.T) {
	var in, want bytes.Buffer
	in.WriteString(http2Preface)
	want.WriteString(http2Preface)
	fw, fi := http2.NewFramer(&want, nil), http2.NewFramer(&in, nil)
	_ = fi.WriteSettings(http2.Setting{ID: http2.SettingMaxFrameSize, Val: 1 << 15})
	_ = fw.WriteSettings(http2.Setting{ID: http2.SettingMaxFrameSize, Val: 1 << 15})
	_ = fi.WriteData(1, false, []byte("hello"))
	_ = fw.WriteData(1, false, []byte("hello"))
	_ = fi.WriteSettingsAck() // dropped
	_ = fi.WriteSettingsAck() // kept
	_ = fw.WriteSettingsAck()
	_ = fi.WritePing(false, [8]byte{1})
	_ = fw.WritePing(false, [8]byte{1})
	got, err := io.ReadAll(&ackFilter{r: &in})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want.Bytes()) {
		t.Fatalf("filtered stream differs:\ngot  %x\nwant %x", got, want.Bytes())
	}
}

// FuzzSniff: any start of a connection is routed or refused, never a panic
// or a hang, and what was read is handed on unchanged.
func FuzzSniff(f *testing.F) {
	f.Add(h2Start(f, "application/grpc", false))
	f.Add(h2Start(f, "application/json", true))
	f.Add([]byte("POST / HTTP/1.1\r\n\r\n"))
	f.Add([]byte(http2Preface + "\x00\x00\x05\x01\x08\x00\x00\x00\x01\xff"))
	f.Fuzz(func(t *testing.T, in []byte) {
		_, peeked, _, err := sniff(&bytesConn{r: bytes.NewReader(in)})
		if err == nil && !bytes.HasPrefix(in, peeked) {
			t.Fatal("peeked bytes are not the start of the input")
		}
		_, _ = io.ReadAll(&ackFilter{r: bytes.NewReader(in)})
	})
}

// recordingConn reads a fixed input and keeps what is written.
type recordingConn struct {
	bytesConn
	out bytes.Buffer
}

func (c *recordingConn) Write(p []byte) (int, error) { return c.out.Write(p) }

// A client's keepalive PING while it waits to send its first request is
// answered by the splitter and left out of what the server is replayed.
func TestSniffAnswersPingBeforeFirstRequest(t *testing.T) {
	start := h2Start(t, "application/grpc", false)
	var ping bytes.Buffer
	_ = http2.NewFramer(&ping, nil).WritePing(false, [8]byte{1, 2, 3, 4, 5, 6, 7, 8})
	// Preface and SETTINGS, then the PING, then the rest (WINDOW_UPDATE
	// and HEADERS).
	head := len(http2Preface) + 9
	in := append(append(append([]byte{}, start[:head]...), ping.Bytes()...), start[head:]...)
	c := &recordingConn{bytesConn: bytesConn{r: bytes.NewReader(in)}}
	isGRPC, peeked, _, err := sniff(c)
	if err != nil || !isGRPC {
		t.Fatalf("sniff: grpc %v, %v", isGRPC, err)
	}
	if !bytes.Equal(peeked, start) {
		t.Errorf("replayed bytes keep the PING (or lost something): %d bytes, want %d", len(peeked), len(start))
	}
	fr := http2.NewFramer(nil, bytes.NewReader(c.out.Bytes()))
	var acked bool
	for {
		f, err := fr.ReadFrame()
		if err != nil {
			break
		}
		if p, ok := f.(*http2.PingFrame); ok && p.IsAck() && p.Data == [8]byte{1, 2, 3, 4, 5, 6, 7, 8} {
			acked = true
		}
	}
	if !acked {
		t.Errorf("no PING ACK with the client's payload among the frames written: % x", c.out.Bytes())
	}
}
