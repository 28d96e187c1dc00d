package sim

import (
	"errors"
	"fmt"
	"sort"
	"time"

	"github.com/quartermaster-dev/quartermaster/core"
	"github.com/quartermaster-dev/quartermaster/trace"
)

// A replay feeds the simulator the arrivals and requests a trace recorded
// (package trace), instead of drawing them from a rate: "what if this
// Saturday's traffic had met that policy". Each distinct request of the
// trace becomes a stream whose Arrivals are the times it was recorded,
// relative to the trace's first request; each allocation's session is as
// long as the trace shows (its allocation's answer to its release), or
// drawn from ReplayOptions.Session when the trace has no release for it.

// ReplayOptions say what a trace does not.
type ReplayOptions struct {
	// Cluster receives requests without multi-cluster routing.
	Cluster string
	// Session is drawn for allocations whose release the trace lacks.
	Session Dist
}

// Replayed describes what ReplayStreams took from a trace.
type Replayed struct {
	// Start is the first request's arrival: virtual time zero.
	Start time.Time
	// Span is the last request's arrival, from Start.
	Span time.Duration
	// Requests are the allocation records replayed; Skipped those left out
	// because the live outcome was not about capacity (a caller's mistake
	// or missing permission, which the simulator does not model), by
	// outcome.
	Requests int
	Skipped  map[string]int
	// Sessions is how many session lengths came from the trace's releases
	// (the rest are drawn).
	Sessions int
	// Recorded is what the trace says each cluster allocated.
	Recorded map[string]int
}

// replayedOutcomes are the live outcomes the simulator can also produce:
// an allocation, no server, lost races, a cluster out of reach, a deadline.
var replayedOutcomes = map[string]bool{
	"OK": true, "ResourceExhausted": true, "Aborted": true, "Unavailable": true, "DeadlineExceeded": true,
}

// maxReplayStreams bounds the distinct requests of one trace: each is a
// stream with its own random streams and memo of cluster orders.
const maxReplayStreams = 1000

// ReplayStreams turns a trace's records into streams for Config.Streams.
func ReplayStreams(recs []trace.Record, o ReplayOptions) ([]StreamConfig, *Replayed, error) {
	if err := o.Session.Validate(); err != nil {
		return nil, nil, fmt.Errorf("session: %v", err)
	}
	rep := &Replayed{Skipped: map[string]int{}, Recorded: map[string]int{}}
	// Sessions from releases: an allocation of a server ends at the first
	// successful release of that server after its answer.
	type open struct {
		rec  int
		done time.Time
	}
	session := map[int]time.Duration{}
	held := map[string]open{}
	// Time order, whatever order the lines were written in (an allocator
	// writes each when its answer is known; a release may be written
	// before a slow allocation that arrived earlier).
	order := make([]int, len(recs))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return recs[order[a]].At.Before(recs[order[b]].At) })
	var allocs []int
	for _, i := range order {
		r := &recs[i]
		switch {
		case r.Event == trace.EventRelease:
			if h, ok := held[r.GameServer]; ok && r.Outcome == "OK" && !r.At.Before(h.done) {
				session[h.rec] = r.At.Sub(h.done)
				delete(held, r.GameServer)
			}
		case !replayedOutcomes[r.Outcome]:
			rep.Skipped[r.Outcome]++
		default:
			allocs = append(allocs, i)
			if r.Allocated() {
				rep.Recorded[r.Cluster]++
				if r.GameServer != "" {
					held[r.GameServer] = open{rec: i, done: r.At.Add(r.Latency())}
				}
			}
		}
	}
	if len(allocs) == 0 {
		return nil, nil, errors.New("the trace has no allocation to replay")
	}
	rep.Start = recs[allocs[0]].At
	rep.Span = recs[allocs[len(allocs)-1]].At.Sub(rep.Start)
	rep.Requests = len(allocs)

	byReq := map[string]int{}
	var out []StreamConfig
	for _, i := range allocs {
		r := &recs[i]
		k := string(r.Request)
		si, ok := byReq[k]
		if !ok {
			req, err := r.CoreRequest()
			if err != nil {
				return nil, nil, fmt.Errorf("the request at %s: %v", r.At.Format(time.RFC3339Nano), err)
			}
			if _, err := core.Normalize(&req); err != nil {
				return nil, nil, fmt.Errorf("the request at %s: %v", r.At.Format(time.RFC3339Nano), err)
			}
			if len(out) == maxReplayStreams {
				return nil, nil, fmt.Errorf("the trace has more than %d distinct requests; a replay takes at most that many", maxReplayStreams)
			}
			si = len(out)
			byReq[k] = si
			st := StreamConfig{Name: fmt.Sprintf("trace-%d", si), Request: req, Session: o.Session, Arrivals: []time.Duration{}}
			if !req.MultiCluster.Enabled {
				if o.Cluster == "" {
					return nil, nil, fmt.Errorf("the request at %s is not multi-cluster: say which cluster receives such requests", r.At.Format(time.RFC3339Nano))
				}
				st.Cluster = o.Cluster
			}
			out = append(out, st)
		}
		st := &out[si]
		st.Arrivals = append(st.Arrivals, r.At.Sub(rep.Start))
		d, ok := session[i]
		if ok {
			rep.Sessions++
		} else {
			d = -1
		}
		st.Sessions = append(st.Sessions, d)
	}
	return out, rep, nil
}

// replayNext schedules replay stream i's next arrival, if it has one; false
// when stream i draws its arrivals from a rate instead.
func (w *world) replayNext(i int) bool {
	s := w.streams[i]
	if s.cfg.Arrivals == nil {
		return false
	}
	if s.sent < len(s.cfg.Arrivals) {
		w.q.push(event{at: int64(s.cfg.Arrivals[s.sent]), kind: evArrival, id: int32(i)})
		s.sent++
	}
	return true
}

// sessionFor is how long the allocation of request r lasts: the trace's
// length for it when there is one, else a draw.
func (w *world) sessionFor(s *stream, r *request) int64 {
	if ss := s.cfg.Sessions; r.arrival >= 0 && int(r.arrival) < len(ss) && ss[r.arrival] >= 0 {
		return int64(ss[r.arrival])
	}
	return s.session.next()
}

// checkArrivals rejects explicit arrivals the event loop cannot take.
func (s *StreamConfig) checkArrivals() error {
	if s.Arrivals == nil {
		if s.Sessions != nil {
			return errors.New("sessions given without arrivals")
		}
		return nil
	}
	if s.Sessions != nil && len(s.Sessions) != len(s.Arrivals) {
		return fmt.Errorf("%d sessions for %d arrivals", len(s.Sessions), len(s.Arrivals))
	}
	for i, a := range s.Arrivals {
		if a < 0 || (i > 0 && a < s.Arrivals[i-1]) {
			return fmt.Errorf("arrivals[%d] = %v: arrivals must be >= 0 and ascending", i, a)
		}
	}
	return nil
}
