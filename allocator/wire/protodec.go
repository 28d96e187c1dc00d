package wire

import (
	"fmt"
	"strconv"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/quartermaster-dev/quartermaster/allocator/pb/allocation"
	"github.com/quartermaster-dev/quartermaster/core"
)

// Field numbers of AllocationRequest and the messages inside it, read from
// the generated descriptors (allocation.proto): the one place they are
// written is the .proto file. A field that is not there fails at start.
var (
	fReqNamespace    = fieldNum(&allocation.AllocationRequest{}, "namespace")
	fReqMultiCluster = fieldNum(&allocation.AllocationRequest{}, "multiClusterSetting")
	fReqRequired     = fieldNum(&allocation.AllocationRequest{}, "requiredGameServerSelector")
	fReqPreferred    = fieldNum(&allocation.AllocationRequest{}, "preferredGameServerSelectors")
	fReqScheduling   = fieldNum(&allocation.AllocationRequest{}, "scheduling")
	fReqMetaPatch    = fieldNum(&allocation.AllocationRequest{}, "metaPatch")
	fReqMetadata     = fieldNum(&allocation.AllocationRequest{}, "metadata")
	fReqSelectors    = fieldNum(&allocation.AllocationRequest{}, "gameServerSelectors")
	fReqPriorities   = fieldNum(&allocation.AllocationRequest{}, "priorities")
	fReqCounters     = fieldNum(&allocation.AllocationRequest{}, "counters")
	fReqLists        = fieldNum(&allocation.AllocationRequest{}, "lists")

	fMCEnabled                = fieldNum(&allocation.MultiClusterSetting{}, "enabled")
	fMCPolicySelector         = fieldNum(&allocation.MultiClusterSetting{}, "policySelector")
	fLabelSelectorMatchLabels = fieldNum(&allocation.LabelSelector{}, "matchLabels")

	fSelMatchLabels = fieldNum(&allocation.GameServerSelector{}, "matchLabels")
	fSelState       = fieldNum(&allocation.GameServerSelector{}, "gameServerState")
	fSelCounters    = fieldNum(&allocation.GameServerSelector{}, "counters")
	fSelLists       = fieldNum(&allocation.GameServerSelector{}, "lists")
	fSelExpressions = fieldNum(&allocation.GameServerSelector{}, "matchExpressions")

	fExprKey      = fieldNum(&allocation.LabelMatchExpressions{}, "key")
	fExprOperator = fieldNum(&allocation.LabelMatchExpressions{}, "operator")
	fExprValues   = fieldNum(&allocation.LabelMatchExpressions{}, "values")

	fCSMinCount     = fieldNum(&allocation.CounterSelector{}, "minCount")
	fCSMaxCount     = fieldNum(&allocation.CounterSelector{}, "maxCount")
	fCSMinAvailable = fieldNum(&allocation.CounterSelector{}, "minAvailable")
	fCSMaxAvailable = fieldNum(&allocation.CounterSelector{}, "maxAvailable")
	fLSContains     = fieldNum(&allocation.ListSelector{}, "containsValue")
	fLSMinAvailable = fieldNum(&allocation.ListSelector{}, "minAvailable")
	fLSMaxAvailable = fieldNum(&allocation.ListSelector{}, "maxAvailable")

	fPrioType  = fieldNum(&allocation.Priority{}, "type")
	fPrioKey   = fieldNum(&allocation.Priority{}, "key")
	fPrioOrder = fieldNum(&allocation.Priority{}, "order")

	fCAAction     = fieldNum(&allocation.CounterAction{}, "action")
	fCAAmount     = fieldNum(&allocation.CounterAction{}, "amount")
	fCACapacity   = fieldNum(&allocation.CounterAction{}, "capacity")
	fLAAdd        = fieldNum(&allocation.ListAction{}, "addValues")
	fLACapacity   = fieldNum(&allocation.ListAction{}, "capacity")
	fLADelete     = fieldNum(&allocation.ListAction{}, "deleteValues")
	fWrapperValue = fieldNum(&wrapperspb.Int64Value{}, "value")
	fPatchLabels  = fieldNum(&allocation.MetaPatch{}, "labels")
	fPatchAnnots  = fieldNum(&allocation.MetaPatch{}, "annotations")
	fEntryKey     = mapEntryField(&allocation.MetaPatch{}, "labels", "key")
	fEntryValue   = mapEntryField(&allocation.MetaPatch{}, "labels", "value")
)

