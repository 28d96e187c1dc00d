package allocator

import (
	"bytes"
	"io"
	"testing"

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
