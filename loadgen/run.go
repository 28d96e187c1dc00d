package loadgen

import (
	"context"
	"errors"
	"fmt"
	"io"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Target is a configured target with its connection.
type Target struct {
	Config TargetConfig
	Caller Caller
}

// Options are how a run drives its targets.
type Options struct {
	// Closed selects closed loop: Workers callers per target, each
	// sending when its previous answer came. Otherwise open loop: the
	// pacer from NewPacer (one per target) sets the arrivals.
	Closed   bool
	Workers  int
	NewPacer func() Pacer
	// MaxInFlight bounds outstanding requests per target in open loop
	// (default 1024). An arrival that finds it reached waits for a slot;
	// what is still waiting when the turn's time is up is counted as not
	// sent. (Arrivals merely late, because the generator fell behind, are
	// sent, with their lateness in their latency.)
	MaxInFlight int
	// Duration is each target's measured time (with several targets the
	// run takes that many times as long); Requests caps each target's
	// requests. At least one of them, or a schedule that stops, or the
	// context, ends the run.
	Duration time.Duration
	Requests int64
	// Warmup runs each target this long first, not recorded.
	Warmup time.Duration
	// Window is each target's turn when several take turns (default 1s).
	Window time.Duration
	// Timeout is each request's deadline (default 10s).
	Timeout time.Duration
	// Release gives every allocated server back with Release after
	// SessionLength (nil: at once). A target that answers Release with
	// Unimplemented (Agones) keeps its servers.
	Release       bool
	SessionLength func() time.Duration
	// AllocationKeys gives every request an idempotency key of its own
	// and sends a request whose answer was lost (AnswerLost) again with
	// its key, while Timeout leaves time, each try bounded by
	// AttemptTimeout (default Timeout/2). With Release, a request given up
	// without an answer is resolved: its key is asked about for up to
	// ResolveFor (default DefaultResolveFor) and what it allocated is
	// given back. Every target's Caller must be a KeyedCaller. Without
	// it, requests carry no key and go out once (keys.go).
	AllocationKeys bool
	AttemptTimeout time.Duration
	ResolveFor     time.Duration
	// Reference is the index of the target that ratios divide by.
	Reference int
	// ServerCPU, when set, reads the server process's CPU time so far; it
	// is read around every turn and the difference charged to the target.
	ServerCPU func() (time.Duration, error)
	// Spin is how long before each arrival the open loop stops sleeping
	// and waits in a yielding loop: 0 (the default) sleeps on a timer, up
	// to 1 ms late; 1ms or so is punctual to microseconds on an idle core
	// but keeps most of one busy, and on a loaded machine takes CPU the
	// senders need.
	Spin time.Duration
	// Precise is the longest stretch before each arrival that the open
	// loop waits precisely (nanosleep) instead of on a Go timer, which is
	// up to a millisecond late: 0 is DefaultPrecise, negative turns it off
	// (timers only). It is used only while the generator keeps to its
	// schedule and arrivals are at most 2,500/s; behind, or faster, the
	// loop falls back to timers (see precision). Spin, when set, replaces it.
	Precise time.Duration
	// Progress, when set, gets a progress line every ProgressEvery
	// (default 1s); with Terminal the line is rewritten in place.
	Progress      io.Writer
	ProgressEvery time.Duration
	Terminal      bool
}

func (o *Options) defaults() error {
	if o.MaxInFlight <= 0 {
		o.MaxInFlight = 1024
	}
	if o.Window <= 0 {
		o.Window = time.Second
	}
	if o.Timeout <= 0 {
		o.Timeout = 10 * time.Second
	}
	if o.ProgressEvery <= 0 {
		o.ProgressEvery = time.Second
	}
	if o.AttemptTimeout <= 0 || o.AttemptTimeout > o.Timeout {
		o.AttemptTimeout = o.Timeout / 2
	}
	if o.ResolveFor <= 0 {
		o.ResolveFor = DefaultResolveFor
	}
	if o.Precise == 0 {
		o.Precise = DefaultPrecise
	}
	if o.Spin > 0 {
		o.Precise = -1 // the spin already waits the last stretch
	}
	if o.Closed && o.Workers <= 0 {
		return errors.New("closed loop needs at least one worker")
	}
	if !o.Closed && o.NewPacer == nil {
		return errors.New("open loop needs a pacer")
	}
	return nil
}

type targetRun struct {
	Target
	pacer      Pacer
	prec       *precision
	rec        *Recorder
	n          uint64        // the next arrival of the schedule
	active     time.Duration // wall time of its turns
	sched      time.Duration // the turns' lengths as planned (Duration counts these)
	dispatched int64
	done       bool
	sem        chan struct{}
	wg         sync.WaitGroup
	windows    []window
	serverCPU  time.Duration
	releasing  atomic.Bool
	released   atomic.Int64
	relErrors  atomic.Int64
	// With allocation keys: tries sent again, and given-up requests
	// whose key was found holding a server (given back), holding none,
	// or never answered for.
	retries       atomic.Int64
	resolved      atomic.Int64
	resolvedEmpty atomic.Int64
	resolveFailed atomic.Int64
}

// window is one turn of one target.
type window struct {
	round  int
	ok     int64
	active time.Duration
}

type runner struct {
	opt       Options
	runs      []*targetRun
	start     time.Time // of the measured part
	callCtx   context.Context
	current   atomic.Int64 // index of the target whose turn it is
	relSem    chan struct{}
	relWG     sync.WaitGroup
	relMu     sync.Mutex
	relTimers map[*time.Timer]func()
	timer     *time.Timer
	first     bool      // the next turn is the measured run's first
	epoch     time.Time // the origin of the precision's clock
	keyPrefix string    // with allocation keys: the run's own
	keySeq    atomic.Uint64
}

// Run drives the targets and returns what it measured. cfg is recorded in
// the result as given. When ctx ends early the result so far comes back
// marked Interrupted, with no error.
func Run(ctx context.Context, cfg Config, targets []Target, opt Options) (*Result, error) {
	if len(targets) == 0 {
		return nil, errors.New("no targets")
	}
	if err := opt.defaults(); err != nil {
		return nil, err
	}
	if opt.Reference < 0 || opt.Reference >= len(targets) {
		return nil, fmt.Errorf("reference target %d out of range", opt.Reference)
	}
	callCtx, cancelCalls := context.WithCancel(context.Background())
	defer cancelCalls()
	// Ctrl-C stops new requests at once; the ones in flight get a moment
	// to answer before they are cancelled.
	stopGrace := context.AfterFunc(ctx, func() {
		time.AfterFunc(2*time.Second, cancelCalls)
	})
	defer stopGrace()

	r := &runner{opt: opt, callCtx: callCtx, relSem: make(chan struct{}, 64), relTimers: map[*time.Timer]func(){}, timer: time.NewTimer(time.Hour), epoch: time.Now()}
	r.timer.Stop()
	if opt.AllocationKeys {
		for _, t := range targets {
			if _, ok := t.Caller.(KeyedCaller); !ok {
				return nil, fmt.Errorf("target %s: allocation keys: its caller (%T) cannot send them", t.Config.Name, t.Caller)
			}
		}
		var err error
		if r.keyPrefix, err = keyPrefix(); err != nil {
			return nil, err
		}
	}
	for _, t := range targets {
		tr := &targetRun{Target: t, sem: make(chan struct{}, opt.MaxInFlight)}
		tr.releasing.Store(opt.Release)
		r.runs = append(r.runs, tr)
	}

	if opt.Warmup > 0 {
		r.start = time.Now()
		for _, tr := range r.runs {
			tr.rec = NewRecorder()
			if !opt.Closed {
				tr.pacer, tr.prec = opt.NewPacer(), newPrecision(opt.Precise)
			}
			r.turn(ctx, tr, opt.Warmup, 0)
			tr.n, tr.active, tr.sched, tr.dispatched, tr.done, tr.windows = 0, 0, 0, 0, false, nil
		}
	}
	for _, tr := range r.runs {
		tr.rec = NewRecorder()
		if !opt.Closed {
			tr.pacer, tr.prec = opt.NewPacer(), newPrecision(opt.Precise)
		}
	}

	r.start, r.first = time.Now(), true
	progressDone := make(chan struct{})
	progressStopped := make(chan struct{})
	go r.progress(progressDone, progressStopped)

	for round := 0; ctx.Err() == nil; round++ {
		anyLeft := false
		for i := range r.runs {
			k := (round + i) % len(r.runs) // rotate who goes first
			tr := r.runs[k]
			if tr.done || ctx.Err() != nil {
				continue
			}
			anyLeft = true
			w := opt.Window
			if len(r.runs) == 1 {
				w = 24 * time.Hour // no one to take turns with
			}
			if opt.Duration > 0 && tr.sched+w > opt.Duration {
				w = opt.Duration - tr.sched
			}
			r.current.Store(int64(k))
			r.turn(ctx, tr, w, round)
			if opt.Duration > 0 && tr.sched >= opt.Duration {
				tr.done = true
			}
		}
		if !anyLeft {
			break
		}
	}
	elapsed := time.Since(r.start)
	close(progressDone)
	<-progressStopped
	r.finishReleases()

	res := &Result{
		APIVersion:      APIVersion,
		Kind:            Kind,
		Config:          cfg,
		Start:           r.start.UTC(),
		DurationSeconds: elapsed.Seconds(),
		Interrupted:     ctx.Err() != nil,
		Generators:      1,
	}
	for _, tr := range r.runs {
		t := tr.rec.Result(tr.Config)
		t.Released, t.ReleaseErrors = tr.released.Load(), tr.relErrors.Load()
		t.Retries, t.Resolved, t.ResolvedEmpty, t.ResolveFailed = tr.retries.Load(), tr.resolved.Load(), tr.resolvedEmpty.Load(), tr.resolveFailed.Load()
		if tr.prec != nil {
			t.PreciseWaits, t.Behind = tr.prec.precise, tr.prec.behind
		}
		if tr.serverCPU > 0 {
			t.ServerCPUSeconds = tr.serverCPU.Seconds()
			if n := t.Latency.Count; n > 0 {
				t.ServerCPUPerRequestMicros = float64(tr.serverCPU.Microseconds()) / float64(n)
			}
		}
		res.Targets = append(res.Targets, t)
	}
	res.Ratios = r.ratios(res)
	return res, nil
}

func (r *runner) second(t time.Time) int {
	if t.Before(r.start) {
		return 0
	}
	return int(t.Sub(r.start) / time.Second)
}

// addActive credits the wall time [from, to) to the seconds it spans.
func (r *runner) addActive(rec *Recorder, from, to time.Time) {
	for from.Before(to) {
		s := r.second(from)
		end := r.start.Add(time.Duration(s+1) * time.Second)
		if end.After(to) {
			end = to
		}
		if !end.After(from) { // before the start (warm-up): one piece
			end = to
		}
		rec.Active(s, end.Sub(from))
		from = end
	}
}

// turn gives one target the machine for w of its own time and waits for
// its answers.
func (r *runner) turn(ctx context.Context, tr *targetRun, w time.Duration, round int) {
	before := tr.rec.Snapshot().OK
	var cpu0 time.Duration
	cpuOK := false
	if r.opt.ServerCPU != nil {
		var err error
		cpu0, err = r.opt.ServerCPU()
		cpuOK = err == nil // a failure shows as a missing figure
	}
	start := time.Now()
	if r.first {
		// The measured run starts with its first turn, to the
		// nanosecond, so its seconds line up with the series'.
		start, r.first = r.start, false
	}
	var from, to time.Time
	if r.opt.Closed {
		from, to = r.closedTurn(ctx, tr, w, start)
	} else {
		from, to = r.openTurn(ctx, tr, w, start)
	}
	tr.wg.Wait()
	if r.opt.ServerCPU != nil {
		if cpu1, err := r.opt.ServerCPU(); err == nil && cpuOK {
			tr.serverCPU += cpu1 - cpu0
		}
	}
	act := to.Sub(from)
	tr.active += act
	tr.sched += w
	if end := from.Add(w); to.After(end) && end.After(from) {
		// A turn that ran over (a generator behind its schedule, answers
		// still coming) is charged to the last second it was meant for,
		// so the series keeps one point per second of the schedule.
		r.addActive(tr.rec, from, end)
		tr.rec.Active(r.second(end.Add(-time.Nanosecond)), to.Sub(end))
	} else {
		r.addActive(tr.rec, from, to)
	}
	tr.windows = append(tr.windows, window{round: round, ok: tr.rec.Snapshot().OK - before, active: act})
}

// sleepUntil waits for t or the end of ctx; false if ctx ended. Go's
// timers on Linux wake up to a millisecond late (half on average); with
// Spin the last stretch is spent yielding in a loop instead, which is
// punctual but costs CPU. Arrivals go through arrive, which chooses
// between a timer and a precise wait; the end of a turn needs no precision.
func (r *runner) sleepUntil(ctx context.Context, t time.Time) bool {
	if d := time.Until(t) - r.opt.Spin; d > 0 && !r.wait(ctx, d) {
		return false
	}
	for r.opt.Spin > 0 && time.Now().Before(t) {
		runtime.Gosched()
	}
	return ctx.Err() == nil
}

// wait sleeps d on the runner's timer; false if ctx ended first.
func (r *runner) wait(ctx context.Context, d time.Duration) bool {
	r.timer.Reset(d)
	select {
	case <-r.timer.C:
		return true
	case <-ctx.Done():
		r.timer.Stop()
		return false
	}
}

// arrive waits for an arrival due at t as prec plans it: on a timer,
// then, when affordable, precisely for the last stretch. false if ctx
// ended.
func (r *runner) arrive(ctx context.Context, prec *precision, t time.Time) bool {
	if r.opt.Spin > 0 {
		return r.sleepUntil(ctx, t)
	}
	due := t.Sub(r.epoch)
	timer, fine := prec.plan(time.Since(r.epoch), due)
	if timer > 0 {
		if !r.wait(ctx, timer) {
			return false
		}
		// A timer that wakes well past the arrival (not just its usual
		// millisecond) means the generator was descheduled.
		prec.woke(time.Since(r.epoch), due)
	}
	if fine {
		for rest := time.Until(t); rest > 0; rest = time.Until(t) {
			preciseSleep(rest)
		}
	}
	return ctx.Err() == nil
}

// openTurn sends the arrivals the target's schedule has between its
// active time and w later. It returns the wall time the turn covered.
func (r *runner) openTurn(ctx context.Context, tr *targetRun, w time.Duration, start time.Time) (time.Time, time.Time) {
	base := tr.sched
	end := base + w
	endWall := start.Add(w)
	wallOf := func(d time.Duration) time.Time { return start.Add(d - base) }
	finished := false // the turn's schedule ran to its end
	for {
		if r.opt.Requests > 0 && tr.dispatched >= r.opt.Requests {
			tr.done = true
			break
		}
		d, stop := tr.pacer.Pace(0, tr.n)
		if stop {
			tr.done = true
			break
		}
		if d >= end {
			finished = true
			break
		}
		due := wallOf(d)
		if !r.arrive(ctx, tr.prec, due) {
			break
		}
		got := false
		select {
		case tr.sem <- struct{}{}:
			got = true
		default:
			r.timer.Reset(time.Until(endWall))
			select {
			case tr.sem <- struct{}{}:
				got = true
				r.timer.Stop()
			case <-r.timer.C:
			case <-ctx.Done():
				r.timer.Stop()
			}
		}
		if !got {
			break // the turn or the run ended while waiting for a slot
		}
		s := r.second(due)
		tr.rec.Dispatch(s)
		tr.n++
		tr.dispatched++
		tr.wg.Add(1)
		go r.call(tr, due, s, true)
	}
	// What the schedule still had for this turn was not sent. When the
	// run was interrupted the turn ended there: only the arrivals due by
	// then were meant to go, not the rest of the schedule.
	limit := end
	if ctx.Err() != nil {
		limit = min(end, base+time.Since(start))
	}
	for r.opt.Requests == 0 || tr.dispatched < r.opt.Requests {
		d, stop := tr.pacer.Pace(0, tr.n)
		if stop || d >= limit {
			break
		}
		tr.rec.Intend(r.second(wallOf(d)), 1)
		tr.n++
		tr.dispatched++
	}
	if finished {
		// The turn lasts its whole length even when its last arrival
		// came earlier, so that wall time and active time agree.
		r.sleepUntil(ctx, endWall)
	}
	// A generator that fell behind sends the turn's arrivals late (each
	// charged from its due time) and the turn lasts until it is done, so
	// its rates are per the time it really took; an interrupted turn
	// lasts until the interruption. A turn that ended the target's run
	// (Requests sent, or the schedule over) lasts until its last answer,
	// as a closed-loop turn does, not to the end of a window it was never
	// going to fill.
	if tr.done {
		tr.wg.Wait()
		return start, time.Now()
	}
	to := time.Now()
	if ctx.Err() == nil && to.Before(endWall) {
		to = endWall
	}
	return start, to
}

// closedTurn runs Workers callers until w has passed.
func (r *runner) closedTurn(ctx context.Context, tr *targetRun, w time.Duration, start time.Time) (time.Time, time.Time) {
	endWall := start.Add(w)
	var left atomic.Int64
	left.Store(r.opt.Requests - tr.dispatched)
	var sent atomic.Int64
	var wg sync.WaitGroup
	for i := 0; i < r.opt.Workers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				now := time.Now()
				if !now.Before(endWall) {
					return
				}
				if r.opt.Requests > 0 && left.Add(-1) < 0 {
					return
				}
				s := r.second(now)
				tr.rec.Dispatch(s)
				sent.Add(1)
				tr.wg.Add(1)
				r.call(tr, now, s, false)
			}
		}()
	}
	wg.Wait()
	tr.dispatched += sent.Load()
	if r.opt.Requests > 0 && tr.dispatched >= r.opt.Requests {
		tr.done = true
	}
	// In closed loop the turn lasts until its last answer: the callers
	// were busy until then.
	return start, time.Now()
}

