package live

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/quartermaster-dev/quartermaster/allocator/mtls"
	"github.com/quartermaster-dev/quartermaster/allocator/pb/allocation"
	qmv1 "github.com/quartermaster-dev/quartermaster/allocator/pb/quartermaster/v1"
	"github.com/quartermaster-dev/quartermaster/allocator/wire"
	"github.com/quartermaster-dev/quartermaster/kindcluster/rig"
	"github.com/quartermaster-dev/quartermaster/loadgen"
	"github.com/quartermaster-dev/quartermaster/scenarios"
	"github.com/quartermaster-dev/quartermaster/sim"
)

// Kind is what a live run's report is called; `qm report` reads it as the
// measured side of a scenario.
const Kind = "LiveScenarioReport"

// Options configure Run.
type Options struct {
	// Scale is the time scale N (default 1).
	Scale float64
	// Backend is BackendMemory (the default) or BackendKubernetes.
	Backend string
	// QM is the qm binary the allocators run as (default: this
	// executable, right for `qm scenario run --live`).
	QM string
	// Dir holds the rig's certificates, fleets, policies and logs (default:
	// a new temporary directory, removed afterwards).
	Dir string
	// Progress receives a line every few seconds and the rig's steps (nil:
	// quiet).
	Progress io.Writer
	// Trace, when set, is where the callers' allocations and releases are
	// recorded as a trace on the scenario's timeline (see trace.go), for
	// `qm sim --replay`.
	Trace string
}

// Report is a live run: the scenario's expectations checked on results in
// the simulator's format, and what the live run did differently.
type Report struct {
	APIVersion   string            `json:"apiVersion"`
	Kind         string            `json:"kind"`
	Scenario     string            `json:"scenario"`
	Description  string            `json:"description,omitempty"`
	Passed       bool              `json:"passed"`
	Expectations []scenarios.Check `json:"expectations"`
	Results      *sim.Results      `json:"results"`
	Live         Info              `json:"live"`
	plan         *Plan
}

// Info is what only a live run has.
type Info struct {
	TimeScale   float64 `json:"timeScale"`
	Backend     string  `json:"backend"`
	Entry       string  `json:"entry"`
	WallSeconds float64 `json:"wallSeconds"`
	Interrupted bool    `json:"interrupted,omitempty"`
	// NotModelled names what the scenario describes that this run did not
	// reproduce, by path in the file.
	NotModelled []string     `json:"notModelled"`
	Streams     []StreamInfo `json:"streams"`
	// OtherAnswers counts answers that are none of the simulator's
	// outcomes, by gRPC code; they count as failed requests.
	OtherAnswers map[string]uint64 `json:"otherAnswers,omitempty"`
	// Refused counts, per cluster, forwarded tries an allocator refused
	// for a reason other than having no server (a misconfigured policy).
	Refused map[string]uint64 `json:"refused,omitempty"`
	// Released and ReleaseErrors count sessions given back per cluster.
	Released      map[string]uint64 `json:"released"`
	ReleaseErrors map[string]uint64 `json:"releaseErrors,omitempty"`
	// Trace says what the run recorded with Options.Trace.
	Trace *TraceInfo `json:"trace,omitempty"`
}

// TraceInfo is a live run's trace: its records are on the scenario's
// timeline (wall times multiplied by the time scale from Start).
type TraceInfo struct {
	Path    string    `json:"path"`
	Start   time.Time `json:"start"`
	Written uint64    `json:"written"`
	// Dropped records found the writer's queue full.
	Dropped uint64 `json:"dropped,omitempty"`
}

// StreamInfo is what the load generator saw of one stream.
type StreamInfo struct {
	Name     string `json:"name"`
	Target   string `json:"target"`
	Intended int64  `json:"intended"`
	Sent     int64  `json:"sent"`
	NotSent  int64  `json:"notSent"`
	// LatencyP99Ms is from each request's intended send time (loadgen's
	// measure), where the results' latencies run from when it was sent.
	LatencyP99Ms      float64 `json:"latencyP99Ms"`
	SendLatenessP99Ms float64 `json:"sendLatenessP99Ms"`
	// SessionMeanDrawnMs is the mean session length drawn (wall time),
	// SessionMeanHeldMs how long sessions really held their server, from
	// the allocation's answer to the release call: timers firing late on a
	// busy machine make sessions longer, and a fleet busier, than drawn.
	SessionMeanDrawnMs float64 `json:"sessionMeanDrawnMs"`
	SessionMeanHeldMs  float64 `json:"sessionMeanHeldMs"`
}

