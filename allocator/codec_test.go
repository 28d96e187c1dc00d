package allocator_test

import (
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/quartermaster-dev/quartermaster/allocator/pb/allocation"
	"github.com/quartermaster-dev/quartermaster/allocator/wire"
	"github.com/quartermaster-dev/quartermaster/core"
)

// TestGRPCAnswerIsResponseFromCore: the gRPC server writes a local
// allocation's answer straight from the game server; a client must decode
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
		want, err := wire.ResponseFromCore(gs, wire.SourceLocal)
		if err != nil {
			t.Fatal(err)
		}
		if !proto.Equal(got, want) {
			t.Errorf("request %d: gRPC answered\n%v\nwant\n%v", i, got, want)
		}
		if i == 1 && (len(got.Counters) == 0 || len(got.Lists) == 0 || got.Metadata.Annotations["note"] != "x") {
			t.Errorf("request 1: the answer lacks the counter, list or annotation it set: %v", got)
		}
	}
}
