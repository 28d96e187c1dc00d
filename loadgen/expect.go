package loadgen

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Threshold is one parsed --expect term, such as p99<50ms.
type Threshold struct {
	Expr   string
	Metric string
	Op     string
	Value  float64 // milliseconds for latencies
}

// latencyMetrics are read from Latency, in milliseconds.
var latencyMetrics = map[string]func(Latency) float64{
	"p50":  func(l Latency) float64 { return l.P50Ms },
	"p90":  func(l Latency) float64 { return l.P90Ms },
	"p99":  func(l Latency) float64 { return l.P99Ms },
	"p999": func(l Latency) float64 { return l.P999Ms },
	"max":  func(l Latency) float64 { return l.MaxMs },
	"mean": func(l Latency) float64 { return l.MeanMs },
}

// plainMetrics are a target's other figures.
var plainMetrics = map[string]func(TargetResult) float64{
	"successRate":  func(t TargetResult) float64 { return t.SuccessRate },
	"throughput":   func(t TargetResult) float64 { return t.Throughput },
	"achievedRate": func(t TargetResult) float64 { return t.AchievedRate },
	"errors": func(t TargetResult) float64 {
		var n int64
		for _, c := range t.Errors {
			n += c
		}
		return float64(n)
	},
	"notSent": func(t TargetResult) float64 { return float64(t.NotSent) },
	// sendLatenessP99 is the generator's own timing error, in ms.
	"sendLatenessP99": func(t TargetResult) float64 { return t.SendLateness.P99Ms },
}

// ratioMetrics compare a target with the reference.
var ratioMetrics = map[string]func(Ratio) float64{
	"ratio.throughput":       func(r Ratio) float64 { return r.Throughput },
	"ratio.throughputMedian": func(r Ratio) float64 { return r.ThroughputMedian },
	"ratio.p50":              func(r Ratio) float64 { return r.P50 },
	"ratio.p99":              func(r Ratio) float64 { return r.P99 },
}

// ParseThresholds reads a comma-separated list like
// "p99<50ms,successRate>=0.999,ratio.throughput>=0.75". Latencies take a
// unit (us, ms, s); the other figures are plain numbers.
func ParseThresholds(s string) ([]Threshold, error) {
	var out []Threshold
	for _, expr := range strings.Split(s, ",") {
		expr = strings.TrimSpace(expr)
		if expr == "" {
			continue
		}
		i := strings.IndexAny(expr, "<>=")
		if i <= 0 {
			return nil, fmt.Errorf("%q: want METRIC<VALUE (operators < <= > >= ==)", expr)
		}
		th := Threshold{Expr: expr, Metric: strings.TrimSpace(expr[:i])}
		rest := expr[i:]
		for _, op := range []string{"<=", ">=", "==", "<", ">"} {
			if strings.HasPrefix(rest, op) {
				th.Op, rest = op, strings.TrimSpace(rest[len(op):])
				break
			}
		}
		if th.Op == "" {
			return nil, fmt.Errorf("%q: want one of the operators < <= > >= ==", expr)
		}
		if _, ok := latencyMetrics[th.Metric]; ok {
			d, err := time.ParseDuration(rest)
			if err != nil {
				return nil, fmt.Errorf("%q: %s is a latency: write it with a unit, like 50ms", expr, th.Metric)
			}
			th.Value = float64(d) / float64(time.Millisecond)
		} else {
			_, plain := plainMetrics[th.Metric]
			_, ratio := ratioMetrics[th.Metric]
			if !plain && !ratio {
				return nil, fmt.Errorf("%q: unknown metric %q (want p50, p90, p99, p999, max, mean, successRate, throughput, achievedRate, errors, notSent, sendLatenessP99, ratio.throughput, ratio.throughputMedian, ratio.p50, ratio.p99)", expr, th.Metric)
			}
			v, err := strconv.ParseFloat(rest, 64)
			if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
				return nil, fmt.Errorf("%q: %q is not a number", expr, rest)
			}
			th.Value = v
		}
		out = append(out, th)
	}
	return out, nil
}

func compare(v float64, op string, limit float64) bool {
	switch op {
	case "<":
		return v < limit
	case "<=":
		return v <= limit
	case ">":
		return v > limit
	case ">=":
		return v >= limit
	}
	return v == limit
}

// Check evaluates the thresholds against every target (or every ratio,
// for ratio metrics), stores the outcome in res.Expectations, and reports
// whether all held. An echo target is not held to allocation thresholds:
// it is the ceiling, not the system under test.
func Check(res *Result, ths []Threshold) bool {
	res.Expectations = nil
	pass := true
	add := func(e Expectation) {
		res.Expectations = append(res.Expectations, e)
		pass = pass && e.Pass
	}
	for _, th := range ths {
		if f, ok := ratioMetrics[th.Metric]; ok {
			for _, r := range res.Ratios {
				v := f(r)
				add(Expectation{Expr: th.Expr, Target: r.Target, Value: v, Pass: compare(v, th.Op, th.Value)})
			}
			continue
		}
		for _, t := range res.Targets {
			if t.Call == "echo" {
				continue
			}
			var v float64
			if f, ok := latencyMetrics[th.Metric]; ok {
				v = f(t.Latency)
			} else {
				v = plainMetrics[th.Metric](t)
			}
			add(Expectation{Expr: th.Expr, Target: t.Name, Value: v, Pass: compare(v, th.Op, th.Value)})
		}
	}
	return pass
}
