package allocator

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"

	"google.golang.org/protobuf/proto"

	"github.com/quartermaster-dev/quartermaster/allocator/wire"
	"github.com/quartermaster-dev/quartermaster/core"
)

// Idempotency keys. A caller that may retry an allocation (a matchmaker
// that timed out, a forwarder whose answer was lost) names it with a key of
// its choosing; the same key again, from the same identity, is the same
// allocation, not a new one. The key rides in the request's metadata
// annotations, so an unchanged Agones client can send it, and so it lands
// on the allocated GameServer too, where a replica that never saw the first
// request can find it.
const (
	// AllocationKeyAnnotation carries the caller's idempotency key in an
	// AllocationRequest's metadata.annotations, and on the GameServer it
	// allocated.
	AllocationKeyAnnotation = wire.AllocationKeyAnnotation
	// AllocationKeyHeader is the gRPC metadata (and HTTP header) form of
	// the key, for clients that can set headers; the service copies it
	// into the annotation, and refuses a request whose annotation and
	// header carry different keys.
	AllocationKeyHeader = "quartermaster-allocation-key"
	// MaxAllocationKeyLength bounds a key: it is stored per allocation, and
	// must fit an annotation value comfortably.
	MaxAllocationKeyLength = 128
)

// ErrKeyReleased: the allocation a key names was released (or its server
// is gone); the key is not reused for a new server while it is remembered.
var ErrKeyReleased = errors.New("the allocation made with this idempotency key was released")

// KeyConflictError: a key was sent again with a different request.
type KeyConflictError struct {
	Key string
}

func (e *KeyConflictError) Error() string {
	return fmt.Sprintf("idempotency key %q was first used with a different request: a key names one allocation request", e.Key)
}

// KeyOf is the idempotency key a normalized request carries, if any.
func KeyOf(req *core.Request) (string, bool) {
	k, ok := req.Metadata.Annotations[AllocationKeyAnnotation]
	return k, ok && k != ""
}

// KeyScope is the store-wide name of identity's key: keys are the
// caller's own, so two callers using the same key do not meet.
func KeyScope(identity, key string) string {
	return identity + "\x00" + key
}

// KeyFingerprint identifies what a keyed request asks for, so that a key
// sent again with a different request is told apart from a retry. It reads
// the normalized request without its key, and the same request gives the
// same fingerprint in every replica (deterministic encoding).
func KeyFingerprint(req *core.Request) (string, error) {
	r := *req
	if _, ok := r.Metadata.Annotations[AllocationKeyAnnotation]; ok {
		r.Metadata.Annotations = maps.Clone(r.Metadata.Annotations)
		delete(r.Metadata.Annotations, AllocationKeyAnnotation)
	}
	m, err := wire.RequestFromCore(&r)
	if err != nil {
		return "", err
	}
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:16]), nil
}
