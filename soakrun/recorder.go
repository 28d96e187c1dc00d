package soakrun

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"hash/fnv"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/quartermaster-dev/quartermaster/allocator/pb/allocation"
	qmv1 "github.com/quartermaster-dev/quartermaster/allocator/pb/quartermaster/v1"
	"github.com/quartermaster-dev/quartermaster/allocator/wire"
	"github.com/quartermaster-dev/quartermaster/loadgen"
	"github.com/quartermaster-dev/quartermaster/soak"
)

// history is the run's history file, written by many goroutines.
type history struct {
	mu sync.Mutex
	w  *soak.Writer
}

func (h *history) request(q soak.Request) {
	h.mu.Lock()
	defer h.mu.Unlock()
	_ = h.w.Request(q) // the first error is kept and reported at the end
}

func (h *history) release(r soak.Release) {
	h.mu.Lock()
	defer h.mu.Unlock()
	_ = h.w.Release(r)
}

func (h *history) fault(f soak.Fault) {
	h.mu.Lock()
	defer h.mu.Unlock()
	_ = h.w.Fault(f)
}

func (h *history) end(t time.Time) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	_ = h.w.End(t)
	return h.w.Err()
}

// entry is one cluster the load enters by: a connection per allocator
// address (a replica's link on a rig; one address for an allocator
// elsewhere).
type entry struct {
	name  string
	conns []*grpc.ClientConn
	alloc []allocation.AllocationServiceClient
	admin []qmv1.AllocationAdminClient
	next  atomic.Uint64
}

func (e *entry) pick() int { return int(e.next.Add(1) % uint64(len(e.conns))) }

// dialEntry connects to every address of a cluster. The connections come
// back soon after an allocator does (gRPC's default backoff would keep a
// caller away for up to two minutes after a replica restarts, which a
// matchmaker tuned for outages does not).
func dialEntry(name string, addrs []string, tlsCfg *tls.Config) (*entry, error) {
	creds := insecure.NewCredentials()
	if tlsCfg != nil {
		creds = credentials.NewTLS(tlsCfg)
	}
	e := &entry{name: name}
	for _, a := range addrs {
		conn, err := grpc.NewClient(a, grpc.WithTransportCredentials(creds),
			grpc.WithConnectParams(grpc.ConnectParams{
				Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second},
				MinConnectTimeout: 3 * time.Second,
			}))
		if err != nil {
			e.close()
			return nil, fmt.Errorf("cluster %s: %s: %w", name, a, err)
		}
		e.conns = append(e.conns, conn)
		e.alloc = append(e.alloc, allocation.NewAllocationServiceClient(conn))
		e.admin = append(e.admin, qmv1.NewAllocationAdminClient(conn))
	}
	if len(e.conns) == 0 {
		return nil, fmt.Errorf("cluster %s: no allocator address", name)
	}
	return e, nil
}

func (e *entry) close() {
	for _, c := range e.conns {
		c.Close()
	}
}

// counters are what the progress lines show.
type counters struct {
	requests, ok, released, releaseFailed atomic.Int64
	retries                               atomic.Int64 // tries sent again, and resolves
	mu                                    sync.Mutex
	errors                                map[string]int64
}

func (c *counters) fail(code string) {
	c.mu.Lock()
	if c.errors == nil {
		c.errors = map[string]int64{}
	}
	c.errors[code]++
	c.mu.Unlock()
}

func (c *counters) errorText() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	names := make([]string, 0, len(c.errors))
	for k := range c.errors {
		names = append(names, k)
	}
	sort.Strings(names)
	var parts []string
	for _, k := range names {
		parts = append(parts, fmt.Sprintf("%s=%d", k, c.errors[k]))
	}
	return strings.Join(parts, " ")
}

// recorder is the load's one loadgen target: each call goes to the next
// entry cluster in turn, and every answer and release is written to the
// history as it comes.
type recorder struct {
	entries   []*entry
	req       *allocation.AllocationRequest
	caller    string
	owner     func(entry, source string) string // the holder the allocator records
	clusterOf func(entry, source string) string // an answer's source as a cluster name
	hist      *history
	count     *counters
	next      atomic.Uint64
	ids       atomic.Uint64
	// holding: after the load's end, sessions are kept (not released), so
	// the snapshot can show them held by their callers.
	holding atomic.Bool
	// releaseFor bounds the retries of one release: long enough to
	// outlast a fault, as a matchmaker that must not leak a server keeps
	// trying. releasing counts the releases under way, which the history
	// must hold before its end.
	releaseFor time.Duration
	releasing  sync.WaitGroup

	mu       sync.Mutex
	sessions map[*loadgen.Session]*held
	keptList []*held
}

// held is a session the recorder handed to the engine.
type held struct {
	id     uint64
	entry  *entry
	source string // the answer's, for the Release
	s      *loadgen.Session
}

var _ loadgen.KeyedCaller = (*recorder)(nil)

// Call implements loadgen.Caller: each request to the next entry cluster.
func (r *recorder) Call(ctx context.Context) (codes.Code, *loadgen.Session) {
	e := r.entries[int(r.next.Add(1)-1)%len(r.entries)]
	return r.send(ctx, e, r.req, soak.Request{})
}

