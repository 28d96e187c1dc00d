package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/quartermaster-dev/quartermaster/allocator/pb/allocation"
	"github.com/quartermaster-dev/quartermaster/allocator/wire"
	"github.com/quartermaster-dev/quartermaster/core"
	"github.com/quartermaster-dev/quartermaster/loadgen"
	"github.com/quartermaster-dev/quartermaster/scenarios"
	"github.com/quartermaster-dev/quartermaster/scenarios/live"
)

func init() {
	register(command{
		name:    "load",
		summary: "drive load at allocators (open or closed loop) and measure it honestly",
		run:     runLoad,
	})
}

const loadUsage = `usage: qm load [flags]
       qm load merge [--out FILE] RESULT.json...

Sends AllocationRequests to one or more allocators (Quartermaster's or
Agones': only the Agones API is used) and reports throughput, errors by
gRPC code and latency percentiles. In open loop (--rate) latency runs from
each request's intended send time, so a server that stalls is charged for
the queue it makes; in closed loop (--workers) each caller waits for its
answer. Several --target flags take turns in short windows and are
compared as ratios to the reference (--reference, default the first echo
target, else the first target).

  qm load --rate 1000 --duration 30s
  qm load --workers 64 --duration 20s --target alloc=localhost:8443 --target echo=localhost:8443 --echo echo
  qm load --rate poisson:500 --target grpc=localhost:8443 --target rest=rest://localhost:8443
  qm load --scenario scenarios/burst-to-cloud.yaml --stream matchmaker --duration 1m
  qm load --rate 2000 --duration 1m --out results.json --expect 'p99<50ms,successRate>=0.999'

--rate takes RATE, constant:RATE, poisson:RATE, ramp:FROM:TO (over
--duration) or steps:RATE@DURATION,... --duration is each target's measured
time. With --release (the default) each allocated server is given back
with Quartermaster's Release after --session; a target without Release
(Agones) keeps its servers. --allocation-keys sends every request with an
idempotency key of its own and a request whose answer was lost again with
that key (the allocator answers it with the server it already allocated,
so no retry holds a second one); with --release, a request that ran out
of --timeout without an answer is then resolved by its key and what it
allocated given back. Exit status 2 when an --expect threshold fails.

Against Agones' own allocator: give --release=false (Agones has no
Release, so every server allocated stays Allocated and the fleet must
hold the whole run), --namespace when the fleet is not in "default" (the
namespace is always sent: Agones allocates nothing for an empty one), and
its allocator-client Secret's --cert, --key and --cacert. Releasing a
forwarded allocation through its source (qm release --source) is
Quartermaster's alone.

flags:
`

// loadFlags are qm load's own flags (connection flags come from connFlags).
type loadFlags struct {
	cpuProfile                    string
	targets, echoes               multiFlag
	reference                     string
	rate                          string
	workers                       int
	duration, warmup, window      time.Duration
	session                       time.Duration
	requests                      int64
	maxInFlight, connections      int
	seed                          uint64
	release                       bool
	out, expect, progress         string
	requestFile, scenario, stream string
	shard, startAt                string
	spin                          time.Duration
	precise                       time.Duration
	serverPID                     int
	namespace, scheduling         string
	labels, annotations, counters multiFlag
	uniqueAnnotation              string
	allocationKeys                bool
	attemptTimeout, resolveFor    time.Duration
	listAdd, listDel              multiFlag
	sels                          selectorFlags
	trace                         string
	traceMaxBytes                 int64
}

