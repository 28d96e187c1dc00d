package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/quartermaster-dev/quartermaster/plan"
	"github.com/quartermaster-dev/quartermaster/scenarios"
)

func init() {
	register(command{
		name:    "sim",
		summary: "run a scenario file in the simulator and check its expectations",
		run:     runSim,
	})
}

const simUsage = `usage: qm sim FILE [--out results.json] [--quiet] [--cpuprofile FILE] [--memprofile FILE]
       qm sim FILE --seeds N [--workers W] [--out spread.json] [--quiet]
       qm sim FILE --seeds N --index I [--out run.json]
       qm sim FILE --seeds N --job-manifest [--image IMAGE] [--job-name NAME] [--out job.yaml]
       qm sim merge [--out spread.json] [--quiet] RUN.json...
       qm sim --replay TRACE FILE [--cluster-name SOURCE=CLUSTER]... [--out results.json]

Runs one scenario file in the simulator on a virtual clock, prints a table
per cluster and the file's expectations, and exits 2 if one fails. Flags may
come before or after FILE. To run every shipped scenario: make sim-scenarios.
Progress (virtual time reached, events/s, time left) goes to stderr when it
is a terminal, unless --quiet or CI is set in the environment.

With --seeds N, the scenario runs under its seed and the N-1 after it, W
runs at a time (default: one per CPU), and the table shows each figure's
spread across the seeds: mean, standard deviation, min and max. A run's
results depend on its seed alone, never on W. Exit status 2 when a seed
misses an expectation. Where one machine is not enough, --index I runs the
I-th of the N seeds alone (counting from 0; a Kubernetes Indexed Job passes
its completion index) and writes its report as a single run does; qm sim
merge adds such reports up into what --seeds N gives, whatever their order.
--job-manifest writes that Job instead of running anything: a ConfigMap
with the scenario file and an Indexed Job of N completions, each running
its index's seed with --out - (the pod's log is its report), with the
commands to collect the logs and merge them in its opening comment.

With --replay, the scenario's clusters, policies and faults meet the
arrivals and requests of a trace (qm serve --trace, qm load --trace) instead
of its workload, and the cluster shares the trace recorded are printed
beside the replayed ones. --cluster-name maps names in the trace (a qm load
trace names clusters by the answer's source: local, or the endpoint
forwarded to) to the scenario's.

flags:
`

// runSim is `qm sim FILE [--out results.json] [--quiet]`. It prints a summary
// table on stdout, progress on stderr for runs that take a while, writes the
// report JSON when asked, and exits 2 when an expectation fails.
func runSim(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "merge" {
		return runSimMerge(args[1:], stdout, stderr)
	}
	o, file, ok, err := parseSimFlags(args, stdout, stderr)
	if !ok {
		return err
	}
	sc, err := scenarios.Load(file)
	if err != nil {
		return err
	}
	if o.jobManifest {
		return writeSimJob(o, file, sc, stdout)
	}
	if o.index >= 0 {
		seed := plan.Seeds(sc, o.seeds)[o.index]
		sc.Spec.Seed = &seed
		o.seeds = 1
	}
	switch {
	case o.replay != "":
		return runSimReplay(ctx, sc, o.replay, o.clusterNames, o.out, o.quiet, stdout, stderr)
	case o.seeds > 1:
		return runSimSeeds(ctx, file, sc, o.seeds, o.workers, o.out, o.quiet, stdout, stderr)
	}
	return runSimOnce(ctx, sc, o, stdout, stderr)
}

// simFlags are qm sim's flags, as parsed.
type simFlags struct {
	out, cpuProfile, memProfile string
	quiet, jobManifest          bool
	seeds, workers, index       int
	image, jobName, replay      string
	clusterNames                multiFlag
}