// Run brings the scenario up live, drives its workload, and returns the
// report. Cancelling ctx stops the run early; the report then covers what
// ran and is marked interrupted.
func Run(ctx context.Context, s *scenarios.Scenario, opt Options) (*Report, error) {
	if opt.Scale == 0 {
		opt.Scale = 1
	}
	p, err := NewPlan(s, opt.Scale, opt.Backend)
	if err != nil {
		return nil, err
	}
	if opt.QM == "" {
		if opt.QM, err = os.Executable(); err != nil {
			return nil, err
		}
	}
	dir := opt.Dir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "qm-live-"+s.Metadata.Name+"-"); err != nil {
			return nil, err
		}
		defer os.RemoveAll(dir)
	}
	logf := func(format string, args ...any) {
		if opt.Progress != nil {
			fmt.Fprintf(opt.Progress, format+"\n", args...)
		}
	}
	logf("live %s: %d clusters as memory-backend qm serve processes in %s; time scale %v: %v of scenario time in %v",
		s.Metadata.Name, len(p.Clusters), dir, p.Scale, s.Spec.Duration.D(), p.Duration)
	var tr *liveTrace
	if opt.Trace != "" {
		// Before the rig, so a trace that cannot be written costs no
		// allocators.
		if tr, err = newLiveTrace(opt.Trace, p.Scale); err != nil {
			return nil, err
		}
		defer tr.a.Close()
	}
	var r liveRig
	if p.Backend == BackendKubernetes {
		r, err = startKubeRig(ctx, p, opt.QM, dir, opt.Progress)
	} else {
		r, err = startRig(ctx, p, opt.QM, dir, *s.Spec.Seed, opt.Progress)
	}
	if err != nil {
		return nil, err
	}
	defer r.stop()
	logf("live %s: allocators up; callers send to %s", s.Metadata.Name, p.Entry)
	rep, err := drive(ctx, p, r, *s.Spec.Seed, opt.Progress, tr)
	if err == nil && tr != nil {
		// Every call and release has returned: what is queued is all.
		if err = tr.a.Close(); err != nil {
			err = fmt.Errorf("trace %s: %w", opt.Trace, err)
		}
		rep.Live.Trace = &TraceInfo{Path: opt.Trace, Start: tr.start.UTC(), Written: tr.a.Written(), Dropped: tr.a.Dropped()}
		if d := tr.a.Dropped(); d > 0 {
			rep.Live.NotModelled = append(rep.Live.NotModelled, fmt.Sprintf(
				"trace: %d records were dropped (the disk fell behind); a replay of %s lacks them", d, opt.Trace))
		}
	}
	return rep, err
}

// drive runs the workload and the outages against a running rig: the
// connections up first, then the clock starts, the outages and samples
// run beside one load generator per stream, and the report is made of
// what they measured.
func drive(ctx context.Context, p *Plan, r liveRig, seed uint64, progress io.Writer, tr *liveTrace) (*Report, error) {
	tlsCfg, err := mtls.ClientConfig(mtls.ClientFilesFor(r.certsDir(), rig.CallerIdentity))
	if err != nil {
		return nil, err
	}
	d := &dialer{tls: tlsCfg}
	defer d.close()
	admins, err := adminClients(ctx, p, r, d)
	if err != nil {
		return nil, err
	}

	start := time.Now()
	rec := newRecorder(p, start)
	if tr != nil {
		tr.start = start
	}
	sources := r.sourceClusters()
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	outages := scheduleOutages(p, r, start, progress)
	defer outages.stop()
	samplesDone := sampleSeries(runCtx, p, rec, start, progress)

	runs := make([]streamRun, len(p.Streams))
	var wg sync.WaitGroup
	for i, st := range p.Streams {
		c, err := newStreamCaller(ctx, p, r, d, st, rec, sources, admins, tr)
		if err != nil {
			return nil, err
		}
		runs[i].caller = c
		cfg, tc, opts, err := streamLoad(p, i, st, seed, c)
		if err != nil {
			return nil, err
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			runs[i].res, runs[i].err = loadgen.Run(runCtx, cfg, []loadgen.Target{{Config: tc, Caller: c}}, opts)
		}()
	}
	wg.Wait()
	wall := time.Since(start)
	cancel()
	<-samplesDone
	// The ticker may have missed the last samples (a busy machine, or an
	// interrupted run); the series end at the run's last interval.
	if p.SampleInterval > 0 {
		last := int(min(time.Since(start), p.Duration)/p.SampleInterval) - 1
		rec.sample(max(last, 0))
	}
	if err := outages.err(); err != nil {
		return nil, fmt.Errorf("outage links: %w", err)
	}

	rep, err := streamsReport(ctx, p, wall, runs)
	if err != nil {
		return nil, err
	}
	tries, err := entryTries(r, p.Entry)
	if err != nil && len(p.Scenario.Spec.Policies) > 0 {
		rep.Live.NotModelled = append(rep.Live.NotModelled, "clusters.*.tries, unAllocated, unavailable: the entry's forwarding metrics could not be read ("+err.Error()+")")
	}
	if rep.Results, err = results(p, rec, tries, &rep.Live); err != nil {
		return nil, err
	}
	if err := rep.check(); err != nil {
		return nil, err
	}
	return rep, nil
}

