package soakrun

import (
	"context"
	"crypto/tls"
	_ "embed"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/quartermaster-dev/quartermaster/allocator/mtls"
	"github.com/quartermaster-dev/quartermaster/allocator/pb/allocation"
	"github.com/quartermaster-dev/quartermaster/kindcluster/rig"
	"github.com/quartermaster-dev/quartermaster/loadgen"
	"github.com/quartermaster-dev/quartermaster/soak"
)

//go:embed topology.yaml
var defaultTopology []byte

// DefaultTopology is the rig a soak brings up unless given another: two
// clusters of two allocator replicas, every request spread over both by
// one policy set (route=soak).
func DefaultTopology() *rig.Topology {
	t, err := rig.Parse(defaultTopology)
	if err != nil {
		// The file is part of the package and its test parses it.
		panic("soakrun: topology.yaml: " + err.Error())
	}
	return t
}

// Files a run writes to its output directory.
const (
	HistoryFile  = "history.jsonl"
	SnapshotFile = "snapshot.json"
	ResultFile   = "result.json"
	TableFile    = "result.md"
	LoadFile     = "load.json"
)

// releaseRetryFor is how long a release whose outcome is unknown is
// tried again: longer than any fault of the shipped schedules, so that a
// release is lost only to an allocator that stays away.
const releaseRetryFor = 2 * time.Minute

// Defaults of Options.
const (
	DefaultRate     = 20
	DefaultSession  = time.Second
	DefaultSettle   = 5 * time.Second
	DefaultTimeout  = 5 * time.Second
	DefaultProgress = 5 * time.Second
)

// Target is one allocator address of a cluster the run drives but does
// not own (Agones' allocator, or any that speaks its API).
type Target struct {
	Cluster, Addr string
}

// Options configure a run. Either Topology (or the default) is brought up
// as a rig, or Targets name allocators running elsewhere.
type Options struct {
	// Duration is how long the load runs; faults end within it.
	Duration time.Duration
	// Schedule is the fault schedule (default soak.DefaultSchedule);
	// Seed, when not 0, overrides its seed.
	Schedule *soak.ScheduleFile
	Seed     uint64
	// Out is the directory the files go to; it is created.
	Out string
	// Rate is the mean arrival rate (Poisson) over all clusters; Session
	// the mean session length (exponential) before each Release.
	Rate    float64
	Session time.Duration
	// Settle is the wait after the load and the last fault before the
	// GameServer objects are read.
	Settle time.Duration
	// Timeout is each request's deadline.
	Timeout time.Duration
	// NoAllocationKeys sends requests without idempotency keys. By default
	// every request carries one (loadgen's AllocationKeys): a lost answer
	// is retried with its key within Timeout, a request given up is
	// resolved by its key for as long as a release is retried, and the
	// checker counts dangling servers strictly.
	NoAllocationKeys bool
	// Check tunes the checker.
	Check soak.Config

	// Topology is the rig to bring up (default DefaultTopology); QM is the
	// qm binary its allocators run as, BinDir holds etcd and
	// kube-apiserver (rig.Options'); RigDir its directory (default: a new
	// temporary one).
	Topology *rig.Topology
	QM       string
	BinDir   string
	RigDir   string
	// ServeArgs are added to every allocator's command line.
	ServeArgs []string

	// Targets, when set, are driven instead of a rig: every address of
	// every cluster. TLS is the callers' client configuration (nil:
	// plaintext), Caller their identity as the allocator records it.
	// Kubeconfigs are each cluster's, to read its GameServers; Namespace
	// is where to allocate and read. PolicySelector, when set, turns on
	// multi-cluster allocation with those policy labels.
	Targets        []Target
	TLS            *tls.Config
	Caller         string
	Kubeconfigs    map[string]string
	Namespace      string
	PolicySelector map[string]string

	// Progress gets a line every ProgressEvery (nil: none); Log gets the
	// rig's and the faults' lines (nil: none).
	Progress      io.Writer
	ProgressEvery time.Duration
	Log           io.Writer
}

// Outcome is what a run did and found.
type Outcome struct {
	Result *soak.Result
	// Dir is where the files are.
	Dir string
	// Injected counts the faults injected, by kind; Skipped says why a
	// kind was not injected; Failed lists faults that could not be
	// started or ended.
	Injected map[string]int
	Skipped  map[string]string
	Failed   []string
	// GiveBack is the error, if any, of releasing what the run kept to
	// the end (after the snapshot; not part of the history).
	GiveBack error
}

