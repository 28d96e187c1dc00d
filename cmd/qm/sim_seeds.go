package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/quartermaster-dev/quartermaster/plan"
	"github.com/quartermaster-dev/quartermaster/scenarios"
)

// runSimSeeds is qm sim --seeds N: the scenario under N seeds, workers
// runs at a time, each figure's spread across them on stdout and the whole
// (every seed's report and the spreads) in --out.
func runSimSeeds(ctx context.Context, file string, sc *scenarios.Scenario, n, workers int, out string, quiet bool, stdout, stderr io.Writer) error {
	data, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	workers = min(workers, n)
	tuneGC(workers)
	seeds := plan.Seeds(sc, n)
	start := time.Now()
	if !quiet {
		fmt.Fprintf(stderr, "qm sim: %s under %d seeds (%d..%d), %d at a time\n", sc.Metadata.Name, n, seeds[0], seeds[n-1], workers)
	}
	res, err := plan.RunSeeds(data, seeds, plan.Options{Workers: workers, Stop: func() bool { return ctx.Err() != nil }})
	if err != nil {
		return err
	}
	if !quiet {
		fmt.Fprintf(stderr, "qm sim: %d runs in %s\n", n, time.Since(start).Round(time.Millisecond))
	}
	return writeSpread(res, out, quiet, stdout, stderr)
}

const simMergeUsage = `usage: qm sim merge [--out spread.json] [--quiet] RUN.json...

Merges the reports of one scenario under different seeds (qm sim --seeds N
--index I --out RUN.json, one per index) into each figure's spread, as
qm sim --seeds N reports it; the order of the files does not matter (the
runs are put in seed order). Exit status 2 when a run missed an
expectation.

flags:
`

// runSimMerge is qm sim merge: the runs' reports, in seed order, through
// the same merge as qm sim --seeds.
func runSimMerge(args []string, stdout, stderr io.Writer) error {
	m, ok, err := parseMerge(mergeCommand[scenarios.Report]{
		name: "sim merge", usage: simMergeUsage,
		outHelp:   "write the merged spread as JSON to this file (\"-\": to stdout)",
		quietHelp: "no table; only failures",
		what:      "a qm sim report", none: "no run reports given",
		check: func(rep *scenarios.Report) error {
			if rep.Kind != "SimulationReport" || rep.Results == nil {
				return fmt.Errorf("not a qm sim report (kind %q); qm sim --out writes one", rep.Kind)
			}
			return nil
		},
	}, args, stdout, stderr)
	if !ok {
		return err
	}
	reps := m.docs
	sort.SliceStable(reps, func(i, j int) bool { return reps[i].Results.Seed < reps[j].Results.Seed })
	res, err := plan.MergeSeeds(reps)
	if err != nil {
		return err
	}
	return writeSpread(res, m.out, m.quiet, stdout, stderr)
}

// mergeCommand describes a merge command (qm sim merge, qm plan merge):
// its name and usage, its flags' help, what its files hold (a T, named
// what, which check accepts), and the mistake of giving none.
type mergeCommand[T any] struct {
	name, usage        string
	outHelp, quietHelp string
	what, none         string
	check              func(*T) error
}

// merged is a merge command's --out, --quiet, and the first JSON document
// of each file given, in the order given.
type merged[T any] struct {
	out   string
	quiet bool
	docs  []*T
}

// parseMerge parses a merge command's flags and files and reads each
// file's first JSON document; ok false means the command is over, with err
// (nil after -h). A file that is not a T names itself in the error.
func parseMerge[T any](c mergeCommand[T], args []string, stdout, stderr io.Writer) (m merged[T], ok bool, err error) {
	fs := flag.NewFlagSet("qm "+c.name, flag.ContinueOnError)
	out := fs.String("out", "", c.outHelp)
	quiet := fs.Bool("quiet", false, c.quietHelp)
	usage, files, ok, err := parseFlagsAndFiles(c.name, c.usage, fs, args, stdout, stderr)
	if !ok {
		return m, false, err
	}
	if len(files) == 0 {
		return m, false, usageFail(stderr, c.name, usage, "%s", c.none)
	}
	for _, f := range files {
		doc, err := firstJSONDocument[T](f, c.what)
		if err != nil {
			return m, false, err
		}
		if err := c.check(doc); err != nil {
			return m, false, fmt.Errorf("%s: %w", f, err)
		}
		m.docs = append(m.docs, doc)
	}
	m.out, m.quiet = *out, *quiet
	return m, true, nil
}