// dialer makes the run's gRPC connections with the callers' certificate
// and closes them all at the end.
type dialer struct {
	tls   *tls.Config
	conns []*grpc.ClientConn
}

func (d *dialer) dial(addr string) (*grpc.ClientConn, error) {
	c, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(d.tls.Clone())))
	if err == nil {
		d.conns = append(d.conns, c)
	}
	return c, err
}

func (d *dialer) close() {
	for _, c := range d.conns {
		c.Close()
	}
}

// adminClients connects to every cluster's allocator for releases, and
// waits for the connections: every one up before the clock starts, so the
// first requests do not pay the TLS handshakes, and a rig that cannot be
// reached fails here, saying which connection.
func adminClients(ctx context.Context, p *Plan, r liveRig, d *dialer) (map[string]qmv1.AllocationAdminClient, error) {
	admins := map[string]qmv1.AllocationAdminClient{}
	for _, c := range p.Clusters {
		// Sessions end inside their cluster, as a game server's own
		// shutdown does: straight to the allocator, past the links, so an
		// outage of the callers' link does not keep a server allocated.
		conn, err := d.dial(r.releaseAddr(c.Name))
		if err != nil {
			return nil, err
		}
		admins[c.Name] = qmv1.NewAllocationAdminClient(conn)
	}
	if err := warmUp(ctx, d.conns); err != nil {
		return nil, err
	}
	return admins, nil
}

// outageTimers take each outage's cluster's links down from its start to
// its end, counted from the run's start.
type outageTimers struct {
	mu     sync.Mutex
	errs   error
	timers []*time.Timer
}

func scheduleOutages(p *Plan, r liveRig, start time.Time, progress io.Writer) *outageTimers {
	o := &outageTimers{}
	for _, out := range p.Outages {
		for _, ev := range []struct {
			at   time.Duration
			down bool
		}{{out.Start, true}, {out.End, false}} {
			o.timers = append(o.timers, time.AfterFunc(ev.at-time.Since(start), func() {
				if err := r.setDown(out.Cluster, ev.down); err != nil {
					o.mu.Lock()
					o.errs = errors.Join(o.errs, err)
					o.mu.Unlock()
				}
				if progress != nil {
					state := "up again"
					if ev.down {
						state = "down (outage)"
					}
					fmt.Fprintf(progress, "live %s: %s: links to %s %s\n", p.Scenario.Metadata.Name, time.Duration(float64(time.Since(start))*p.Scale).Round(time.Second), out.Cluster, state)
				}
			}))
		}
	}
	return o
}

func (o *outageTimers) stop() {
	for _, t := range o.timers {
		t.Stop()
	}
}

func (o *outageTimers) err() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.errs
}

// sampleSeries samples the series every interval of wall time, with a
// progress line every 5 s when asked, until ctx ends; the channel closes
// when it has stopped.
func sampleSeries(ctx context.Context, p *Plan, rec *recorder, start time.Time, progress io.Writer) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		tick := time.NewTicker(p.SampleInterval)
		defer tick.Stop()
		k := 0
		last := time.Now()
		for {
			select {
			case <-ctx.Done():
				return
			case now := <-tick.C:
				rec.sample(k)
				k++
				if progress != nil && now.Sub(last) >= 5*time.Second {
					last = now
					fmt.Fprintln(progress, progressLine(p, rec, now.Sub(start)))
				}
			}
		}
	}()
	return done
}

// streamRun is one stream's caller and what its load generator measured.
type streamRun struct {
	caller *caller
	res    *loadgen.Result
	err    error
}

