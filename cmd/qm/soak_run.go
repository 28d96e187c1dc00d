package main

import (
	"context"
	"crypto/tls"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"time"

	"github.com/quartermaster-dev/quartermaster/allocator/mtls"
	"github.com/quartermaster-dev/quartermaster/kindcluster/rig"
	"github.com/quartermaster-dev/quartermaster/soak"
	"github.com/quartermaster-dev/quartermaster/soakrun"
)

const soakRunUsage = `usage: qm soak [--duration 5m] [--schedule FILE] [--seed N] [--out DIR] [flags]
       qm soak --target CLUSTER=HOST:PORT --kubeconfig CLUSTER=FILE --identity NAME
               (--certs-dir DIR | --cert FILE --key FILE --cacert FILE | --insecure) [flags]
       qm soak check HISTORY SNAPSHOT (qm soak check -h)

A soak brings up a multi-cluster rig (real API servers, fleet agents,
allocator replicas, latency links; --topology, or two clusters of two
replicas with every request spread over both), drives open-loop load at
it (Poisson arrivals, sessions held and released), and injects faults on
a seeded schedule (--schedule, or the shipped one: every kind a few times
in five minutes): an allocator replica killed with SIGKILL and started
again, an API server down and up, a link cut, slowed or made lossy, a
connection Secret rotated, a fleet scaled down and up, a remote that
answers slowly, answers lost on their way back. Every request, release and fault goes to DIR/history.jsonl
as it happens; after the load and a settle period every GameServer object
on every API server goes to DIR/snapshot.json, and the checker holds the
two against the allocator's promises (soak/README.md). The table goes to
stdout and DIR/result.md, the result to DIR/result.json (qm report DIR/result.json
draws it), the load engine's result to DIR/load.json.

With --target the run drives allocators it does not own (Agones' own, or
any that speaks its API): --kubeconfig gives each cluster's API server for
the snapshot, --certs-dir/--identity or --cert/--key/--cacert the callers'
credentials. Faults that need the rig are skipped, with a note; a fleet
scale needs only the API server and is injected.

Every request carries an idempotency key of its own (--allocation-keys,
on by default): an answer lost to a fault is retried with the key within
--timeout, a request given up is resolved by its key afterwards and what
it allocated given back, and the checker counts every Allocated server
without a live session as dangling (--strict's rule).

Progress lines go to stderr every few seconds, unless --quiet or CI is set
in the environment. Exit status: 2 on any violation (or a usage
mistake), 1 when the run could not be made, 0 when every promise held.

flags:
`

type soakRunFlags struct {
	duration, session, settle, timeout time.Duration
	schedule, topology, out, binDir    string
	qm                                 string
	seed                               uint64
	rate                               float64
	quiet                              bool
	targets, kubeconfigs, selector     multiFlag
	namespace                          string
	cert, key, cacert, certsDir        string
	identity                           string
	insecure                           bool
	allocationKeys                     bool
	check                              soak.Config
}

