package reports

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"strings"

	"golang.org/x/perf/benchunit"
)

// WriteJSON writes the comparison as indented JSON.
func (c *Comparison) WriteJSON(w io.Writer) error {
	b, err := json.MarshalIndent(c, "", "  ")
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// WriteMarkdown writes the summary for CI logs and pull requests: the
// verdict, what failed and why, every gated figure, and of the rest only
// what changed, so an unchanged run stays a few lines long.
func (c *Comparison) WriteMarkdown(w io.Writer) error {
	var b strings.Builder
	verdict := "PASS"
	if !c.Passed {
		verdict = "FAIL"
	}
	fmt.Fprintf(&b, "## Performance report: %s\n\n", verdict)
	if c.Baseline != "" {
		fmt.Fprintf(&b, "Compared with the baseline in `%s`: ", c.Baseline)
	} else {
		b.WriteString("No baseline: ")
	}
	fmt.Fprintf(&b, "medians with %.0f%% intervals, Mann-Whitney U at alpha %v, at least %d samples a side. A gated figure fails only when its change is significant and worse than its threshold.\n\n",
		100*c.Confidence, c.Alpha, c.MinSamples)
	if len(c.Regressions) > 0 {
		b.WriteString("**Regressions**\n\n")
		for _, r := range c.Regressions {
			fmt.Fprintf(&b, "- %s\n", r)
		}
		b.WriteString("\n")
	}
	if len(c.Missing) > 0 {
		b.WriteString("**Gated figures missing**\n\n")
		for _, m := range c.Missing {
			fmt.Fprintf(&b, "- %s\n", m)
		}
		b.WriteString("\n")
	}
	if len(c.Failures) > 0 {
		b.WriteString("**Failed expectations**\n\n")
		for _, f := range c.Failures {
			fmt.Fprintf(&b, "- %s\n", f)
		}
		b.WriteString("\n")
	}
	var gated, changed []Row
	unchanged := 0
	for _, r := range c.Rows {
		switch {
		case r.Gated:
			gated = append(gated, r)
		case r.Verdict == VerdictSame || r.Verdict == VerdictNoChange || r.Verdict == VerdictTooFew:
			unchanged++
		default:
			changed = append(changed, r)
		}
	}
	if len(gated) > 0 {
		b.WriteString("### Gated figures\n\n")
		rowTable(&b, gated, true)
	}
	if len(changed) > 0 {
		fmt.Fprintf(&b, "### Other figures that changed or are new\n\n")
		rowTable(&b, changed, false)
	}
	fmt.Fprintf(&b, "%d other figure(s) unchanged or with too few samples to tell.\n\n", unchanged)
	if len(c.Expectations) > 0 {
		pass := 0
		for _, e := range c.Expectations {
			if e.Pass {
				pass++
			}
		}
		fmt.Fprintf(&b, "### Expectations: %d of %d hold\n\n", pass, len(c.Expectations))
		b.WriteString("| source | metric | value | want | |\n|---|---|---:|---|---|\n")
		for _, e := range c.Expectations {
			mark := "ok"
			if !e.Pass {
				mark = "**FAIL**"
			}
			fmt.Fprintf(&b, "| %s | `%s` | %s | %s | %s |\n", e.Source, e.Metric, num(e.Value), e.Want, mark)
		}
		b.WriteString("\n")
	}
	if len(c.Pairs) > 0 {
		b.WriteString("### Predicted and measured\n\n| scenario | metric | want | simulated | live |\n|---|---|---|---:|---:|\n")
		for _, p := range c.Pairs {
			meas := "-"
			if p.HasMeasured {
				meas = passMark(num(p.Measured), p.MeasuredPass)
			}
			fmt.Fprintf(&b, "| %s | `%s` | %s | %s | %s |\n", p.Scenario, p.Metric, p.Bounds, passMark(num(p.Predicted), p.PredictedPass), meas)
		}
		b.WriteString("\n")
	}
	for _, wn := range c.Warnings {
		fmt.Fprintf(&b, "warning: %s\n", wn)
	}
	_, err := io.WriteString(w, b.String())
	return err
}

func passMark(s string, pass bool) string {
	if pass {
		return s
	}
	return s + " (fails)"
}

func rowTable(b *strings.Builder, rows []Row, gated bool) {
	if gated {
		b.WriteString("| figure | baseline | this run | change | p | threshold | verdict |\n|---|---:|---:|---:|---:|---:|---|\n")
	} else {
		b.WriteString("| figure | baseline | this run | change | p | verdict |\n|---|---:|---:|---:|---:|---|\n")
	}
	for _, r := range rows {
		p := "-"
		if r.P != nil {
			p = fmt.Sprintf("%.3f", *r.P)
		}
		change := "-"
		if r.Change != 0 {
			change = fmt.Sprintf("%+.1f%%", 100*(r.Change-1))
		}
		verdict := r.Verdict
		if r.Verdict == VerdictRegression {
			verdict = "**regression**"
		}
		if r.Note != "" {
			verdict += " (" + r.Note + ")"
		}
		if gated {
			fmt.Fprintf(b, "| `%s` | %s | %s | %s | %s | %s | %s |\n", r.Figure, FormatStat(r.Baseline, r.Unit), FormatStat(r.Current, r.Unit), change, p, pct(r.MaxRegression), verdict)
		} else {
			fmt.Fprintf(b, "| `%s` | %s | %s | %s | %s | %s |\n", r.Figure, FormatStat(r.Baseline, r.Unit), FormatStat(r.Current, r.Unit), change, p, verdict)
		}
	}
	b.WriteString("\n")
}

// FormatStat prints a side as benchstat does: the median with its unit,
// and the interval as ± percent when there are several samples.
func FormatStat(s *Stat, unit string) string {
	if s == nil {
		return "-"
	}
	out := FormatValue(s.Center, unit)
	if s.N > 1 && s.Center != 0 {
		spread := math.Max(s.Hi-s.Center, s.Center-s.Lo) / math.Abs(s.Center)
		out += fmt.Sprintf(" ±%.0f%%", 100*spread)
	}
	if s.N > 1 {
		out += fmt.Sprintf(" (n=%d)", s.N)
	}
	return out
}

// FormatValue prints a value with its unit, scaled the way benchstat scales
// benchmark units (µs for sec/op, Ki for B/op).
func FormatValue(v float64, unit string) string {
	switch unit {
	case "sec/op":
		return benchunit.Scale(v, benchunit.ClassOf(unit)) + "s/op"
	case "B/op", "allocs/op":
		return benchunit.Scale(v, benchunit.ClassOf(unit)) + " " + unit
	case "fraction":
		return num(v)
	case "x":
		return num(v) + "x"
	}
	return num(v) + " " + unit
}

// num prints a float with four significant digits and no exponent for the
// usual range, so tables stay readable and deterministic.
func num(v float64) string {
	if v == math.Trunc(v) && math.Abs(v) < 1e15 {
		return fmt.Sprintf("%.0f", v)
	}
	a := math.Abs(v)
	switch {
	case a >= 1000:
		return fmt.Sprintf("%.0f", v)
	case a >= 1e-3:
		s := fmt.Sprintf("%.4g", v)
		return s
	}
	return fmt.Sprintf("%.3g", v)
}
