// Package reports turns performance results into something a person can
// read and a CI job can gate on.
//
// It reads `go test -bench` output (through golang.org/x/perf's benchfmt),
// `qm sim` scenario reports and `qm load` results, compares every figure with
// a checked-in baseline using benchstat's statistics (golang.org/x/perf's
// benchmath: medians, confidence intervals, Mann-Whitney U), and writes three
// things: one self-contained HTML page with SVG plots drawn by gonum/plot, a
// Markdown summary for CI logs and pull requests, and the comparison as JSON.
//
// A figure fails the gate only when three things hold: a rule in the
// baseline's thresholds file names it, the change from the baseline is
// significant, and the change is worse than the rule's threshold. Gated
// figures are meant to be ratios to a reference measured in the same run
// (the indexed allocator against the naive scan, the service against its
// echo), because absolute times on a shared two-core machine swing by tens of
// percent from one minute to the next, while such ratios barely move.
package reports