// parseSimFlags parses and checks qm sim's command line: its flags and
// its one scenario file. ok false: the usage was printed, and err is the
// command's answer.
func parseSimFlags(args []string, stdout, stderr io.Writer) (o simFlags, file string, ok bool, err error) {
	fs := flag.NewFlagSet("qm sim", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&o.out, "out", "", "write the results JSON to this file (\"-\": to stdout, with the table on stderr, as qm load does)")
	fs.BoolVar(&o.quiet, "quiet", false, "no progress and no table; only failures and errors")
	fs.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of the run to this file (go tool pprof reads it)")
	fs.StringVar(&o.memProfile, "memprofile", "", "write a heap profile at the end of the run to this file: what is live then (inuse) and what the run allocated (alloc)")
	fs.IntVar(&o.seeds, "seeds", 1, "run the scenario under this many seeds (its own and the ones after it) and report each figure's spread")
	fs.IntVar(&o.workers, "workers", runtime.NumCPU(), "with --seeds: runs at once")
	fs.IntVar(&o.index, "index", -1, "with --seeds N: run only the seed of this index (0..N-1), as one run, for qm sim merge")
	fs.BoolVar(&o.jobManifest, "job-manifest", false, "with --seeds N: write a Kubernetes Indexed Job (and a ConfigMap with the scenario) that runs the N seeds, one per index, instead of running them")
	fs.StringVar(&o.image, "image", jobImage, "with --job-manifest: the qm image the pods run")
	fs.StringVar(&o.jobName, "job-name", "qm-sim", "with --job-manifest: the Job's name (the ConfigMap's is NAME-scenario)")
	fs.StringVar(&o.replay, "replay", "", "replay this trace's arrivals and requests against the scenario's clusters instead of its workload")
	fs.Var(&o.clusterNames, "cluster-name", "with --replay: SOURCE=CLUSTER, the scenario's name for a cluster the trace names SOURCE (repeatable)")
	usage, files, ok, err := parseFlagsAndFiles("sim", simUsage, fs, args, stdout, stderr)
	if !ok {
		return o, "", false, err
	}
	fail := func(format string, args ...any) (simFlags, string, bool, error) {
		return o, "", false, usageFail(stderr, "sim", usage, format, args...)
	}
	switch {
	case len(files) == 0:
		return fail("no scenario file given")
	case len(files) > 1:
		// One report, one exit status: several files would need a rule
		// for merging both, so each file gets its own run.
		return fail("one scenario file per run, got %d (%s); run qm sim once per file, or make sim-scenarios for all of them",
			len(files), strings.Join(files, " "))
	case o.replay == "" && len(o.clusterNames) > 0:
		return fail("--cluster-name needs --replay")
	case o.seeds < 1:
		return fail("--seeds %d: want 1 or more", o.seeds)
	case o.workers < 1:
		return fail("--workers %d: want 1 or more", o.workers)
	case o.seeds > 1 && o.replay != "":
		return fail("--seeds and --replay: a replay follows its trace; run it once")
	case o.index >= o.seeds || o.index < -1:
		return fail("--index %d: want 0..%d, one of the --seeds %d", o.index, o.seeds-1, o.seeds)
	case o.jobManifest && (o.index >= 0 || o.replay != ""):
		return fail("--job-manifest writes the Job that runs every --index; it takes no --index or --replay")
	}
	if o.jobManifest {
		if err := checkJobName(o.jobName); err != nil {
			return fail("%v", err)
		}
	}
	return o, files[0], true, nil
}

// writeSimJob writes the Indexed Job that runs o's seeds of file.
func writeSimJob(o simFlags, file string, sc *scenarios.Scenario, stdout io.Writer) error {
	data, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	j := &simJob{name: o.jobName, image: o.image, file: file, data: data, runs: o.seeds,
		merge:    "qm sim merge --out spread.json",
		describe: fmt.Sprintf("qm sim %s --seeds %d as a Kubernetes Indexed Job: the seed of each index (%d..%d), one run per pod.", file, o.seeds, *sc.Spec.Seed, *sc.Spec.Seed+uint64(o.seeds)-1)}
	j.args = []string{"sim", j.podScenario(), "--seeds", strconv.Itoa(o.seeds), "--index", indexArg, "--quiet", "--out", "-"}
	return writeManifest(j, o.out, stdout)
}

