package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/quartermaster-dev/quartermaster/plan"
)

func init() {
	register(command{
		name:    "plan",
		summary: "find the smallest value of a scenario field that meets a target, by bisection over simulator runs",
		run:     runPlan,
	})
}

const planUsage = `usage: qm plan FILE --target 'successRate>=0.999,p99<200ms' --vary PATH=FROM..TO [--out plan.json] [--workers W] [--points K]

Varies one field of a scenario file over FROM..TO and bisects for the
smallest value whose simulator run meets every clause of --target. Each run
is deterministic (the scenario's seed), so the answer is the same on every
machine. The target should get easier as the value grows (servers, buffer,
nodes): the plan runs FROM and TO first (no answer if TO misses), then
--points values evenly spaced between the bounds left, round after round,
until two neighbours separate a miss from a pass (--points 1: bisection).
The runs of a round go on at once, --workers at a time (default: one per
CPU); the points depend on --points alone, so the curve and the answer are
the same whatever --workers is. Prints the curve it explored on stdout (progress on stderr) and
writes it with --out for qm report. Exit status 2 when even TO misses.

PATH is the field as the file spells it, list entries by name:
  fleets.game.buffer.size          (fleets.NAME: the one cluster with that fleet)
  clusters.on-prem.fleets.game.replicas
  clusters.on-prem.nodes.count
  workload.matchmaker.rate.constant
Target clauses: NAME OP VALUE with OP >=, <=, > or <; NAME a total
(successRate, unAllocatedRate, cost, nodeHours, retriesPerAllocation), a
latency (p50, p90, p99, p999, max, mean: with a unit, like 200ms) or any
number of the results by path (clusters.on-prem.share).

flags:
`

func runPlan(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("qm plan", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	targetFlag := fs.String("target", "", "clauses every run must meet, like 'successRate>=0.999,p99<200ms'")
	varyFlag := fs.String("vary", "", "PATH=FROM..TO: the field to vary and its range, like fleets.game.buffer.size=0..500")
	out := fs.String("out", "", "write the plan (question, answer, every point) as JSON to this file, for qm report")
	quiet := fs.Bool("quiet", false, "no progress on stderr")
	workers := fs.Int("workers", runtime.NumCPU(), "simulator runs at once")
	points := fs.Int("points", 2, "values tested per round between the bounds (1: bisection)")
	usage, files, ok, err := parseFlagsAndFiles("plan", planUsage, fs, args, stdout, stderr)
	if !ok {
		return err
	}
	switch {
	case len(files) == 0:
		return usageFail(stderr, "plan", usage, "no scenario file given")
	case len(files) > 1:
		return usageFail(stderr, "plan", usage, "one scenario file per plan, got %d (%s)", len(files), strings.Join(files, " "))
	case *targetFlag == "":
		return usageFail(stderr, "plan", usage, "--target is required, like --target 'successRate>=0.999,p99<200ms'")
	case *varyFlag == "":
		return usageFail(stderr, "plan", usage, "--vary is required, like --vary fleets.game.buffer.size=0..500")
	}
	if *workers < 1 {
		return usageFail(stderr, "plan", usage, "--workers %d: want 1 or more", *workers)
	}
	if *points < 1 {
		return usageFail(stderr, "plan", usage, "--points %d: want 1 or more", *points)
	}
	tg, err := plan.ParseTarget(*targetFlag)
	if err != nil {
		return usageFail(stderr, "plan", usage, "--target: %v", err)
	}
	v, err := plan.ParseVary(*varyFlag)
	if err != nil {
		return usageFail(stderr, "plan", usage, "--vary: %v", err)
	}
	data, err := os.ReadFile(files[0])
	if err != nil {
		return err
	}
	p, err := plan.New(data, v, tg)
	if err != nil {
		return fmt.Errorf("%s: %w", files[0], err)
	}
	p.Points = *points
	// A round runs at most max(points, 2) at once.
	tuneGC(min(*workers, max(*points, 2)))
	opt := plan.Options{Stop: func() bool { return ctx.Err() != nil }, Workers: *workers}
	if !*quiet {
		// Runs of a round end in any order: one line per run as it ends.
		opt.Progress = func(value int, pt *plan.Point) {
			if pt == nil {
				return
			}
			verdict := "meets the target"
			if !pt.Pass {
				verdict = "misses " + strings.Join(pt.Failed, ", ")
			}
			fmt.Fprintf(stderr, "qm plan: %s=%d %s (%s in %.1fs)\n", v.Path, value, verdict, metricList(tg, pt), pt.WallSeconds)
		}
	}
	start := time.Now()
	res, err := p.Run(opt)
	if err != nil {
		return err
	}
	printPlan(stdout, res, tg)
	if !*quiet {
		fmt.Fprintf(stderr, "qm plan: %d runs in %s\n", len(res.Points), time.Since(start).Round(time.Millisecond))
	}
	if *out != "" {
		b, err := json.MarshalIndent(res, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(*out, append(b, '\n'), 0o644); err != nil {
			return fmt.Errorf("--out: %w", err)
		}
	}
	if !res.Found {
		return exitError{code: 2}
	}
	return nil
}

func metricList(tg plan.Target, pt *plan.Point) string {
	var parts []string
	for _, b := range tg {
		parts = append(parts, fmt.Sprintf("%s %s", b.Name, formatMetric(b.Name, pt.Metrics[b.Name])))
	}
	return strings.Join(parts, ", ")
}

func formatMetric(name string, x float64) string {
	switch {
	case strings.HasSuffix(name, "Rate"):
		return fmt.Sprintf("%.4f%%", 100*x)
	case name == "p99Ms" || name == "p50" || name == "p90" || name == "p99" || name == "p999" || name == "max" || name == "mean":
		return fmt.Sprintf("%.1fms", x)
	}
	return fmt.Sprintf("%.4g", x)
}

// printPlan writes the curve explored, one row per run in value order,
// and the answer.
func printPlan(w io.Writer, res *plan.Result, tg plan.Target) {
	fmt.Fprintf(w, "plan for scenario %s (seed %d): smallest %s in %d..%d meeting %s\n\n",
		res.Scenario, res.Seed, res.Vary, res.From, res.To, strings.Join(res.Target, ", "))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	// The target's metrics, then the ones that describe any run (those
	// the target names already are not repeated).
	cols := []string{}
	seen := map[string]bool{}
	for _, b := range tg {
		if !seen[b.Name] {
			cols, seen[b.Name] = append(cols, b.Name), true
		}
	}
	for _, c := range []string{"successRate", "p99Ms", "cost"} {
		if !seen[c] && !(c == "p99Ms" && seen["p99"]) {
			cols = append(cols, c)
		}
	}
	fmt.Fprintln(tw, "value\t"+strings.Join(cols, "\t")+"\tverdict\t")
	for _, pt := range res.Points {
		row := fmt.Sprintf("%d\t", pt.Value)
		for _, c := range cols {
			row += formatMetric(c, pt.Metrics[c]) + "\t"
		}
		verdict := "meets"
		if !pt.Pass {
			verdict = "misses " + strings.Join(pt.Failed, ", ")
		}
		fmt.Fprintf(tw, "%s%s\t\n", row, verdict)
	}
	tw.Flush()
	if res.Found {
		fmt.Fprintf(w, "\nanswer: %s = %d\n", res.Vary, res.Answer)
	} else {
		fmt.Fprintf(w, "\nno answer: the target is missed even at %s = %d\n", res.Vary, res.To)
	}
}