func (o *Options) defaults() error {
	if o.Duration <= 0 {
		return errors.New("duration must be positive")
	}
	if o.Schedule == nil {
		o.Schedule = soak.DefaultSchedule()
	}
	if o.Seed == 0 {
		o.Seed = o.Schedule.Seed()
	}
	if o.Rate == 0 {
		o.Rate = DefaultRate
	}
	if o.Rate < 0 || math.IsNaN(o.Rate) || math.IsInf(o.Rate, 0) {
		return fmt.Errorf("rate must be positive, got %g", o.Rate)
	}
	if o.Session == 0 {
		o.Session = DefaultSession
	}
	if o.Session < 0 {
		return fmt.Errorf("session must not be negative, got %s", o.Session)
	}
	if o.Settle == 0 {
		o.Settle = DefaultSettle
	}
	if o.Timeout <= 0 {
		o.Timeout = DefaultTimeout
	}
	if o.ProgressEvery <= 0 {
		o.ProgressEvery = DefaultProgress
	}
	if o.Out == "" {
		return errors.New("an output directory is needed")
	}
	// A directory that holds a run's history is another run's evidence.
	if _, err := os.Stat(filepath.Join(o.Out, HistoryFile)); err == nil {
		return fmt.Errorf("%s holds a run already (its %s): choose another output directory, or remove that one", o.Out, HistoryFile)
	}
	if len(o.Targets) > 0 {
		if o.Caller == "" {
			return errors.New("the callers' identity is needed with targets")
		}
		if o.Namespace == "" {
			o.Namespace = "default"
		}
		for _, t := range o.Targets {
			if t.Cluster == "" || t.Addr == "" {
				return fmt.Errorf("target %q=%q: want CLUSTER=HOST:PORT", t.Cluster, t.Addr)
			}
		}
		for cl := range o.Kubeconfigs {
			if !slicesContains(o.Targets, cl) {
				return fmt.Errorf("kubeconfig for %q, which no target names", cl)
			}
		}
		return checkTargets(o.Schedule, targetsShape(o.Targets))
	}
	top := o.Topology
	if top == nil {
		top = DefaultTopology()
	}
	return checkTargets(o.Schedule, topologyShape(top))
}

// Validate reports what Run would refuse in the options (a bad value, a
// schedule target the run does not have, an output directory holding a
// run), before anything starts.
func (o Options) Validate() error { return o.defaults() }

func slicesContains(ts []Target, cluster string) bool {
	for _, t := range ts {
		if t.Cluster == cluster {
			return true
		}
	}
	return false
}

