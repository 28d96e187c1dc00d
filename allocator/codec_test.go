package allocator_test

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/quartermaster-dev/quartermaster/allocator/pb/allocation"
	"github.com/quartermaster-dev/quartermaster/allocator/wire"
	"github.com/quartermaster-dev/quartermaster/core"
)

// TestGRPCAnswerIsResponseFromCore: a client of the gRPC server must decode
// exactly the message wire.ResponseFromCore describes the allocated server
// with (ports, addresses, labels, annotations, counters, lists).
func TestGRPCAnswerIsResponseFromCore(t *testing.T) {
	h := startHarness(t, harnessOpts{})
	conn := h.dial(nil)
	reqs := []*allocation.AllocationRequest{
		{},
		{
			GameServerSelectors: []*allocation.GameServerSelector{{MatchLabels: map[string]string{"mode": "lobby"}}},
			Metadata:            &allocation.MetaPatch{Labels: map[string]string{"match": "m1"}, Annotations: map[string]string{"note": "x"}},
			Counters:            map[string]*allocation.CounterAction{"rooms": {Action: wrapperspb.String("Increment"), Amount: wrapperspb.Int64(1)}},
			Lists:               map[string]*allocation.ListAction{"players": {AddValues: []string{"alice"}}},
		},
		{Namespace: "other"},
	}
	for i, req := range reqs {
		got, err := h.grpcAllocate(conn, req)
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		ns := req.GetNamespace()
		if ns == "" {
			ns = core.DefaultNamespace
		}
		gs, ok := h.backend.Get(core.Key{Namespace: ns, Name: got.GameServerName})
		if !ok {
			t.Fatalf("request %d: allocated %q is not in the backend", i, got.GameServerName)
		}
		want := wire.ResponseFromCore(gs, wire.SourceLocal)
		if !proto.Equal(got, want) {
			t.Errorf("request %d: gRPC answered\n%v\nwant\n%v", i, got, want)
		}
		if i == 1 && (len(got.Counters) == 0 || len(got.Lists) == 0 || got.Metadata.Annotations["note"] != "x") {
			t.Errorf("request 1: the answer lacks the counter, list or annotation it set: %v", got)
		}
	}
}

// rawCodec sends and receives a message's bytes as they are, so a test can
// put any bytes on the wire under the proto content-subtype.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return v.([]byte), nil }
func (rawCodec) Unmarshal(data []byte, v any) error {
	*v.(*[]byte) = append([]byte(nil), data...)
	return nil
}
func (rawCodec) Name() string { return "proto" }

// TestGRPCRequestDecoding: over a real connection the server answers
// Allocate's request bytes as Agones' allocator does: bytes that are not protobuf are Internal, an enum
// value outside the API is InvalidArgument naming the field (and nothing
// is allocated), unknown fields are ignored, and a well-formed request
// allocates what it selects.
func TestGRPCRequestDecoding(t *testing.T) {
	h := startHarness(t, harnessOpts{})
	conn := h.dial(nil)
	call := func(b []byte) ([]byte, error) {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		var out []byte
		err := conn.Invoke(ctx, allocation.AllocationService_Allocate_FullMethodName, b, &out, grpc.ForceCodec(rawCodec{}))
		return out, err
	}
	tag := func(num protowire.Number, typ protowire.Type) []byte { return protowire.AppendTag(nil, num, typ) }
	str := func(num protowire.Number, s string) []byte {
		return protowire.AppendString(tag(num, protowire.BytesType), s)
	}
	msg := func(num protowire.Number, parts ...[]byte) []byte {
		return protowire.AppendBytes(tag(num, protowire.BytesType), bytes.Join(parts, nil))
	}
	lobby := msg(8, msg(1, str(1, "mode"), str(2, "lobby"))) // gameServerSelectors[0].matchLabels{mode: lobby}

	before := len(h.backend.Allocated())
	for _, tc := range []struct {
		name string
		b    []byte
		code codes.Code
		msg  string
	}{
		{"truncated", []byte{0x0a, 0x09, 'x'}, codes.Internal, "unmarshal"},
		{"invalid UTF-8", str(1, "\xff"), codes.Internal, "unmarshal"},
		{"unknown state", append(lobby, msg(8, protowire.AppendVarint(tag(2, protowire.VarintType), 9))...),
			codes.InvalidArgument, "gameServerSelectors[1].gameServerState: unknown value 9"},
	} {
		if _, err := call(tc.b); status.Code(err) != tc.code || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%s: got %v, want %s mentioning %q", tc.name, err, tc.code, tc.msg)
		}
	}
	if n := len(h.backend.Allocated()); n != before {
		t.Fatalf("refused requests allocated %d servers", n-before)
	}
	unknown := append(append([]byte(nil), lobby...), str(4242, "from a newer client")...)
	out, err := call(unknown)
	if err != nil {
		t.Fatal(err)
	}
	var resp allocation.AllocationResponse
	if err := proto.Unmarshal(out, &resp); err != nil {
		t.Fatal(err)
	}
	gs, ok := h.backend.Get(core.Key{Namespace: core.DefaultNamespace, Name: resp.GameServerName})
	if !ok || gs.State != core.StateAllocated || gs.Labels["mode"] != "lobby" {
		t.Fatalf("allocated %q: %v", resp.GameServerName, gs)
	}
}