// fieldNum is the number of m's field name.
func fieldNum(m proto.Message, name string) protowire.Number {
	fd := m.ProtoReflect().Descriptor().Fields().ByName(protoreflect.Name(name))
	if fd == nil {
		panic("wire: " + string(m.ProtoReflect().Descriptor().FullName()) + " has no field " + name)
	}
	return fd.Number()
}

// mapEntryField is the number of the key or the value (field) in the
// entries of m's map field mapField; protobuf gives every map entry the
// same.
func mapEntryField(m proto.Message, mapField, field string) protowire.Number {
	fd := m.ProtoReflect().Descriptor().Fields().ByName(protoreflect.Name(mapField))
	if fd == nil || !fd.IsMap() {
		panic("wire: " + string(m.ProtoReflect().Descriptor().FullName()) + " has no map field " + mapField)
	}
	if field == "key" {
		return fd.MapKey().Number()
	}
	return fd.MapValue().Number()
}

// DecodeRequestToCore reads an AllocationRequest in protobuf's wire format
// straight into the core's Request: what DecodeRequest followed by
// RequestToCore gives (the fuzz test holds it to that, unknown fields,
// repeated and merged fields and malformed input included), without
// building the message and its maps first. It is the request path's
// decoder for a request that is not forwarded: the message is garbage the
// moment it is converted, and the allocator's CPU per allocation from
// outside was measured more than 10% higher with it when requests differ
// (docs/performance.md, "Service from outside").
//
// Bytes proto.Unmarshal rejects give an error wrapping ErrMalformed; a
// well-formed request that RequestToCore rejects gives its
// *core.InvalidRequestError, with only Namespace set in the Request (for
// the caller's metrics). The selectors go in sel's storage (from its
// length on) while they fit.
func DecodeRequestToCore(b []byte, sel []core.Selector) (core.Request, error) {
	var d reqDecoder
	d.out.Selectors = sel[len(sel):]
	if err := d.request(b); err != nil {
		return core.Request{}, err
	}
	if d.hasMetadata {
		d.out.Metadata = d.metadata
	} else {
		d.out.Metadata = d.metaPatch
	}
	if err := d.check(); err != nil {
		return core.Request{Namespace: d.out.Namespace}, err
	}
	return d.out, nil
}

// reqDecoder holds what DecodeRequest has read so far. Enum values are
// stored as read; check turns those the API does not define into the
// errors RequestToCore gives, once every occurrence of a field has been
// read (the last one wins, so an early bad value may be overwritten).
type reqDecoder struct {
	out                 core.Request
	metadata, metaPatch core.MetaPatch
	hasMetadata         bool
}

// Unknown values of the string-typed enums (selector state, expression
// operator) are kept as this marker followed by the number; no value the
// core defines starts with it.
const badEnum = "\x00"

func unknownState(v int32) core.State { return core.State(badEnum + strconv.Itoa(int(v))) }

func unknownOperator(v int32) core.Operator {
	return core.Operator(badEnum + strconv.Itoa(int(v)))
}

// badNumber returns the number a marked value holds.
func badNumber(s string) (int32, bool) {
	if len(s) == 0 || s[:1] != badEnum {
		return 0, false
	}
	v, _ := strconv.Atoi(s[1:])
	return int32(v), true
}

func malformed(what string, n int) error {
	return fmt.Errorf("%w: %s: %v", ErrMalformed, what, protowire.ParseError(n))
}

// next reads a field's tag as the generated decoder does: a field number
// outside 1..2^29-1 is malformed.
func next(b []byte) (protowire.Number, protowire.Type, int, error) {
	num, typ, n := protowire.ConsumeTag(b)
	if n < 0 {
		return 0, 0, 0, malformed("field tag", n)
	}
	if num > protowire.MaxValidNumber {
		return 0, 0, 0, fmt.Errorf("%w: field number %d out of range", ErrMalformed, num)
	}
	return num, typ, n, nil
}