// Run runs a soak and checks it. It returns an error when the run could
// not be made (a rig that did not come up, a file that could not be
// written); violations are in the Outcome's Result.
func Run(ctx context.Context, opt Options) (_ *Outcome, err error) {
	if err := opt.defaults(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(opt.Out, 0o755); err != nil {
		return nil, err
	}
	logf := func(format string, args ...any) {
		if opt.Log != nil {
			fmt.Fprintf(opt.Log, "%s qm soak: %s\n", time.Now().UTC().Format("15:04:05"), fmt.Sprintf(format, args...))
		}
	}
	d, err := setUp(ctx, &opt, logf)
	if err != nil {
		return nil, err
	}
	defer func() {
		if serr := d.tearDown(); serr != nil && err == nil {
			err = serr
		}
	}()
	return d.run(ctx, &opt, logf)
}

// driven is what a run drives: the clusters' entries and API clients,
// and the rig when the run owns one.
type driven struct {
	rig       *rig.Rig
	clusters  []string
	entries   []*entry
	dyn       map[string]dynamic.Interface
	namespace string
	caller    string
	owner     func(entry, source string) string
	clusterOf func(entry, source string) string
	selector  map[string]string
	out       string
}

func setUp(ctx context.Context, opt *Options, logf func(string, ...any)) (_ *driven, err error) {
	d := &driven{dyn: map[string]dynamic.Interface{}, out: opt.Out}
	defer func() {
		if err != nil {
			_ = d.tearDown()
		}
	}()
	if len(opt.Targets) > 0 {
		return d, d.setUpTargets(opt)
	}
	top := opt.Topology
	if top == nil {
		top = DefaultTopology()
	}
	dir := opt.RigDir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "qm-soak-rig-"); err != nil {
			return nil, err
		}
	}
	logf("bringing up rig %q in %s", top.Metadata.Name, dir)
	var rigLog io.Writer
	if opt.Log != nil {
		rigLog = opt.Log
	}
	r, err := rig.Up(ctx, top, rig.Options{Dir: dir, QM: opt.QM, BinDir: opt.BinDir, Log: rigLog, ServeArgs: opt.ServeArgs})
	if err != nil {
		return nil, fmt.Errorf("rig: %w", err)
	}
	d.rig = r
	d.clusters = r.ClusterNames()
	d.namespace = top.Spec.Namespace
	if d.namespace == "" {
		d.namespace = "default"
	}
	d.caller = rig.CallerIdentity
	l := r.CallerCerts()
	tlsCfg, err := mtls.ClientConfig(mtls.ClientFiles{CertFile: l.ClientCert(rig.CallerIdentity), KeyFile: l.ClientKey(rig.CallerIdentity), CAFile: l.CACert()})
	if err != nil {
		return nil, err
	}
	for _, cl := range d.clusters {
		e, err := dialEntry(cl, r.CallerAddrs(cl), tlsCfg)
		if err != nil {
			return nil, err
		}
		d.entries = append(d.entries, e)
		cfg, err := r.RESTConfig(cl)
		if err != nil {
			return nil, err
		}
		if d.dyn[cl], err = dynamic.NewForConfig(cfg); err != nil {
			return nil, err
		}
	}
	// A forwarded answer's source is the link the entry cluster reached
	// the other by; the other cluster holds it for the entry's forwarder.
	linkTo := map[string]string{}
	for _, lk := range r.Links().All() {
		if lk.From != rig.CallersName {
			linkTo[lk.Addr()] = lk.To
		}
	}
	d.clusterOf = func(entry, source string) string {
		if source == "" || source == "local" {
			return entry
		}
		if cl, ok := linkTo[source]; ok {
			return cl
		}
		return source
	}
	d.owner = func(entry, _ string) string { return rig.ForwarderIdentity(entry) }
	if sel := soakSelector(top); sel != nil {
		d.selector = sel
	}
	return d, nil
}

// soakSelector is the policy labels a rig's requests select: the
// route=soak policies when the topology has them.
func soakSelector(t *rig.Topology) map[string]string {
	for _, p := range t.Spec.Policies {
		if p.Labels["route"] == "soak" {
			return map[string]string{"route": "soak"}
		}
	}
	return nil
}

func (d *driven) setUpTargets(opt *Options) error {
	d.namespace = opt.Namespace
	d.caller = opt.Caller
	d.selector = opt.PolicySelector
	byCluster := map[string][]string{}
	for _, t := range opt.Targets {
		if _, ok := byCluster[t.Cluster]; !ok {
			d.clusters = append(d.clusters, t.Cluster)
		}
		byCluster[t.Cluster] = append(byCluster[t.Cluster], t.Addr)
	}
	addrTo := map[string]string{}
	for _, cl := range d.clusters {
		e, err := dialEntry(cl, byCluster[cl], opt.TLS)
		if err != nil {
			return err
		}
		d.entries = append(d.entries, e)
		for _, a := range byCluster[cl] {
			addrTo[a] = cl
		}
		path, ok := opt.Kubeconfigs[cl]
		if !ok {
			continue // recorded as unread in the snapshot
		}
		cfg, err := clientcmd.BuildConfigFromFlags("", path)
		if err != nil {
			return fmt.Errorf("cluster %s: kubeconfig %s: %w", cl, path, err)
		}
		if d.dyn[cl], err = dynamic.NewForConfig(cfg); err != nil {
			return err
		}
	}
	d.clusterOf = func(entry, source string) string {
		if source == "" || source == "local" {
			return entry
		}
		if cl, ok := addrTo[source]; ok {
			return cl
		}
		return source
	}
	// An allocator elsewhere may record a forwarder's identity we do not
	// know; Agones records none, and the checker compares only what is
	// recorded.
	d.owner = func(string, string) string { return d.caller }
	return nil
}

func (d *driven) tearDown() error {
	for _, e := range d.entries {
		e.close()
	}
	d.entries = nil
	if d.rig == nil {
		return nil
	}
	d.keepLogs()
	err := d.rig.Stop()
	d.rig = nil
	return err
}