// call sends one request meant to go out at due and records its answer.
func (r *runner) call(tr *targetRun, due time.Time, s int, slot bool) {
	defer tr.wg.Done()
	if slot {
		defer func() { <-tr.sem }()
	}
	sent := time.Now()
	ctx, cancel := context.WithTimeout(r.callCtx, r.opt.Timeout)
	var code codes.Code
	var sess *Session
	var key string
	if r.opt.AllocationKeys {
		code, sess, key = r.callKeyed(ctx, tr)
	} else {
		code, sess = tr.Caller.Call(ctx)
	}
	cancel()
	got := time.Now()
	if code != codes.OK && r.callCtx.Err() != nil {
		code = codes.Canceled // we stopped it, whatever the transport said
	}
	tr.rec.Add(Sample{Second: s, Latency: got.Sub(due), Lateness: sent.Sub(due), Code: code})
	if !tr.releasing.Load() {
		return
	}
	switch {
	case code == codes.OK && sess != nil:
		r.release(tr, sess, r.sessionLength())
	case key != "" && AnswerLost(code):
		r.resolve(tr, key)
	}
}

func (r *runner) sessionLength() time.Duration {
	if r.opt.SessionLength == nil {
		return 0
	}
	return r.opt.SessionLength()
}

// release gives a session back after l, off the request path.
func (r *runner) release(tr *targetRun, sess *Session, l time.Duration) {
	r.relWG.Add(1)
	fire := func() {
		defer r.relWG.Done()
		if !tr.releasing.Load() {
			return
		}
		r.relSem <- struct{}{}
		defer func() { <-r.relSem }()
		ctx, cancel := context.WithTimeout(context.Background(), r.opt.Timeout)
		defer cancel()
		err := tr.Caller.Release(ctx, sess)
		switch status.Code(err) {
		case codes.OK:
			tr.released.Add(1)
		case codes.Unimplemented:
			// Not a Quartermaster allocator: its servers are held, as a
			// matchmaker without Release would hold them.
			tr.releasing.Store(false)
		default:
			tr.relErrors.Add(1)
		}
	}
	if l <= 0 {
		go fire()
		return
	}
	r.relMu.Lock()
	var t *time.Timer
	t = time.AfterFunc(l, func() {
		r.relMu.Lock()
		delete(r.relTimers, t)
		r.relMu.Unlock()
		fire()
	})
	r.relTimers[t] = fire
	r.relMu.Unlock()
}