func newSoakRunFlags() (*flag.FlagSet, *soakRunFlags) {
	fs := flag.NewFlagSet("qm soak", flag.ContinueOnError)
	f := &soakRunFlags{}
	durationFlag(fs, &f.duration, "duration", 5*time.Minute, "how long the load runs, a `duration` such as 30m or 8h (faults end within it)")
	fs.StringVar(&f.schedule, "schedule", "", "fault schedule file (default: the shipped one, soak/default.yaml)")
	fs.Uint64Var(&f.seed, "seed", 0, "seed of the schedule's times and targets, the arrivals and the sessions (default: the schedule's)")
	fs.StringVar(&f.out, "out", "", "directory for the history, snapshot and result (default: soak-TIME in the current directory)")
	fs.Float64Var(&f.rate, "rate", soakrun.DefaultRate, "mean requests per second over all clusters (Poisson arrivals)")
	durationFlag(fs, &f.session, "session", soakrun.DefaultSession, "mean session length (exponential) before each Release, a `duration`")
	durationFlag(fs, &f.settle, "settle", soakrun.DefaultSettle, "how long to wait after the load before reading the GameServer objects, a `duration` (0s: no wait)")
	durationFlag(fs, &f.timeout, "timeout", soakrun.DefaultTimeout, "each request's deadline, a `duration`: its tries are sent again with its key within it")
	fs.StringVar(&f.topology, "topology", "", "rig topology file (default: two clusters, east and west, of two allocator replicas)")
	fs.StringVar(&f.binDir, "bin-dir", "", "directory with etcd and kube-apiserver (default ./bin of the repository)")
	fs.StringVar(&f.qm, "qm", "", "the qm binary the rig's allocators and fleet agents run as (default: this one)")
	fs.BoolVar(&f.quiet, "quiet", false, "no progress lines and no rig log")
	fs.Var(&f.targets, "target", "CLUSTER=HOST:PORT: an allocator the run drives instead of a rig (repeatable; several per cluster for its replicas)")
	fs.Var(&f.kubeconfigs, "kubeconfig", "CLUSTER=FILE: the kubeconfig of a --target cluster's API server, to read its GameServers (repeatable)")
	fs.Var(&f.selector, "policy-selector", "KEY=VALUE: with --target, allocate multi-cluster through the policies with this label (repeatable)")
	fs.StringVar(&f.namespace, "namespace", "default", "with --target, the namespace to allocate in and read")
	fs.StringVar(&f.cert, "cert", "", "with --target, the client certificate file")
	fs.StringVar(&f.key, "key", "", "with --target, the client private key file")
	fs.StringVar(&f.cacert, "cacert", "", "with --target, the CA file to verify the allocator against")
	fs.StringVar(&f.certsDir, "certs-dir", "", "with --target, a certificate directory (qm certs layout) holding --identity's certificate")
	fs.StringVar(&f.identity, "identity", "", "with --target, the callers' identity: its certificate in --certs-dir, and the holder the allocator records")
	fs.BoolVar(&f.insecure, "insecure", false, "with --target, plaintext (an allocator run with --insecure-disable-tls)")
	fs.IntVar(&f.check.Examples, "examples", soak.DefaultExamples, "examples kept per promise")
	durationFlag(fs, &f.check.Window, "window", soak.DefaultWindow, "the span after a fault whose failures count as after it, and the step of recovery, a `duration`")
	fs.BoolVar(&f.allocationKeys, "allocation-keys", true, "send every request with an idempotency key of its own, retry a lost answer with it within --timeout, and resolve a request given up by its key (give back what it allocated); the checker then counts dangling servers strictly")
	fs.BoolVar(&f.check.Strict, "strict", false, "count an Allocated server whose release failed, or that a lost answer may explain, as dangling (always so for a run with --allocation-keys)")
	return fs, f
}

func soakRun(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs, f := newSoakRunFlags()
	usage, ok, err := parseFlags("soak", soakRunUsage, fs, args, stdout, stderr)
	if !ok {
		return err
	}
	bad := func(format string, a ...any) error { return usageFail(stderr, "soak", usage, format, a...) }
	set := map[string]bool{}
	fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	opt, err := soakOptions(f, set)
	if err != nil {
		return bad("%v", err)
	}
	for _, n := range soakNotes(opt) {
		fmt.Fprintf(stderr, "qm soak: note: %s\n", n)
	}
	if !f.quiet {
		opt.Log = stderr
		if !ciSet() {
			opt.Progress = stderr
		}
	}
	out, err := soakrun.Run(ctx, *opt)
	if err != nil {
		return err
	}
	if err := out.Result.WriteTable(stdout); err != nil {
		return err
	}
	writeSoakNotes(stdout, out)
	if n := out.Result.Violations(); n > 0 {
		fmt.Fprintf(stderr, "qm soak: %d violations (files in %s)\n", n, out.Dir)
		return exitError{code: 2}
	}
	fmt.Fprintf(stderr, "qm soak: every promise held (files in %s)\n", out.Dir)
	return nil
}

// writeSoakNotes says which faults ran, which were skipped and why, and
// any that could not be started or ended.
func writeSoakNotes(w io.Writer, out *soakrun.Outcome) {
	var kinds []string
	for _, k := range soak.FaultKinds {
		if n := out.Injected[k]; n > 0 {
			kinds = append(kinds, fmt.Sprintf("%s %d", k, n))
		}
	}
	fmt.Fprintf(w, "\nFaults injected: %s\n", orNone(strings.Join(kinds, ", ")))
	skipped := make([]string, 0, len(out.Skipped))
	for k := range out.Skipped {
		skipped = append(skipped, k)
	}
	sort.Strings(skipped)
	for _, k := range skipped {
		fmt.Fprintf(w, "Skipped %s: %s\n", k, out.Skipped[k])
	}
	for _, f := range out.Failed {
		fmt.Fprintf(w, "Fault failed: %s\n", f)
	}
	if out.GiveBack != nil {
		fmt.Fprintf(w, "Giving back the servers held to the end failed: %v\n", out.GiveBack)
	}
}

func orNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// ciSet says whether CI is set in the environment, as CI services set it.
func ciSet() bool {
	ci := os.Getenv("CI")
	return ci != "" && ci != "false" && ci != "0"
}

// soakOptions checks the flags, naming the one at fault, and turns them
// into the run's options.
func soakOptions(f *soakRunFlags, set map[string]bool) (*soakrun.Options, error) {
	if err := checkSoakNumbers(f); err != nil {
		return nil, err
	}
	opt := &soakrun.Options{Duration: f.duration, Seed: f.seed, Out: f.out, Rate: f.rate, Session: f.session,
		Settle: f.settle, Timeout: f.timeout, Check: f.check, BinDir: f.binDir, QM: f.qm, NoAllocationKeys: !f.allocationKeys}
	if f.settle == 0 {
		opt.Settle = -1 // no wait: Options reads 0 as the default
	}
	if opt.Out == "" {
		opt.Out = "soak-" + time.Now().UTC().Format("20060102-150405")
	}
	if f.schedule != "" {
		s, err := soak.LoadSchedule(f.schedule)
		if err != nil {
			return nil, fmt.Errorf("--schedule: %v", err)
		}
		opt.Schedule = s
	}
	if len(f.targets) == 0 {
		for _, name := range []string{"kubeconfig", "policy-selector", "namespace", "cert", "key", "cacert", "certs-dir", "identity", "insecure"} {
			if set[name] {
				return nil, fmt.Errorf("--%s is for --target runs", name)
			}
		}
		if f.topology != "" {
			t, err := rig.Load(f.topology)
			if err != nil {
				return nil, fmt.Errorf("--topology: %v", err)
			}
			opt.Topology = t
		}
		if err := checkSoakBinaries(f); err != nil {
			return nil, err
		}
		return opt, opt.Validate()
	}
	for _, name := range []string{"topology", "bin-dir", "qm"} {
		if set[name] {
			return nil, fmt.Errorf("--%s is for a rig; --target drives allocators running elsewhere", name)
		}
	}
	for _, t := range f.targets {
		cl, addr, ok := strings.Cut(t, "=")
		if !ok || cl == "" || addr == "" {
			return nil, fmt.Errorf("--target %q: want CLUSTER=HOST:PORT", t)
		}
		opt.Targets = append(opt.Targets, soakrun.Target{Cluster: cl, Addr: addr})
	}
	opt.Kubeconfigs = map[string]string{}
	for _, k := range f.kubeconfigs {
		cl, path, ok := strings.Cut(k, "=")
		if !ok || cl == "" || path == "" {
			return nil, fmt.Errorf("--kubeconfig %q: want CLUSTER=FILE", k)
		}
		opt.Kubeconfigs[cl] = path
	}
	for _, s := range f.selector {
		k, v, ok := strings.Cut(s, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("--policy-selector %q: want KEY=VALUE", s)
		}
		if opt.PolicySelector == nil {
			opt.PolicySelector = map[string]string{}
		}
		opt.PolicySelector[k] = v
	}
	opt.Namespace = f.namespace
	if f.identity == "" {
		return nil, fmt.Errorf("--identity is needed with --target: the holder the allocator records (and the certificate in --certs-dir)")
	}
	opt.Caller = f.identity
	tlsCfg, err := soakTLS(f)
	if err != nil {
		return nil, err
	}
	opt.TLS = tlsCfg
	return opt, opt.Validate()
}

func soakTLS(f *soakRunFlags) (*tls.Config, error) {
	if f.insecure {
		return nil, nil
	}
	files := mtls.ClientFiles{CertFile: f.cert, KeyFile: f.key, CAFile: f.cacert}
	if f.cert == "" && f.key == "" {
		if f.certsDir == "" {
			return nil, fmt.Errorf("--target needs credentials: --certs-dir (with --identity), --cert/--key/--cacert, or --insecure")
		}
		files = mtls.ClientFilesFor(f.certsDir, f.identity)
	}
	cfg, err := mtls.ClientConfig(files)
	if err != nil {
		return nil, fmt.Errorf("credentials: %v", err)
	}
	return cfg, nil
}
