package allocator

import (
	"encoding/json"
	"path/filepath"
	"testing"
	"time"

	"github.com/quartermaster-dev/quartermaster/allocator/pb/allocation"
	"github.com/quartermaster-dev/quartermaster/trace"
)

// BenchmarkTraceRecord is the tracer's goroutine's work per allocation:
// encoding the record (the request as JSON) and writing it, buffered.
func BenchmarkTraceRecord(b *testing.B) {
	w, err := trace.NewWriter(filepath.Join(b.TempDir(), "t.jsonl"), trace.WriterOptions{})
	if err != nil {
		b.Fatal(err)
	}
	defer w.Close()
	t := &Tracer{cluster: "local", reqJSON: map[string]json.RawMessage{}}
	it := traceItem{at: time.Now(), latency: 13 * time.Microsecond,
		req:  &allocation.AllocationRequest{Namespace: "default", GameServerSelectors: []*allocation.GameServerSelector{{MatchLabels: map[string]string{"mode": "load"}}}},
		name: "big-4fwbh"}
	b.ReportAllocs()
	var r trace.Record
	for b.Loop() {
		r = trace.Record{}
		t.record(&it, &r)
		if err := w.Write(&r); err != nil {
			b.Fatal(err)
		}
	}
}
