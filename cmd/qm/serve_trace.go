package main

import (
	"flag"
	"fmt"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/quartermaster-dev/quartermaster/allocator"
	"github.com/quartermaster-dev/quartermaster/trace"
)

// traceFlags are `qm serve`'s flags for recording a trace.
type traceFlags struct {
	path     string
	maxBytes int64
}

// defaultTraceMaxBytes bounds a trace nobody bounded: at about 300 bytes
// a record, a few million requests.
const defaultTraceMaxBytes = 1 << 30

func (t *traceFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&t.path, "trace", "", "record every allocation request and its answer to this file as JSON lines (see trace/), for qm sim --replay; written off the request path, records dropped (qm_trace_dropped_total) rather than requests slowed when the disk falls behind")
	fs.Int64Var(&t.maxBytes, "trace-max-bytes", defaultTraceMaxBytes, "bound on the trace on disk: the file rotates to FILE.1 .. FILE.3 and the oldest goes (0: no bound)")
}

// start records svc's answers when --trace is set; the returned function
// flushes and closes the trace, once the server has stopped.
func (t *traceFlags) start(svc *allocator.Service, reg prometheus.Registerer, cluster string, log *slog.Logger) (func(), error) {
	if t.path == "" {
		return func() {}, nil
	}
	if t.maxBytes < 0 {
		return nil, fmt.Errorf("--trace-max-bytes %d: want 0 (no bound) or more", t.maxBytes)
	}
	tr, err := allocator.NewTracer(allocator.TracerOptions{
		Path: t.path, Writer: trace.WriterOptions{MaxBytes: t.maxBytes}, Cluster: cluster,
		OnError: func(err error) {
			log.Error("trace: writing failed; records are counted in qm_trace_failed_total from now on", "path", t.path, "err", err)
		},
	})
	if err != nil {
		return nil, fmt.Errorf("--trace: %w", err)
	}
	if err := tr.Register(reg); err != nil {
		tr.Close()
		return nil, err
	}
	svc.SetTracer(tr)
	log.Info("recording a trace", "path", t.path, "maxBytes", t.maxBytes)
	return func() {
		svc.SetTracer(nil)
		if err := tr.Close(); err != nil {
			log.Error("trace: closing", "path", t.path, "err", err)
		}
		if d := tr.Dropped(); d > 0 {
			log.Warn("trace: records dropped because the disk fell behind", "path", t.path, "dropped", d)
		}
	}, nil
}
