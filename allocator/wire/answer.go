package wire

import (
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/quartermaster-dev/quartermaster/allocator/pb/allocation"
	"github.com/quartermaster-dev/quartermaster/core"
)

// The allocator's gRPC answer to an allocation it made itself is written
// here straight from the server, without building the message
// (ResponseFromCore) for the generated encoder: building it copies the
// annotations to add the allocation stamp, and from outside that cost the
// server measurably more CPU per allocation (docs/performance.md, "Service
// from outside"). The bytes are the generated encoder's for
// ResponseFromCore(gs, source) (answer_test.go holds them to that).

// Field numbers of AllocationResponse and the messages inside it, read
// from the generated descriptors.
var (
	fRespGameServerName = fieldNum(&allocation.AllocationResponse{}, "gameServerName")
	fRespPorts          = fieldNum(&allocation.AllocationResponse{}, "ports")
	fRespAddress        = fieldNum(&allocation.AllocationResponse{}, "address")
	fRespNodeName       = fieldNum(&allocation.AllocationResponse{}, "nodeName")
	fRespSource         = fieldNum(&allocation.AllocationResponse{}, "source")
	fRespMetadata       = fieldNum(&allocation.AllocationResponse{}, "metadata")
	fRespAddresses      = fieldNum(&allocation.AllocationResponse{}, "addresses")
	fRespCounters       = fieldNum(&allocation.AllocationResponse{}, "counters")
	fRespLists          = fieldNum(&allocation.AllocationResponse{}, "lists")

	fPortName        = fieldNum(&allocation.AllocationResponse_GameServerStatusPort{}, "name")
	fPortPort        = fieldNum(&allocation.AllocationResponse_GameServerStatusPort{}, "port")
	fAddrType        = fieldNum(&allocation.AllocationResponse_GameServerStatusAddress{}, "type")
	fAddrAddress     = fieldNum(&allocation.AllocationResponse_GameServerStatusAddress{}, "address")
	fMetaLabels      = fieldNum(&allocation.AllocationResponse_GameServerMetadata{}, "labels")
	fMetaAnnots      = fieldNum(&allocation.AllocationResponse_GameServerMetadata{}, "annotations")
	fMapKey          = mapEntryField(&allocation.AllocationResponse{}, "counters", "key")
	fMapValue        = mapEntryField(&allocation.AllocationResponse{}, "counters", "value")
	fCounterCount    = fieldNum(&allocation.AllocationResponse_CounterStatus{}, "count")
	fCounterCapacity = fieldNum(&allocation.AllocationResponse_CounterStatus{}, "capacity")
	fListValues      = fieldNum(&allocation.AllocationResponse_ListStatus{}, "values")
	fListCapacity    = fieldNum(&allocation.AllocationResponse_ListStatus{}, "capacity")
	fInt64Value      = fWrapperValue
)

// A map entry is a message of a key and a value. Unlike other proto3
// fields, the proto library writes both even when empty.
func sizeStringMap(num protowire.Number, m map[string]string) int {
	n := 0
	for k, v := range m {
		n += sizeMessage(num, sizeMapKey(k)+sizeMessage(fMapValue, len(v)))
	}
	return n
}

func appendStringMap(b []byte, num protowire.Number, m map[string]string) []byte {
	for k, v := range m {
		b = appendStringEntry(b, num, k, v)
	}
	return b
}

func appendStringEntry(b []byte, num protowire.Number, k, v string) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(sizeMapKey(k)+sizeMessage(fMapValue, len(v))))
	b = appendMapKey(b, k)
	b = protowire.AppendTag(b, fMapValue, protowire.BytesType)
	return protowire.AppendString(b, v)
}

// sizeAnnotations and appendAnnotations encode the annotations as Agones
// has them (core.GameServer.AllAnnotations) without building that map: the
// server's own, with the last-allocated stamp in place of any it carries.
func sizeAnnotations(gs *core.GameServer) int {
	if gs.AllocatedAt == 0 {
		return sizeStringMap(fMetaAnnots, gs.Annotations)
	}
	n := sizeMessage(fMetaAnnots, sizeMapKey(core.LastAllocatedAnnotation)+sizeMessage(fMapValue, stampSize(gs.AllocatedAt)))
	for k, v := range gs.Annotations {
		if k != core.LastAllocatedAnnotation {
			n += sizeMessage(fMetaAnnots, sizeMapKey(k)+sizeMessage(fMapValue, len(v)))
		}
	}
	return n
}

