package allocator

import (
	"bytes"
	"errors"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	"golang.org/x/net/http2"
)

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

// Once the splitter is closed its listeners say so as a closed listener
// does (net.ErrClosed), which the servers take for the end, not for a
// failure to report.
func TestSplitterCloseEndsAccept(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := newSplitter(ln, nil, nil, slog.New(slog.DiscardHandler))
	go s.serve()
	errs := make(chan error, 2)
	for _, l := range []net.Listener{s.grpc, s.rest} {
		go func() {
			_, err := l.Accept()
			errs <- err
		}()
	}
	s.close()
	for range 2 {
		select {
		case err := <-errs:
			if !errors.Is(err, net.ErrClosed) {
				t.Errorf("Accept after close: %v, want net.ErrClosed", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("Accept still waiting 10 s after the splitter closed")
		}
	}
}
