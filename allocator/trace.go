package allocator

import (
	"bytes"
	"encoding/json"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/quartermaster-dev/quartermaster/allocator/pb/allocation"
	qmv1 "github.com/quartermaster-dev/quartermaster/allocator/pb/quartermaster/v1"
	"github.com/quartermaster-dev/quartermaster/allocator/wire"
	"github.com/quartermaster-dev/quartermaster/core"
	"github.com/quartermaster-dev/quartermaster/trace"
)

// Tracer records every allocation request the service answers as a line of
// a trace (package trace; `qm serve --trace`): when it arrived, the request
// as Agones' JSON, the answer's code, the server and the cluster that
// allocated it (this one, or the policy's cluster a forwarded request
// went to), the latency and the conflicts retried; and every Release, as a
// release record (which is how a replay learns session lengths). Multi-cluster requests
// are recorded once, where they arrived; a cluster they were forwarded to
// records them as it received them, if it traces too.
//
// The request path only copies a few words into a bounded queue (no heap
// allocation; nothing at all without a tracer); encoding and writing
// happen on the tracer's goroutine. When the disk falls behind and the
// queue is full, records are dropped and counted
// (qm_trace_dropped_total), never the allocation delayed.
type Tracer struct {
	a       *trace.Async[traceItem]
	cluster string
	// Used on the writer's goroutine only: the JSON of requests seen, by
	// their deterministic protobuf encoding (far cheaper than protojson;
	// a trace repeats a few requests), and a buffer for that encoding.
	reqJSON map[string]json.RawMessage
	pb      []byte
	records prometheus.CounterFunc
	dropped prometheus.CounterFunc
	failed  prometheus.CounterFunc
}

// traceItem is what the request path hands over: pointers and values it
// already holds. The request message is not changed after its answer, and
// game servers are immutable once allocated (core copies to change one).
type traceItem struct {
	at      time.Time
	latency time.Duration
	req     *allocation.AllocationRequest
	name    string // a forwarded allocation's server
	source  string // its cluster, "" for this one
	code    codes.Code
	retries int
	// release: a Release of rel (namespace, name) rather than an
	// allocation.
	release bool
	rel     *qmv1.ReleaseRequest
}

// TracerOptions configure NewTracer.
type TracerOptions struct {
	// Path is the trace file; Writer bounds its size on disk.
	Path   string
	Writer trace.WriterOptions
	// Cluster is this allocator's cluster name, recorded for the
	// allocations it makes itself ("local" when empty).
	Cluster string
	// Queue is how many records may wait for the disk (default 16384).
	Queue int
	// OnError is told of the first write error (a full disk); later ones
	// are counted in qm_trace_failed_total.
	OnError func(error)
}

// NewTracer creates the trace file and starts its writer.
func NewTracer(o TracerOptions) (*Tracer, error) {
	w, err := trace.NewWriter(o.Path, o.Writer)
	if err != nil {
		return nil, err
	}
	if o.Queue <= 0 {
		o.Queue = 16384
	}
	t := &Tracer{cluster: o.Cluster, reqJSON: map[string]json.RawMessage{}}
	if t.cluster == "" {
		t.cluster = wire.SourceLocal
	}
	t.a = trace.NewAsync(w, o.Queue, t.record, o.OnError)
	t.records = prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "qm_trace_records_total", Help: "Allocation requests written to the trace (qm serve --trace).",
	}, func() float64 { return float64(t.a.Written()) })
	t.dropped = prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "qm_trace_dropped_total", Help: "Allocation requests left out of the trace because its queue was full (the disk fell behind).",
	}, func() float64 { return float64(t.a.Dropped()) })
	t.failed = prometheus.NewCounterFunc(prometheus.CounterOpts{
		Name: "qm_trace_failed_total", Help: "Trace records the writer could not write (a full or failing disk).",
	}, func() float64 { return float64(t.a.Failed()) })
	return t, nil
}

// Register adds the tracer's metrics to reg.
func (t *Tracer) Register(reg prometheus.Registerer) error {
	for _, c := range []prometheus.Collector{t.records, t.dropped, t.failed} {
		if err := reg.Register(c); err != nil {
			return err
		}
	}
	return nil
}

