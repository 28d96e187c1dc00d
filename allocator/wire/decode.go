package wire

import (
	"bytes"
	"errors"
	"fmt"
	"unicode/utf8"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/quartermaster-dev/quartermaster/allocator/pb/allocation"
)

// ErrMalformed is wrapped by DecodeRequest's error for bytes that are not an
// AllocationRequest in protobuf's wire format: what proto.Unmarshal rejects.
var ErrMalformed = errors.New("malformed AllocationRequest")

// requestDescriptor is the AllocationRequest's generated descriptor.
var requestDescriptor = (*allocation.AllocationRequest)(nil).ProtoReflect().Descriptor()

// DecodeRequest reads an AllocationRequest in protobuf's wire format and
// answers as proto.Unmarshal does (the fuzz test holds it to that). The
// usual request is read by vtprotobuf's generated UnmarshalVTUnsafe from a
// copy of b, which its strings share instead of a copy each (b may be
// reused once DecodeRequest has returned; the copy never changes). scan first
// refuses what UnmarshalVT would let through (strings that are not UTF-8,
// field numbers out of range), and sends the bytes UnmarshalVT reads
// otherwise than protobuf does to the proto library. Bytes proto.Unmarshal
// rejects give an error wrapping ErrMalformed.
func DecodeRequest(b []byte) (*allocation.AllocationRequest, error) {
	unusual, err := scan(b, requestDescriptor)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	m := new(allocation.AllocationRequest)
	if !unusual && m.UnmarshalVTUnsafe(bytes.Clone(b)) == nil {
		return m, nil
	}
	m = new(allocation.AllocationRequest)
	if err := proto.Unmarshal(b, m); err != nil {
		return nil, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	return m, nil
}

// scan walks b, a message of type md, and the messages inside it, with
// the field numbers and types of the generated descriptors. It reports an
// error for what proto.Unmarshal refuses and UnmarshalVT does not: a
// string that is not UTF-8, a field number out of range, a field it cannot
// step over. unusual is true for what UnmarshalVT reads otherwise than
// protobuf does: a known field number with another wire type (protobuf
// reads it as an unknown field), and a map entry with a field other than
// its key and value or with either twice (protobuf merges a value message
// sent twice; UnmarshalVT keeps the last, and misreads an entry's unknown
// fields), and an unknown field inside a well-known type (a wrapper),
// which UnmarshalVT drops.
func scan(b []byte, md protoreflect.MessageDescriptor) (unusual bool, err error) {
	fields := md.Fields()
	entry := md.IsMapEntry()
	var seen [3]bool // a map entry's key (1) and value (2)
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return false, protowire.ParseError(n)
		}
		if num > protowire.MaxValidNumber {
			return false, fmt.Errorf("field number %d out of range", num)
		}
		b = b[n:]
		fd := fields.ByNumber(num)
		if entry {
			if fd == nil || seen[num] {
				unusual = true
			} else {
				seen[num] = true
			}
		}
		if fd == nil || !wireTypeFits(fd, typ) {
			unusual = unusual || fd != nil || md.ParentFile().Package() == "google.protobuf"
			if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
				return false, protowire.ParseError(n)
			}
			b = b[n:]
			continue
		}
		if typ != protowire.BytesType {
			if n = protowire.ConsumeFieldValue(num, typ, b); n < 0 {
				return false, protowire.ParseError(n)
			}
			b = b[n:]
			continue
		}
		v, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return false, protowire.ParseError(n)
		}
		b = b[n:]
		switch fd.Kind() {
		case protoreflect.StringKind:
			if !utf8.Valid(v) {
				return false, fmt.Errorf("%s: a string field is not valid UTF-8", fd.FullName())
			}
		case protoreflect.MessageKind:
			inner, err := scan(v, fd.Message())
			if err != nil {
				return false, err
			}
			unusual = unusual || inner
		}
	}
	return unusual, nil
}

// wireTypeFits reports whether protobuf reads a field of wire type typ as
// fd (and not as an unknown field): fd's own wire type, or a packed list
// of numbers.
func wireTypeFits(fd protoreflect.FieldDescriptor, typ protowire.Type) bool {
	var want protowire.Type
	switch fd.Kind() {
	case protoreflect.StringKind, protoreflect.BytesKind, protoreflect.MessageKind:
		return typ == protowire.BytesType
	case protoreflect.GroupKind:
		return typ == protowire.StartGroupType
	case protoreflect.Fixed32Kind, protoreflect.Sfixed32Kind, protoreflect.FloatKind:
		want = protowire.Fixed32Type
	case protoreflect.Fixed64Kind, protoreflect.Sfixed64Kind, protoreflect.DoubleKind:
		want = protowire.Fixed64Type
	default:
		want = protowire.VarintType
	}
	return typ == want || (fd.IsList() && typ == protowire.BytesType)
}
