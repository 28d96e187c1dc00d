package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"time"

	"github.com/quartermaster-dev/quartermaster/reports"
)

func init() {
	register(command{
		name:    "report",
		summary: "turn sim, load and benchmark results into a page and a summary; gate on a baseline",
		run:     runReport,
	})
}

const reportUsage = `usage: qm report [--baseline DIR] [--thresholds FILE] [--history FILE [--record COMMIT]] [--out DIR] [--quiet] RESULT...

Reads results (go test -bench output, qm sim --out and qm load --out JSON),
compares them with the baseline in DIR (its result files and
thresholds.yaml), and writes OUT/index.html (plots and tables, one
self-contained file), OUT/` + reports.MarkdownFile + ` (printed too) and OUT/comparison.json.
Exits 1 when a gated figure regressed, changed when it must not, is
missing from the results, or an expectation failed, naming it.
--history draws each gated figure across the recorded baselines;
--record COMMIT appends this run's gated figures to that file as the
baseline measured at COMMIT (make perf-baseline).

`

// runReport is `qm report`. Flags may come before or after the files.
func runReport(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("qm report", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	baseline := fs.String("baseline", "", "baseline directory: result files and thresholds.yaml (none: report only, no gate)")
	out := fs.String("out", "report", "directory to write index.html, "+reports.MarkdownFile+" and comparison.json into")
	quiet := fs.Bool("quiet", false, "do not print the summary; only regressions and errors")
	title := fs.String("title", "", "the page's title")
	thresholdsFile := fs.String("thresholds", "", "the gate's rules (default: thresholds.yaml in the baseline directory)")
	historyFile := fs.String("history", "", "recorded baselines ("+reports.HistoryFile+"): a trend per gated figure")
	record := fs.String("record", "", "append this run's gated figures to --history as the baseline at this commit")
	usage, files, ok, err := parseFlagsAndFiles("report", reportUsage, fs, args, stdout, stderr)
	if !ok {
		return err
	}
	if len(files) == 0 {
		return usageFail(stderr, "report", usage, "no result files given")
	}
	r, err := reports.Build(files, *baseline)
	if err != nil {
		return err
	}
	if *title != "" {
		r.Title = *title
	}
	if *thresholdsFile != "" {
		th, ok, err := reports.LoadThresholds(*thresholdsFile)
		if err != nil {
			return err
		}
		if !ok {
			return fmt.Errorf("--thresholds %s: no such file", *thresholdsFile)
		}
		if th.Declared, err = reports.LoadChanges(filepath.Join(filepath.Dir(*thresholdsFile), reports.ChangesFile)); err != nil {
			return err
		}
		r.UseThresholds(th)
	}
	if *record != "" && *historyFile == "" {
		return usageFail(stderr, "report", usage, "--record needs --history")
	}
	if *historyFile != "" {
		if r.History, err = reports.LoadHistory(*historyFile); err != nil {
			return err
		}
		if *record != "" {
			if err := r.History.Record(*record, time.Now().UTC().Format(time.RFC3339), r.Comparison); err != nil {
				return err
			}
			if err := r.History.Write(*historyFile); err != nil {
				return err
			}
		}
	}
	if err := r.WriteFiles(*out); err != nil {
		return err
	}
	c := r.Comparison
	if !*quiet {
		if err := c.WriteMarkdown(stdout); err != nil {
			return err
		}
		fmt.Fprintf(stderr, "wrote %s, %s and %s\n", filepath.Join(*out, reports.HTMLFile),
			filepath.Join(*out, reports.MarkdownFile), filepath.Join(*out, reports.JSONFile))
	}
	if c.Passed {
		return nil
	}
	var what []string
	for _, r := range c.Regressions {
		what = append(what, "regression: "+r)
	}
	for _, m := range c.Missing {
		what = append(what, "missing: "+m)
	}
	for _, f := range c.Failures {
		what = append(what, "expectation failed: "+f)
	}
	return errors.New(strings.Join(what, "\n"))
}
