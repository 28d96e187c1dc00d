package live

import (
	"fmt"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/quartermaster-dev/quartermaster/allocator/pb/allocation"
	"github.com/quartermaster-dev/quartermaster/allocator/wire"
	"github.com/quartermaster-dev/quartermaster/trace"
)

// A live run can record what its callers sent and got as a trace (package
// trace), for `qm sim --replay`. The records are on the scenario's
// timeline, not the wall clock's: the run's start is the first record's
// epoch, and every time since it (arrivals, releases, latencies) is
// multiplied by the time scale. A replay then sees the arrivals where the
// scenario put them and sessions as long as the scenario drew them, with
// nothing to know about the scale. Each allocation names the cluster that
// served it by its name in the scenario, which the caller knows from the
// answer's source, so the replay's shares line up with the file's clusters.

// liveTrace writes a run's records off the callers' path.
type liveTrace struct {
	a     *trace.Async[liveTraceItem]
	start time.Time
	scale float64
	// reqs are the streams' requests in Agones' REST JSON, by stream.
	reqs [][]byte
}

type liveTraceItem struct {
	at      time.Time
	stream  int
	release bool
	code    codes.Code
	cluster string
	gs      string
	latency time.Duration
}

// liveTraceQueue is how many records may wait for the disk; a full queue
// drops records (counted in the report) rather than delaying a request.
const liveTraceQueue = 16384

func newLiveTrace(path string, scale float64) (*liveTrace, error) {
	w, err := trace.NewWriter(path, trace.WriterOptions{})
	if err != nil {
		return nil, fmt.Errorf("trace: %w", err)
	}
	t := &liveTrace{scale: scale}
	t.a = trace.NewAsync(w, liveTraceQueue, t.record, nil)
	return t, nil
}

// addStream registers a stream's request and returns its index.
func (t *liveTrace) addStream(req *allocation.AllocationRequest) (int, error) {
	b, err := wire.MarshalJSON(req)
	if err != nil {
		return 0, fmt.Errorf("trace: encoding the request: %w", err)
	}
	t.reqs = append(t.reqs, b)
	return len(t.reqs) - 1, nil
}

// scaled maps a wall duration onto the scenario's timeline.
func (t *liveTrace) scaled(d time.Duration) time.Duration {
	return time.Duration(float64(d) * t.scale)
}

func (t *liveTrace) record(it *liveTraceItem, r *trace.Record) {
	r.At = t.start.Add(t.scaled(it.at.Sub(t.start))).UTC()
	r.Outcome = it.code.String()
	r.GameServer = it.gs
	r.Cluster = it.cluster
	r.LatencyMs = trace.Ms(t.scaled(it.latency))
	if it.release {
		r.Event = trace.EventRelease
		return
	}
	r.Request = t.reqs[it.stream]
}

func (t *liveTrace) add(it liveTraceItem) {
	if t != nil {
		t.a.Add(it)
	}
}
