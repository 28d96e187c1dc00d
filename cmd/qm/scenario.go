package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/quartermaster-dev/quartermaster/scenarios"
	"github.com/quartermaster-dev/quartermaster/scenarios/live"
)

func init() {
	register(command{
		name:    "scenario",
		summary: "run a scenario file in the simulator or live on local allocators (qm scenario run FILE [--live])",
		run:     runScenario,
	})
}

const scenarioUsage = `usage: qm scenario run FILE [--live [--time-scale N] [--trace TRACE]] [--out results.json] [--quiet]

Without --live, the same as 'qm sim FILE': the simulator's prediction.

With --live, the scenario runs on real allocators on this machine: one
memory-backend 'qm serve' per cluster with the file's fleets, latency links
carrying the clusters' RTTs (down during the file's outages), the policies
as GameServerAllocationPolicies, and the workload sent by qm load's engine,
each session released after its drawn length. --time-scale N runs N scenario
seconds per wall second (a 3-hour scenario in 3 minutes at N=60) with every
rate multiplied by N, so each server sees the same load. The expectations
are checked on the live result, which is written in the simulator's format
(kind LiveScenarioReport) so 'qm report SIM.json LIVE.json' shows predicted
and measured side by side; live.notModelled lists what the live run does
not reproduce. Progress goes to stderr; exit 2 when an expectation fails.

--trace TRACE records what the callers sent and got (JSON lines, as qm load
--trace writes them) on the scenario's timeline: times since the run's
start and latencies are multiplied by the time scale, and each allocation
names the scenario's cluster that served it. 'qm sim --replay TRACE FILE'
then replays the live run against the file's clusters.

flags:
`

// runScenario is `qm scenario run FILE [--live] ...`.
func runScenario(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && (args[0] == "-h" || args[0] == "--help") {
		usageOf(scenarioUsage, newScenarioFlags().fs)(stdout)
		return nil
	}
	if len(args) == 0 {
		return usageFail(stderr, "scenario", nil, "want a subcommand: run")
	}
	if args[0] != "run" {
		return usageFail(stderr, "scenario", nil, "unknown subcommand %q (want run)", args[0])
	}
	return scenarioRun(ctx, args[1:], stdout, stderr)
}

type scenarioFlags struct {
	fs      *flag.FlagSet
	live    *bool
	scale   *float64
	out     *string
	quiet   *bool
	dir     *string
	backend *string
	trace   *string
}

func newScenarioFlags() *scenarioFlags {
	f := &scenarioFlags{fs: flag.NewFlagSet("qm scenario run", flag.ContinueOnError)}
	f.fs.SetOutput(io.Discard)
	f.live = f.fs.Bool("live", false, "run on live allocators on this machine instead of the simulator")
	f.scale = f.fs.Float64("time-scale", 1, "with --live: scenario seconds per wall second (rates are multiplied by it); 1 to 3600")
	f.out = f.fs.String("out", "", "write the results JSON to this file (\"-\": to stdout, with the table on stderr)")
	f.quiet = f.fs.Bool("quiet", false, "no progress and no table; only failures and errors")
	f.backend = f.fs.String("backend", live.BackendMemory, "with --live: memory (one memory-backend qm serve per cluster) or kubernetes (the multi-cluster rig: API servers, fleet agents, the file's allocator replicas; needs bin/etcd and bin/kube-apiserver, about 60 requests/s at most, no outages)")
	f.trace = f.fs.String("trace", "", "with --live: record the callers' allocations and releases in this trace file, on the scenario's timeline (for qm sim --replay)")
	f.dir = f.fs.String("dir", "", "with --live: keep the rig's certificates, fleets, policies and allocator logs in this new directory (default: a temporary one, removed)")
	return f
}

func scenarioRun(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	f := newScenarioFlags()
	// Flags may come before or after the file, as with qm sim.
	usage, files, ok, err := parseFlagsAndFiles("scenario run", scenarioUsage, f.fs, args, stdout, stderr)
	if !ok {
		return err
	}
	if len(files) != 1 {
		return usageFail(stderr, "scenario run", usage, "want one scenario file, got %d (%s)", len(files), strings.Join(files, " "))
	}
	set := map[string]bool{}
	f.fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	if !*f.live {
		for _, n := range []string{"time-scale", "dir", "backend", "trace"} {
			if set[n] {
				return usageFail(stderr, "scenario run", usage, "--%s applies to --live runs only", n)
			}
		}
		simArgs := []string{files[0]}
		if *f.out != "" {
			simArgs = append(simArgs, "--out", *f.out)
		}
		if *f.quiet {
			simArgs = append(simArgs, "--quiet")
		}
		return runSim(ctx, simArgs, stdout, stderr)
	}
	if *f.scale < 1 || *f.scale > live.MaxScale {
		return usageFail(stderr, "scenario run", usage, "--time-scale %v: must be 1 to %d", *f.scale, live.MaxScale)
	}
	if *f.backend != live.BackendMemory && *f.backend != live.BackendKubernetes {
		return usageFail(stderr, "scenario run", usage, "--backend %q: want %s or %s", *f.backend, live.BackendMemory, live.BackendKubernetes)
	}
	sc, err := scenarios.Load(files[0])
	if err != nil {
		return err
	}
	if *f.dir != "" {
		if entries, err := os.ReadDir(*f.dir); err == nil && len(entries) > 0 {
			return fmt.Errorf("--dir %s exists and is not empty", *f.dir)
		}
		if err := os.MkdirAll(*f.dir, 0o755); err != nil {
			return err
		}
	}
	opt := live.Options{Scale: *f.scale, Dir: *f.dir, Backend: *f.backend, Trace: *f.trace}
	if !*f.quiet {
		opt.Progress = stderr
	}
	rep, err := live.Run(ctx, sc, opt)
	if err != nil {
		return err
	}
	if *f.out != "" {
		b, err := json.MarshalIndent(rep, "", "  ")
		if err != nil {
			return err
		}
		b = append(b, '\n')
		if *f.out == "-" {
			if _, err := stdout.Write(b); err != nil {
				return err
			}
			stdout = stderr
		} else if err := os.WriteFile(*f.out, b, 0o644); err != nil {
			return err
		}
	}
	sr := rep.SimReport()
	if !*f.quiet {
		fmt.Fprintf(stdout, "live run on the %s backend at time scale %v (%.0f s wall), callers through %s; not modelled live:\n", rep.Live.Backend, rep.Live.TimeScale, rep.Live.WallSeconds, rep.Live.Entry)
		for _, n := range rep.Live.NotModelled {
			fmt.Fprintf(stdout, "  - %s\n", n)
		}
		fmt.Fprintln(stdout)
		printSummary(stdout, sr)
		if t := rep.Live.Trace; t != nil {
			fmt.Fprintf(stdout, "\ntrace: %d records in %s on the scenario's timeline from %s; replay it with qm sim --replay %s %s\n",
				t.Written, t.Path, t.Start.Format(time.RFC3339), t.Path, files[0])
		}
	} else {
		for _, c := range sr.Expectations {
			if !c.Pass {
				fmt.Fprintf(stdout, "FAIL %s = %v (want %s)\n", c.Metric, c.Value, bounds(c))
			}
		}
	}
	if rep.Live.Interrupted {
		fmt.Fprintln(stderr, "interrupted: the results cover the part that ran")
	}
	if !rep.Passed {
		return exitError{code: 2}
	}
	return nil
}
