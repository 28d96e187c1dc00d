// Package trace records allocation traffic as JSON lines, one request per
// line, and reads such files back: `qm serve --trace` records what an
// allocator was asked and answered, `qm load --trace` what a load
// generator sent and got, and `qm sim --replay` feeds the recorded
// arrivals and requests to the simulator.
//
// A line is a Record:
//
//	{"at":"2026-11-22T21:00:00.123456Z","request":{"namespace":"default",...},
//	 "outcome":"OK","cluster":"cloud-a","gameServer":"default/game-x7k2p",
//	 "latencyMs":1.84,"retries":0}
//
// at is when the request arrived (or was sent); request is the Agones
// AllocationRequest in its REST JSON form, exactly as a matchmaker would
// POST it; outcome is the gRPC code name of the answer; cluster is the
// cluster that allocated (a name when the recorder knows it, otherwise the
// response's source); retries counts write conflicts the allocator retried.
// A release record ("event":"release") says when a game server was given
// back, which is how a replay learns session lengths.
//
// The package is standard library and core only, so the simulator can read
// traces without pulling in gRPC or the allocator. Writing is done off the
// request path (Async) into a Writer that rotates its file at a size bound,
// so a long-running allocator's trace never fills a disk.
package trace

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strings"
	"time"
)

// Events a record can describe.
const (
	// EventAllocate is an allocation request and its answer (the default:
	// written as an absent "event").
	EventAllocate = ""
	// EventRelease is a game server given back.
	EventRelease = "release"
)

// Record is one line of a trace.
type Record struct {
	// At is when the request arrived at the allocator (or left the load
	// generator).
	At time.Time `json:"at"`
	// Event is EventAllocate or EventRelease.
	Event string `json:"event,omitempty"`
	// Request is the AllocationRequest as Agones' REST JSON (allocations
	// only).
	Request json.RawMessage `json:"request,omitempty"`
	// Outcome is the answer's gRPC code name: OK, ResourceExhausted, ...
	Outcome string `json:"outcome"`
	// Cluster is the cluster that allocated, empty when none did.
	Cluster string `json:"cluster,omitempty"`
	// GameServer is the allocated (or released) server as namespace/name.
	GameServer string `json:"gameServer,omitempty"`
	// LatencyMs is how long the answer took, in milliseconds.
	LatencyMs float64 `json:"latencyMs"`
	// Retries is the write conflicts the allocator retried (or forwarded
	// tries beyond the first) for this request.
	Retries int `json:"retries,omitempty"`
}

// codeNames are the gRPC status code names, as google.golang.org/grpc/codes
// prints them (the package is not imported: see the package comment).
var codeNames = map[string]bool{
	"OK": true, "Canceled": true, "Unknown": true, "InvalidArgument": true,
	"DeadlineExceeded": true, "NotFound": true, "AlreadyExists": true,
	"PermissionDenied": true, "ResourceExhausted": true, "FailedPrecondition": true,
	"Aborted": true, "OutOfRange": true, "Unimplemented": true, "Internal": true,
	"Unavailable": true, "DataLoss": true, "Unauthenticated": true,
}

// codeList is codeNames in code order, for error messages.
const codeList = "OK, Canceled, Unknown, InvalidArgument, DeadlineExceeded, NotFound, AlreadyExists, " +
	"PermissionDenied, ResourceExhausted, FailedPrecondition, Aborted, OutOfRange, Unimplemented, " +
	"Internal, Unavailable, DataLoss, Unauthenticated"

// Validate reports the first field of r that a reader would refuse.
func (r *Record) Validate() error {
	if r.At.IsZero() {
		return errors.New("at: missing (want an RFC 3339 time such as 2026-11-22T21:00:00.5Z)")
	}
	switch r.Event {
	case EventAllocate:
		if len(r.Request) == 0 {
			return errors.New("request: missing (an allocation record carries its AllocationRequest)")
		}
		if !isObject(r.Request) {
			return errors.New("request: not a JSON object")
		}
	case EventRelease:
		if r.GameServer == "" {
			return errors.New("gameServer: missing (a release record names the server given back)")
		}
	default:
		return fmt.Errorf("event: %q: want \"release\" or none (an allocation)", r.Event)
	}
	if !codeNames[r.Outcome] {
		if r.Outcome == "" {
			return errors.New("outcome: missing (want a gRPC code name: " + codeList + ")")
		}
		return fmt.Errorf("outcome: %q is not a gRPC code name (want one of %s)", r.Outcome, codeList)
	}
	if math.IsNaN(r.LatencyMs) || math.IsInf(r.LatencyMs, 0) || r.LatencyMs < 0 {
		return fmt.Errorf("latencyMs: %v: want a finite number >= 0", r.LatencyMs)
	}
	if r.Retries < 0 {
		return fmt.Errorf("retries: %d: want >= 0", r.Retries)
	}
	if r.GameServer != "" {
		ns, name, ok := strings.Cut(r.GameServer, "/")
		if !ok || ns == "" || name == "" {
			return fmt.Errorf("gameServer: %q: want namespace/name", r.GameServer)
		}
	}
	return nil
}

func isObject(b json.RawMessage) bool {
	for _, c := range b {
		switch c {
		case ' ', '\t', '\r', '\n':
			continue
		case '{':
			return true
		}
		return false
	}
	return false
}

// Allocated reports whether the record is an allocation that succeeded.
func (r *Record) Allocated() bool { return r.Event == EventAllocate && r.Outcome == "OK" }

// Latency is LatencyMs as a duration.
func (r *Record) Latency() time.Duration {
	return time.Duration(r.LatencyMs * float64(time.Millisecond))
}

// Ms converts a duration to the milliseconds a record holds, rounded to the
// microsecond (what a trace needs, in a third of the digits).
func Ms(d time.Duration) float64 {
	return float64(d.Round(time.Microsecond)) / float64(time.Millisecond)
}
