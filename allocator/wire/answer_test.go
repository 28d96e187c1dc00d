package wire

import (
	"bytes"
	"math/rand/v2"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/quartermaster-dev/quartermaster/allocator/pb/allocation"
	"github.com/quartermaster-dev/quartermaster/core"
)

// TestAppendGameServerResponseMatchesGenerated: writing a server's answer
// straight from it gives what the generated encoder gives for
// ResponseFromCore's message (the same bytes when no map has two entries;
// an equal message when decoded otherwise).
func TestAppendGameServerResponseMatchesGenerated(t *testing.T) {
	r := rand.New(rand.NewPCG(17, 2))
	for i := range 5000 {
		maxEntries := 1
		if i%2 == 1 {
			maxEntries = 4
		}
		gs := randomGameServer(r, maxEntries)
		source := []string{SourceLocal, "", "https://peer:443"}[i%3]
		msg := ResponseFromCore(gs, source)
		want, err := msg.MarshalVT()
		if err != nil {
			t.Fatal(err)
		}
		got := AppendGameServerResponse(nil, gs, source)
		if n := GameServerResponseSize(gs, source); n != len(got) || n != len(want) {
			t.Fatalf("case %d: size %d, wrote %d bytes, MarshalVT %d", i, n, len(got), len(want))
		}
		if maxEntries == 1 && len(msg.GetMetadata().GetAnnotations()) <= 1 && !bytes.Equal(got, want) {
			t.Fatalf("case %d: bytes differ\n got %x\nwant %x", i, got, want)
		}
		var back allocation.AllocationResponse
		if err := proto.Unmarshal(got, &back); err != nil {
			t.Fatalf("case %d: does not decode: %v", i, err)
		}
		if !proto.Equal(&back, msg) {
			t.Fatalf("case %d: decodes to\n%v\nwant\n%v", i, &back, msg)
		}
	}
}

// TestStampSize checks the stamp's length as computed against the
// formatted stamp, fractions with trailing zeros and none included.
func TestStampSize(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 9))
	base := time.Date(2026, 11, 25, 0, 0, 0, 0, time.UTC).UnixNano()
	cases := []int64{base, base + 1, base + 10, base + 500_000_000, base + 123_456_789, base + 100, -1, -1_000_000_000, 1}
	for range 2000 {
		ns, unit := r.Int64N(1e9), int64(1)
		for range r.IntN(10) {
			unit *= 10
		}
		ns -= ns % unit
		cases = append(cases, base+r.Int64N(1e7)*1e9+ns)
	}
	for _, at := range cases {
		gs := &core.GameServer{AllocatedAt: at}
		if want := len(gs.LastAllocated()); stampSize(at) != want {
			t.Fatalf("stampSize(%d) = %d, want %d (%s)", at, stampSize(at), want, gs.LastAllocated())
		}
	}
}