// newStreamCaller connects a stream's caller to its target (the cluster it
// names, else the entry) through the callers' links, four connections
// over the target's addresses, up before it returns.
func newStreamCaller(ctx context.Context, p *Plan, r liveRig, d *dialer, st StreamPlan, rec *recorder, sources map[string]string,
	admins map[string]qmv1.AllocationAdminClient, tr *liveTrace) (*caller, error) {
	target := p.Entry
	if st.Cluster != "" {
		target = st.Cluster
	}
	req, err := wire.RequestFromCore(&st.Request)
	if err != nil {
		return nil, fmt.Errorf("stream %s: %w", st.Name, err)
	}
	addrs := r.callerAddrs(target)
	if len(addrs) == 0 {
		return nil, fmt.Errorf("stream %s: no link to cluster %s", st.Name, target)
	}
	var entry []allocation.AllocationServiceClient
	var conns []*grpc.ClientConn
	for k := range 4 {
		conn, err := d.dial(addrs[k%len(addrs)])
		if err != nil {
			return nil, err
		}
		conns = append(conns, conn)
		entry = append(entry, allocation.NewAllocationServiceClient(conn))
	}
	if err := warmUp(ctx, conns); err != nil {
		return nil, err
	}
	c := &caller{rec: rec, alloc: entry, addrs: addrs, req: req, direct: st.Cluster, sources: sources, admins: admins, tr: tr}
	if tr != nil {
		if c.stream, err = tr.addStream(req); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// streamLoad is stream i's load as loadgen runs it: Poisson arrivals on
// the simulator's schedule, sessions drawn from the stream's distribution
// and given back after their length.
func streamLoad(p *Plan, i int, st StreamPlan, seed uint64, c *caller) (loadgen.Config, loadgen.TargetConfig, loadgen.Options, error) {
	sched, err := sim.NewSchedule(st.Rate, p.Duration)
	if err != nil {
		return loadgen.Config{}, loadgen.TargetConfig{}, loadgen.Options{}, err
	}
	streamSeed := seed ^ (uint64(i+1) * 0x9e3779b97f4a7c15)
	draw := sessionSampler(st.Session, streamSeed)
	opts := loadgen.Options{
		NewPacer:    func() loadgen.Pacer { return newPoissonPacer(sched, streamSeed) },
		Duration:    p.Duration,
		Timeout:     p.Deadline,
		MaxInFlight: 8192,
		Release:     true,
		// Timers only: a run drives several streams at once, each with a
		// loop of its own, and a precise wait blocks a thread per stream;
		// the millisecond a timer can be late is small beside the
		// latencies a scenario models, and the late sends are counted in
		// the result as usual.
		Precise: -1,
		SessionLength: func() time.Duration {
			d := draw()
			c.drawn.add(d)
			return d
		},
	}
	cfg := loadgen.Config{Mode: "open", Arrival: "scenario:" + p.Scenario.Metadata.Name + "/" + st.Name, Seed: streamSeed,
		Connections: len(c.alloc), DurationSeconds: p.Duration.Seconds()}
	tc := loadgen.TargetConfig{Name: st.Name, Addr: strings.Join(c.addrs, ","), Protocol: "grpc", Call: "allocate"}
	return cfg, tc, opts, nil
}

// streamsReport starts the report with what the streams' load generators
// measured, naming where the run strayed from the scenario.
func streamsReport(ctx context.Context, p *Plan, wall time.Duration, runs []streamRun) (*Report, error) {
	rep := &Report{
		APIVersion: scenarios.APIVersion, Kind: Kind, Scenario: p.Scenario.Metadata.Name,
		Description: p.Scenario.Metadata.Description, Passed: true, Expectations: []scenarios.Check{}, plan: p,
		Live: Info{TimeScale: p.Scale, Backend: p.Backend, Entry: p.Entry, WallSeconds: round4(wall.Seconds()),
			Interrupted: ctx.Err() != nil, NotModelled: append([]string(nil), p.NotModelled...)},
	}
	for i, o := range runs {
		if o.err != nil {
			return nil, fmt.Errorf("stream %s: %w", p.Streams[i].Name, o.err)
		}
		t := o.res.Targets[0]
		si := StreamInfo{
			Name: p.Streams[i].Name, Target: t.Addr, Intended: t.Intended, Sent: t.Sent, NotSent: t.NotSent,
			LatencyP99Ms: round4(t.Latency.P99Ms), SendLatenessP99Ms: round4(t.SendLateness.P99Ms),
			SessionMeanDrawnMs: o.caller.drawn.ms(), SessionMeanHeldMs: o.caller.sessions.ms(),
		}
		rep.Live.Streams = append(rep.Live.Streams, si)
		// Wall-clock lateness is multiplied by the time scale in scenario
		// time; say so when it is large enough to matter.
		if late := time.Duration(si.SendLatenessP99Ms * 1e6 * p.Scale); late > time.Second {
			rep.Live.NotModelled = append(rep.Live.NotModelled, fmt.Sprintf(
				"spec.workload[%d]: 1%% of arrivals were sent over %.0f ms late (wall), %v of scenario time at this time scale; a smaller --time-scale follows the schedule more closely",
				i, si.SendLatenessP99Ms, late.Round(time.Second)))
		}
		if d, h := si.SessionMeanDrawnMs, si.SessionMeanHeldMs; d > 0 && h > 1.05*d {
			rep.Live.NotModelled = append(rep.Live.NotModelled, fmt.Sprintf(
				"spec.workload[%d].sessionLength: sessions held their servers %.0f%% longer than drawn (mean %.1f ms against %.1f ms of wall time: late release timers on a busy machine), so the fleets were that much busier; a smaller --time-scale keeps this down",
				i, 100*(h/d-1), h, d))
		}
		if t.NotSent > 0 {
			rep.Live.NotModelled = append(rep.Live.NotModelled, fmt.Sprintf(
				"spec.workload[%d]: %d of %d arrivals were not sent (the generator fell behind); they are in no figure of the results", i, t.NotSent, t.Intended))
		}
	}
	return rep, nil
}

// entryTries adds up the entry's replicas' forwarding metrics: tries per
// cluster and outcome. The error says which could not be read.
func entryTries(r liveRig, entry string) (triesOf, error) {
	tries := triesOf{}
	var err error
	for _, addr := range r.metricsAddrs(entry) {
		t, e := scrapeTries(addr)
		err = errors.Join(err, e)
		for cl, m := range t {
			if tries[cl] == nil {
				tries[cl] = map[string]uint64{}
			}
			for k, v := range m {
				tries[cl][k] += v
			}
		}
	}
	return tries, err
}

// liveRig is what a run needs of its rig.
type liveRig interface {
	certsDir() string
	// callerAddrs are where the callers dial a cluster: through its links.
	callerAddrs(cluster string) []string
	// releaseAddr is one of the cluster's allocators' own address.
	releaseAddr(cluster string) string
	// metricsAddrs are the cluster's allocators' /metrics addresses.
	metricsAddrs(cluster string) []string
	// sourceClusters maps an allocation's source to its cluster.
	sourceClusters() map[string]string
	setDown(cluster string, down bool) error
	stop()
}

// warmUp makes a health check on every connection: any answer from the
// allocator proves the connection and the certificates work.
func warmUp(ctx context.Context, conns []*grpc.ClientConn) error {
	for _, c := range conns {
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, err := healthpb.NewHealthClient(c).Check(cctx, &healthpb.HealthCheckRequest{})
		cancel()
		switch status.Code(err) {
		case codes.Unavailable, codes.DeadlineExceeded, codes.Canceled, codes.Unauthenticated:
			return fmt.Errorf("allocator at %s: %v", c.Target(), status.Convert(err).Message())
		}
	}
	return nil
}

func progressLine(p *Plan, rec *recorder, wall time.Duration) string {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	var parts []string
	for i, n := range rec.names {
		parts = append(parts, fmt.Sprintf("%s %d", n, rec.perCluster[i].allocated))
	}
	failed := rec.requests - rec.allocated
	return fmt.Sprintf("live %s: %5.1f%% (%v of %v scenario time), %d requests, %d failed; allocated: %s",
		p.Scenario.Metadata.Name, 100*wall.Seconds()/p.Duration.Seconds(),
		time.Duration(float64(wall)*p.Scale).Round(time.Second), p.Scenario.Spec.Duration.D(),
		rec.requests, failed, strings.Join(parts, ", "))
}

// caller is loadgen's Caller for one stream: it allocates through the
// entry's (or the stream's cluster's) link, records which cluster served
// each request from the answer's source, and releases a session on that
// cluster.
type caller struct {
	rec     *recorder
	alloc   []allocation.AllocationServiceClient
	addrs   []string // where alloc dials, through the callers' links
	next    uint64
	mu      sync.Mutex
	req     *allocation.AllocationRequest
	direct  string
	sources map[string]string
	admins  map[string]qmv1.AllocationAdminClient
	held    sync.Map // *loadgen.Session -> heldSession
	// tr records calls when the run keeps a trace (nil: none); stream is
	// this caller's request in it.
	tr     *liveTrace
	stream int
	// drawn are the session lengths loadgen drew, sessions how long they
	// held their servers.
	drawn, sessions runningMean
}

type heldSession struct {
	cluster string
	since   time.Time
}

// runningMean is a mean of durations, safe for concurrent use.
type runningMean struct {
	mu  sync.Mutex
	sum time.Duration
	n   int64
}

func (m *runningMean) add(d time.Duration) {
	m.mu.Lock()
	m.sum += d
	m.n++
	m.mu.Unlock()
}

func (m *runningMean) ms() float64 {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.n == 0 {
		return 0
	}
	return round4(float64(m.sum/time.Duration(m.n)) / 1e6)
}

func (c *caller) Call(ctx context.Context) (codes.Code, *loadgen.Session) {
	c.mu.Lock()
	cl := c.alloc[c.next%uint64(len(c.alloc))]
	c.next++
	c.mu.Unlock()
	sent := time.Now()
	resp, err := cl.Allocate(ctx, c.req)
	lat := time.Since(sent)
	code := status.Code(err)
	cluster := ""
	if err == nil {
		var ok bool
		if cluster, ok = c.sources[resp.GetSource()]; !ok {
			cluster = ""
		}
		if c.direct != "" {
			cluster = c.direct
		}
	}
	c.rec.add(sent, lat, code, cluster, c.direct)
	ns := c.req.GetNamespace()
	if ns == "" {
		ns = "default"
	}
	if c.tr != nil {
		it := liveTraceItem{at: sent, stream: c.stream, code: code, cluster: cluster, latency: lat}
		if err == nil {
			it.gs = ns + "/" + resp.GetGameServerName()
		}
		c.tr.add(it)
	}
	if err != nil || cluster == "" {
		return code, nil
	}
	s := &loadgen.Session{Namespace: ns, Name: resp.GetGameServerName()}
	c.held.Store(s, heldSession{cluster, time.Now()})
	return codes.OK, s
}

func (c *caller) Release(ctx context.Context, s *loadgen.Session) error {
	v, ok := c.held.LoadAndDelete(s)
	if !ok {
		return status.Error(codes.NotFound, "not a session of this run")
	}
	h := v.(heldSession)
	c.sessions.add(time.Since(h.since))
	cluster := h.cluster
	at := time.Now()
	_, err := c.admins[cluster].Release(ctx, &qmv1.ReleaseRequest{Namespace: s.Namespace, GameServerName: s.Name})
	c.rec.released(cluster, err == nil)
	c.tr.add(liveTraceItem{at: at, release: true, code: status.Code(err), cluster: cluster, gs: s.Namespace + "/" + s.Name, latency: time.Since(at)})
	return err
}

func (c *caller) Close() error { return nil }

// triesOf is one cluster's forwarded tries by outcome, from the entry's
// qm_forward_tries_total.
type triesOf map[string]map[string]uint64

// scrapeTries reads the entry allocator's forwarding counters.
func scrapeTries(httpAddr string) (triesOf, error) {
	resp, err := http.Get("http://" + httpAddr + "/metrics")
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("/metrics: %s", resp.Status)
	}
	return parseTries(resp.Body)
}

// parseTries reads qm_forward_tries_total{cluster="...",outcome="..."} N
// lines of the Prometheus text format.
func parseTries(r io.Reader) (triesOf, error) {
	out := triesOf{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	const name = "qm_forward_tries_total{"
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name) {
			continue
		}
		end := strings.LastIndexByte(line, '}')
		if end < 0 {
			return nil, fmt.Errorf("metrics: malformed line %q", line)
		}
		labels := map[string]string{}
		for _, kv := range strings.Split(line[len(name):end], ",") {
			k, v, ok := strings.Cut(kv, "=")
			if !ok {
				continue
			}
			if uq, err := strconv.Unquote(v); err == nil {
				v = uq
			}
			labels[k] = v
		}
		f, err := strconv.ParseFloat(strings.TrimSpace(line[end+1:]), 64)
		if err != nil {
			return nil, fmt.Errorf("metrics: value of %q: %v", line, err)
		}
		cl := labels["cluster"]
		if out[cl] == nil {
			out[cl] = map[string]uint64{}
		}
		out[cl][labels["outcome"]] += uint64(math.Round(f))
	}
	return out, sc.Err()
}