// skip consumes a field the decoder does not read: an unknown number, or a
// known number with another wire type, which protobuf reads as unknown too.
func skip(num protowire.Number, typ protowire.Type, b []byte) (int, error) {
	n := protowire.ConsumeFieldValue(num, typ, b)
	if n < 0 {
		return 0, malformed("field "+strconv.Itoa(int(num)), n)
	}
	return n, nil
}

// message consumes a length-delimited field's bytes.
func message(b []byte) ([]byte, int, error) {
	v, n := protowire.ConsumeBytes(b)
	if n < 0 {
		return nil, 0, malformed("length-delimited field", n)
	}
	return v, n, nil
}

// str consumes a proto3 string, which must be valid UTF-8.
func str(b []byte) (string, int, error) {
	v, n, err := message(b)
	if err != nil {
		return "", 0, err
	}
	if !utf8.Valid(v) {
		return "", 0, fmt.Errorf("%w: a string field is not valid UTF-8", ErrMalformed)
	}
	return string(v), n, nil
}

func varint(b []byte) (uint64, int, error) {
	v, n := protowire.ConsumeVarint(b)
	if n < 0 {
		return 0, 0, malformed("varint", n)
	}
	return v, n, nil
}

// fields calls f for each field of message b. f reports how many bytes of
// the value it consumed, 0 for a field it does not read (skipped here).
func fields(b []byte, f func(num protowire.Number, typ protowire.Type, v []byte) (int, error)) error {
	for len(b) > 0 {
		num, typ, n, err := next(b)
		if err != nil {
			return err
		}
		b = b[n:]
		if n, err = f(num, typ, b); err != nil {
			return err
		}
		if n == 0 {
			if n, err = skip(num, typ, b); err != nil {
				return err
			}
		}
		b = b[n:]
	}
	return nil
}

const (
	bytesType  = protowire.BytesType
	varintType = protowire.VarintType
)

func (d *reqDecoder) request(b []byte) error {
	return fields(b, func(num protowire.Number, typ protowire.Type, b []byte) (n int, err error) {
		switch {
		case typ == varintType && num == fReqScheduling:
			var v uint64
			v, n, err = varint(b)
			// core.Packed and core.Distributed have the wire's numbers.
			d.out.Scheduling = core.Strategy(int32(v))
			return n, err
		case typ != bytesType:
			return 0, nil
		case num == fReqNamespace:
			d.out.Namespace, n, err = str(b)
			return n, err
		}
		v, n, err := message(b)
		if err != nil {
			return 0, err
		}
		switch num {
		case fReqMultiCluster:
			err = d.multiCluster(v)
		case fReqRequired:
			if d.out.Required == nil {
				d.out.Required = &core.Selector{State: core.StateReady}
			}
			err = selector(v, d.out.Required) // a second occurrence merges
		case fReqPreferred:
			d.out.Preferred = append(d.out.Preferred, core.Selector{State: core.StateReady})
			err = selector(v, &d.out.Preferred[len(d.out.Preferred)-1])
		case fReqSelectors:
			d.out.Selectors = append(d.out.Selectors, core.Selector{State: core.StateReady})
			err = selector(v, &d.out.Selectors[len(d.out.Selectors)-1])
		case fReqMetaPatch:
			err = metaPatch(v, &d.metaPatch)
		case fReqMetadata:
			d.hasMetadata = true
			err = metaPatch(v, &d.metadata)
		case fReqPriorities:
			d.out.Priorities = append(d.out.Priorities, core.Priority{})
			err = priority(v, &d.out.Priorities[len(d.out.Priorities)-1])
		case fReqCounters:
			err = counterAction(v, &d.out.Counters)
		case fReqLists:
			err = listAction(v, &d.out.Lists)
		default:
			return 0, nil
		}
		return n, err
	})
}

