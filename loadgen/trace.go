package loadgen

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/quartermaster-dev/quartermaster/allocator/pb/allocation"
	"github.com/quartermaster-dev/quartermaster/allocator/wire"
	"github.com/quartermaster-dev/quartermaster/trace"
)

// Tracer records what a run sent and got as a trace (package trace): one
// record per allocation, with the time it was sent, the request, the
// answer's code, the game server and the cluster that served it (the
// answer's source: "local" or the endpoint it was forwarded to), and its
// latency from the send; one record per Release. The records are written
// off the callers' path; when the writer falls behind, records are dropped
// and counted rather than slowing the load.
type Tracer struct {
	a   *trace.Async[traceItem]
	req []byte
}

type traceItem struct {
	at      time.Time
	release bool
	code    codes.Code
	gs      string
	source  string
	latency time.Duration
}

// traceQueue is how many records may wait for the disk: at 10,000
// requests a second, most of a second.
const traceQueue = 8192

// NewTracer starts a trace at path for requests req.
func NewTracer(path string, o trace.WriterOptions, req *allocation.AllocationRequest) (*Tracer, error) {
	body, err := wire.MarshalJSON(req)
	if err != nil {
		return nil, fmt.Errorf("trace: encoding the request: %w", err)
	}
	w, err := trace.NewWriter(path, o)
	if err != nil {
		return nil, err
	}
	t := &Tracer{req: body}
	t.a = trace.NewAsync(w, traceQueue, t.record, nil)
	return t, nil
}

func (t *Tracer) record(it *traceItem, r *trace.Record) {
	r.At = it.at.UTC()
	r.Outcome = it.code.String()
	r.GameServer = it.gs
	r.Cluster = it.source
	r.LatencyMs = trace.Ms(it.latency)
	if it.release {
		r.Event = trace.EventRelease
		return
	}
	r.Request = t.req
}

// Wrap returns c with every call recorded.
func (t *Tracer) Wrap(c Caller) Caller {
	tc := &tracingCaller{Caller: c, t: t}
	if _, ok := c.(KeyedCaller); ok {
		return keyedTracingCaller{tc}
	}
	return tc
}

// Dropped is how many records were lost to a writer that fell behind.
func (t *Tracer) Dropped() uint64 { return t.a.Dropped() }

// Written is how many records reached the file.
func (t *Tracer) Written() uint64 { return t.a.Written() }

// Close writes what is queued and closes the file.
func (t *Tracer) Close() error { return t.a.Close() }

type tracingCaller struct {
	Caller
	t *Tracer
}

func (c *tracingCaller) Call(ctx context.Context) (codes.Code, *Session) {
	at := time.Now()
	code, s := c.Caller.Call(ctx)
	it := traceItem{at: at, code: code, latency: time.Since(at)}
	if s != nil {
		it.gs, it.source = gameServerKey(s), s.Source
	}
	c.t.a.Add(it)
	return code, s
}

// keyedTracingCaller traces a KeyedCaller, and is one.
type keyedTracingCaller struct{ *tracingCaller }

func (c keyedTracingCaller) CallKeyed(ctx context.Context, t Try) (codes.Code, *Session) {
	kc := c.Caller.(KeyedCaller) // Wrap made it only for one
	at := time.Now()
	code, s := kc.CallKeyed(ctx, t)
	it := traceItem{at: at, code: code, latency: time.Since(at)}
	if s != nil {
		it.gs, it.source = gameServerKey(s), s.Source
	}
	c.t.a.Add(it)
	return code, s
}

func (c *tracingCaller) Release(ctx context.Context, s *Session) error {
	at := time.Now()
	err := c.Caller.Release(ctx, s)
	c.t.a.Add(traceItem{at: at, release: true, code: status.Code(err), gs: gameServerKey(s), latency: time.Since(at)})
	return err
}

// gameServerKey is namespace/name, the namespace defaulted as the
// allocator defaults it.
func gameServerKey(s *Session) string {
	ns := s.Namespace
	if ns == "" {
		ns = "default"
	}
	return ns + "/" + s.Name
}
