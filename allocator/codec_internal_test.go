package allocator

import (
	"errors"
	"testing"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"

	"github.com/quartermaster-dev/quartermaster/allocator/pb/allocation"
	"github.com/quartermaster-dev/quartermaster/allocator/wire"
	"github.com/quartermaster-dev/quartermaster/core"
)

// TestCodecDecodesRequests: the gRPC codec reads an AllocationRequest into
// a *decodedRequest by hand, keeps the request as sent only for a
// multi-cluster one (forwarding sends it on), and still decodes other
// messages with the proto library.
func TestCodecDecodesRequests(t *testing.T) {
	c := newCodec()
	decode := func(m *allocation.AllocationRequest) *decodedRequest {
		t.Helper()
		b, err := proto.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		d := &decodedRequest{}
		if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer(b)}, d); err != nil {
			t.Fatal(err)
		}
		return d
	}
	local := decode(&allocation.AllocationRequest{Namespace: "ns", GameServerSelectors: []*allocation.GameServerSelector{{MatchLabels: map[string]string{"mode": "x"}}}})
	if local.err != nil || local.in != nil || local.req.Namespace != "ns" || local.req.Selectors[0].MatchLabels["mode"] != "x" {
		t.Fatalf("local request: %+v", local)
	}
	multi := decode(&allocation.AllocationRequest{MultiClusterSetting: &allocation.MultiClusterSetting{Enabled: true}})
	if multi.err != nil || multi.in == nil || !multi.in.GetMultiClusterSetting().GetEnabled() || !multi.req.MultiCluster.Enabled {
		t.Fatalf("multi-cluster request: %+v", multi)
	}
	bad := decode(&allocation.AllocationRequest{Namespace: "ns", Scheduling: 7})
	var ire *core.InvalidRequestError
	if !errors.As(bad.err, &ire) || bad.req.Namespace != "ns" {
		t.Fatalf("unknown scheduling: %+v", bad)
	}
	if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer([]byte{0x0a, 0x07})}, &decodedRequest{}); !errors.Is(err, wire.ErrMalformed) {
		t.Fatalf("truncated: %v", err)
	}
	var other allocation.AllocationResponse
	if err := c.Unmarshal(mem.BufferSlice{mem.SliceBuffer([]byte{0x12, 0x01, 'g'})}, &other); err != nil || other.GameServerName != "g" {
		t.Fatalf("a response through the proto library: %v, %v", &other, err)
	}
}