// finishReleases gives back, now, the sessions still running, so a run
// does not leave a fleet allocated, and waits (at most a minute, or as
// long as a given-up request's key is resolved) for the releases to
// finish.
func (r *runner) finishReleases() {
	r.relMu.Lock()
	for t, fire := range r.relTimers {
		if t.Stop() {
			go fire()
		}
		delete(r.relTimers, t)
	}
	r.relMu.Unlock()
	done := make(chan struct{})
	go func() { r.relWG.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(max(time.Minute, r.opt.ResolveFor+2*r.opt.Timeout)):
	}
}

// progress flushes the recorders' finished seconds and, when asked,
// prints a line about the target whose turn it is.
func (r *runner) progress(done <-chan struct{}, stopped chan<- struct{}) {
	defer close(stopped)
	t := time.NewTicker(r.opt.ProgressEvery)
	defer t.Stop()
	last := make([]int64, len(r.runs))
	lastAt := time.Now()
	for {
		select {
		case <-done:
			if r.opt.Progress != nil && r.opt.Terminal {
				fmt.Fprint(r.opt.Progress, "\r\033[K")
			}
			return
		case now := <-t.C:
			for _, tr := range r.runs {
				tr.rec.Flush(r.second(now))
			}
			if r.opt.Progress == nil {
				continue
			}
			k := r.current.Load()
			tr := r.runs[k]
			snap := tr.rec.Snapshot()
			rate := float64(snap.Sent-last[k]) / now.Sub(lastAt).Seconds()
			for i, x := range r.runs {
				last[i] = x.rec.Snapshot().Sent
			}
			lastAt = now
			var errs []string
			for _, c := range ErrorCodes(snap.Errors) {
				errs = append(errs, fmt.Sprintf("%s=%d", c, snap.Errors[c]))
			}
			line := fmt.Sprintf("%6.0fs  %-12s %8.0f req/s  in flight %4d  ok %d  p50 %s  p99 %s",
				now.Sub(r.start).Seconds(), tr.Config.Name, rate, len(tr.sem), snap.OK, ms(snap.P50), ms(snap.P99))
			if len(errs) > 0 {
				line += "  errors " + strings.Join(errs, " ")
			}
			if r.opt.Terminal {
				fmt.Fprintf(r.opt.Progress, "\r\033[K%s", line)
			} else {
				fmt.Fprintln(r.opt.Progress, line)
			}
		}
	}
}

