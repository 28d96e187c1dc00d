package allocator

import (
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/quartermaster-dev/quartermaster/allocator/wire"
	"github.com/quartermaster-dev/quartermaster/core"
)

func TestResponseForMatchesWire(t *testing.T) {
	servers := []*core.GameServer{
		{Name: "bare"},
		{
			Namespace: "ns", Name: "full", NodeName: "n1", Address: "10.0.0.1",
			Labels:      map[string]string{"a": "1", core.FleetLabel: "f"},
			Annotations: map[string]string{core.LastAllocatedAnnotation: "2026-01-01T00:00:00Z"},
			Addresses:   []core.Address{{Type: "InternalIP", Address: "10.0.0.1"}, {Type: "Hostname", Address: "n1"}},
			Ports:       []core.Port{{Name: "game", Port: 7000}, {Name: "query", Port: 7001}},
			Counters:    map[string]core.Counter{"rooms": {Count: 2, Capacity: 10}, "zero": {}},
			Lists:       map[string]core.List{"players": {Values: []string{"p1", "p2"}, Capacity: 8}, "empty": {Capacity: 1}},
		},
		{Name: "empty-maps", Labels: map[string]string{}, Counters: map[string]core.Counter{}},
		manyPorts(),
	}
	for _, gs := range servers {
		want, err := wire.ResponseFromCore(gs, wire.SourceLocal)
		if err != nil {
			t.Fatal(err)
		}
		if got := responseFor(gs, wire.SourceLocal); !proto.Equal(got, want) {
			t.Errorf("%s:\nresponseFor:      %v\nResponseFromCore: %v", gs.Name, got, want)
		}
	}
}

func manyPorts() *core.GameServer {
	gs := &core.GameServer{Name: "many-ports"}
	for i := range 6 {
		gs.Ports = append(gs.Ports, core.Port{Name: string(rune('a' + i)), Port: int32(7000 + i)})
		gs.Addresses = append(gs.Addresses, core.Address{Type: "T", Address: string(rune('A' + i))})
	}
	return gs
}
