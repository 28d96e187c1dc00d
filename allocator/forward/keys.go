package forward

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"sync/atomic"

	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/quartermaster-dev/quartermaster/allocator/pb/allocation"
	"github.com/quartermaster-dev/quartermaster/core"
)

// The idempotency key of an allocation, as the allocator package defines
// it (its AllocationKeyAnnotation and AllocationKeyHeader: this package
// sits below that one, so it names them again; a test holds them equal).
const (
	allocationKeyAnnotation = "quartermaster.dev/allocation-key"
	allocationKeyHeader     = "quartermaster-allocation-key"
)

// Every forwarded request carries a key of the forwarder's making, so
// that a request whose answer was lost can be sent again, and an
// allocation nobody received can be given back, whatever the caller sent:
//
//   - a caller's key k becomes "qmk-" and a digest of (identity, k): the
//     remote scopes keys by its caller, which is this allocator's
//     connection identity for every caller of this allocator, so two
//     callers using the same k must not meet there; the same caller's
//     retry, through any replica of this allocator, derives the same key
//     and finds its allocation;
//   - a request without a key gets a key of its own, "qmf-", a random
//     prefix per forwarder and a counter: never sent again by the caller,
//     it serves the forwarder's own retries and reconciliation.
//
// An Agones remote puts the annotation on the GameServer it allocates and
// otherwise ignores it.

// callerKey is the key the caller gave: the annotation of the decoded
// request, which holds the header's key too when the service decoded it;
// else (read from the request as sent) the gRPC header.
func callerKey(ctx context.Context, req *core.Request, decoded bool) string {
	if k := req.Metadata.Annotations[allocationKeyAnnotation]; k != "" || decoded {
		return k
	}
	if v := metadata.ValueFromIncomingContext(ctx, allocationKeyHeader); len(v) > 0 {
		return v[0]
	}
	return ""
}

// derivedKey is the forwarded key of identity's key k.
func derivedKey(identity, k string) string {
	h := sha256.New()
	h.Write([]byte(identity))
	h.Write([]byte{0})
	h.Write([]byte(k))
	var sum [sha256.Size]byte
	return "qmk-" + hex.EncodeToString(h.Sum(sum[:0])[:16])
}

// keySeed is the cluster order's seed of a request forwarded with key
// (a derivedKey): the same on every replica, spread as its digest is.
func keySeed(key string) uint64 {
	seed := uint64(0xcbf29ce484222325) // FNV-1a 64
	for i := range len(key) {
		seed = (seed ^ uint64(key[i])) * 0x100000001b3
	}
	return seed
}

// requestKeys makes the keys of requests that came without one.
type requestKeys struct {
	prefix string
	n      atomic.Uint64
}

func newRequestKeys() *requestKeys {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return &requestKeys{prefix: "qmf-" + hex.EncodeToString(b[:]) + "-"}
}

func (k *requestKeys) next() string {
	var buf [48]byte
	b := append(buf[:0], k.prefix...)
	return string(strconv.AppendUint(b, k.n.Add(1), 36))
}

// withKey returns base, an encoded forwarded request, followed by the
// encoding of a request holding only key as the allocation-key annotation
// of both metadata and metaPatch. Protobuf merges a message's repeated
// occurrences, and a map's later entry replaces an earlier one with the
// same key: the remote reads base with its annotation set to key, while
// base itself, the Memo's, stays the same for every request.
func withKey(base mem.BufferSlice, key string) *encodedRequest {
	k := &keyedRequest{}
	k.data = append(append(k.bufs[:0], base...), mem.SliceBuffer(appendKeySuffix(k.buf[:0], key)))
	return &k.encodedRequest
}

// keyedRequest holds a keyed request's parts in one allocation.
type keyedRequest struct {
	encodedRequest
	bufs [2]mem.Buffer
	buf  [192]byte // the suffix, unless the key is long
}

// The field numbers of the suffix, from the generated descriptors.
var (
	fieldMetadata, fieldMetaPatch, fieldAnnotations, fieldEntryKey, fieldEntryValue = func() (a, b, c, d, e protowire.Number) {
		req := (&allocation.AllocationRequest{}).ProtoReflect().Descriptor().Fields()
		ann := (&allocation.MetaPatch{}).ProtoReflect().Descriptor().Fields().ByName("annotations")
		return req.ByName("metadata").Number(), req.ByName("metaPatch").Number(), ann.Number(),
			ann.MapKey().Number(), ann.MapValue().Number()
	}()
)

// appendKeySuffix appends the encoding of an AllocationRequest whose
// metadata and metaPatch annotations hold only key: what MarshalVT writes
// for it (a test holds them equal), without building the message.
func appendKeySuffix(b []byte, key string) []byte {
	entry := protowire.SizeTag(fieldEntryKey) + protowire.SizeBytes(len(allocationKeyAnnotation)) +
		protowire.SizeTag(fieldEntryValue) + protowire.SizeBytes(len(key))
	patch := protowire.SizeTag(fieldAnnotations) + protowire.SizeBytes(entry)
	for _, f := range []protowire.Number{fieldMetaPatch, fieldMetadata} {
		b = protowire.AppendTag(b, f, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(patch))
		b = protowire.AppendTag(b, fieldAnnotations, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(entry))
		b = protowire.AppendTag(b, fieldEntryKey, protowire.BytesType)
		b = protowire.AppendString(b, allocationKeyAnnotation)
		b = protowire.AppendTag(b, fieldEntryValue, protowire.BytesType)
		b = protowire.AppendString(b, key)
	}
	return b
}
