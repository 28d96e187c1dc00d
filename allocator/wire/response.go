package wire

import (
	"sort"

	"github.com/quartermaster-dev/quartermaster/allocator/pb/allocation"
	"github.com/quartermaster-dev/quartermaster/core"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// SourceLocal is the source an allocation served by this cluster reports,
// as Agones' allocator does.
const SourceLocal = "local"

// ResponseFromCore describes an allocated game server as an Agones
// AllocationResponse: the one answer every allocation is given, whichever
// front end and encoding carries it. source is the allocator endpoint that
// served it (SourceLocal for this cluster; the remote endpoint when
// forwarded).
//
// Metadata is always present, and counters and lists carry both count and
// capacity, so a JSON client sees every field (Agones' REST answers do the
// same). The response shares gs's maps and value slices instead of copying
// them: a server in the core is never modified once allocated, and a
// response is only read. Empty maps and lists are nil, as a decoded
// response has them. A nil server has no response (nil).
func ResponseFromCore(gs *core.GameServer, source string) *allocation.AllocationResponse {
	if gs == nil {
		return nil
	}
	// One allocation for the message, its metadata and the usual single port
	// and address.
	parts := new(responseParts)
	out := &parts.resp
	out.GameServerName, out.Address, out.NodeName, out.Source = gs.Name, gs.Address, gs.NodeName, source
	parts.meta.Labels, parts.meta.Annotations = nilIfEmpty(gs.Labels), nilIfEmpty(gs.AllAnnotations())
	out.Metadata = &parts.meta
	if n := len(gs.Ports); n > 0 {
		ports, ptrs := parts.ports[:], parts.portPtrs[:]
		if n > len(ports) {
			ports, ptrs = make([]allocation.AllocationResponse_GameServerStatusPort, n), make([]*allocation.AllocationResponse_GameServerStatusPort, n)
		}
		for i, p := range gs.Ports {
			ports[i].Name, ports[i].Port = p.Name, p.Port
			ptrs[i] = &ports[i]
		}
		out.Ports = ptrs[:n:n]
	}
	if n := len(gs.Addresses); n > 0 {
		addrs, ptrs := parts.addrs[:], parts.addrPtrs[:]
		if n > len(addrs) {
			addrs, ptrs = make([]allocation.AllocationResponse_GameServerStatusAddress, n), make([]*allocation.AllocationResponse_GameServerStatusAddress, n)
		}
		for i, a := range gs.Addresses {
			addrs[i].Type, addrs[i].Address = a.Type, a.Address
			ptrs[i] = &addrs[i]
		}
		out.Addresses = ptrs[:n:n]
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

// responseParts holds a response and its usual parts in one allocation.
type responseParts struct {
	resp     allocation.AllocationResponse
	meta     allocation.AllocationResponse_GameServerMetadata
	ports    [1]allocation.AllocationResponse_GameServerStatusPort
	portPtrs [1]*allocation.AllocationResponse_GameServerStatusPort
	addrs    [1]allocation.AllocationResponse_GameServerStatusAddress
	addrPtrs [1]*allocation.AllocationResponse_GameServerStatusAddress
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

// GameServerFromResponse is the inverse of ResponseFromCore, for callers
// that receive an allocation from another allocator (the multi-cluster
// forwarder, the client). The response does not carry the namespace, so the
// caller supplies the one it asked for. The server is in state Allocated,
// which is what a successful response means. Unset counts and capacities
// read as 0; nil entries are skipped.
func GameServerFromResponse(in *allocation.AllocationResponse, namespace string) *core.GameServer {
	out := &core.GameServer{
		Namespace:   namespace,
		Name:        in.GetGameServerName(),
		Labels:      copyStrings(in.GetMetadata().GetLabels()),
		Annotations: copyStrings(in.GetMetadata().GetAnnotations()),
		State:       core.StateAllocated,
		NodeName:    in.GetNodeName(),
		Address:     in.GetAddress(),
	}
	for _, p := range in.GetPorts() {
		if p != nil {
			out.Ports = append(out.Ports, core.Port{Name: p.GetName(), Port: p.GetPort()})
		}
	}
	for _, a := range in.GetAddresses() {
		if a != nil {
			out.Addresses = append(out.Addresses, core.Address{Type: a.GetType(), Address: a.GetAddress()})
		}
	}
	if cs := in.GetCounters(); len(cs) > 0 {
		out.Counters = make(map[string]core.Counter, len(cs))
		for k, c := range cs {
			out.Counters[k] = core.Counter{Count: c.GetCount().GetValue(), Capacity: c.GetCapacity().GetValue()}
		}
	}
	if ls := in.GetLists(); len(ls) > 0 {
		out.Lists = make(map[string]core.List, len(ls))
		for k, l := range ls {
			out.Lists[k] = core.List{Values: copySlice(l.GetValues()), Capacity: l.GetCapacity().GetValue()}
		}
	}
	return out
}

// copyStrings copies a string map; empty becomes nil so that round trips
// through the wire compare equal whichever of the two a side used.
func copyStrings(m map[string]string) map[string]string {
	if len(m) == 0 {
		return nil
	}
	c := make(map[string]string, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}

// copySlice copies a string slice; empty becomes nil, as for copyStrings.
func copySlice(s []string) []string {
	if len(s) == 0 {
		return nil
	}
	return append([]string(nil), s...)
}

// int64Ptr reads an optional wrapper: nil means the request did not set it.
func int64Ptr(w *wrapperspb.Int64Value) *int64 {
	if w == nil {
		return nil
	}
	v := w.GetValue()
	return &v
}

func int64Wrapper(p *int64) *wrapperspb.Int64Value {
	if p == nil {
		return nil
	}
	return wrapperspb.Int64(*p)
}

func sortFieldErrors(fe []core.FieldError) {
	sort.SliceStable(fe, func(i, j int) bool { return fe[i].Field < fe[j].Field })
}