// CallKeyed implements loadgen.KeyedCaller: the key rides in the
// request's annotations, as an Agones client sends it, and every try of
// one key goes to the same entry cluster (keys are a cluster's own; its
// replicas share them), chosen from the key so that keys spread over the
// clusters.
func (r *recorder) CallKeyed(ctx context.Context, t loadgen.Try) (codes.Code, *loadgen.Session) {
	h := fnv.New32a()
	h.Write([]byte(t.Key))
	e := r.entries[int(h.Sum32()%uint32(len(r.entries)))]
	q := &allocation.AllocationRequest{Namespace: r.req.GetNamespace(), MultiClusterSetting: r.req.GetMultiClusterSetting(),
		Metadata: &allocation.MetaPatch{Annotations: map[string]string{wire.AllocationKeyAnnotation: t.Key}}}
	code, s := r.send(ctx, e, q, soak.Request{Key: t.Key, Attempt: t.Attempt, Resolve: t.Resolve})
	if s != nil {
		s.Key = t.Key
	}
	return code, s
}

// send sends one request to entry e and writes its line; q's key fields
// come from line.
func (r *recorder) send(ctx context.Context, e *entry, req *allocation.AllocationRequest, line soak.Request) (codes.Code, *loadgen.Session) {
	sent := time.Now()
	resp, err := e.alloc[e.pick()].Allocate(ctx, req)
	answered := time.Now()
	code := status.Code(err)
	id := r.ids.Add(1)
	q := line
	q.ID, q.Caller, q.Cluster, q.Sent, q.Answered = id, r.caller, e.name, sent, answered
	q.Code, q.Namespace = code.String(), req.GetNamespace()
	if !q.Resolve && q.Attempt == 0 {
		r.count.requests.Add(1)
	} else {
		r.count.retries.Add(1)
	}
	if err != nil {
		r.count.fail(code.String())
		r.hist.request(q)
		return code, nil
	}
	r.count.ok.Add(1)
	q.Server = resp.GetGameServerName()
	if src := r.clusterOf(e.name, resp.GetSource()); src != e.name {
		q.Source = src
		if o := r.owner(e.name, src); o != r.caller {
			q.Owner = o
		}
	}
	r.hist.request(q)
	s := &loadgen.Session{Namespace: q.Namespace, Name: q.Server, Source: resp.GetSource()}
	r.mu.Lock()
	r.sessions[s] = &held{id: id, entry: e, source: resp.GetSource()}
	r.mu.Unlock()
	return codes.OK, s
}

// Release implements loadgen.Caller: it retries an attempt whose outcome
// is unknown (the allocator unreachable, the deadline passed) through the
// entry cluster's next address, and writes the release's final answer.
// After the load's end it keeps the session instead.
func (r *recorder) Release(ctx context.Context, s *loadgen.Session) error {
	r.mu.Lock()
	h := r.sessions[s]
	delete(r.sessions, s)
	r.mu.Unlock()
	if h == nil {
		return fmt.Errorf("release of a session the recorder did not hand out: %s", s.Name)
	}
	if r.holding.Load() {
		// Held to the end, for the snapshot to show.
		r.mu.Lock()
		r.keptList = append(r.keptList, &held{id: h.id, entry: h.entry, source: h.source, s: s})
		r.mu.Unlock()
		return nil
	}
	r.releasing.Add(1)
	defer r.releasing.Done()
	at := time.Now()
	in := &qmv1.ReleaseRequest{Namespace: s.Namespace, GameServerName: s.Name, Source: h.source}
	deadline := at.Add(r.releaseFor)
	wait := 200 * time.Millisecond
	var err error
	retried := false
	for attempt := 0; ; attempt++ {
		actx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_, err = h.entry.admin[h.entry.pick()].Release(actx, in)
		cancel()
		switch status.Code(err) {
		case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled:
			if time.Now().Add(wait).Before(deadline) {
				retried = true
				time.Sleep(wait)
				wait = min(2*wait, 2*time.Second)
				continue
			}
		}
		break
	}
	code := status.Code(err)
	if code == codes.Unimplemented {
		// An allocator without Release (Agones'): the session is held,
		// as a matchmaker without Release holds it.
		return err
	}
	r.hist.release(soak.Release{ID: h.id, At: at, Result: code.String(), Retried: retried})
	if err != nil {
		r.count.releaseFailed.Add(1)
		return err
	}
	r.count.released.Add(1)
	return nil
}

// Close implements loadgen.Caller; the entries are closed by the run.
func (r *recorder) Close() error { return nil }

// giveBack releases, unrecorded, what the run kept to the end, once the
// snapshot is taken, so an allocator the run does not own is left as it
// was found. Failures are returned together.
func (r *recorder) giveBack(ctx context.Context) error {
	r.mu.Lock()
	kept := r.keptList
	r.keptList = nil
	r.mu.Unlock()
	var errs []error
	for _, k := range kept {
		in := &qmv1.ReleaseRequest{Namespace: k.s.Namespace, GameServerName: k.s.Name, Source: k.source}
		_, err := k.entry.admin[k.entry.pick()].Release(ctx, in)
		if status.Code(err) == codes.Unimplemented {
			return nil // nothing to give back with
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", k.s.Name, err))
		}
	}
	if len(errs) > 3 {
		errs = append(errs[:3], fmt.Errorf("and %d more", len(errs)-3))
	}
	return errors.Join(errs...)
}