// keepLogs copies the rig's process logs into the output directory
// before the rig (and its directory) goes.
func (d *driven) keepLogs() {
	for _, cl := range d.clusters {
		logs, _ := filepath.Glob(filepath.Join(d.rig.LogDir(cl), "*.log"))
		for _, src := range logs {
			b, err := os.ReadFile(src)
			if err != nil {
				continue
			}
			dst := filepath.Join(d.out, "logs", cl, filepath.Base(src))
			if os.MkdirAll(filepath.Dir(dst), 0o755) == nil {
				_ = os.WriteFile(dst, b, 0o644)
			}
		}
	}
}

func (d *driven) request() *allocation.AllocationRequest {
	q := &allocation.AllocationRequest{Namespace: d.namespace}
	if len(d.selector) > 0 {
		q.MultiClusterSetting = &allocation.MultiClusterSetting{Enabled: true,
			PolicySelector: &allocation.LabelSelector{MatchLabels: d.selector}}
	}
	return q
}

func (d *driven) run(ctx context.Context, opt *Options, logf func(string, ...any)) (*Outcome, error) {
	histPath := filepath.Join(opt.Out, HistoryFile)
	hf, err := os.Create(histPath)
	if err != nil {
		return nil, err
	}
	defer hf.Close()

	faults := opt.Schedule.Schedule(opt.Seed, opt.Duration)
	start := time.Now()
	hist := &history{w: soak.NewWriter(hf, soak.Run{Start: start})}
	count := &counters{}
	rec := &recorder{entries: d.entries, req: d.request(), caller: d.caller, owner: d.owner, clusterOf: d.clusterOf,
		hist: hist, count: count, releaseFor: releaseRetryFor, sessions: map[*loadgen.Session]*held{}}
	inj := &injector{rig: d.rig, clusters: d.clusters, dyn: d.dyn, namespace: d.namespace,
		rng: rand.New(rand.NewPCG(opt.Seed, 0x50a6)), hist: hist, log: logf,
		links: map[linkFault]int{}, current: map[int]string{}, skipped: map[string]string{}, done: map[string]int{}}
	keys := "with allocation keys (lost answers retried with them)"
	if opt.NoAllocationKeys {
		keys = "without allocation keys"
	}
	logf("load: %g/s (Poisson) over %s for %s, sessions of %s on average, %s; %d faults scheduled (seed %d)",
		opt.Rate, strings.Join(d.clusters, ", "), opt.Duration, opt.Session, keys, len(faults), opt.Seed)

	var wg sync.WaitGroup
	fctx, stopFaults := context.WithCancel(ctx)
	defer stopFaults()
	wg.Add(1)
	go func() {
		defer wg.Done()
		inj.run(fctx, start, faults)
	}()
	holdAt := time.AfterFunc(opt.Duration, func() { rec.holding.Store(true) })
	defer holdAt.Stop()
	progressDone := make(chan struct{})
	if opt.Progress != nil {
		go progress(ctx, opt, start, count, inj, progressDone)
	}

	var sessMu sync.Mutex
	sessRng := rand.New(rand.NewPCG(opt.Seed, 0x5e55))
	cfg := loadgen.Config{Mode: "open", Arrival: fmt.Sprintf("poisson:%g", opt.Rate), Seed: opt.Seed,
		MaxInFlight: 256, Connections: 1, DurationSeconds: opt.Duration.Seconds(), TimeoutSeconds: opt.Timeout.Seconds(),
		Request: "soak", Release: true, AllocationKeys: !opt.NoAllocationKeys}
	load, err := loadgen.Run(ctx, cfg, []loadgen.Target{{
		Config: loadgen.TargetConfig{Name: "soak", Addr: strings.Join(d.clusters, ","), Protocol: "grpc", Call: "allocate"},
		Caller: rec,
	}}, loadgen.Options{
		NewPacer:    func() loadgen.Pacer { return loadgen.NewPoisson(opt.Rate, opt.Seed) },
		MaxInFlight: 256, Duration: opt.Duration, Timeout: opt.Timeout, Release: true,
		AllocationKeys: !opt.NoAllocationKeys, ResolveFor: releaseRetryFor,
		SessionLength: func() time.Duration {
			sessMu.Lock()
			defer sessMu.Unlock()
			return time.Duration(sessRng.ExpFloat64() * float64(opt.Session))
		},
	})
	rec.holding.Store(true)
	end := time.Now()
	wg.Wait()            // every fault ended
	rec.releasing.Wait() // every release answered
	close(progressDone)
	if err != nil {
		return nil, fmt.Errorf("load: %w", err)
	}
	if err := hist.end(end); err != nil {
		return nil, fmt.Errorf("%s: %w", histPath, err)
	}
	if err := hf.Close(); err != nil {
		return nil, err
	}
	if err := writeFile(filepath.Join(opt.Out, LoadFile), func(w io.Writer) error { return loadgen.WriteResult(w, load) }); err != nil {
		return nil, err
	}
	if ctx.Err() != nil {
		return nil, fmt.Errorf("interrupted; the history so far is in %s", histPath)
	}

	logf("load over (%d requests); settling for %s", count.requests.Load(), opt.Settle)
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-time.After(opt.Settle):
	}
	snap := takeSnapshot(ctx, d.clusters, d.dyn, d.namespace)
	for _, c := range snap.Clusters {
		if c.Error != "" {
			logf("cluster %s could not be read: %s", c.Name, c.Error)
		}
	}
	if err := writeFile(filepath.Join(opt.Out, SnapshotFile), func(w io.Writer) error { return soak.WriteSnapshot(w, snap) }); err != nil {
		return nil, err
	}
	out := &Outcome{Dir: opt.Out, Injected: inj.done, Skipped: inj.skipped, Failed: inj.failed}
	out.GiveBack = rec.giveBack(context.WithoutCancel(ctx))

	// The checker reads the files back, as `qm soak check` would.
	h, err := readBack(histPath, soak.ReadHistory)
	if err != nil {
		return nil, err
	}
	s, err := readBack(filepath.Join(opt.Out, SnapshotFile), soak.ReadSnapshot)
	if err != nil {
		return nil, err
	}
	out.Result = soak.Check(h, s, opt.Check)
	if err := writeFile(filepath.Join(opt.Out, ResultFile), out.Result.WriteJSON); err != nil {
		return nil, err
	}
	if err := writeFile(filepath.Join(opt.Out, TableFile), out.Result.WriteTable); err != nil {
		return nil, err
	}
	return out, nil
}