func (d *reqDecoder) multiCluster(b []byte) error {
	return fields(b, func(num protowire.Number, typ protowire.Type, b []byte) (n int, err error) {
		switch {
		case num == fMCEnabled && typ == varintType:
			var v uint64
			v, n, err = varint(b)
			d.out.MultiCluster.Enabled = v != 0
		case num == fMCPolicySelector && typ == bytesType:
			var v []byte
			if v, n, err = message(b); err == nil {
				err = fields(v, func(num protowire.Number, typ protowire.Type, b []byte) (int, error) {
					if num == fLabelSelectorMatchLabels && typ == bytesType {
						return stringEntry(b, &d.out.MultiCluster.PolicySelector)
					}
					return 0, nil
				})
			}
		}
		return n, err
	})
}

func metaPatch(b []byte, m *core.MetaPatch) error {
	return fields(b, func(num protowire.Number, typ protowire.Type, b []byte) (int, error) {
		switch {
		case typ != bytesType:
		case num == fPatchLabels:
			return stringEntry(b, &m.Labels)
		case num == fPatchAnnots:
			return stringEntry(b, &m.Annotations)
		}
		return 0, nil
	})
}

// stringEntry consumes one entry of a map<string, string> into *m (made on
// the first entry). A later entry with the same key replaces it; a missing
// key or value is "".
func stringEntry(b []byte, m *map[string]string) (int, error) {
	v, n, err := message(b)
	if err != nil {
		return 0, err
	}
	var key, val string
	err = fields(v, func(num protowire.Number, typ protowire.Type, b []byte) (n int, err error) {
		switch {
		case typ != bytesType:
		case num == fEntryKey:
			key, n, err = str(b)
		case num == fEntryValue:
			val, n, err = str(b)
		}
		return n, err
	})
	if err != nil {
		return 0, err
	}
	if *m == nil {
		*m = make(map[string]string, 1)
	}
	(*m)[key] = val
	return n, nil
}

// entry consumes one entry of a map<string, message>: the key, and the
// value's bytes (every occurrence of it: they merge, in order) passed to
// value.
func entry(b []byte, value func([]byte) error) (key string, n int, err error) {
	v, n, err := message(b)
	if err != nil {
		return "", 0, err
	}
	key, err = entryFields(v, value)
	return key, n, err
}

// entryFields is entry for the entry's own bytes.
func entryFields(v []byte, value func([]byte) error) (key string, err error) {
	err = fields(v, func(num protowire.Number, typ protowire.Type, b []byte) (n int, err error) {
		switch {
		case typ != bytesType:
		case num == fEntryKey:
			key, n, err = str(b)
		case num == fEntryValue:
			var v []byte
			if v, n, err = message(b); err == nil {
				err = value(v)
			}
		}
		return n, err
	})
	return key, err
}

// selector reads a GameServerSelector into s, over what s holds already.
func selector(b []byte, s *core.Selector) error {
	return fields(b, func(num protowire.Number, typ protowire.Type, b []byte) (n int, err error) {
		switch {
		case num == fSelState && typ == varintType:
			var v uint64
			v, n, err = varint(b)
			switch allocation.GameServerSelector_GameServerState(int32(v)) {
			case allocation.GameServerSelector_READY:
				s.State = core.StateReady
			case allocation.GameServerSelector_ALLOCATED:
				s.State = core.StateAllocated
			default:
				s.State = unknownState(int32(v))
			}
			return n, err
		case typ != bytesType:
			return 0, nil
		case num == fSelMatchLabels:
			return stringEntry(b, &s.MatchLabels)
		case num == fSelCounters:
			var c core.CounterSelector
			var key string
			key, n, err = entry(b, func(v []byte) error { return counterSelector(v, &c) })
			if err == nil {
				if s.Counters == nil {
					s.Counters = make(map[string]core.CounterSelector, 1)
				}
				s.Counters[key] = c
			}
			return n, err
		case num == fSelLists:
			var l core.ListSelector
			var key string
			key, n, err = entry(b, func(v []byte) error { return listSelector(v, &l) })
			if err == nil {
				if s.Lists == nil {
					s.Lists = make(map[string]core.ListSelector, 1)
				}
				s.Lists[key] = l
			}
			return n, err
		case num == fSelExpressions:
			var v []byte
			if v, n, err = message(b); err != nil {
				return 0, err
			}
			s.MatchExpressions = append(s.MatchExpressions, core.LabelExpression{Operator: core.OpIn})
			return n, expression(v, &s.MatchExpressions[len(s.MatchExpressions)-1])
		}
		return 0, nil
	})
}

