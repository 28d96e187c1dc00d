package allocator

import (
	"hash/maphash"
	"sync"
	"sync/atomic"

	"github.com/quartermaster-dev/quartermaster/allocator/forward"
	"github.com/quartermaster-dev/quartermaster/allocator/pb/allocation"
	"github.com/quartermaster-dev/quartermaster/core"
)

// Prepared requests. A matchmaker sends the same few requests over and over
// (one per game mode and region, say), byte for byte. The gRPC codec keeps
// the decoded form of the requests it has seen, keyed by their bytes, and
// the service keeps beside each the normalized request it last made of it
// for one caller (pipeline.go's step 3): a request seen before is then
// neither decoded nor converted, validated or compiled again. A request is
// kept the second time its bytes come, so requests that differ every time
// (a match ID in their metadata) cost a hash each and are never kept; the
// cache is small and starts over when full.

const (
	// maxPreparedRequests bounds the cache; it is emptied when full.
	maxPreparedRequests = 512
	// maxPreparedBytes is the largest request kept: the usual one is a few
	// dozen bytes, and the key is a copy of them.
	maxPreparedBytes = 1024
)

// preparedRequest is a request as decoded (see request), shared by every
// call that sends the same bytes. Nothing in it is modified once it is in
// the cache.
type preparedRequest struct {
	sent    *allocation.AllocationRequest
	decoded bool
	conv    core.Request
	norm    atomic.Pointer[normalizedRequest]
	// memo is sent's forwarded encodings (forward.Memo), for a
	// multi-cluster request.
	memo forward.Memo
}

// normalizedRequest is what the service made of a prepared request for one
// caller under one set of limits: the owner annotation and the re-allocation
// restriction depend on both.
type normalizedRequest struct {
	identity string
	limits   *limiter
	req      *core.Request
	// key is req's idempotency key ("" for none), fingerprint its
	// KeyFingerprint.
	key, fingerprint string
}

// normalized returns the request normalized for identity under limits, if
// that is the one kept.
func (p *preparedRequest) normalized(identity string, limits *limiter) *normalizedRequest {
	if n := p.norm.Load(); n != nil && n.identity == identity && n.limits == limits {
		return n
	}
	return nil
}

// keep remembers req, with its key and fingerprint, as the request
// normalized for identity under limits.
func (p *preparedRequest) keep(identity string, limits *limiter, req *core.Request, key, fingerprint string) {
	p.norm.Store(&normalizedRequest{identity: identity, limits: limits, req: req, key: key, fingerprint: fingerprint})
}

// requestCache maps a request's bytes to its preparedRequest.
type requestCache struct {
	mu sync.Mutex
	m  map[string]*preparedRequest
	// seen holds the hashes of requests seen once, one per slot: a request
	// is kept the second time it comes, so a stream of requests that are
	// all different costs a hash each, not a copy and an entry each.
	seen [seenSlots]uint64
	seed maphash.Seed
}

// seenSlots is the size of requestCache.seen (a power of 2).
const seenSlots = 1024

func newRequestCache() *requestCache {
	return &requestCache{m: make(map[string]*preparedRequest), seed: maphash.MakeSeed()}
}

// get returns the prepared request for b, or nil.
func (c *requestCache) get(b []byte) *preparedRequest {
	c.mu.Lock()
	p := c.m[string(b)]
	c.mu.Unlock()
	return p
}

// put prepares the request just decoded from b (sent, or conv, whose
// selectors it copies; the cache keeps the rest) and returns it, or nil
// when b is too large to keep or seen for the first time.
func (c *requestCache) put(b []byte, sent *allocation.AllocationRequest, conv *core.Request) *preparedRequest {
	if len(b) > maxPreparedBytes {
		return nil
	}
	h := maphash.Bytes(c.seed, b)
	c.mu.Lock()
	defer c.mu.Unlock()
	if slot := &c.seen[h%seenSlots]; *slot != h {
		*slot = h
		return nil
	}
	p := &preparedRequest{sent: sent}
	if conv != nil {
		p.decoded, p.conv = true, *conv
		p.conv.Selectors = append([]core.Selector(nil), conv.Selectors...)
		p.conv.Preferred = append([]core.Selector(nil), conv.Preferred...)
	}
	if len(c.m) >= maxPreparedRequests {
		clear(c.m)
	}
	c.m[string(b)] = p
	return p
}