func runLoad(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "merge" {
		return runLoadMerge(args[1:], stdout, stderr)
	}
	var c connFlags
	var f loadFlags
	fs := loadFlagSet(&c, &f)
	usage, ok, err := parseFlags("load", loadUsage, fs, args, stdout, stderr)
	if !ok {
		return err
	}
	set := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	bad := func(format string, a ...any) error { return usageFail(stderr, "load", usage, format, a...) }

	plan, err := planLoad(&c, &f, set)
	if err != nil {
		return bad("%v", err)
	}
	tlsCfg, err := c.tlsConfig()
	if err != nil {
		return err
	}

	// Connect to every target first: a wrong address or certificate
	// fails here, before any load, with the reason.
	targets, err := dialLoadTargets(ctx, plan, &f, tlsCfg)
	defer func() {
		for _, t := range targets {
			t.Caller.Close()
		}
	}()
	if err != nil {
		return err
	}
	if f.trace != "" {
		tracer, err := startLoadTrace(&f, plan.req, targets, stderr)
		if err != nil {
			return err
		}
		defer tracer()
	}
	if err := loadOutputs(plan, &f, stderr); err != nil {
		return err
	}
	if err := waitLoadStart(ctx, plan.startAt, stderr); err != nil {
		return err
	}
	if f.cpuProfile != "" {
		stop, err := profileCPU(f.cpuProfile)
		if err != nil {
			return fmt.Errorf("--cpu-profile: %w", err)
		}
		defer stop()
	}
	res, err := loadgen.Run(ctx, plan.cfg, targets, plan.opt)
	if err != nil {
		return err
	}
	pass := loadgen.Check(res, plan.thresholds)
	if err := writeLoadResult(f.out, res, stdout, stderr); err != nil {
		return err
	}
	if res.Interrupted {
		fmt.Fprintln(stderr, "qm load: interrupted; the result covers the run until then")
		return exitError{code: 130}
	}
	if !pass {
		return exitError{code: 2}
	}
	return nil
}

// dialLoadTargets connects to each of the plan's targets. The targets
// connected before an error come back with it, for the caller to close.
func dialLoadTargets(ctx context.Context, plan *loadPlan, f *loadFlags, tlsCfg *tls.Config) ([]loadgen.Target, error) {
	var targets []loadgen.Target
	for _, tc := range plan.cfg.Targets {
		caller, err := loadgen.NewCaller(ctx, loadgen.Dial{Target: tc, TLS: tlsCfg, Connections: f.connections,
			Request: plan.req, Sessions: f.release || f.trace != "", UniqueAnnotation: f.uniqueAnnotation})
		if err != nil {
			return targets, err
		}
		targets = append(targets, loadgen.Target{Config: tc, Caller: caller})
	}
	return targets, nil
}

// loadOutputs sets where the run's progress lines go (--progress) and the
// server's CPU probe (--server-pid), and says what the run will do.
func loadOutputs(plan *loadPlan, f *loadFlags, stderr io.Writer) error {
	progress := stderr
	terminal := isTerminal(stderr)
	switch f.progress {
	case "never":
		progress = nil
	case "auto":
		if !terminal {
			progress = nil
		}
	}
	plan.opt.Progress, plan.opt.Terminal = progress, terminal
	if f.serverPID != 0 {
		probe, err := loadgen.ProcCPU(f.serverPID)
		if err != nil {
			return fmt.Errorf("--server-pid: %w", err)
		}
		plan.opt.ServerCPU = probe
	}
	if progress != nil {
		fmt.Fprintf(stderr, "qm load: %s\n", plan.describe())
	}
	return nil
}

// waitLoadStart waits until --start-at, if given. It is called once
// connected, so a bad address or certificate fails at once, not at the
// start time; a generator that comes up after the time starts at once and
// says how late it is (merge lines the series up by wall-clock second).
func waitLoadStart(ctx context.Context, startAt time.Time, stderr io.Writer) error {
	if startAt.IsZero() {
		return nil
	}
	wait := time.Until(startAt)
	if wait <= 0 {
		fmt.Fprintf(stderr, "qm load: --start-at %s was %s ago: starting now\n", startAt.UTC().Format(time.RFC3339), (-wait).Round(time.Millisecond))
		return nil
	}
	fmt.Fprintf(stderr, "qm load: starting at %s (in %s)\n", startAt.UTC().Format(time.RFC3339), wait.Round(time.Second))
	t := time.NewTimer(wait)
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		t.Stop()
		fmt.Fprintln(stderr, "qm load: interrupted before the start; nothing was sent")
		return exitError{code: 130}
	}
}