func expression(b []byte, x *core.LabelExpression) error {
	return fields(b, func(num protowire.Number, typ protowire.Type, b []byte) (n int, err error) {
		switch {
		case num == fExprOperator && typ == varintType:
			var v uint64
			v, n, err = varint(b)
			switch allocation.LabelMatchExpressions_Operator(int32(v)) {
			case allocation.LabelMatchExpressions_In:
				x.Operator = core.OpIn
			case allocation.LabelMatchExpressions_NotIn:
				x.Operator = core.OpNotIn
			case allocation.LabelMatchExpressions_Exists:
				x.Operator = core.OpExists
			case allocation.LabelMatchExpressions_DoesNotExist:
				x.Operator = core.OpDoesNotExist
			default:
				x.Operator = unknownOperator(int32(v))
			}
		case typ != bytesType:
		case num == fExprKey:
			x.Key, n, err = str(b)
		case num == fExprValues:
			var v string
			if v, n, err = str(b); err == nil {
				x.Values = append(x.Values, v)
			}
		}
		return n, err
	})
}

// int64Field reads an int64 field numbered num into *dst when b's field is
// one; n is 0 otherwise.
func int64Field(num, want protowire.Number, typ protowire.Type, b []byte, dst *int64) (int, error) {
	if num != want || typ != varintType {
		return 0, nil
	}
	v, n, err := varint(b)
	*dst = int64(v)
	return n, err
}

func counterSelector(b []byte, c *core.CounterSelector) error {
	return fields(b, func(num protowire.Number, typ protowire.Type, b []byte) (int, error) {
		switch num {
		case fCSMinCount:
			return int64Field(num, fCSMinCount, typ, b, &c.MinCount)
		case fCSMaxCount:
			return int64Field(num, fCSMaxCount, typ, b, &c.MaxCount)
		case fCSMinAvailable:
			return int64Field(num, fCSMinAvailable, typ, b, &c.MinAvailable)
		case fCSMaxAvailable:
			return int64Field(num, fCSMaxAvailable, typ, b, &c.MaxAvailable)
		}
		return 0, nil
	})
}

func listSelector(b []byte, l *core.ListSelector) error {
	return fields(b, func(num protowire.Number, typ protowire.Type, b []byte) (n int, err error) {
		switch num {
		case fLSContains:
			if typ == bytesType {
				l.ContainsValue, n, err = str(b)
			}
			return n, err
		case fLSMinAvailable:
			return int64Field(num, fLSMinAvailable, typ, b, &l.MinAvailable)
		case fLSMaxAvailable:
			return int64Field(num, fLSMaxAvailable, typ, b, &l.MaxAvailable)
		}
		return 0, nil
	})
}

func priority(b []byte, p *core.Priority) error {
	return fields(b, func(num protowire.Number, typ protowire.Type, b []byte) (n int, err error) {
		var v uint64
		switch {
		case num == fPrioKey && typ == bytesType:
			p.Key, n, err = str(b)
		case num == fPrioType && typ == varintType:
			v, n, err = varint(b)
			p.Type = core.PriorityType(int32(v)) // Counter 0, List 1 on both sides
		case num == fPrioOrder && typ == varintType:
			v, n, err = varint(b)
			p.Order = core.Order(int32(v)) // Ascending 0, Descending 1 on both sides
		}
		return n, err
	})
}

// readInt64Wrapper reads a google.protobuf.Int64Value into *p, made on its
// first occurrence (a present wrapper is set, even when empty); later
// occurrences merge into it.
func readInt64Wrapper(b []byte, p **int64) (int, error) {
	v, n, err := message(b)
	if err != nil {
		return 0, err
	}
	if *p == nil {
		*p = new(int64)
	}
	return n, fields(v, func(num protowire.Number, typ protowire.Type, b []byte) (int, error) {
		return int64Field(num, fWrapperValue, typ, b, *p)
	})
}