func ms(d time.Duration) string { return fmt.Sprintf("%.2fms", float64(d)/float64(time.Millisecond)) }

// ratios compares every target with the reference, over the whole run and
// round by round.
func (r *runner) ratios(res *Result) []Ratio {
	if len(r.runs) < 2 {
		return nil
	}
	ref := r.opt.Reference
	refT := res.Targets[ref]
	var out []Ratio
	for k, t := range res.Targets {
		if k == ref {
			continue
		}
		ra := Ratio{Target: t.Name, Reference: refT.Name,
			Throughput: div(t.Throughput, refT.Throughput),
			P50:        div(t.Latency.P50Ms, refT.Latency.P50Ms),
			P99:        div(t.Latency.P99Ms, refT.Latency.P99Ms)}
		ra.ServerCPUPerRequest = serverCPURatio(t, refT)
		rates := func(ws []window) map[int]float64 {
			m := map[int]float64{}
			for _, w := range ws {
				if w.active > 0 {
					m[w.round] = float64(w.ok) / w.active.Seconds()
				}
			}
			return m
		}
		mine, theirs := rates(r.runs[k].windows), rates(r.runs[ref].windows)
		rounds := make([]int, 0, len(mine))
		for round := range mine {
			rounds = append(rounds, round)
		}
		sort.Ints(rounds)
		for _, round := range rounds {
			if d, ok := theirs[round]; ok && d > 0 {
				ra.ThroughputRounds = append(ra.ThroughputRounds, mine[round]/d)
			}
		}
		ra.ThroughputMedian = median(ra.ThroughputRounds)
		out = append(out, ra)
	}
	return out
}

// minServerCPUSeconds is the least server CPU a reference's turns must
// show for another target's CPU to be given as a ratio of it. The kernel
// counts process CPU in ticks of 10 ms, so a server that sat idle through
// the reference's turns (an entry allocator while the callers go to the
// remote directly) shows a tick or two, and dividing by that gives ratios
// in the hundreds that mean nothing; ten ticks keep the ratio within 10%.
const minServerCPUSeconds = 0.1

// serverCPURatio is t's server CPU per request over ref's, or 0 when
// either was not measured or ref's is too small to divide by.
func serverCPURatio(t, ref TargetResult) float64 {
	if ref.ServerCPUSeconds < minServerCPUSeconds {
		return 0
	}
	return div(t.ServerCPUPerRequestMicros, ref.ServerCPUPerRequestMicros)
}

func div(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return a / b
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}
