package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/quartermaster-dev/quartermaster/scenarios"
	"github.com/quartermaster-dev/quartermaster/sim"
	"github.com/quartermaster-dev/quartermaster/trace"
)

// runSimReplay is `qm sim --replay TRACE FILE`: the scenario's clusters
// against the trace's traffic, with the shares the trace recorded beside
// the replayed ones.
func runSimReplay(ctx context.Context, sc *scenarios.Scenario, tracePath string, names []string, out string, quiet bool, stdout, stderr io.Writer) error {
	rename := map[string]string{}
	known := map[string]bool{}
	for _, c := range sc.Spec.Clusters {
		known[c.Name] = true
	}
	for _, n := range names {
		from, to, ok := strings.Cut(n, "=")
		if !ok || from == "" || to == "" {
			return fmt.Errorf("--cluster-name %q: want SOURCE=CLUSTER, like local=on-prem", n)
		}
		if !known[to] {
			return fmt.Errorf("--cluster-name %q: the scenario has no cluster %q (it has %s)", n, to, strings.Join(sortedKeys(known), ", "))
		}
		rename[from] = to
	}
	recs, err := trace.ReadFiles(tracePath)
	if err != nil {
		return fmt.Errorf("--replay: %w", err)
	}
	tuneGC(1)
	start := time.Now()
	opt := scenarios.Options{Stop: func() bool { return ctx.Err() != nil }}
	if !quiet {
		last := start
		opt.Progress = func(now, total time.Duration, events uint64) {
			if t := time.Now(); t.Sub(last) >= time.Second {
				last = t
				fmt.Fprintf(stderr, "\rreplay: %5.1f%% of %s virtual, %d events", 100*now.Seconds()/total.Seconds(), total, events)
			}
		}
	}
	rep, replayed, err := sc.Replay(recs, opt)
	if err != nil {
		return fmt.Errorf("--replay %s: %w", tracePath, err)
	}
	if !quiet {
		if time.Since(start) >= time.Second {
			fmt.Fprintln(stderr)
		}
		var skipped []string
		for _, k := range sortedKeys(replayed.Skipped) {
			skipped = append(skipped, fmt.Sprintf("%d %s", replayed.Skipped[k], k))
		}
		fmt.Fprintf(stderr, "replay: %d requests over %s from %s; %d session lengths from the trace's releases, the rest drawn",
			replayed.Requests, replayed.Span.Round(time.Millisecond), replayed.Start.UTC().Format(time.RFC3339), replayed.Sessions)
		if len(skipped) > 0 {
			fmt.Fprintf(stderr, "; left out (not about capacity): %s", strings.Join(skipped, ", "))
		}
		fmt.Fprintln(stderr)
	}
	if out != "" {
		b, err := json.MarshalIndent(rep, "", "  ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(out, append(b, '\n'), 0o644); err != nil {
			return fmt.Errorf("--out: %w", err)
		}
	}
	if !quiet {
		printSummary(stdout, rep)
		printShares(stdout, recordedShares(replayed, rename), rep.Results)
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

// recordedShares is each cluster's part of the trace's allocations, under
// the scenario's names where --cluster-name gives them.
func recordedShares(r *sim.Replayed, rename map[string]string) map[string]float64 {
	counts := map[string]int{}
	total := 0
	for c, n := range r.Recorded {
		if to, ok := rename[c]; ok {
			c = to
		}
		if c == "" {
			c = "(unnamed)" // an answer without a source (not every allocator sets one)
		}
		counts[c] += n
		total += n
	}
	out := map[string]float64{}
	for c, n := range counts {
		out[c] = float64(n) / float64(max(total, 1))
	}
	return out
}

// printShares sets the trace's shares beside the replay's, cluster by
// cluster.
func printShares(w io.Writer, recorded map[string]float64, res *sim.Results) {
	all := map[string]bool{}
	for c := range recorded {
		all[c] = true
	}
	for c := range res.Clusters {
		all[c] = true
	}
	fmt.Fprintln(w, "\ncluster shares, recorded in the trace and replayed:")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "cluster\trecorded\treplayed\tdifference\t")
	for _, c := range sortedKeys(all) {
		rec, ok := recorded[c]
		cr, inScenario := res.Clusters[c]
		switch {
		case !inScenario:
			fmt.Fprintf(tw, "%s\t%.1f%%\t-\t(not a cluster of the scenario: map it with --cluster-name)\t\n", c, 100*rec)
		case !ok:
			fmt.Fprintf(tw, "%s\t0.0%%\t%.1f%%\t%+.1f points\t\n", c, 100*cr.Share, 100*cr.Share)
		default:
			fmt.Fprintf(tw, "%s\t%.1f%%\t%.1f%%\t%+.1f points\t\n", c, 100*rec, 100*cr.Share, 100*(cr.Share-rec))
		}
	}
	tw.Flush()
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
