package forward

import (
	"sync"
	"sync/atomic"

	"google.golang.org/grpc/mem"
	"google.golang.org/protobuf/proto"

	"github.com/quartermaster-dev/quartermaster/allocator/pb/allocation"
)

// A Memo keeps what one multi-cluster request becomes when forwarded: the
// encoded request for each (caller identity, target namespace) it went
// to. A caller that sends the same request again (the allocator keeps its
// repeated requests decoded, with a Memo each) is then forwarded without
// building and encoding the forwarded request again. The zero Memo is
// ready to use. It belongs to one request: give it with that request and
// no other.
type Memo struct {
	mu      sync.Mutex // serializes adding; reading takes no lock
	entries atomic.Pointer[[]memoEntry]
}

// maxMemoEntries bounds a Memo: a request goes to few targets, for few
// identities; past this the oldest is dropped.
const maxMemoEntries = 8

type memoEntry struct {
	identity, namespace string
	msg                 *encodedRequest
}

// encodedRequest is a forwarded request already encoded, as the client
// codec gives it to grpc-go.
type encodedRequest struct {
	data mem.BufferSlice
	// encodings counts the calls grpc-go took the request's bytes for
	// (codec.go). A call that did not take them cannot have sent them.
	encodings atomic.Int32
}

func (m *Memo) get(identity, namespace string) *encodedRequest {
	if m == nil {
		return nil
	}
	if es := m.entries.Load(); es != nil {
		for _, e := range *es {
			if e.identity == identity && e.namespace == namespace {
				return e.msg
			}
		}
	}
	return nil
}

// encode encodes req, the forwarded form of the Memo's request for
// identity into namespace, and keeps it. It returns nil for a nil Memo or
// a req that does not encode (the caller then sends req itself, and its
// error surfaces there).
func (m *Memo) encode(identity, namespace string, req *allocation.AllocationRequest) *encodedRequest {
	if m == nil {
		return nil
	}
	b, err := proto.Marshal(req)
	if err != nil {
		return nil
	}
	msg := &encodedRequest{data: mem.BufferSlice{mem.SliceBuffer(b)}}
	m.mu.Lock()
	defer m.mu.Unlock()
	var old []memoEntry
	if es := m.entries.Load(); es != nil {
		old = *es
	}
	if len(old) >= maxMemoEntries {
		old = old[1:]
	}
	es := append(append(make([]memoEntry, 0, len(old)+1), old...), memoEntry{identity: identity, namespace: namespace, msg: msg})
	m.entries.Store(&es)
	return msg
}
