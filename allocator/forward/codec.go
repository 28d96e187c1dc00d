package forward

import (
	"errors"

	"google.golang.org/grpc/encoding"
	protocodec "google.golang.org/grpc/encoding/proto"
	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/quartermaster-dev/quartermaster/allocator/pb/allocation"
)

// clientCodec is the codec of the forwarder's connections: grpc-go's
// protobuf codec, except that the remote's AllocationResponse, the one
// message a forward receives, is decoded by hand (decodeResponse). The
// proto library decodes its label and annotation maps through reflection,
// with several heap allocations per entry, a large share of what a
// forwarded request allocates in the entry allocator.
type clientCodec struct {
	proto encoding.CodecV2
}

func newClientCodec() *clientCodec {
	return &clientCodec{proto: encoding.GetCodecV2(protocodec.Name)}
}

func (c *clientCodec) Marshal(v any) (mem.BufferSlice, error) {
	if e, ok := v.(*encodedRequest); ok {
		// Sent as is: grpc-go only reads the slice and its buffer (a
		// SliceBuffer's Free does nothing), so one serves every call.
		return e.data, nil
	}
	return c.proto.Marshal(v)
}

func (c *clientCodec) Unmarshal(data mem.BufferSlice, v any) error {
	resp, ok := v.(*allocation.AllocationResponse)
	if !ok {
		return c.proto.Unmarshal(data, v)
	}
	buf := data.MaterializeToBuffer(mem.DefaultBufferPool())
	defer buf.Free()
	return decodeAnswer(buf.ReadOnlyData(), resp)
}

// decodeAnswer decodes a remote's AllocationResponse by hand, or, for
// anything the hand decoder does not know (a field added to the message,
// unknown fields to keep), the proto library's way. resp keeps no part of
// b.
func decodeAnswer(b []byte, resp *allocation.AllocationResponse) error {
	if decodeResponse(b, resp) == nil {
		return nil
	}
	resp.Reset()
	return proto.Unmarshal(b, resp)
}

// Name is the proto codec's: the content-subtype is unchanged on the wire.
func (c *clientCodec) Name() string { return protocodec.Name }

// errUnhandled makes decodeResponse give the message to the proto
// library.
var errUnhandled = errors.New("not handled by the hand decoder")

// decodeResponse decodes an AllocationResponse. Every string in it is a
// substring of one copy of b (one allocation for all of them, where the
// proto library makes one per string); repeated messages share one
// backing array. It returns errUnhandled, leaving m partly filled, for
// anything it does not decode exactly as the proto library would: an
// unknown field, an unexpected wire type, malformed bytes.
func decodeResponse(b []byte, m *allocation.AllocationResponse) error {
	s := string(b)
	var nPorts, nAddrs int
	if err := eachField(b, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
		switch {
		case num == 3 && typ == protowire.BytesType:
			nPorts++
		case num == 8 && typ == protowire.BytesType:
			nAddrs++
		}
		return nil
	}); err != nil {
		return err
	}
	var ports []allocation.AllocationResponse_GameServerStatusPort
	var addrs []allocation.AllocationResponse_GameServerStatusAddress
	if nPorts > 0 {
		ports = make([]allocation.AllocationResponse_GameServerStatusPort, 0, nPorts)
		m.Ports = make([]*allocation.AllocationResponse_GameServerStatusPort, 0, nPorts)
	}
	if nAddrs > 0 {
		addrs = make([]allocation.AllocationResponse_GameServerStatusAddress, 0, nAddrs)
		m.Addresses = make([]*allocation.AllocationResponse_GameServerStatusAddress, 0, nAddrs)
	}
	// str returns v, a slice of b, as a substring of s. protowire slices
	// values as b[i:][:n], so a value's capacity runs to the end of b's:
	// its offset in b is the difference.
	str := func(v []byte) string {
		if len(v) == 0 {
			return ""
		}
		off := cap(b) - cap(v)
		return s[off : off+len(v)]
	}
	return eachField(b, func(num protowire.Number, typ protowire.Type, v []byte, x uint64) error {
		if typ != protowire.BytesType {
			return errUnhandled
		}
		switch num {
		case 2:
			m.GameServerName = str(v)
		case 3:
			ports = append(ports, allocation.AllocationResponse_GameServerStatusPort{})
			p := &ports[len(ports)-1]
			if err := eachField(v, func(num protowire.Number, typ protowire.Type, v []byte, x uint64) error {
				switch {
				case num == 1 && typ == protowire.BytesType:
					p.Name = str(v)
				case num == 2 && typ == protowire.VarintType:
					p.Port = int32(x)
				default:
					return errUnhandled
				}
				return nil
			}); err != nil {
				return err
			}
			m.Ports = append(m.Ports, p)
		case 4:
			m.Address = str(v)
		case 5:
			m.NodeName = str(v)
		case 6:
			m.Source = str(v)
		case 7:
			if m.Metadata == nil {
				m.Metadata = &allocation.AllocationResponse_GameServerMetadata{}
			}
			md := m.Metadata
			if err := eachField(v, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
				if typ != protowire.BytesType {
					return errUnhandled
				}
				var into *map[string]string
				switch num {
				case 1:
					into = &md.Labels
				case 2:
					into = &md.Annotations
				default:
					return errUnhandled
				}
				k, val, err := stringEntry(v, str)
				if err != nil {
					return err
				}
				if *into == nil {
					*into = make(map[string]string, 8)
				}
				(*into)[k] = val
				return nil
			}); err != nil {
				return err
			}
		case 8:
			addrs = append(addrs, allocation.AllocationResponse_GameServerStatusAddress{})
			a := &addrs[len(addrs)-1]
			if err := eachField(v, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
				if typ != protowire.BytesType {
					return errUnhandled
				}
				switch num {
				case 1:
					a.Type = str(v)
				case 2:
					a.Address = str(v)
				default:
					return errUnhandled
				}
				return nil
			}); err != nil {
				return err
			}
			m.Addresses = append(m.Addresses, a)
		case 9:
			k, cs, err := counterEntry(v, str)
			if err != nil {
				return err
			}
			if m.Counters == nil {
				m.Counters = map[string]*allocation.AllocationResponse_CounterStatus{}
			}
			m.Counters[k] = cs
		case 10:
			k, ls, err := listEntry(v, str)
			if err != nil {
				return err
			}
			if m.Lists == nil {
				m.Lists = map[string]*allocation.AllocationResponse_ListStatus{}
			}
			m.Lists[k] = ls
		default:
			return errUnhandled
		}
		return nil
	})
}

