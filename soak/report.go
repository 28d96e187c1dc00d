package soak

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"
)

// WriteTable writes the result as Markdown tables: the run's counts, the
// promises with their violations and examples, then the cost of each
// kind of fault. The timeline (second by second) is qm report's to draw.
// It has the reporters' shape, func(io.Writer) error.
func (r *Result) WriteTable(w io.Writer) error {
	var b strings.Builder
	fmt.Fprintf(&b, "Run: %s from %s, %d faults\n\n", r.End.Sub(r.Start).Round(time.Second), r.Start.UTC().Format(time.RFC3339), len(r.FaultSpans))
	fmt.Fprintf(&b, "Requests: %d, answered OK: %d (released %d, held at the end %d); violations: %d\n\n",
		r.Requests, r.OK, r.Released, r.Live, r.Violations())
	if r.Retries > 0 || r.Resolves > 0 {
		fmt.Fprintf(&b, "Allocation keys: %d tries sent again after a lost answer; %d requests given up and resolved by their keys, %d of which held a server (given back)\n\n",
			r.Retries, r.Resolves, r.ResolvedHeld)
	}
	if r.Strict {
		b.WriteString("Dangling servers counted strictly: none is explained.\n\n")
	}
	if len(r.Unread) > 0 {
		fmt.Fprintf(&b, "Not checked against objects (cluster could not be read): %s\n\n", strings.Join(r.Unread, ", "))
	}
	b.WriteString("| promise | violations | explained | meaning |\n|---|---:|---:|---|\n")
	for _, p := range r.Promises {
		fmt.Fprintf(&b, "| %s | %d | %d | %s |\n", p.Name, p.Violations, p.Explained, p.Description)
	}
	for _, p := range r.Promises {
		if len(p.Examples) == 0 {
			continue
		}
		fmt.Fprintf(&b, "\n%s, %d of %d:\n", p.Name, len(p.Examples), p.Violations)
		for _, e := range p.Examples {
			fmt.Fprintf(&b, "- %s\n", e)
		}
	}
	fmt.Fprintf(&b, "\nOutside faults: error rate %s, p99 %s\n", percent(r.ErrorRateOutside), r.P99Outside)
	if len(r.Faults) > 0 {
		b.WriteString("\n| fault | count | failed during | failed after | max recovery | unrecovered | p99 during |\n|---|---:|---:|---:|---:|---:|---:|\n")
		for _, f := range r.Faults {
			fmt.Fprintf(&b, "| %s | %d | %s of %d | %s of %d | %s | %d | %s |\n",
				f.Kind, f.Count,
				share(f.DuringFailed, f.During), f.During,
				share(f.AfterFailed, f.After), f.After,
				f.MaxRecovery.Round(time.Millisecond), f.Unrecovered, f.P99During)
		}
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// WriteJSON writes the result as one JSON document, for qm report.
func (r *Result) WriteJSON(w io.Writer) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(r)
}

func share(n, of int) string {
	if of == 0 {
		return "-"
	}
	return percent(float64(n) / float64(of))
}

func percent(f float64) string { return fmt.Sprintf("%.1f%%", 100*f) }
