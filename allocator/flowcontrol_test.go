package allocator_test

import (
	"bytes"
	"crypto/tls"
	"encoding/binary"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/protobuf/proto"

	"github.com/quartermaster-dev/quartermaster/allocator/pb/allocation"
)

// A lone request must not cost a flow-control round trip. grpc-go's
// dynamic window sends a PING (after a WINDOW_UPDATE) for every DATA frame
// it receives while no earlier PING is out, to estimate the link's
// bandwidth-delay product: with one caller, every request then costs the
// server two more writes and the caller a read and a write. The server's
// fixed windows turn that off. This caller speaks HTTP/2 by hand over mTLS
// and counts the frames the server sends across three allocations.
func TestServerSendsNoFlowControlPings(t *testing.T) {
	h := startHarness(t, harnessOpts{})
	cfg := h.pki.client(t, "dev", nil, nil)
	cfg.NextProtos = []string{"h2"}
	conn, err := tls.Dial("tcp", h.grpcAddr, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	if _, err := conn.Write([]byte(http2.ClientPreface)); err != nil {
		t.Fatal(err)
	}
	fr := http2.NewFramer(conn, conn)
	if err := fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	msg, err := proto.Marshal(&allocation.AllocationRequest{
		Namespace:           "default",
		GameServerSelectors: []*allocation.GameServerSelector{{MatchLabels: map[string]string{"mode": "deathmatch"}}},
	})
	if err != nil {
		t.Fatal(err)
	}
	body := binary.BigEndian.AppendUint32([]byte{0}, uint32(len(msg)))
	body = append(body, msg...)

	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	status := ""
	dec := hpack.NewDecoder(4096, func(f hpack.HeaderField) {
		if f.Name == "grpc-status" {
			status = f.Value
		}
	})
	var pings, windowUpdates int
	for i := range 3 {
		stream := uint32(2*i + 1)
		hb.Reset()
		for _, f := range [][2]string{
			{":method", "POST"}, {":scheme", "https"}, {":path", "/allocation.AllocationService/Allocate"},
			{":authority", "localhost"}, {"content-type", "application/grpc"}, {"te", "trailers"},
		} {
			_ = enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]})
		}
		if err := fr.WriteHeaders(http2.HeadersFrameParam{StreamID: stream, BlockFragment: hb.Bytes(), EndHeaders: true}); err != nil {
			t.Fatal(err)
		}
		if err := fr.WriteData(stream, true, body); err != nil {
			t.Fatal(err)
		}
		status = ""
		for done := false; !done; {
			f, err := fr.ReadFrame()
			if err != nil {
				t.Fatalf("request %d: %v", i+1, err)
			}
			switch f := f.(type) {
			case *http2.SettingsFrame:
				if !f.IsAck() {
					_ = fr.WriteSettingsAck()
				}
			case *http2.PingFrame:
				if !f.IsAck() {
					pings++
					_ = fr.WritePing(true, f.Data)
				}
			case *http2.WindowUpdateFrame:
				if f.StreamID != 0 || i > 0 {
					windowUpdates++ // the first request's connection-level one raises the initial window
				}
			case *http2.HeadersFrame:
				if f.StreamID == stream {
					if _, err := dec.Write(f.HeaderBlockFragment()); err != nil {
						t.Fatal(err)
					}
					done = f.StreamEnded()
				}
			case *http2.GoAwayFrame:
				t.Fatalf("request %d: GOAWAY %v", i+1, f.ErrCode)
			}
		}
		if status != "0" {
			t.Fatalf("request %d: grpc-status %q, want 0", i+1, status)
		}
	}
	if pings != 0 || windowUpdates != 0 {
		t.Errorf("the server sent %d PINGs and %d WINDOW_UPDATEs for three small requests, want none", pings, windowUpdates)
	}
}