// eachField calls f with each field of the message in b: its number,
// wire type, and the bytes of a length-delimited value or the varint.
func eachField(b []byte, f func(num protowire.Number, typ protowire.Type, v []byte, x uint64) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return errUnhandled
		}
		b = b[n:]
		var v []byte
		var x uint64
		switch typ {
		case protowire.BytesType:
			v, n = protowire.ConsumeBytes(b)
		case protowire.VarintType:
			x, n = protowire.ConsumeVarint(b)
		default:
			return errUnhandled
		}
		if n < 0 {
			return errUnhandled
		}
		b = b[n:]
		if err := f(num, typ, v, x); err != nil {
			return err
		}
	}
	return nil
}

// stringEntry decodes a map<string, string> entry.
func stringEntry(b []byte, str func([]byte) string) (k, v string, err error) {
	err = eachField(b, func(num protowire.Number, typ protowire.Type, val []byte, _ uint64) error {
		if typ != protowire.BytesType {
			return errUnhandled
		}
		switch num {
		case 1:
			k = str(val)
		case 2:
			v = str(val)
		default:
			return errUnhandled
		}
		return nil
	})
	return k, v, err
}

// int64Value decodes a google.protobuf.Int64Value.
func int64Value(b []byte) (*wrapperspb.Int64Value, error) {
	w := &wrapperspb.Int64Value{}
	err := eachField(b, func(num protowire.Number, typ protowire.Type, _ []byte, x uint64) error {
		if num != 1 || typ != protowire.VarintType {
			return errUnhandled
		}
		w.Value = int64(x)
		return nil
	})
	return w, err
}

// counterEntry decodes a map<string, CounterStatus> entry.
func counterEntry(b []byte, str func([]byte) string) (string, *allocation.AllocationResponse_CounterStatus, error) {
	var k string
	cs := &allocation.AllocationResponse_CounterStatus{}
	err := eachField(b, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
		if typ != protowire.BytesType {
			return errUnhandled
		}
		switch num {
		case 1:
			k = str(v)
		case 2:
			return eachField(v, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
				if typ != protowire.BytesType {
					return errUnhandled
				}
				w, err := int64Value(v)
				switch num {
				case 1:
					cs.Count = w
				case 2:
					cs.Capacity = w
				default:
					return errUnhandled
				}
				return err
			})
		default:
			return errUnhandled
		}
		return nil
	})
	return k, cs, err
}

// listEntry decodes a map<string, ListStatus> entry.
func listEntry(b []byte, str func([]byte) string) (string, *allocation.AllocationResponse_ListStatus, error) {
	var k string
	ls := &allocation.AllocationResponse_ListStatus{}
	err := eachField(b, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
		if typ != protowire.BytesType {
			return errUnhandled
		}
		switch num {
		case 1:
			k = str(v)
		case 2:
			return eachField(v, func(num protowire.Number, typ protowire.Type, v []byte, _ uint64) error {
				if typ != protowire.BytesType {
					return errUnhandled
				}
				switch num {
				case 1:
					ls.Values = append(ls.Values, str(v))
				case 2:
					w, err := int64Value(v)
					if err != nil {
						return err
					}
					ls.Capacity = w
				default:
					return errUnhandled
				}
				return nil
			})
		default:
			return errUnhandled
		}
		return nil
	})
	return k, ls, err
}
