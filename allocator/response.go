package allocator

import (
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/quartermaster-dev/quartermaster/allocator/pb/allocation"
	"github.com/quartermaster-dev/quartermaster/core"
)

// responseFor is wire.ResponseFromCore for the request path: the same
// message, built with fewer allocations. The label map (and the annotation
// map, when there is no stamp to add to it) is shared with gs instead of
// copied: GameServers are immutable once in the core, and the response is
// only read (marshalled) after the handler returns. TestResponseForMatchesWire keeps the two equal.
func responseFor(gs *core.GameServer, source string) *allocation.AllocationResponse {
	// One allocation for the message, its metadata and (for the usual few)
	// its ports and addresses.
	buf := new(responseBuf)
	out := &buf.resp
	out.GameServerName, out.Address, out.NodeName, out.Source = gs.Name, gs.Address, gs.NodeName, source
	buf.meta.Labels, buf.meta.Annotations = nilIfEmpty(gs.Labels), nilIfEmpty(gs.AllAnnotations())
	out.Metadata = &buf.meta
	if n := len(gs.Ports); n > 0 {
		ports, ptrs := buf.ports[:0], buf.portPtrs[:0]
		if n > len(buf.ports) {
			ports, ptrs = make([]allocation.AllocationResponse_GameServerStatusPort, 0, n), make([]*allocation.AllocationResponse_GameServerStatusPort, 0, n)
		}
		ports = ports[:n]
		for i, p := range gs.Ports {
			ports[i].Name, ports[i].Port = p.Name, p.Port
			ptrs = append(ptrs, &ports[i])
		}
		out.Ports = ptrs
	}
	if n := len(gs.Addresses); n > 0 {
		addrs, ptrs := buf.addrs[:0], buf.addrPtrs[:0]
		if n > len(buf.addrs) {
			addrs, ptrs = make([]allocation.AllocationResponse_GameServerStatusAddress, 0, n), make([]*allocation.AllocationResponse_GameServerStatusAddress, 0, n)
		}
		addrs = addrs[:n]
		for i, a := range gs.Addresses {
			addrs[i].Type, addrs[i].Address = a.Type, a.Address
			ptrs = append(ptrs, &addrs[i])
		}
		out.Addresses = ptrs
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

// responseBuf holds a response and its usual parts in one allocation.
type responseBuf struct {
	resp     allocation.AllocationResponse
	meta     allocation.AllocationResponse_GameServerMetadata
	ports    [4]allocation.AllocationResponse_GameServerStatusPort
	portPtrs [4]*allocation.AllocationResponse_GameServerStatusPort
	addrs    [4]allocation.AllocationResponse_GameServerStatusAddress
	addrPtrs [4]*allocation.AllocationResponse_GameServerStatusAddress
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
