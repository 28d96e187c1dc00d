package main

import (
	"fmt"
	"log/slog"
	"math"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
)

// defaultHeapFloor is `qm serve --gc-heap-floor`'s default.
const defaultHeapFloor = "32Mi"

// maxFloorPercent bounds the GOGC the floor sets, whatever the live heap:
// the goal it aims for is the floor, which this only caps for a heap of
// under a hundredth of it.
const maxFloorPercent = 10000

// A heapFloor keeps the collector from running every few megabytes while
// the live heap is small. Go starts a collection when the heap has grown by
// GOGC percent over what the last one left live (and at least 4 MB): an
// allocator whose own data is small, such as an entry that only forwards,
// collects tens of times a second under a lone caller's requests. Each
// collection costs its fixed work, and it also shrinks the stacks of the
// idle gRPC request goroutines, which the next request then grows again;
// together a large share of such an entry's CPU per request. After every
// collection the floor sets GOGC so that the next one comes when the heap
// reaches floor bytes, and back to the base (100) once what is live is
// large enough for that to come later anyway. Go's memory limit
// (GOMEMLIMIT, or the one taken from the container's) still bounds the
// heap, so the floor never lets it past that.
//
// The cost is memory and page faults: Go's scavenger gives back to the
// system what the last collection left free, beyond what is live, so the
// heap faults pages in again as it grows towards the floor; the larger the
// floor, the more faults per request. The default is where most of the
// saving is already had (docs/performance.md, Forwarding, the fifth pass).
type heapFloor struct {
	floor uint64
	base  int

	mu      sync.Mutex
	stopped bool
	percent int               // as last set
	samples [3]metrics.Sample // live heap, then the stacks and globals scanned
}

// gcSentinel is allocated for one collection to find unreachable: its
// cleanup is the floor's turn. (It holds a pointer so that it is never one
// of the tiny pointer-free objects the runtime packs together, whose
// cleanups may wait for their neighbours.)
type gcSentinel struct{ _ *heapFloor }

// startHeapFloor starts a floor of floor bytes, unless floor is 0 or the
// user set GOGC (their choice stands). stop ends it and restores the base.
func startHeapFloor(floor uint64, log *slog.Logger) (stop func()) {
	if floor == 0 {
		return func() {}
	}
	if v := os.Getenv("GOGC"); v != "" {
		log.Debug("GOGC is set; no GC heap floor", "GOGC", v)
		return func() {}
	}
	h := &heapFloor{floor: floor, base: 100, percent: 100}
	h.samples[0].Name = "/gc/heap/live:bytes"
	h.samples[1].Name = "/gc/scan/stack:bytes"
	h.samples[2].Name = "/gc/scan/globals:bytes"
	h.arm()
	log.Debug("GC heap floor", "bytes", floor)
	return h.stop
}

func (h *heapFloor) arm() {
	runtime.AddCleanup(new(gcSentinel), (*heapFloor).afterGC, h)
}

// afterGC runs once per collection, on the runtime's cleanup goroutine.
func (h *heapFloor) afterGC() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.stopped {
		return
	}
	metrics.Read(h.samples[:])
	var v [3]uint64
	for i, s := range h.samples {
		if s.Value.Kind() == metrics.KindUint64 {
			v[i] = s.Value.Uint64()
		}
	}
	if p := floorPercent(v[0], v[1]+v[2], h.floor, h.base); p != h.percent {
		debug.SetGCPercent(p)
		h.percent = p
	}
	h.arm()
}

func (h *heapFloor) stop() {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.stopped {
		return
	}
	h.stopped = true
	if h.percent != h.base {
		debug.SetGCPercent(h.base)
		h.percent = h.base
	}
}

// floorPercent is the GOGC that puts the next collection at floor bytes
// of heap, when live bytes of heap survived the last one and roots bytes
// of stacks and globals were scanned: Go's goal is then
// live + (live+roots)×GOGC/100. It is never below base, nor above
// maxFloorPercent.
func floorPercent(live, roots, floor uint64, base int) int {
	if live >= floor {
		return base
	}
	if live+roots == 0 {
		return maxFloorPercent
	}
	p := (floor - live) * 100 / (live + roots)
	switch {
	case p < uint64(base):
		return base
	case p > maxFloorPercent:
		return maxFloorPercent
	}
	return int(p)
}

// parseByteSize reads a size such as 64Mi, 512Ki, 1Gi (the suffixes of
// Kubernetes quantities, with or without a trailing B) or a plain count of
// bytes.
func parseByteSize(s string) (uint64, error) {
	num, shift := s, 0
	for _, u := range []struct {
		suffix string
		shift  int
	}{{"Ki", 10}, {"Mi", 20}, {"Gi", 30}} {
		if t, ok := strings.CutSuffix(strings.TrimSuffix(s, "B"), u.suffix); ok {
			num, shift = t, u.shift
			break
		}
	}
	n, err := strconv.ParseUint(num, 10, 64)
	if err != nil || (shift > 0 && n > math.MaxUint64>>shift) {
		return 0, fmt.Errorf("%q is not a size (bytes, or a whole number with Ki, Mi or Gi: 64Mi)", s)
	}
	return n << shift, nil
}
