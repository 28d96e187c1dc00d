package loadgen

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/quartermaster-dev/quartermaster/allocator/pb/allocation"
	"github.com/quartermaster-dev/quartermaster/core"
	"github.com/quartermaster-dev/quartermaster/trace"
)

// TestTraceRecordsWhatWasSentAndGot runs open-loop load with a Tracer
// around the caller against a real mTLS gRPC server, and reads the trace
// back: one allocation record per request answered, with the request as
// sent and the server named by the answer, one release record per session
// given back, each after its allocation; then the same with a server that
// refuses, whose code the trace keeps.
func TestTraceRecordsWhatWasSentAndGot(t *testing.T) {
	f := newFake(t, true)
	req := &allocation.AllocationRequest{
		Namespace: "default",
		GameServerSelectors: []*allocation.GameServerSelector{
			{MatchLabels: map[string]string{"game": "shooter"}},
		},
		Scheduling: allocation.AllocationRequest_Distributed,
	}
	path := filepath.Join(t.TempDir(), "load.jsonl")
	tr, err := NewTracer(path, trace.WriterOptions{}, req)
	if err != nil {
		t.Fatal(err)
	}
	tg := f.target(t, "fake", "allocate")
	tg.Caller = tr.Wrap(tg.Caller)
	start := time.Now()
	res, err := Run(context.Background(), Config{}, []Target{tg}, Options{
		NewPacer: func() Pacer { p, _ := ParseArrival("200", time.Second, 1); return p },
		Duration: 300 * time.Millisecond,
		Release:  true,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Close(); err != nil {
		t.Fatal(err)
	}
	recs, err := trace.ReadFiles(path)
	if err != nil {
		t.Fatal(err)
	}
	ok := res.Targets[0].OK
	if ok < 20 {
		t.Fatalf("only %d requests answered", ok)
	}
	allocAt := map[string]time.Time{}
	var allocs, releases int64
	for i, r := range recs {
		if r.At.Before(start) || r.At.After(time.Now()) {
			t.Fatalf("record %d at %v: outside the run", i, r.At)
		}
		switch r.Event {
		case trace.EventAllocate:
			allocs++
			if r.Outcome != "OK" || !strings.HasPrefix(r.GameServer, "default/gs-") || r.LatencyMs <= 0 {
				t.Fatalf("record %d: %+v", i, r)
			}
			cr, err := r.CoreRequest()
			if err != nil {
				t.Fatal(err)
			}
			if len(cr.Selectors) != 1 || cr.Selectors[0].MatchLabels["game"] != "shooter" || cr.Scheduling != core.Distributed {
				t.Fatalf("record %d: request %+v, not the one sent", i, cr)
			}
			allocAt[r.GameServer] = r.At
		case trace.EventRelease:
			releases++
			at, seen := allocAt[r.GameServer]
			if !seen || r.At.Before(at) || r.Outcome != "OK" {
				t.Fatalf("record %d: release of %s (allocated at %v, seen %v): %+v", i, r.GameServer, at, seen, r)
			}
		}
	}
	if allocs != ok || releases != res.Targets[0].Released || tr.Dropped() != 0 {
		t.Fatalf("trace: %d allocations and %d releases, %d dropped; the run: %d OK, %d released",
			allocs, releases, tr.Dropped(), ok, res.Targets[0].Released)
	}

	// Refusals keep their code.
	f.fail.Store(int32(codes.ResourceExhausted))
	path2 := filepath.Join(t.TempDir(), "refused.jsonl")
	tr2, err := NewTracer(path2, trace.WriterOptions{}, req)
	if err != nil {
		t.Fatal(err)
	}
	tg2 := f.target(t, "fake", "allocate")
	tg2.Caller = tr2.Wrap(tg2.Caller)
	if _, err := Run(context.Background(), Config{}, []Target{tg2}, Options{Closed: true, Workers: 1, Requests: 5}); err != nil {
		t.Fatal(err)
	}
	tr2.Close()
	recs, err = trace.ReadFiles(path2)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 5 {
		t.Fatalf("%d records for 5 refused requests", len(recs))
	}
	for _, r := range recs {
		if r.Outcome != "ResourceExhausted" || r.GameServer != "" {
			t.Fatalf("refused request recorded as %+v", r)
		}
	}
}