// writeSpread writes res to out (if any) and the table or the failures to
// stdout; exit status 2 when a run missed an expectation.
func writeSpread(res *plan.SeedRuns, out string, quiet bool, stdout, stderr io.Writer) error {
	if out != "" {
		b, err := json.MarshalIndent(res, "", "  ")
		if err != nil {
			return err
		}
		b = append(b, '\n')
		if out == "-" {
			if _, err := stdout.Write(b); err != nil {
				return err
			}
			stdout = stderr
		} else if err := os.WriteFile(out, b, 0o644); err != nil {
			return fmt.Errorf("--out: %w", err)
		}
	}
	failed := expectationTally(res)
	if !quiet {
		printSpread(stdout, res, failed)
	} else {
		for _, line := range failed {
			fmt.Fprintln(stdout, line)
		}
	}
	if res.Passed < len(res.Runs) {
		return exitError{code: 2}
	}
	return nil
}

// spreadFigures are the figures the table shows, beside each cluster's
// share and p99; --out has every number of the results.
var spreadFigures = []string{
	"totals.requests", "totals.allocated", "totals.successRate", "totals.unAllocated", "totals.retries",
	"totals.latency.p50Ms", "totals.latency.p99Ms", "totals.packingEfficiency", "totals.nodeHours", "totals.cost",
}

// expectationTally returns a FAIL line per expectation some seed missed.
func expectationTally(res *plan.SeedRuns) []string {
	var lines []string
	for i, c := range res.Runs[0].Expectations {
		var missed []string
		for j, rep := range res.Runs {
			if !rep.Expectations[i].Pass {
				missed = append(missed, fmt.Sprintf("seed %d: %v", res.Seeds[j], rep.Expectations[i].Value))
			}
		}
		if len(missed) > 0 {
			lines = append(lines, fmt.Sprintf("FAIL %s (want %s) in %d of %d seeds: %s", c.Metric, bounds(c),
				len(missed), len(res.Runs), strings.Join(missed, ", ")))
		}
	}
	return lines
}

func printSpread(w io.Writer, res *plan.SeedRuns, failed []string) {
	fmt.Fprintf(w, "scenario %s under %d seeds (%d..%d)\n\n", res.Scenario, len(res.Seeds), res.Seeds[0], res.Seeds[len(res.Seeds)-1])
	figures := append([]string{}, spreadFigures...)
	var clusters []string
	for name := range res.Runs[0].Results.Clusters {
		clusters = append(clusters, name)
	}
	sort.Strings(clusters)
	for _, c := range clusters {
		figures = append(figures, "clusters."+c+".share", "clusters."+c+".latency.p99Ms")
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "figure\tmean\tsd\tmin\tmax\t")
	for _, name := range figures {
		f, ok := res.Figure(name)
		if !ok {
			continue
		}
		fmt.Fprintf(tw, "%s\t%.6g\t%.3g\t%.6g\t%.6g\t\n", name, f.Mean, f.SD, f.Min, f.Max)
	}
	tw.Flush()
	fmt.Fprintf(w, "\nexpectations met in %d of %d seeds\n", res.Passed, len(res.Runs))
	for _, line := range failed {
		fmt.Fprintln(w, "  "+line)
	}
	if res.Passed == len(res.Runs) {
		fmt.Fprintln(w, "PASS")
	} else {
		fmt.Fprintln(w, "FAIL")
	}
}

// firstJSONDocument reads the first JSON document of file as a T, refusing
// fields T does not have: an index's result, written by --out or read off
// its pod's log (which may go on after it). what names T in the error.
func firstJSONDocument[T any](file, what string) (*T, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	var v T
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("%s: not %s: %w", file, what, err)
	}
	return &v, nil
}