// results builds the simulator's results from what was recorded.
func results(p *Plan, rec *recorder, tries triesOf, info *Info) (*sim.Results, error) {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	finished := float64(rec.requests)
	res := &sim.Results{
		Scenario: p.Scenario.Metadata.Name, Seed: *p.Scenario.Spec.Seed, Duration: p.Scenario.Spec.Duration.D().String(),
		// Events counts a simulation's events; a live run has none.
		Clusters:  map[string]sim.ClusterResult{},
		Providers: map[string]sim.ProviderResult{},
	}
	t := &res.Totals
	t.Requests, t.Allocated, t.UnAllocated = rec.requests, rec.allocated, rec.unAllocated
	t.Contention, t.Unavailable, t.DeadlineExceeded = rec.contention, rec.unavailable, rec.deadline
	t.Latency, t.LatencyBuckets = rec.lat.summary(), rec.lat.bucketList()
	if finished > 0 {
		t.SuccessRate = float64(rec.allocated) / finished
		t.UnAllocatedRate = float64(rec.unAllocated) / finished
	}
	t.PackingEfficiency = 1 // not measured; see notModelled
	if len(rec.other) > 0 {
		info.OtherAnswers = rec.other
	}
	info.Released = map[string]uint64{}
	for i, c := range p.Clusters {
		pc := rec.perCluster[i]
		cr := sim.ClusterResult{Provider: c.Provider, Region: c.Region, Latency: pc.lat.summary(), PackingEfficiency: 1}
		cr.Allocated = pc.allocated
		cr.Tries, cr.UnAllocated, cr.Unavailable = pc.direct.tries, pc.direct.unAllocated, pc.direct.unavailable
		if m := tries[c.Name]; m != nil {
			for outcome, n := range m {
				cr.Tries += n
				switch outcome {
				case "unallocated":
					cr.UnAllocated += n
				case "unavailable", "breaker_open", "deadline":
					cr.Unavailable += n
				case "refused", "misconfigured":
					if info.Refused == nil {
						info.Refused = map[string]uint64{}
					}
					info.Refused[c.Name] += n
				}
			}
		}
		if rec.allocated > 0 {
			cr.Share = round4(float64(pc.allocated) / float64(rec.allocated))
		}
		cr.SuccessRate = float64(cr.Allocated) / max(1, float64(cr.Allocated+cr.UnAllocated+cr.Contention))
		for _, f := range c.Fleets.Fleets {
			cr.Servers += f.Replicas
		}
		res.Clusters[c.Name] = cr
		pr := res.Providers[c.Provider]
		pr.Allocated += pc.allocated
		res.Providers[c.Provider] = pr
		info.Released[c.Name] = pc.released
		if pc.relFailure > 0 {
			if info.ReleaseErrors == nil {
				info.ReleaseErrors = map[string]uint64{}
			}
			info.ReleaseErrors[c.Name] = pc.relFailure
		}
	}
	for k, pr := range res.Providers {
		if rec.allocated > 0 {
			pr.Share = round4(float64(pr.Allocated) / float64(rec.allocated))
		}
		res.Providers[k] = pr
	}
	if len(rec.phases) > 0 {
		res.Phases = map[string]sim.PhaseResult{}
		for i, ph := range rec.phases {
			pc := rec.phaseCounts[i]
			pr := sim.PhaseResult{Requests: pc.requests, Allocated: pc.allocated, Clusters: map[string]sim.PhaseCluster{}}
			for ci, n := range pc.perCluster {
				share := 0.0
				if pc.allocated > 0 {
					share = round4(float64(n) / float64(pc.allocated))
				}
				pr.Clusters[rec.names[ci]] = sim.PhaseCluster{Allocated: n, Share: share}
			}
			res.Phases[ph.name] = pr
		}
	}
	var err error
	if res.Series, err = series(p, rec); err != nil {
		return nil, err
	}
	info.NotModelled = append(info.NotModelled,
		"results.series: per cluster, allocations and allocated (sessions held) are measured; ready, nodesInUse, nodesWithAllocated, packingEfficiency, unAllocated and retries are not, and are written as 0",
		"results.totals/clusters: packingEfficiency (written as 1), nodeHours and cost (0) are not measured live; retries are 0 (one memory-backend allocator per cluster never conflicts)")
	sort.Strings(info.NotModelled)
	return res, nil
}

