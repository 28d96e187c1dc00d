package main

import (
	"errors"
	"fmt"
	"io"

	"github.com/quartermaster-dev/quartermaster/allocator/pb/allocation"
	"github.com/quartermaster-dev/quartermaster/loadgen"
	"github.com/quartermaster-dev/quartermaster/trace"
)

// checkLoadTrace refuses --trace where its records could not be replayed:
// a trace is one allocator's traffic, so one target that allocates.
func checkLoadTrace(f *loadFlags, tcs []loadgen.TargetConfig) error {
	if f.trace == "" {
		if f.traceMaxBytes != 0 {
			return errors.New("--trace-max-bytes needs --trace")
		}
		return nil
	}
	if f.traceMaxBytes < 0 {
		return fmt.Errorf("--trace-max-bytes %d: want 0 (no bound) or more", f.traceMaxBytes)
	}
	if len(tcs) != 1 {
		return fmt.Errorf("--trace records one allocator's traffic; %d targets are given (drop --trace or keep one --target)", len(tcs))
	}
	if tcs[0].Call == "echo" {
		return errors.New("--trace records allocations; the target is an --echo")
	}
	return nil
}

// startLoadTrace wraps the targets' callers so that every call is
// recorded, and returns what closes the trace (and says what it holds).
func startLoadTrace(f *loadFlags, req *allocation.AllocationRequest, targets []loadgen.Target, stderr io.Writer) (func(), error) {
	t, err := loadgen.NewTracer(f.trace, trace.WriterOptions{MaxBytes: f.traceMaxBytes}, req)
	if err != nil {
		return nil, fmt.Errorf("--trace: %w", err)
	}
	for i := range targets {
		targets[i].Caller = t.Wrap(targets[i].Caller)
	}
	return func() {
		if err := t.Close(); err != nil {
			fmt.Fprintf(stderr, "qm load: --trace %s: %v\n", f.trace, err)
		}
		if d := t.Dropped(); d > 0 {
			fmt.Fprintf(stderr, "qm load: --trace %s: %d records written, %d dropped (the disk fell behind)\n", f.trace, t.Written(), d)
		}
	}, nil
}