// stampSize is the length of the last-allocated stamp of a server
// allocated at at (Unix nanoseconds), without formatting it: RFC 3339 is 20
// bytes for the years int64 nanoseconds reach, then a dot and the fraction
// up to its last digit that is not 0, if any.
func stampSize(at int64) int {
	frac := at % 1e9
	if frac < 0 {
		frac += 1e9
	}
	if frac == 0 {
		return 20
	}
	n := 9
	for frac%10 == 0 {
		frac /= 10
		n--
	}
	return 21 + n
}

func appendAnnotations(b []byte, gs *core.GameServer) []byte {
	if gs.AllocatedAt == 0 {
		return appendStringMap(b, fMetaAnnots, gs.Annotations)
	}
	for k, v := range gs.Annotations {
		if k != core.LastAllocatedAnnotation {
			b = appendStringEntry(b, fMetaAnnots, k, v)
		}
	}
	var buf [48]byte
	stamp := gs.AppendLastAllocated(buf[:0])
	b = protowire.AppendTag(b, fMetaAnnots, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(sizeMapKey(core.LastAllocatedAnnotation)+sizeMessage(fMapValue, len(stamp))))
	b = appendMapKey(b, core.LastAllocatedAnnotation)
	b = protowire.AppendTag(b, fMapValue, protowire.BytesType)
	return protowire.AppendBytes(b, stamp)
}

func sizeMapKey(k string) int { return sizeMessage(fMapKey, len(k)) }

func appendMapKey(b []byte, k string) []byte {
	b = protowire.AppendTag(b, fMapKey, protowire.BytesType)
	return protowire.AppendString(b, k)
}

func sizeMessage(num protowire.Number, n int) int {
	return protowire.SizeTag(num) + protowire.SizeBytes(n)
}

// proto3 scalars are left out when they hold the zero value.
func sizeString(num protowire.Number, s string) int {
	if s == "" {
		return 0
	}
	return protowire.SizeTag(num) + protowire.SizeBytes(len(s))
}