// writeLoadResult writes the summary, and the result as JSON to --out.
func writeLoadResult(out string, res *loadgen.Result, stdout, stderr io.Writer) error {
	if out == "-" {
		// The result is what a Job's pod log is read for (deploy/loadgen.yaml):
		// the document first and alone on stdout, the summary after it on
		// stderr, so the log reads back as a result.
		if err := loadgen.WriteResult(stdout, res); err != nil {
			return fmt.Errorf("--out -: %w", err)
		}
		return loadgen.WriteSummary(stderr, res)
	}
	if err := loadgen.WriteSummary(stdout, res); err != nil {
		return err
	}
	if out != "" {
		return writeResultFile(out, res)
	}
	return nil
}

// loadFlagSet declares qm load's flags (deploy/loadgen.yaml's tests parse
// the Job's arguments with it too).
func loadFlagSet(c *connFlags, f *loadFlags) *flag.FlagSet {
	fs := flag.NewFlagSet("qm load", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	c.register(fs)
	fs.Var(&f.targets, "target", "NAME=HOST:PORT, NAME=grpc://HOST:PORT or NAME=rest://HOST:PORT (repeatable; default: --addr)")
	fs.Var(&f.echoes, "echo", "the target NAME calls the gRPC health check instead of Allocate: a ceiling on the same server, port and mTLS (repeatable)")
	fs.StringVar(&f.reference, "reference", "", "target the ratios divide by (default: the first echo target, else the first)")
	fs.StringVar(&f.rate, "rate", "", "open loop arrivals, per target: RATE, poisson:RATE, ramp:FROM:TO, steps:RATE@DUR,... (default 100)")
	fs.IntVar(&f.workers, "workers", 0, "closed loop with this many callers per target (instead of --rate)")
	fs.DurationVar(&f.duration, "duration", 0, "measured time per target (default 10s unless --requests or a steps schedule ends the run)")
	fs.Int64Var(&f.requests, "requests", 0, "stop each target after this many requests")
	fs.DurationVar(&f.warmup, "warmup", 0, "run each target this long first, not counted")
	fs.DurationVar(&f.window, "window", time.Second, "length of each target's turn when several take turns")
	fs.IntVar(&f.maxInFlight, "max-in-flight", 1024, "open loop: most requests outstanding per target; arrivals beyond wait, and count as not sent if their turn ends first")
	fs.IntVar(&f.connections, "connections", 1, "connections per target")
	fs.Uint64Var(&f.seed, "seed", 1, "seed for Poisson arrivals and session lengths")
	fs.BoolVar(&f.release, "release", true, "give allocated servers back with Release (Quartermaster targets) after --session")
	fs.DurationVar(&f.session, "session", 0, "how long each allocation is held before Release (0: at once; a scenario's sessionLength when --scenario)")
	fs.StringVar(&f.out, "out", "", "write the result as JSON to this file (\"-\": to stdout, with the summary on stderr)")
	fs.StringVar(&f.expect, "expect", "", "thresholds that set the exit status, like 'p99<50ms,successRate>=0.999,ratio.throughput>=0.75'")
	fs.StringVar(&f.progress, "progress", "auto", "progress lines on stderr: auto (when a terminal), always or never")
	fs.StringVar(&f.requestFile, "request", "", "JSON AllocationRequest file (\"-\" for stdin) instead of the request flags")
	fs.StringVar(&f.scenario, "scenario", "", "scenario file: take the rate, request and session lengths from its workload")
	fs.StringVar(&f.stream, "stream", "", "the scenario's workload stream (needed when it has several)")
	fs.DurationVar(&f.precise, "precise", loadgen.DefaultPrecise, "open loop: wait up to this long before each arrival with nanosleep instead of a Go timer (up to 1ms late), while on schedule and at most 2,500/s; 0: timers only")
	fs.DurationVar(&f.spin, "spin", 0, "open loop: wait the last stretch before each arrival in a busy loop (like 1ms): punctual sends for most of a core of CPU")
	fs.StringVar(&f.cpuProfile, "cpu-profile", "", "write qm load's own CPU profile to this file (for go tool pprof)")
	fs.IntVar(&f.serverPID, "server-pid", 0, "the server's process id on this machine: charge its CPU (from /proc) to the target whose turn it is")
	fs.StringVar(&f.startAt, "start-at", "", "wait, once connected, until this time (RFC 3339, like 2026-11-22T20:00:00Z) to start: generators of one load begin together")
	fs.StringVar(&f.shard, "shard", "", "I/N: run generator I's share (1/N) of the rate, of N generators (see qm load merge)")
	fs.StringVar(&f.namespace, "namespace", core.DefaultNamespace, "namespace to allocate in (sent as given: Agones reads an empty one as no namespace)")
	fs.Var(selectorFlag{&f.sels}, "selector", "a game server selector's matchLabels as key=value[,key=value...]; repeat for several, tried in order")
	fs.Var(stateFlag{&f.sels}, "state", "Ready or Allocated: the game server state for the --selector just before it")
	fs.StringVar(&f.scheduling, "scheduling", "Packed", "Packed or Distributed")
	fs.Var(&f.labels, "label", "metadata label key=value to set on the allocated server (repeatable)")
	fs.Var(&f.annotations, "annotation", "metadata annotation key=value to set (repeatable)")
	fs.StringVar(&f.uniqueAnnotation, "unique-annotation", "", "annotation KEY every allocation request carries with a value of its own (a sequence number), as a match ID would: no two requests alike (gRPC targets)")
	fs.BoolVar(&f.allocationKeys, "allocation-keys", false, "give every request an idempotency key of its own (the quartermaster.dev/allocation-key annotation over gRPC, the quartermaster-allocation-key header over REST) and send a request whose answer was lost (Unavailable, DeadlineExceeded, ...) again with the same key within --timeout; with --release, a request given up without an answer has its key asked about for --resolve-for and what it allocated given back")
	fs.DurationVar(&f.attemptTimeout, "attempt-timeout", 0, "with --allocation-keys: each try's deadline within --timeout (default half of --timeout)")
	fs.DurationVar(&f.resolveFor, "resolve-for", loadgen.DefaultResolveFor, "with --allocation-keys and --release: how long a request given up without an answer is asked about by its key")
	fs.Var(&f.counters, "counter", "counter action NAME=Increment:N, NAME=Decrement:N or NAME=capacity:N (repeatable)")
	fs.Var(&f.listAdd, "list-add", "list action NAME=VALUE (repeatable)")
	fs.Var(&f.listDel, "list-delete", "list action NAME=VALUE (repeatable)")
	fs.StringVar(&f.trace, "trace", "", "record every request sent and answer got as a trace (JSON lines, see trace/) to this file, for qm sim --replay; one allocate target only")
	fs.Int64Var(&f.traceMaxBytes, "trace-max-bytes", 0, "bound on the trace on disk, rotated files included (0: no bound)")
	return fs
}

// loadPlan is everything the flags decide, checked before connecting.
type loadPlan struct {
	cfg        loadgen.Config
	opt        loadgen.Options
	req        *allocation.AllocationRequest
	thresholds []loadgen.Threshold
	startAt    time.Time // zero: at once
}

func (p *loadPlan) describe() string {
	var names []string
	for _, t := range p.cfg.Targets {
		names = append(names, fmt.Sprintf("%s (%s %s %s)", t.Name, t.Call, t.Protocol, t.Addr))
	}
	how := "closed loop, " + strconv.Itoa(p.cfg.Workers) + " workers"
	if p.cfg.Mode == "open" {
		how = "open loop, " + p.cfg.Arrival
	}
	return how + " -> " + strings.Join(names, ", ")
}

// planLoad validates the flags, naming the one at fault, and turns them
// into the run's configuration: the checks of plain values, the targets,
// the request and its source, the schedule, then the Config and Options.
func planLoad(c *connFlags, f *loadFlags, set map[string]bool) (*loadPlan, error) {
	if err := checkLoadFlags(c, f, set); err != nil {
		return nil, err
	}
	share, shard, err := loadShard(f)
	if err != nil {
		return nil, err
	}
	p := &loadPlan{}
	if p.startAt, err = loadStartAt(f.startAt); err != nil {
		return nil, err
	}
	if p.thresholds, err = loadgen.ParseThresholds(f.expect); err != nil {
		return nil, fmt.Errorf("--expect: %v", err)
	}
	tcs, ref, err := loadTargets(c, f)
	if err != nil {
		return nil, err
	}
	w, err := loadRequest(f, set, share)
	if err != nil {
		return nil, err
	}
	p.req = w.req
	// The namespace goes out as given, never empty: Quartermaster reads an
	// empty one as "default", Agones does not (ResourceExhausted).
	if set["namespace"] || p.req.Namespace == "" {
		p.req.Namespace = f.namespace
	}
	if k := f.uniqueAnnotation; k != "" {
		if err := checkUniqueAnnotation(k, tcs); err != nil {
			return nil, err
		}
		w.source += ", unique annotation " + k
	}
	if !f.allocationKeys && (set["attempt-timeout"] || set["resolve-for"]) {
		return nil, errors.New("--attempt-timeout and --resolve-for are for --allocation-keys")
	}
	if f.attemptTimeout < 0 || f.attemptTimeout > c.timeout {
		return nil, fmt.Errorf("--attempt-timeout %s: want a deadline within --timeout (%s)", f.attemptTimeout, c.timeout)
	}
	if f.resolveFor <= 0 {
		return nil, fmt.Errorf("--resolve-for %s: want a positive duration", f.resolveFor)
	}
	if f.stream != "" && f.scenario == "" {
		return nil, errors.New("--stream needs --scenario")
	}
	if err := checkLoadTrace(f, tcs); err != nil {
		return nil, err
	}
	mode, err := loadSchedule(f, w, share)
	if err != nil {
		return nil, err
	}
	p.cfg, p.opt = loadConfig(c, f, mode, w, tcs, ref, shard)
	return p, nil
}

// checkLoadFlags checks the flags that stand on their own.
func checkLoadFlags(c *connFlags, f *loadFlags, set map[string]bool) error {
	if f.workers < 0 {
		return fmt.Errorf("--workers %d: want a positive number", f.workers)
	}
	if set["workers"] && f.workers == 0 {
		return errors.New("--workers 0: want a positive number")
	}
	if f.workers > 0 && set["rate"] {
		return errors.New("--rate (open loop) and --workers (closed loop) exclude each other")
	}
	if f.duration < 0 || f.warmup < 0 || f.session < 0 || f.spin < 0 || f.precise < 0 {
		return errors.New("--duration, --warmup, --session, --spin and --precise must not be negative")
	}
	if f.window <= 0 {
		return fmt.Errorf("--window %v: want a positive duration", f.window)
	}
	if f.requests < 0 {
		return fmt.Errorf("--requests %d: want a positive number", f.requests)
	}
	if f.maxInFlight < 1 {
		return fmt.Errorf("--max-in-flight %d: want at least 1", f.maxInFlight)
	}
	if f.connections < 1 || f.connections > 1000 {
		return fmt.Errorf("--connections %d: want 1 to 1000", f.connections)
	}
	if c.timeout <= 0 {
		return fmt.Errorf("--timeout %v: want a positive duration", c.timeout)
	}
	switch f.progress {
	case "auto", "always", "never":
	default:
		return fmt.Errorf("--progress %q: want auto, always or never", f.progress)
	}
	return nil
}

// loadShard reads --shard: this generator's share of the rate, and its own
// seed so that the shards' arrivals differ.
func loadShard(f *loadFlags) (share float64, shard *loadgen.Shard, err error) {
	if f.shard == "" {
		return 1, nil, nil
	}
	i, n, ok := strings.Cut(f.shard, "/")
	iv, err1 := strconv.Atoi(i)
	nv, err2 := strconv.Atoi(n)
	if !ok || err1 != nil || err2 != nil || nv < 1 || iv < 0 || iv >= nv {
		return 0, nil, fmt.Errorf("--shard %q: want I/N with 0 <= I < N, like 0/4", f.shard)
	}
	if f.workers > 0 {
		return 0, nil, errors.New("--shard splits an open-loop rate; with --workers give each generator its own worker count")
	}
	f.seed += uint64(iv) * 0x9e3779b9 // each shard its own arrivals
	return 1 / float64(nv), &loadgen.Shard{Index: iv, Count: nv}, nil
}

// loadStartAt reads --start-at (zero when not given).
func loadStartAt(v string) (time.Time, error) {
	if v == "" {
		return time.Time{}, nil
	}
	at, err := time.Parse(time.RFC3339, v)
	if err != nil {
		return time.Time{}, fmt.Errorf("--start-at %q: want a time like 2026-11-22T20:00:00Z", v)
	}
	// A day ahead is a typo in the date far more often than a plan.
	if time.Until(at) > 24*time.Hour {
		return time.Time{}, fmt.Errorf("--start-at %s: more than a day from now", v)
	}
	return at, nil
}

// loadTargets reads --target (default --addr), --echo and --reference:
// the targets and the index of the one ratios divide by.
func loadTargets(c *connFlags, f *loadFlags) ([]loadgen.TargetConfig, int, error) {
	proto := "grpc"
	if c.rest {
		proto = "rest"
	}
	specs := []string(f.targets)
	if len(specs) == 0 {
		specs = []string{c.addr}
	}
	seen := map[string]bool{}
	var tcs []loadgen.TargetConfig
	for _, s := range specs {
		tc, err := loadgen.ParseTarget(s, proto)
		if err != nil {
			return nil, 0, fmt.Errorf("--target: %v", err)
		}
		if seen[tc.Name] {
			return nil, 0, fmt.Errorf("--target: two targets are named %q", tc.Name)
		}
		seen[tc.Name] = true
		tcs = append(tcs, tc)
	}
	for _, e := range f.echoes {
		found := false
		for i := range tcs {
			if tcs[i].Name == e {
				tcs[i].Call, found = "echo", true
				if tcs[i].Protocol != "grpc" {
					return nil, 0, fmt.Errorf("--echo %s: the echo is the gRPC health check; the target is REST", e)
				}
			}
		}
		if !found {
			return nil, 0, fmt.Errorf("--echo %q: no --target has that name", e)
		}
	}
	if f.reference != "" {
		for i, t := range tcs {
			if t.Name == f.reference {
				return tcs, i, nil
			}
		}
		return nil, 0, fmt.Errorf("--reference %q: no --target has that name", f.reference)
	}
	for i, t := range tcs {
		if t.Call == "echo" {
			return tcs, i, nil // the first echo target
		}
	}
	return tcs, 0, nil
}

// loadWork is what the run sends: the request, where it came from, and,
// for a scenario, the arrival schedule and session lengths.
type loadWork struct {
	req           *allocation.AllocationRequest
	source        string // Config.Request
	arrival       string // Config.Arrival; set with newPacer
	newPacer      func() loadgen.Pacer
	sessionLength func() time.Duration
}

// loadRequest reads the request from --scenario, --request or the request
// flags (one of them), and the session length from --session or the
// scenario.
func loadRequest(f *loadFlags, set map[string]bool, share float64) (*loadWork, error) {
	requestFlags := len(f.sels.list)+len(f.labels)+len(f.annotations)+len(f.counters)+len(f.listAdd)+len(f.listDel) > 0 || set["scheduling"]
	w := &loadWork{source: "flags"}
	if f.session > 0 {
		d := f.session
		w.sessionLength = func() time.Duration { return d }
	}
	switch {
	case f.scenario != "":
		if f.requestFile != "" || requestFlags {
			return nil, errors.New("--scenario gives the request: it cannot be combined with --request or the request flags")
		}
		if set["rate"] || f.workers > 0 {
			return nil, errors.New("--scenario gives the rate: it cannot be combined with --rate or --workers")
		}
		sc, err := scenarios.Load(f.scenario)
		if err != nil {
			return nil, fmt.Errorf("--scenario: %v", err)
		}
		sw, err := live.WorkloadOf(sc, f.stream, f.seed, share)
		if err != nil {
			return nil, fmt.Errorf("--scenario %s: %v", f.scenario, err)
		}
		w.req, w.newPacer = sw.Request, sw.NewPacer
		if !set["session"] {
			w.sessionLength = sw.SessionLength
		}
		if f.duration == 0 && f.requests == 0 {
			f.duration = sw.Duration
		}
		w.arrival = "scenario:" + sc.Metadata.Name + "/" + sw.Stream
		w.source = "scenario:" + f.scenario + "#" + sw.Stream
	case f.requestFile != "":
		if requestFlags {
			return nil, errors.New("--request cannot be combined with the request flags (only --namespace may override it)")
		}
		var b []byte
		var err error
		if f.requestFile == "-" {
			b, err = io.ReadAll(io.LimitReader(os.Stdin, 16<<20))
		} else {
			b, err = os.ReadFile(f.requestFile)
		}
		if err != nil {
			return nil, fmt.Errorf("--request: %v", err)
		}
		if w.req, err = wire.DecodeJSONRequest(b); err != nil {
			return nil, fmt.Errorf("--request %s: %v", f.requestFile, err)
		}
		w.source = "file:" + f.requestFile
	default:
		var err error
		w.req, err = buildRequest(f.namespace, f.sels.list, f.scheduling, f.labels, f.annotations, f.counters, f.listAdd, f.listDel)
		if err != nil {
			return nil, err
		}
	}
	return w, nil
}

// checkUniqueAnnotation checks --unique-annotation's key, which gRPC
// targets alone can vary per request.
func checkUniqueAnnotation(k string, tcs []loadgen.TargetConfig) error {
	if _, err := core.Normalize(&core.Request{Metadata: core.MetaPatch{Annotations: map[string]string{k: "1"}}}); err != nil {
		return fmt.Errorf("--unique-annotation %q: %v", k, err)
	}
	for _, tc := range tcs {
		if tc.Protocol != "grpc" && tc.Call != "echo" {
			return fmt.Errorf("--unique-annotation: target %s is %s; it is for gRPC targets only", tc.Name, tc.Protocol)
		}
	}
	return nil
}

// loadSchedule settles the loop and, in open loop without a scenario, the
// arrivals from --rate; it fills in the duration a schedule or the default
// gives. It returns "open" or "closed".
func loadSchedule(f *loadFlags, w *loadWork, share float64) (string, error) {
	if f.workers > 0 {
		if f.duration == 0 && f.requests == 0 {
			f.duration = 10 * time.Second
		}
		return "closed", nil
	}
	if w.newPacer != nil {
		return "open", nil
	}
	spec := f.rate
	if spec == "" {
		spec = "100"
	}
	// Parse once to check the spec (a ramp spans the duration, which may
	// itself come from a steps schedule's length or the default).
	span := f.duration
	if span == 0 {
		span = 10 * time.Second
	}
	pc, err := loadgen.ParseArrivalShare(spec, span, f.seed, share)
	if err != nil {
		return "", fmt.Errorf("--rate: %v", err)
	}
	if l := loadgen.Length(pc); l > 0 && f.duration == 0 {
		f.duration = l
	}
	if f.duration == 0 && f.requests == 0 {
		f.duration = 10 * time.Second
	}
	seed, dur := f.seed, f.duration
	if dur == 0 {
		dur = span
	}
	w.arrival = spec
	w.newPacer = func() loadgen.Pacer {
		p, _ := loadgen.ParseArrivalShare(spec, dur, seed, share) // checked above
		return p
	}
	return "open", nil
}

// loadConfig is the run as the result records it and as loadgen.Run takes
// it.
func loadConfig(c *connFlags, f *loadFlags, mode string, w *loadWork, tcs []loadgen.TargetConfig, ref int, shard *loadgen.Shard) (loadgen.Config, loadgen.Options) {
	cfg := loadgen.Config{
		Mode:            mode,
		Arrival:         w.arrival,
		Seed:            f.seed,
		Workers:         f.workers,
		Connections:     f.connections,
		DurationSeconds: f.duration.Seconds(),
		Requests:        f.requests,
		WarmupSeconds:   f.warmup.Seconds(),
		TimeoutSeconds:  c.timeout.Seconds(),
		Request:         w.source,
		Release:         f.release,
		AllocationKeys:  f.allocationKeys,
		Reference:       tcs[ref].Name,
		Shard:           shard,
		Targets:         tcs,
	}
	if mode == "open" {
		cfg.MaxInFlight = f.maxInFlight
	}
	if len(tcs) > 1 {
		cfg.WindowSeconds = f.window.Seconds()
	}
	opt := loadgen.Options{
		Closed:         mode == "closed",
		Workers:        f.workers,
		NewPacer:       w.newPacer,
		MaxInFlight:    f.maxInFlight,
		Duration:       f.duration,
		Requests:       f.requests,
		Warmup:         f.warmup,
		Window:         f.window,
		Timeout:        c.timeout,
		Release:        f.release,
		SessionLength:  w.sessionLength,
		AllocationKeys: f.allocationKeys,
		AttemptTimeout: f.attemptTimeout,
		ResolveFor:     f.resolveFor,
		Reference:      ref,
		Spin:           f.spin,
		Precise:        f.precise,
	}
	if f.precise == 0 {
		opt.Precise = -1 // timers only
	}
	return cfg, opt
}

func writeResultFile(path string, res *loadgen.Result) error {
	fh, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("--out: %w", err)
	}
	if err := loadgen.WriteResult(fh, res); err != nil {
		fh.Close()
		return fmt.Errorf("--out: %w", err)
	}
	if err := fh.Close(); err != nil {
		return fmt.Errorf("--out: %w", err)
	}
	return nil
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}

