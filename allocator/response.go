package allocator

import (
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/quartermaster-dev/quartermaster/allocator/pb/allocation"
	"github.com/quartermaster-dev/quartermaster/core"
)

// responseFor is wire.ResponseFromCore for the request path: the same
// message, built with fewer allocations. The label and annotation maps are
// shared with gs instead of copied: GameServers are immutable once in the
// core, and the response is only read (marshalled) after the handler
// returns. The ports, addresses and status entries are carved from one
// backing array each. TestResponseForMatchesWire keeps the two equal.
func responseFor(gs *core.GameServer, source string) *allocation.AllocationResponse {
	out := &allocation.AllocationResponse{
		GameServerName: gs.Name,
		Address:        gs.Address,
		NodeName:       gs.NodeName,
		Source:         source,
		Metadata: &allocation.AllocationResponse_GameServerMetadata{
			Labels:      nilIfEmpty(gs.Labels),
			Annotations: nilIfEmpty(gs.Annotations),
		},
	}
	if n := len(gs.Ports); n > 0 {
		backing := make([]allocation.AllocationResponse_GameServerStatusPort, n)
		out.Ports = make([]*allocation.AllocationResponse_GameServerStatusPort, n)
		for i, p := range gs.Ports {
			backing[i].Name, backing[i].Port = p.Name, p.Port
			out.Ports[i] = &backing[i]
		}
	}
	if n := len(gs.Addresses); n > 0 {
		backing := make([]allocation.AllocationResponse_GameServerStatusAddress, n)
		out.Addresses = make([]*allocation.AllocationResponse_GameServerStatusAddress, n)
		for i, a := range gs.Addresses {
			backing[i].Type, backing[i].Address = a.Type, a.Address
			out.Addresses[i] = &backing[i]
		}
	}
	if len(gs.Counters) > 0 {
		out.Counters = make(map[string]*allocation.AllocationResponse_CounterStatus, len(gs.Counters))
		for k, c := range gs.Counters {
			out.Counters[k] = &allocation.AllocationResponse_CounterStatus{
				Count:    wrapperspb.Int64(c.Count),
				Capacity: wrapperspb.Int64(c.Capacity),
			}
		}
	}
	if len(gs.Lists) > 0 {
		out.Lists = make(map[string]*allocation.AllocationResponse_ListStatus, len(gs.Lists))
		for k, l := range gs.Lists {
			out.Lists[k] = &allocation.AllocationResponse_ListStatus{
				Values:   nilIfEmptySlice(l.Values),
				Capacity: wrapperspb.Int64(l.Capacity),
			}
		}
	}
	return out
}

func nilIfEmpty(m map[string]string) map[string]string {
	if len(m) == 0 {
		return nil
	}
	return m
}

func nilIfEmptySlice(s []string) []string {
	if len(s) == 0 {
		return nil
	}
	return s
}