// counterAction reads one entry (its own bytes) of the request's counters.
func counterAction(b []byte, m *map[string]core.CounterAction) error {
	var a core.CounterAction
	key, err := entryFields(b, func(v []byte) error {
		return fields(v, func(num protowire.Number, typ protowire.Type, b []byte) (n int, err error) {
			if typ != bytesType {
				return 0, nil
			}
			switch num {
			case fCAAction:
				// A StringValue: present means set, even to "".
				var w []byte
				if w, n, err = message(b); err == nil {
					err = fields(w, func(num protowire.Number, typ protowire.Type, b []byte) (n int, err error) {
						if num == fWrapperValue && typ == bytesType {
							a.Action, n, err = str(b)
						}
						return n, err
					})
				}
				return n, err
			case fCAAmount:
				return readInt64Wrapper(b, &a.Amount)
			case fCACapacity:
				return readInt64Wrapper(b, &a.Capacity)
			}
			return 0, nil
		})
	})
	if err != nil {
		return err
	}
	if *m == nil {
		*m = make(map[string]core.CounterAction, 1)
	}
	(*m)[key] = a
	return nil
}

// listAction reads one entry (its own bytes) of the request's lists.
func listAction(b []byte, m *map[string]core.ListAction) error {
	var a core.ListAction
	key, err := entryFields(b, func(v []byte) error {
		return fields(v, func(num protowire.Number, typ protowire.Type, b []byte) (n int, err error) {
			if typ != bytesType {
				return 0, nil
			}
			var s string
			switch num {
			case fLAAdd:
				if s, n, err = str(b); err == nil {
					a.AddValues = append(a.AddValues, s)
				}
			case fLADelete:
				if s, n, err = str(b); err == nil {
					a.DeleteValues = append(a.DeleteValues, s)
				}
			case fLACapacity:
				return readInt64Wrapper(b, &a.Capacity)
			}
			return n, err
		})
	})
	if err != nil {
		return err
	}
	if *m == nil {
		*m = make(map[string]core.ListAction, 1)
	}
	(*m)[key] = a
	return nil
}

// check reports the enum values the API does not define, as RequestToCore
// does.
func (d *reqDecoder) check() error {
	var e errs
	if s := d.out.Scheduling; s != core.Packed && s != core.Distributed {
		e.add("scheduling", unknownEnum(int32(s), "Packed or Distributed"))
	}
	checkSelector := func(field string, s *core.Selector) {
		if v, bad := badNumber(string(s.State)); bad {
			e.add(field+".gameServerState", unknownEnum(v, "READY or ALLOCATED"))
		}
		for i := range s.MatchExpressions {
			if v, bad := badNumber(string(s.MatchExpressions[i].Operator)); bad {
				e.add(field+".matchExpressions["+strconv.Itoa(i)+"].operator",
					unknownEnum(v, "In, NotIn, Exists or DoesNotExist"))
			}
		}
	}
	if d.out.Required != nil {
		checkSelector("requiredGameServerSelector", d.out.Required)
	}
	for i := range d.out.Preferred {
		checkSelector("preferredGameServerSelectors["+strconv.Itoa(i)+"]", &d.out.Preferred[i])
	}
	for i := range d.out.Selectors {
		checkSelector("gameServerSelectors["+strconv.Itoa(i)+"]", &d.out.Selectors[i])
	}
	for i, p := range d.out.Priorities {
		f := "priorities[" + strconv.Itoa(i) + "]"
		if p.Type != core.PriorityCounter && p.Type != core.PriorityList {
			e.add(f+".type", unknownEnum(int32(p.Type), "Counter or List"))
		}
		if p.Order != core.Ascending && p.Order != core.Descending {
			e.add(f+".order", unknownEnum(int32(p.Order), "Ascending or Descending"))
		}
	}
	return e.err()
}