func readBack[T any](path string, read func(io.Reader) (*T, error)) (*T, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	v, err := read(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return v, nil
}

func writeFile(path string, write func(io.Writer) error) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := write(f); err != nil {
		f.Close()
		return fmt.Errorf("%s: %w", path, err)
	}
	return f.Close()
}

// progress writes a line every opt.ProgressEvery until done.
func progress(ctx context.Context, opt *Options, start time.Time, c *counters, inj *injector, done <-chan struct{}) {
	t := time.NewTicker(opt.ProgressEvery)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case now := <-t.C:
			fmt.Fprintln(opt.Progress, progressLine(now.Sub(start), opt.Duration, ctx.Err() != nil, c, inj.inForce()))
		}
	}
}

// progressLine is one progress line at elapsed into a run of duration.
// Past the duration, or once interrupted, the load has stopped sending
// and waits on the faults' ends, the releases still being retried and
// the requests given up being resolved (up to releaseRetryFor), which
// the line says rather than count on as if the load went on.
func progressLine(elapsed, duration time.Duration, interrupted bool, c *counters, faults string) string {
	line := fmt.Sprintf("%s/%s", elapsed.Round(time.Second), duration)
	switch {
	case interrupted:
		line = fmt.Sprintf("interrupted at %s, ending the faults, waiting for releases and resolves (up to %s)",
			elapsed.Round(time.Second), releaseRetryFor)
	case elapsed > duration:
		line = fmt.Sprintf("load over %s ago, waiting for releases and resolves (up to %s)",
			(elapsed - duration).Round(time.Second), releaseRetryFor)
	}
	line += fmt.Sprintf("  requests %d  ok %d  released %d", c.requests.Load(), c.ok.Load(), c.released.Load())
	if n := c.retries.Load(); n > 0 {
		line += fmt.Sprintf("  tries again %d", n)
	}
	if n := c.releaseFailed.Load(); n > 0 {
		line += fmt.Sprintf(" (release failed %d)", n)
	}
	if e := c.errorText(); e != "" {
		line += "  errors " + e
	}
	return line + "  fault: " + faults
}