// series writes the per-sample figures in the simulator's series format.
// The simulator's per-cluster series type is its own, so they are built
// as JSON and decoded into it.
func series(p *Plan, rec *recorder) (sim.Series, error) {
	n := len(rec.heldAtSample)
	if p.SampleInterval > 0 {
		// Ticks while the last answers and releases came in are past the
		// scenario's end.
		n = min(n, int(p.Duration/p.SampleInterval))
	}
	type col struct {
		Allocated          []int     `json:"allocated"`
		Ready              []int     `json:"ready"`
		NodesInUse         []int     `json:"nodesInUse"`
		NodesWithAllocated []int     `json:"nodesWithAllocated"`
		PackingEfficiency  []float64 `json:"packingEfficiency"`
		Allocations        []uint64  `json:"allocations"`
		UnAllocated        []uint64  `json:"unAllocated"`
		Retries            []uint64  `json:"retries"`
	}
	out := struct {
		IntervalSeconds float64         `json:"intervalSeconds"`
		T               []float64       `json:"t"`
		Clusters        map[string]*col `json:"clusters"`
	}{IntervalSeconds: round4(p.SampleInterval.Seconds() * p.Scale), Clusters: map[string]*col{}}
	for k := range n {
		out.T = append(out.T, round4(float64(k+1)*p.SampleInterval.Seconds()*p.Scale))
	}
	for ci, name := range rec.names {
		c := &col{
			Allocated: make([]int, n), Ready: make([]int, n), NodesInUse: make([]int, n), NodesWithAllocated: make([]int, n),
			PackingEfficiency: make([]float64, n), Allocations: make([]uint64, n), UnAllocated: make([]uint64, n), Retries: make([]uint64, n),
		}
		for k := range n {
			c.Allocated[k] = max(rec.heldAtSample[k][ci], 0)
			if k < len(rec.allocations) {
				c.Allocations[k] = rec.allocations[k][ci]
			}
		}
		out.Clusters[name] = c
	}
	var s sim.Series
	b, err := json.Marshal(out)
	if err == nil {
		err = json.Unmarshal(b, &s)
	}
	if err != nil {
		// Both sides are this package's and sim's own types; a mismatch
		// is this package's bug, said as such rather than written wrong.
		return s, fmt.Errorf("live: the series do not fit the simulator's format: %w", err)
	}
	return s, nil
}