// runSimOnce runs sc once: progress, profiles, the results file, the
// summary, and exit status 2 when an expectation failed.
func runSimOnce(ctx context.Context, sc *scenarios.Scenario, o simFlags, stdout, stderr io.Writer) error {
	tuneGC(1)
	if o.cpuProfile != "" {
		stop, err := startCPUProfile(o.cpuProfile)
		if err != nil {
			return err
		}
		defer stop()
	}
	opt := scenarios.Options{}
	start := time.Now()
	showProgress := !o.quiet && progressWanted(stderr)
	if showProgress {
		last := start
		opt.Progress = func(now, total time.Duration, events uint64) {
			if t := time.Now(); t.Sub(last) >= time.Second {
				last = t
				fmt.Fprintf(stderr, "\r%s", progressLine(sc.Metadata.Name, now, total, events, t.Sub(start)))
			}
		}
	}
	// A signal (Ctrl-C) cancels ctx; the run notices within a moment.
	opt.Stop = func() bool { return ctx.Err() != nil }
	rep, err := sc.Run(opt)
	if err != nil {
		return err
	}
	wall := time.Since(start)
	if o.memProfile != "" {
		if err := writeHeapProfile(o.memProfile); err != nil {
			return err
		}
	}
	if !o.quiet {
		if showProgress && wall >= time.Second {
			fmt.Fprintln(stderr)
		}
		fmt.Fprintf(stderr, "%s: %d events in %s (%.0f events/s)\n", sc.Metadata.Name, rep.Results.Events,
			wall.Round(time.Millisecond), float64(rep.Results.Events)/wall.Seconds())
	}
	if o.out != "" {
		if stdout, err = writeSimResults(rep, o.out, stdout, stderr); err != nil {
			return err
		}
	}
	if !o.quiet {
		printSummary(stdout, rep)
	} else {
		for _, c := range rep.Expectations {
			if !c.Pass {
				fmt.Fprintf(stdout, "FAIL %s = %v (want %s)\n", c.Metric, c.Value, bounds(c))
			}
		}
	}
	if !rep.Passed {
		return exitError{code: 2}
	}
	return nil
}

// writeSimResults writes rep's JSON to out ("-": stdout, which then
// carries the JSON alone, so it can be piped). It returns where the
// summary goes: stdout, or stderr when stdout took the JSON.
func writeSimResults(rep *scenarios.Report, out string, stdout, stderr io.Writer) (io.Writer, error) {
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return stdout, err
	}
	b = append(b, '\n')
	if out == "-" {
		if _, err := stdout.Write(b); err != nil {
			return stdout, err
		}
		return stderr, nil
	}
	return stdout, os.WriteFile(out, b, 0o644)
}

func printSummary(w io.Writer, rep *scenarios.Report) {
	r := rep.Results
	t := r.Totals
	fmt.Fprintf(w, "scenario %s (seed %d, %s virtual)\n\n", rep.Scenario, r.Seed, r.Duration)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "cluster\tprovider\ttries\tallocated\tshare\tunAllocated*\tcontention*\tunavailable*\tretries\tp50 ms\tp99 ms\tpacking\tnode-hours\tcost\t")
	names := make([]string, 0, len(r.Clusters))
	for n := range r.Clusters {
		names = append(names, n)
	}
	sort.Strings(names)
	var tries uint64
	for _, n := range names {
		c := r.Clusters[n]
		tries += c.Tries
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%.1f%%\t%d\t%d\t%d\t%d\t%.1f\t%.1f\t%.3f\t%.1f\t%.2f\t\n",
			n, c.Provider, c.Tries, c.Allocated, 100*c.Share, c.UnAllocated, c.Contention, c.Unavailable,
			c.Retries, c.Latency.P50Ms, c.Latency.P99Ms, c.PackingEfficiency, c.NodeHours, c.Cost)
	}
	fmt.Fprintf(tw, "total\t\t%d\t%d\t\t%d\t%d\t%d\t%d\t%.1f\t%.1f\t%.3f\t%.1f\t%.2f\t\n",
		tries, t.Allocated, t.UnAllocated, t.Contention, t.Unavailable, t.Retries,
		t.Latency.P50Ms, t.Latency.P99Ms, t.PackingEfficiency, t.NodeHours, t.Cost)
	tw.Flush()
	// A cluster's refusals count its tries, and a refused try usually goes
	// on to the next cluster of the policy, so a cluster can show thousands
	// beside a total of 0: the total counts requests no cluster served.
	if len(names) > 1 {
		fmt.Fprintln(w, "  * per cluster: tries it refused (each went on to the next cluster, if there was one); total: requests no cluster served")
	}
	fmt.Fprintf(w, "\n%d requests: success rate %.4f%%, unAllocated %d, contention %d, unavailable %d, deadline exceeded %d, in flight at end %d\n",
		t.Requests, 100*t.SuccessRate, t.UnAllocated, t.Contention, t.Unavailable, t.DeadlineExceeded, t.InFlight)
	if l := r.Losses; l != nil {
		fmt.Fprintf(w, "losses: %d servers leaked (%.1f an hour, %d still Allocated at the end), %d duplicate allocations avoided by keys, %d retries (%d by callers, %d by forwarders); answers lost: %d on links, %d to callers, %d after the caller gave up; %d reconciled\n",
			l.Leaked, l.LeakedPerHour, l.LeakedAtEnd, l.DuplicatesAvoided, l.Retries, l.CallerRetries, l.ForwardRetries,
			l.LostOnLinks, l.LostToCallers, l.GaveUp, l.Reconciled)
	}
	if len(rep.Expectations) == 0 {
		return
	}
	fmt.Fprintln(w, "\nexpectations:")
	for _, c := range rep.Expectations {
		mark := "ok  "
		if !c.Pass {
			mark = "FAIL"
		}
		fmt.Fprintf(w, "  %s %s = %v (want %s)", mark, c.Metric, c.Value, bounds(c))
		if c.Description != "" {
			fmt.Fprintf(w, "  # %s", c.Description)
		}
		fmt.Fprintln(w)
	}
	if rep.Passed {
		fmt.Fprintln(w, "PASS")
	} else {
		fmt.Fprintln(w, "FAIL")
	}
}

