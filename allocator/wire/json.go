package wire

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"

	"github.com/quartermaster-dev/quartermaster/allocator/pb/allocation"
	"github.com/quartermaster-dev/quartermaster/core"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// The REST codec: proto3 JSON as Agones' REST endpoint speaks it. Keys are
// the proto field names (which, being lowerCamelCase in these protos, are
// also the JSON names, so clients may send either), enums are their names,
// int64 values are strings, and responses list every field, set or not.
var (
	marshalOptions = protojson.MarshalOptions{UseProtoNames: true, EmitUnpopulated: true}
	// strictUnmarshal is tried first: it succeeds for every body without
	// unknown fields or enum names, which is nearly all of them, in one pass.
	strictUnmarshal = protojson.UnmarshalOptions{}
	// lenientUnmarshal ignores unknown fields, so that clients built against
	// a newer Agones API keep working.
	lenientUnmarshal = protojson.UnmarshalOptions{DiscardUnknown: true}
)

// DecodeJSONRequest decodes a REST request body into an AllocationRequest.
//
// Unknown fields are ignored, as Agones does. An unknown enum name is not:
// protojson's DiscardUnknown would drop it and leave the default, turning a
// misspelt "Distributd" into a silent Packed allocation, so it is reported
// with the field's path instead. An empty body is an empty request.
//
// Every error is the caller's fault and is a *core.InvalidRequestError.
func DecodeJSONRequest(data []byte) (*allocation.AllocationRequest, error) {
	req := &allocation.AllocationRequest{}
	if len(bytes.TrimSpace(data)) == 0 {
		return req, nil
	}
	if err := UnmarshalJSON(data, req); err != nil {
		return nil, err
	}
	return req, nil
}

// EncodeJSONResponse encodes an AllocationResponse as a REST response body.
func EncodeJSONResponse(resp *allocation.AllocationResponse) ([]byte, error) {
	if resp == nil {
		resp = &allocation.AllocationResponse{}
	}
	return MarshalJSON(resp)
}

// MarshalJSON encodes any of the allocator's messages (allocation.* and
// quartermaster.v1.*) the way the REST API does. protojson varies its
// whitespace from build to build on purpose; the output is compacted so
// that the same message always gives the same bytes, which lets gRPC and
// REST answers be compared and golden files stay stable.
func MarshalJSON(m proto.Message) ([]byte, error) {
	b, err := marshalOptions.Marshal(m)
	if err != nil {
		return nil, err
	}
	var out bytes.Buffer
	out.Grow(len(b))
	if err := json.Compact(&out, b); err != nil {
		return nil, err
	}
	return out.Bytes(), nil
}

// UnmarshalJSON decodes any of the allocator's messages the way
// DecodeJSONRequest does: unknown fields ignored, unknown enum names
// refused. m is reset first. Errors are *core.InvalidRequestError.
func UnmarshalJSON(data []byte, m proto.Message) error {
	if strictUnmarshal.Unmarshal(data, m) == nil {
		return nil
	}
	// Either the body is malformed or it has something this API does not
	// know. The lenient pass tells which.
	if err := lenientUnmarshal.Unmarshal(data, m); err != nil {
		proto.Reset(m)
		return bodyError(m, err)
	}
	var raw any
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := dec.Decode(&raw); err != nil {
		// protojson accepted what encoding/json did not; nothing to check.
		return nil
	}
	var e errs
	checkEnumNames(&e, "", m.ProtoReflect().Descriptor(), raw)
	if err := e.err(); err != nil {
		proto.Reset(m)
		return err
	}
	return nil
}

func bodyError(m proto.Message, err error) error {
	msg := err.Error()
	// protobuf-go prefixes its errors with "proto:" and a space that varies
	// between builds; the prefix says nothing to a REST caller.
	if rest, ok := strings.CutPrefix(msg, "proto:"); ok {
		msg = strings.TrimLeft(rest, " \u00a0")
	}
	return &core.InvalidRequestError{Errors: []core.FieldError{{
		Field:  "body",
		Reason: "not valid JSON for " + string(m.ProtoReflect().Descriptor().Name()) + ": " + msg,
	}}}
}

// checkEnumNames walks a decoded JSON value alongside the message
// descriptor and reports every enum field whose string value names no value
// of its enum. Unknown keys are skipped: ignoring them is the point of the
// lenient decode. Shapes protojson would have rejected cannot occur here, as
// protojson accepted the body first.
func checkEnumNames(e *errs, path string, md protoreflect.MessageDescriptor, v any) {
	if strings.HasPrefix(string(md.FullName()), "google.protobuf.") {
		return // well-known types have their own JSON forms and no enums of ours
	}
	obj, ok := v.(map[string]any)
	if !ok {
		return
	}
	fields := md.Fields()
	for key, val := range obj {
		fd := fields.ByJSONName(key)
		if fd == nil {
			fd = fields.ByTextName(key)
		}
		if fd == nil {
			continue
		}
		f := joinPath(path, string(fd.Name()))
		switch {
		case fd.IsMap():
			m, _ := val.(map[string]any)
			vd := fd.MapValue()
			for k, mv := range m {
				checkValue(e, f+"["+strconv.Quote(k)+"]", vd, mv)
			}
		case fd.IsList():
			l, _ := val.([]any)
			for i, lv := range l {
				checkValue(e, f+"["+strconv.Itoa(i)+"]", fd, lv)
			}
		default:
			checkValue(e, f, fd, val)
		}
	}
}

// checkValue checks one (non-repeated) value of field fd.
func checkValue(e *errs, path string, fd protoreflect.FieldDescriptor, v any) {
	switch fd.Kind() {
	case protoreflect.EnumKind:
		s, ok := v.(string)
		if !ok {
			return // numbers are range-checked by the conversion to core
		}
		ed := fd.Enum()
		if ed.Values().ByName(protoreflect.Name(s)) == nil {
			e.add(path, "unknown value "+strconv.Quote(s)+" (want "+enumNames(ed)+")")
		}
	case protoreflect.MessageKind, protoreflect.GroupKind:
		checkEnumNames(e, path, fd.Message(), v)
	}
}

func enumNames(ed protoreflect.EnumDescriptor) string {
	vals := ed.Values()
	names := make([]string, vals.Len())
	for i := range names {
		names[i] = string(vals.Get(i).Name())
	}
	switch len(names) {
	case 0:
		return "nothing"
	case 1:
		return names[0]
	}
	return strings.Join(names[:len(names)-1], ", ") + " or " + names[len(names)-1]
}

func joinPath(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}