func appendString(b []byte, num protowire.Number, s string) []byte {
	if s == "" {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendString(b, s)
}

// An int32 is sign-extended to 64 bits on the wire, so a negative one takes
// ten bytes.
func sizeInt32(num protowire.Number, v int32) int {
	if v == 0 {
		return 0
	}
	return protowire.SizeTag(num) + protowire.SizeVarint(uint64(int64(v)))
}

func appendInt32(b []byte, num protowire.Number, v int32) []byte {
	if v == 0 {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.VarintType)
	return protowire.AppendVarint(b, uint64(int64(v)))
}

// GameServerResponseSize is the length of AppendGameServerResponse's
// encoding.
func GameServerResponseSize(gs *core.GameServer, source string) int {
	n := sizeString(fRespGameServerName, gs.Name)
	for _, p := range gs.Ports {
		n += sizeMessage(fRespPorts, sizeString(fPortName, p.Name)+sizeInt32(fPortPort, p.Port))
	}
	n += sizeString(fRespAddress, gs.Address)
	n += sizeString(fRespNodeName, gs.NodeName)
	n += sizeString(fRespSource, source)
	n += sizeMessage(fRespMetadata, sizeStringMap(fMetaLabels, gs.Labels)+sizeAnnotations(gs))
	for _, a := range gs.Addresses {
		n += sizeMessage(fRespAddresses, sizeString(fAddrType, a.Type)+sizeString(fAddrAddress, a.Address))
	}
	for k, c := range gs.Counters {
		n += sizeMessage(fRespCounters, sizeMapKey(k)+sizeMessage(fMapValue, coreCounterSize(c)))
	}
	for k, l := range gs.Lists {
		n += sizeMessage(fRespLists, sizeMapKey(k)+sizeMessage(fMapValue, coreListSize(l)))
	}
	return n
}

// AppendGameServerResponse appends the protobuf encoding of
// ResponseFromCore(gs, source) to b, without building the message: the
// allocator's gRPC answer to an allocation it made itself. Map entries come
// in Go's map order, as proto.Marshal's do.
func AppendGameServerResponse(b []byte, gs *core.GameServer, source string) []byte {
	b = appendString(b, fRespGameServerName, gs.Name)
	for _, p := range gs.Ports {
		b = protowire.AppendTag(b, fRespPorts, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(sizeString(fPortName, p.Name)+sizeInt32(fPortPort, p.Port)))
		b = appendString(b, fPortName, p.Name)
		b = appendInt32(b, fPortPort, p.Port)
	}
	b = appendString(b, fRespAddress, gs.Address)
	b = appendString(b, fRespNodeName, gs.NodeName)
	b = appendString(b, fRespSource, source)
	// Metadata is always present (ResponseFromCore's promise to clients).
	b = protowire.AppendTag(b, fRespMetadata, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(sizeStringMap(fMetaLabels, gs.Labels)+sizeAnnotations(gs)))
	b = appendStringMap(b, fMetaLabels, gs.Labels)
	b = appendAnnotations(b, gs)
	for _, a := range gs.Addresses {
		b = protowire.AppendTag(b, fRespAddresses, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(sizeString(fAddrType, a.Type)+sizeString(fAddrAddress, a.Address)))
		b = appendString(b, fAddrType, a.Type)
		b = appendString(b, fAddrAddress, a.Address)
	}
	for k, c := range gs.Counters {
		cs := coreCounterSize(c)
		b = appendMapEntryHead(b, fRespCounters, k, cs)
		b = appendInt64(b, fCounterCount, c.Count)
		b = appendInt64(b, fCounterCapacity, c.Capacity)
	}
	for k, l := range gs.Lists {
		ls := coreListSize(l)
		b = appendMapEntryHead(b, fRespLists, k, ls)
		for _, v := range l.Values {
			b = protowire.AppendTag(b, fListValues, protowire.BytesType)
			b = protowire.AppendString(b, v)
		}
		b = appendInt64(b, fListCapacity, l.Capacity)
	}
	return b
}

// A counter's count and capacity, and a list's capacity, are always sent
// (as present wrappers), zero or not.
func coreCounterSize(c core.Counter) int {
	return sizeInt64(fCounterCount, c.Count) + sizeInt64(fCounterCapacity, c.Capacity)
}

func coreListSize(l core.List) int {
	n := 0
	for _, v := range l.Values {
		n += protowire.SizeTag(fListValues) + protowire.SizeBytes(len(v))
	}
	return n + sizeInt64(fListCapacity, l.Capacity)
}

// sizeInt64 and appendInt64 write a present Int64Value holding v.
func sizeInt64(num protowire.Number, v int64) int {
	inner := 0
	if v != 0 {
		inner = protowire.SizeTag(fInt64Value) + protowire.SizeVarint(uint64(v))
	}
	return sizeMessage(num, inner)
}

func appendInt64(b []byte, num protowire.Number, v int64) []byte {
	inner := 0
	if v != 0 {
		inner = protowire.SizeTag(fInt64Value) + protowire.SizeVarint(uint64(v))
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(inner))
	if v != 0 {
		b = protowire.AppendTag(b, fInt64Value, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(v))
	}
	return b
}

// appendMapEntryHead writes a map entry of field up to its message value's
// contents: the entry's tag and length, the key, and the value's tag and
// length (valueSize bytes, which the caller writes next).
func appendMapEntryHead(b []byte, field protowire.Number, key string, valueSize int) []byte {
	b = protowire.AppendTag(b, field, protowire.BytesType)
	b = protowire.AppendVarint(b, uint64(sizeMapKey(key)+sizeMessage(fMapValue, valueSize)))
	b = appendMapKey(b, key)
	b = protowire.AppendTag(b, fMapValue, protowire.BytesType)
	return protowire.AppendVarint(b, uint64(valueSize))
}
