package loadgen

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
)

// WriteSummary prints a result for a person: one row per target, the
// ratios, errors by code, the generator's own lateness, and the
// expectations.
func WriteSummary(w io.Writer, r *Result) error {
	ew := &errWriter{w: w}
	c := r.Config
	how := c.Mode + " loop"
	if c.Mode == "open" {
		how += ", " + c.Arrival
	} else if c.Workers > 0 {
		how += fmt.Sprintf(", %d workers", c.Workers)
	}
	if r.Generators > 1 {
		how += fmt.Sprintf(", %d generators merged", r.Generators)
	}
	if len(r.Targets) > 1 {
		how += fmt.Sprintf(", %d targets taking %gs turns", len(r.Targets), c.WindowSeconds)
	}
	fmt.Fprintf(ew, "%s, %.1fs", how, r.DurationSeconds)
	if r.Interrupted {
		fmt.Fprint(ew, " (INTERRUPTED: partial result)")
	}
	fmt.Fprintln(ew)
	fmt.Fprintln(ew)

	tw := tabwriter.NewWriter(ew, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "target\tcall\tsent\tok\terrors\tnot sent\tintended/s\tsent/s\tok/s\tp50\tp90\tp99\tp99.9\tmax\t")
	for _, t := range r.Targets {
		var errs int64
		for _, n := range t.Errors {
			errs += n
		}
		l := t.Latency
		fmt.Fprintf(tw, "%s\t%s/%s\t%d\t%d\t%d\t%d\t%.0f\t%.0f\t%.0f\t%s\t%s\t%s\t%s\t%s\t\n",
			t.Name, t.Call, t.Protocol, t.Sent, t.OK, errs, t.NotSent, t.IntendedRate, t.AchievedRate, t.Throughput,
			fmtMs(l.P50Ms), fmtMs(l.P90Ms), fmtMs(l.P99Ms), fmtMs(l.P999Ms), fmtMs(l.MaxMs))
	}
	tw.Flush()

	for _, t := range r.Targets {
		if len(t.Errors) > 0 {
			var parts []string
			for _, code := range ErrorCodes(t.Errors) {
				parts = append(parts, fmt.Sprintf("%s %d", code, t.Errors[code]))
			}
			fmt.Fprintf(ew, "errors %s: %s\n", t.Name, strings.Join(parts, ", "))
		}
		if t.ServerCPUSeconds > 0 {
			fmt.Fprintf(ew, "server CPU %s: %.0fµs per request (%.2fs in its turns)\n", t.Name, t.ServerCPUPerRequestMicros, t.ServerCPUSeconds)
		}
		if t.Released > 0 || t.ReleaseErrors > 0 {
			fmt.Fprintf(ew, "released %s: %d (%d failed)\n", t.Name, t.Released, t.ReleaseErrors)
		}
		if t.Retries > 0 || t.Resolved > 0 || t.ResolvedEmpty > 0 || t.ResolveFailed > 0 {
			fmt.Fprintf(ew, "allocation keys %s: %d tries sent again; given up without an answer: %d held a server (given back), %d held none, %d unresolved\n",
				t.Name, t.Retries, t.Resolved, t.ResolvedEmpty, t.ResolveFailed)
		}
	}
	if len(r.Ratios) > 0 {
		fmt.Fprintln(ew)
		for _, ra := range r.Ratios {
			fmt.Fprintf(ew, "%s / %s: throughput %.2f", ra.Target, ra.Reference, ra.Throughput)
			if len(ra.ThroughputRounds) > 0 {
				fmt.Fprintf(ew, " (median of %d rounds %.2f)", len(ra.ThroughputRounds), ra.ThroughputMedian)
			}
			fmt.Fprintf(ew, ", p50 %.2fx, p99 %.2fx", ra.P50, ra.P99)
			if ra.ServerCPUPerRequest > 0 {
				fmt.Fprintf(ew, ", server CPU per request %.2fx", ra.ServerCPUPerRequest)
			}
			fmt.Fprintln(ew)
		}
	}
	if c.Mode == "open" {
		// In closed loop a request goes when its caller is free: there is
		// no schedule to be late for.
		fmt.Fprintln(ew)
		var late, fromSend []string
		for _, t := range r.Targets {
			late = append(late, fmt.Sprintf("%s p50 %s p99 %s", t.Name, fmtMs(t.SendLateness.P50Ms), fmtMs(t.SendLateness.P99Ms)))
			if t.FromSend.Count > 0 {
				fromSend = append(fromSend, fmt.Sprintf("%s p50 %s p99 %s", t.Name, fmtMs(t.FromSend.P50Ms), fmtMs(t.FromSend.P99Ms)))
			}
		}
		fmt.Fprintf(ew, "send lateness (the generator's own timing): %s\n", strings.Join(late, "; "))
		if len(fromSend) > 0 {
			// Comparable with a closed-loop tool's figures, which start
			// the clock at the send; the table's latency is the honest one.
			fmt.Fprintf(ew, "latency from the actual send (as ghz counts): %s\n", strings.Join(fromSend, "; "))
		}
	}
	if len(r.Expectations) > 0 {
		fmt.Fprintln(ew)
		for _, e := range r.Expectations {
			mark := "ok  "
			if !e.Pass {
				mark = "FAIL"
			}
			unit := ""
			if i := strings.IndexAny(e.Expr, "<>="); i > 0 {
				if _, ok := latencyMetrics[strings.TrimSpace(e.Expr[:i])]; ok {
					unit = "ms"
				}
			}
			fmt.Fprintf(ew, "%s %-30s %s: %.4g%s\n", mark, e.Expr, e.Target, e.Value, unit)
		}
	}
	return ew.err
}

func fmtMs(ms float64) string {
	switch {
	case ms == 0:
		return "-"
	case ms < 1:
		return fmt.Sprintf("%.0fµs", ms*1000)
	case ms < 100:
		return fmt.Sprintf("%.2fms", ms)
	case ms < 10000:
		return fmt.Sprintf("%.0fms", ms)
	}
	return fmt.Sprintf("%.1fs", ms/1000)
}

// errWriter keeps the first write error, so the summary is checked once.
type errWriter struct {
	w   io.Writer
	err error
}

func (e *errWriter) Write(p []byte) (int, error) {
	if e.err != nil {
		return 0, e.err
	}
	n, err := e.w.Write(p)
	e.err = err
	return n, err
}