// check evaluates the scenario's expectations on the results, by the
// same paths the simulator's are.
func (rep *Report) check() error {
	b, err := json.Marshal(rep.Results)
	if err != nil {
		return err
	}
	var tree any
	if err := json.Unmarshal(b, &tree); err != nil {
		return err
	}
	for i, e := range rep.plan.Scenario.Spec.Expectations {
		v, err := lookup(tree, e.Metric)
		if err != nil {
			return fmt.Errorf("spec.expectations[%d].metric: %v", i, err)
		}
		ok := (e.Min == nil || v >= *e.Min) && (e.Max == nil || v <= *e.Max)
		rep.Expectations = append(rep.Expectations, scenarios.Check{
			Metric: e.Metric, Description: e.Description, Min: e.Min, Max: e.Max, Value: v, Pass: ok,
		})
		rep.Passed = rep.Passed && ok
	}
	return nil
}

// lookup resolves a dotted path (clusters.on-prem.share) in a decoded
// JSON tree to a number.
func lookup(tree any, path string) (float64, error) {
	cur := tree
	parts := strings.Split(path, ".")
	for i, part := range parts {
		m, ok := cur.(map[string]any)
		if !ok {
			return 0, fmt.Errorf("%q: %s is not an object", path, strings.Join(parts[:i], "."))
		}
		if cur, ok = m[part]; !ok {
			keys := make([]string, 0, len(m))
			for k := range m {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			return 0, fmt.Errorf("%q: no %q here; there is %s", path, part, strings.Join(keys, ", "))
		}
	}
	switch x := cur.(type) {
	case float64:
		return x, nil
	case bool:
		if x {
			return 1, nil
		}
		return 0, nil
	}
	return 0, fmt.Errorf("%q is not a number", path)
}

// SimReport is the report as the simulator's type, for code that prints
// or compares scenario reports.
func (rep *Report) SimReport() *scenarios.Report {
	return &scenarios.Report{APIVersion: rep.APIVersion, Kind: rep.Kind, Scenario: rep.Scenario,
		Description: rep.Description, Passed: rep.Passed, Expectations: rep.Expectations, Results: rep.Results}
}

var _ loadgen.Caller = (*caller)(nil)