// progressWanted says whether w is a terminal someone watches: not in CI
// (CI set, as CI services set it), not redirected to a file or a pipe.
func progressWanted(w io.Writer) bool {
	if ci := os.Getenv("CI"); ci != "" && ci != "false" && ci != "0" {
		return false
	}
	return isTerminal(w)
}

// progressLine is a run's progress: how far it is in virtual time, its
// speed in events per wall second, and the wall time left at the average
// pace of virtual time so far.
func progressLine(name string, now, total time.Duration, events uint64, wall time.Duration) string {
	line := fmt.Sprintf("%s: %5.1f%% of %s virtual, %d events, %.0f events/s", name,
		100*now.Seconds()/total.Seconds(), total, events, float64(events)/wall.Seconds())
	if now > 0 && now < total {
		left := time.Duration(float64(wall) * float64(total-now) / float64(now))
		line += ", about " + left.Round(time.Second).String() + " left  "
	}
	return line
}

// startCPUProfile profiles the process into file until the returned
// function is called.
func startCPUProfile(file string) (func(), error) {
	f, err := os.Create(file)
	if err != nil {
		return nil, fmt.Errorf("--cpuprofile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("--cpuprofile: %w", err)
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
	}, nil
}

// writeHeapProfile writes the heap profile as of a collection made now,
// so that its in-use figures are the live heap at the end of the run.
func writeHeapProfile(file string) error {
	runtime.GC()
	f, err := os.Create(file)
	if err != nil {
		return fmt.Errorf("--memprofile: %w", err)
	}
	if err := pprof.WriteHeapProfile(f); err != nil {
		f.Close()
		return fmt.Errorf("--memprofile: %w", err)
	}
	return f.Close()
}

func bounds(c scenarios.Check) string {
	var parts []string
	if c.Min != nil {
		parts = append(parts, fmt.Sprintf(">= %v", *c.Min))
	}
	if c.Max != nil {
		parts = append(parts, fmt.Sprintf("<= %v", *c.Max))
	}
	return strings.Join(parts, " and ")
}

// tuneGC trades memory for speed unless the user chose GOGC/GOMEMLIMIT: a
// simulation's live heap is its cached indexes, which change slowly, while
// every allocation produces short-lived garbage; collecting at 4x the live
// heap (but before 3 GiB per run under way) cuts the time spent in the
// collector, and the limit leaves a million-server run's live heap room
// to grow (docs/performance.md, Simulator, has its peak).
func tuneGC(runs int) {
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(400)
	}
	if os.Getenv("GOMEMLIMIT") == "" {
		debug.SetMemoryLimit(int64(max(runs, 1)) * 3 << 30)
	}
}
