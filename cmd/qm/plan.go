package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"strconv"
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
       qm plan FILE --target ... --vary ... [--points K] --job-manifest [--image IMAGE] [--job-name NAME] [--out job.yaml]
       qm plan FILE --target ... --vary ... [--points K] --index I [--out point.json]
       qm plan merge [--out plan.json] [--quiet] POINT.json...

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

Where one machine is not enough, --job-manifest writes a Kubernetes
Indexed Job (and a ConfigMap with the scenario) whose indexes each run one
value: FROM, TO and the K values the search runs between them next (K+2
runs; --points TO-FROM-1 runs every value). --index I runs the I-th of those
alone and writes its point (--out -: on stdout, as the pods do); qm plan
merge folds the points, in any order, through the same search: the plan
qm plan --points K writes when they settle the answer, else the range the
next plan is to search (exit status 3).

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
	if len(args) > 0 && args[0] == "merge" {
		return runPlanMerge(args[1:], stdout, stderr)
	}
	fs := flag.NewFlagSet("qm plan", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	targetFlag := fs.String("target", "", "clauses every run must meet, like 'successRate>=0.999,p99<200ms'")
	varyFlag := fs.String("vary", "", "PATH=FROM..TO: the field to vary and its range, like fleets.game.buffer.size=0..500")
	out := fs.String("out", "", "write the plan (question, answer, every point) as JSON to this file, for qm report")
	quiet := fs.Bool("quiet", false, "no progress on stderr")
	workers := fs.Int("workers", runtime.NumCPU(), "simulator runs at once")
	points := fs.Int("points", 2, "values tested per round between the bounds (1: bisection)")
	index := fs.Int("index", -1, "run only the I-th value of the plan's Indexed Job (0..K+1) and write its point, for qm plan merge")
	jobManifest := fs.Bool("job-manifest", false, "write a Kubernetes Indexed Job (and a ConfigMap with the scenario) that runs the plan's values, one per index, instead of running them")
	image := fs.String("image", jobImage, "with --job-manifest: the qm image the pods run")
	jobName := fs.String("job-name", "qm-plan", "with --job-manifest: the Job's name (the ConfigMap's is NAME-scenario)")
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
	if *jobManifest && *index >= 0 {
		return usageFail(stderr, "plan", usage, "--job-manifest writes the Job that runs every --index; it takes no --index")
	}
	if *jobManifest {
		if err := checkJobName(*jobName); err != nil {
			return usageFail(stderr, "plan", usage, "%v", err)
		}
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
	if *jobManifest {
		values := p.JobValues()
		j := &simJob{name: *jobName, image: *image, file: files[0], data: data, runs: len(values),
			merge: "qm plan merge --out plan.json",
			describe: fmt.Sprintf("qm plan %s --vary %s --points %d as a Kubernetes Indexed Job: one value of %s per index (%s).",
				files[0], *varyFlag, *points, v.Path, joinInts(values))}
		j.args = []string{"plan", j.podScenario(), "--target", *targetFlag, "--vary", *varyFlag,
			"--points", strconv.Itoa(*points), "--index", indexArg, "--quiet", "--out", "-"}
		return writeManifest(j, *out, stdout)
	}
	if *index >= 0 {
		return runPlanIndex(ctx, p, *index, *out, *quiet, stdout, stderr)
	}
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

func joinInts(vs []int) string {
	s := make([]string, len(vs))
	for i, v := range vs {
		s[i] = strconv.Itoa(v)
	}
	return strings.Join(s, ", ")
}

// runPlanIndex is qm plan --index I: one value of the plan's Indexed Job,
// its point as JSON in --out ("-": stdout, the line on stderr), a line on
// stdout otherwise. A value that misses the target is a result: exit 0.
func runPlanIndex(ctx context.Context, p *plan.Plan, index int, out string, quiet bool, stdout, stderr io.Writer) error {
	tuneGC(1)
	rep, err := p.RunIndex(index, plan.Options{Stop: func() bool { return ctx.Err() != nil }})
	if err != nil {
		return err
	}
	line := stdout
	if out != "" {
		b, err := json.MarshalIndent(rep, "", "  ")
		if err != nil {
			return err
		}
		b = append(b, '\n')
		if out == "-" {
			if _, err := stdout.Write(b); err != nil {
				return err
			}
			line = stderr
		} else if err := os.WriteFile(out, b, 0o644); err != nil {
			return fmt.Errorf("--out: %w", err)
		}
	}
	if !quiet || out == "" {
		verdict := "meets the target"
		if !rep.Point.Pass {
			verdict = "misses " + strings.Join(rep.Point.Failed, ", ")
		}
		fmt.Fprintf(line, "qm plan: index %d: %s=%d %s\n", index, rep.Vary, rep.Point.Value, verdict)
	}
	return nil
}

const planMergeUsage = `usage: qm plan merge [--out plan.json] [--quiet] POINT.json...

Folds the points of a plan's Indexed Job (qm plan --job-manifest; each
pod's log, or qm plan --index I --out POINT.json) through the plan's
search, whatever their order. When they settle the answer it prints and
writes the plan qm plan --points K gives (exit status 2 when even TO
misses); when they do not, it names the range the next plan is to search,
exit status 3.

flags:
`

// runPlanMerge is qm plan merge.
func runPlanMerge(args []string, stdout, stderr io.Writer) error {
	m, ok, err := parseMerge(mergeCommand[plan.PointReport]{
		name: "plan merge", usage: planMergeUsage,
		outHelp:   "write the plan as JSON to this file, for qm report",
		quietHelp: "no table",
		what:      "a plan's point", none: "no points given",
		check: func(rep *plan.PointReport) error {
			if rep.Kind != plan.PointKind {
				return fmt.Errorf("not a plan's point (kind %q); qm plan --index writes one", rep.Kind)
			}
			return nil
		},
	}, args, stdout, stderr)
	if !ok {
		return err
	}
	res, err := plan.Merge(m.docs)
	var u *plan.Unsettled
	if errors.As(err, &u) {
		fmt.Fprintf(stderr, "qm plan merge: %v\n", err)
		return exitError{code: 3}
	}
	if err != nil {
		return err
	}
	tg, err := plan.ParseTarget(strings.Join(res.Target, ","))
	if err != nil {
		return fmt.Errorf("the points' target: %w", err)
	}
	if !m.quiet {
		printPlan(stdout, res, tg)
	}
	if m.out != "" {
		b, err := json.MarshalIndent(res, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(m.out, append(b, '\n'), 0o644); err != nil {
			return fmt.Errorf("--out: %w", err)
		}
	}
	if !res.Found {
		return exitError{code: 2}
	}
	return nil
}