const loadMergeUsage = `usage: qm load merge [--out FILE] [--expect THRESHOLDS] RESULT.json...

Merges the results of generators that ran at the same time against the same
targets (qm load --shard I/N): counts and rates add up, and the HDR
histograms merge exactly, so the percentiles are those of every request.

flags:
`

func runLoadMerge(args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("qm load merge", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	out := fs.String("out", "", "write the merged result as JSON to this file")
	expect := fs.String("expect", "", "thresholds that set the exit status, as for qm load")
	usage, files, ok, err := parseFlagsAndFiles("load merge", loadMergeUsage, fs, args, stdout, stderr)
	if !ok {
		return err
	}
	if len(files) == 0 {
		return usageFail(stderr, "load merge", usage, "no result files given")
	}
	ths, err := loadgen.ParseThresholds(*expect)
	if err != nil {
		return usageFail(stderr, "load merge", usage, "--expect: %v", err)
	}
	var results []*loadgen.Result
	for _, name := range files {
		fh, err := os.Open(name)
		if err != nil {
			return err
		}
		r, err := loadgen.ReadResult(fh)
		fh.Close()
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		results = append(results, r)
	}
	m, err := loadgen.Merge(results...)
	if err != nil {
		return err
	}
	pass := loadgen.Check(m, ths)
	if err := loadgen.WriteSummary(stdout, m); err != nil {
		return err
	}
	if *out != "" {
		if err := writeResultFile(*out, m); err != nil {
			return err
		}
	}
	if !pass {
		return exitError{code: 2}
	}
	return nil
}
