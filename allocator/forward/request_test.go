package forward

import (
	"bytes"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/quartermaster-dev/quartermaster/allocator/pb/allocation"
)

// fields decodes one message's top-level fields: number → the raw value of
// each occurrence (bytes for length-delimited fields, the varint as its
// encoding otherwise).
func fields(t *testing.T, b []byte) map[protowire.Number][][]byte {
	t.Helper()
	out := map[protowire.Number][][]byte{}
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			t.Fatalf("bad tag: %v", protowire.ParseError(n))
		}
		b = b[n:]
		m := protowire.ConsumeFieldValue(num, typ, b)
		if m < 0 {
			t.Fatalf("bad value of field %d: %v", num, protowire.ParseError(m))
		}
		val := b[:m]
		if typ == protowire.BytesType {
			v, _ := protowire.ConsumeBytes(b)
			val = v
		}
		out[num] = append(out[num], val)
		b = b[m:]
	}
	return out
}

// Field numbers of AllocationRequest and MultiClusterSetting (Agones'
// allocation.proto).
const (
	fNamespace    = 1
	fMultiCluster = 2
	fRequired     = 3
	fPreferred    = 4
	fScheduling   = 5
	fMetaPatch    = 6
	fMetadata     = 7
	fSelectors    = 8
	fPriorities   = 9
	fCounters     = 10
	fLists        = 11
	fMCEnabled    = 1
	fMCSelector   = 2
)

func marshal(t *testing.T, m proto.Message) []byte {
	t.Helper()
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestForwardRequestWire checks, on the wire, that a forwarded request sets
// the fields Agones' forwarder sets (it converts the request to a
// GameServerAllocation and back): multiClusterSetting present with enabled
// false (so absent inside) and the policySelector kept, the namespace of
// the policy, the selectors also in the deprecated required (last) and
// preferred (the others) fields, and the metadata in both metadata and
// metaPatch.
func TestForwardRequestWire(t *testing.T) {
	in := &allocation.AllocationRequest{
		Namespace: "default",
		MultiClusterSetting: &allocation.MultiClusterSetting{
			Enabled:        true,
			PolicySelector: &allocation.LabelSelector{MatchLabels: map[string]string{"route": "burst"}},
		},
		Scheduling: allocation.AllocationRequest_Distributed,
		GameServerSelectors: []*allocation.GameServerSelector{
			{MatchLabels: map[string]string{"mode": "lobby"}, GameServerState: allocation.GameServerSelector_ALLOCATED},
			{MatchLabels: map[string]string{"mode": "lobby"}},
		},
		Metadata:   &allocation.MetaPatch{Labels: map[string]string{"match": "m1"}},
		Priorities: []*allocation.Priority{{Type: allocation.Priority_Counter, Key: "rooms"}},
		Counters:   map[string]*allocation.CounterAction{"rooms": {Action: wrapperspb.String("Increment"), Amount: wrapperspb.Int64(1)}},
		Lists:      map[string]*allocation.ListAction{"players": {AddValues: []string{"alice"}}},
	}
	before := marshal(t, in)
	out := ForwardRequest(in, "games")
	if !bytes.Equal(before, marshal(t, in)) {
		t.Fatal("ForwardRequest changed its input")
	}
	f := fields(t, marshal(t, out))
	for _, n := range []protowire.Number{fNamespace, fMultiCluster, fRequired, fPreferred, fScheduling, fMetaPatch, fMetadata, fSelectors, fPriorities, fCounters, fLists} {
		if len(f[n]) == 0 {
			t.Errorf("field %d is not set", n)
		}
	}
	if string(f[fNamespace][0]) != "games" {
		t.Errorf("namespace %q, want the policy's %q", f[fNamespace][0], "games")
	}
	mc := fields(t, f[fMultiCluster][0])
	if len(mc[fMCEnabled]) != 0 {
		t.Error("multiClusterSetting.enabled is on the wire (true): the remote would forward again")
	}
	sel := fields(t, mc[fMCSelector][0])
	if len(sel[1]) != 1 {
		t.Errorf("policySelector not kept: %v", sel)
	}
	if len(f[fSelectors]) != 2 || len(f[fPreferred]) != 1 || len(f[fRequired]) != 1 {
		t.Fatalf("selectors %d, preferred %d, required %d; want 2, 1, 1", len(f[fSelectors]), len(f[fPreferred]), len(f[fRequired]))
	}
	if !bytes.Equal(f[fPreferred][0], f[fSelectors][0]) || !bytes.Equal(f[fRequired][0], f[fSelectors][1]) {
		t.Error("preferred/required are not the selectors' first and last")
	}
	if !bytes.Equal(f[fMetaPatch][0], f[fMetadata][0]) || len(f[fMetadata][0]) == 0 {
		t.Error("metaPatch does not repeat metadata")
	}
	if got := mustVarint(t, f[fScheduling][0]); got != uint64(allocation.AllocationRequest_Distributed) {
		t.Errorf("scheduling %d", got)
	}
}

// A request in the deprecated form (required, preferred, metaPatch) is
// forwarded in both forms too.
func TestForwardRequestDeprecatedForm(t *testing.T) {
	in := &allocation.AllocationRequest{
		RequiredGameServerSelector:   &allocation.GameServerSelector{MatchLabels: map[string]string{"a": "1"}},
		PreferredGameServerSelectors: []*allocation.GameServerSelector{{MatchLabels: map[string]string{"b": "2"}}},
		MetaPatch:                    &allocation.MetaPatch{Annotations: map[string]string{"x": "y"}},
		MultiClusterSetting:          &allocation.MultiClusterSetting{Enabled: true},
	}
	out := ForwardRequest(in, "default")
	sels := out.GetGameServerSelectors()
	if len(sels) != 2 || sels[0].GetMatchLabels()["b"] != "2" || sels[1].GetMatchLabels()["a"] != "1" {
		t.Errorf("gameServerSelectors %v, want preferred then required", sels)
	}
	if out.GetMetadata().GetAnnotations()["x"] != "y" || out.GetMetaPatch().GetAnnotations()["x"] != "y" {
		t.Errorf("metadata %v metaPatch %v", out.GetMetadata(), out.GetMetaPatch())
	}
	if out.GetMultiClusterSetting() == nil || out.GetMultiClusterSetting().GetEnabled() {
		t.Error("multiClusterSetting must be present and disabled")
	}
	// A request with no selector at all gets the empty required selector
	// Agones' conversion gives it (match any Ready server).
	out = ForwardRequest(&allocation.AllocationRequest{}, "default")
	if len(out.GetGameServerSelectors()) != 1 || out.GetRequiredGameServerSelector() == nil { //nolint:staticcheck // SA1019: checking the deprecated field is written.
		t.Errorf("empty request forwarded as %v", out)
	}
}

func mustVarint(t *testing.T, b []byte) uint64 {
	t.Helper()
	v, n := protowire.ConsumeVarint(b)
	if n < 0 {
		t.Fatal("bad varint")
	}
	return v
}