// Dropped is how many records the full queue cost.
func (t *Tracer) Dropped() uint64 { return t.a.Dropped() }

// Close writes what is queued and closes the file; call it once the server
// has stopped answering.
func (t *Tracer) Close() error { return t.a.Close() }

// SetTracer starts (or, with nil, stops) recording the requests answered
// from now on. The caller closes a tracer it replaces.
func (s *Service) SetTracer(t *Tracer) { s.tracer.Store(t) }

// trace hands one answered request to the tracer, if there is one.
func (s *Service) trace(start time.Time, r *request, o outcome) {
	t := s.tracer.Load()
	if t == nil {
		return
	}
	it := traceItem{at: start, latency: time.Since(start), req: r.message(), retries: o.retries}
	if o.err != nil {
		it.code = status.Code(o.err)
	} else if o.gs != nil {
		it.name = o.gs.Name
	} else if o.resp != nil {
		it.name = o.resp.GetGameServerName()
		if src := s.source(o.resp); src != wire.SourceLocal {
			it.source = src
		}
	}
	t.a.Add(it)
}

// traceRelease hands one answered Release to the tracer, if there is one:
// a replay takes a session's length from it.
func (s *Service) traceRelease(start time.Time, in *qmv1.ReleaseRequest, err error) {
	t := s.tracer.Load()
	if t == nil {
		return
	}
	t.a.Add(traceItem{at: start, latency: time.Since(start), release: true, rel: in, code: status.Code(err)})
}

// traceJSON writes requests as Agones' REST JSON with only the fields set:
// wire's REST codec lists every field, which would double a trace's size
// for nothing a reader needs.
var traceJSON = protojson.MarshalOptions{UseProtoNames: true}

// maxCachedRequests bounds the tracer's cache of request encodings; when
// full it starts afresh (requests that vary without end gain nothing).
const maxCachedRequests = 4096

// deterministic makes equal requests encode to equal bytes (map order).
var deterministic = proto.MarshalOptions{Deterministic: true}

// requestJSON is req as compact Agones JSON, from the cache when an equal
// request was seen.
func (t *Tracer) requestJSON(req *allocation.AllocationRequest) json.RawMessage {
	var err error
	if t.pb, err = deterministic.MarshalAppend(t.pb[:0], req); err == nil {
		if j, ok := t.reqJSON[string(t.pb)]; ok {
			return j
		}
	}
	j := json.RawMessage("{}")
	if b, jerr := traceJSON.Marshal(req); jerr == nil {
		// protojson varies its white space on purpose; a trace line
		// wants none.
		var buf bytes.Buffer
		if json.Compact(&buf, b) == nil {
			j = buf.Bytes()
		}
	}
	if err == nil {
		if len(t.reqJSON) >= maxCachedRequests {
			clear(t.reqJSON)
		}
		t.reqJSON[string(t.pb)] = j
	}
	return j
}

// record turns an item into a record, on the writer's goroutine.
func (t *Tracer) record(it *traceItem, r *trace.Record) {
	r.At = it.at.UTC()
	r.Outcome = it.code.String()
	r.LatencyMs = trace.Ms(it.latency)
	r.Retries = it.retries
	if it.release {
		ns := it.rel.GetNamespace()
		if ns == "" {
			ns = core.DefaultNamespace
		}
		r.Event, r.GameServer = trace.EventRelease, ns+"/"+it.rel.GetGameServerName()
		if it.rel.GetGameServerName() == "" {
			r.GameServer = ns + "/-" // refused as it named none; the record keeps its shape
		}
		return
	}
	r.Request = t.requestJSON(it.req)
	ns := it.req.GetNamespace()
	if ns == "" {
		ns = core.DefaultNamespace
	}
	if it.code == codes.OK && it.name != "" {
		r.Cluster, r.GameServer = it.source, ns+"/"+it.name
		if r.Cluster == "" {
			r.Cluster = t.cluster
		}
	}
}
