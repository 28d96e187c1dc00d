package plan

import (
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/quartermaster-dev/quartermaster/scenarios"
	"github.com/quartermaster-dev/quartermaster/sim"
)

// Bound is one clause of a target: a metric of the results compared with a
// value.
type Bound struct {
	// Name is the metric as written (p99); Metric its path in the results
	// (totals.latency.p99Ms).
	Name, Metric string
	Op           string // >=, <=, > or <
	Value        float64
	// Latency: Value is in milliseconds, written with a unit.
	Latency bool
}

// Target is every clause; a run meets it when it meets all of them.
type Target []Bound

// short names for the figures a capacity question is usually about.
var shortNames = map[string]string{
	"p50": "totals.latency.p50Ms", "p90": "totals.latency.p90Ms", "p99": "totals.latency.p99Ms",
	"p999": "totals.latency.p999Ms", "max": "totals.latency.maxMs", "mean": "totals.latency.meanMs",
}

// ParseTarget reads clauses like 'successRate>=0.999,p99<200ms'. A name
// without a dot is a total (successRate, unAllocatedRate, cost, nodeHours,
// retriesPerAllocation, ...) or a latency percentile (p50, p90, p99, p999,
// max, mean), whose value carries a unit; a dotted name is any number in
// the results, as scenario expectations address them
// (clusters.on-prem.share).
func ParseTarget(s string) (Target, error) {
	if strings.TrimSpace(s) == "" {
		return nil, fmt.Errorf("empty: want clauses like 'successRate>=0.999,p99<200ms'")
	}
	var out Target
	for _, clause := range strings.Split(s, ",") {
		clause = strings.TrimSpace(clause)
		if clause == "" {
			return nil, fmt.Errorf("%q: an empty clause (two commas?)", s)
		}
		b, err := parseBound(clause)
		if err != nil {
			return nil, err
		}
		out = append(out, b)
	}
	return out, nil
}

func parseBound(clause string) (Bound, error) {
	i := strings.IndexAny(clause, "<>=!")
	if i <= 0 {
		return Bound{}, fmt.Errorf("%q: want NAME OP VALUE with OP one of >= <= > <, like successRate>=0.999", clause)
	}
	name := strings.TrimSpace(clause[:i])
	rest := clause[i:]
	var op string
	for _, o := range []string{">=", "<=", ">", "<"} {
		if strings.HasPrefix(rest, o) {
			op = o
			break
		}
	}
	if op == "" {
		return Bound{}, fmt.Errorf("%q: operator %q: want >=, <=, > or <", clause, strings.TrimRight(rest, "0123456789.msµun "))
	}
	val := strings.TrimSpace(rest[len(op):])
	b := Bound{Name: name, Op: op, Metric: name}
	latency := false
	if m, ok := shortNames[name]; ok {
		b.Metric, latency = m, true
	} else if !strings.Contains(name, ".") {
		b.Metric = "totals." + name
	}
	if strings.HasSuffix(b.Metric, "Ms") && strings.Contains(b.Metric, "latency.") {
		latency = true
	}
	if latency {
		d, err := time.ParseDuration(val)
		if err != nil {
			if _, nerr := strconv.ParseFloat(val, 64); nerr == nil {
				return Bound{}, fmt.Errorf("%q: %s is a latency: give %q a unit, like %sms", clause, name, val, val)
			}
			return Bound{}, fmt.Errorf("%q: %q is not a duration like 200ms", clause, val)
		}
		b.Value = float64(d) / float64(time.Millisecond)
		b.Latency = true
		return b, nil
	}
	v, err := strconv.ParseFloat(val, 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
		return Bound{}, fmt.Errorf("%q: %q is not a number", clause, val)
	}
	b.Value = v
	return b, nil
}

// Holds reports whether x meets the bound.
func (b Bound) Holds(x float64) bool {
	switch b.Op {
	case ">=":
		return x >= b.Value
	case "<=":
		return x <= b.Value
	case ">":
		return x > b.Value
	}
	return x < b.Value
}

func (b Bound) String() string {
	if b.Latency {
		return b.Name + b.Op + time.Duration(b.Value*float64(time.Millisecond)).String()
	}
	return b.Name + b.Op + strconv.FormatFloat(b.Value, 'g', -1, 64)
}

// Check makes sure every metric names a number in the results of sc,
// before anything runs, from an empty result of the same shape.
func (t Target) Check(sc *scenarios.Scenario) error {
	r := &sim.Results{
		Clusters:  map[string]sim.ClusterResult{},
		Providers: map[string]sim.ProviderResult{},
		Phases:    map[string]sim.PhaseResult{},
	}
	pc := map[string]sim.PhaseCluster{}
	for _, c := range sc.Spec.Clusters {
		r.Clusters[c.Name] = sim.ClusterResult{}
		r.Providers[c.Provider] = sim.ProviderResult{}
		pc[c.Name] = sim.PhaseCluster{}
	}
	for _, p := range sc.Spec.Phases {
		r.Phases[p.Name] = sim.PhaseResult{Clusters: pc}
	}
	tree, err := toTree(r)
	if err != nil {
		return err
	}
	for _, b := range t {
		if _, err := lookup(tree, b.Metric); err != nil {
			return fmt.Errorf("%s: %v", b.Name, err)
		}
	}
	return nil
}

func toTree(v any) (any, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	var t any
	err = json.Unmarshal(b, &t)
	return t, err
}

// lookup resolves a dotted path to a number in a decoded results tree.
func lookup(tree any, path string) (float64, error) {
	cur := tree
	parts := strings.Split(path, ".")
	for i, part := range parts {
		m, ok := cur.(map[string]any)
		if !ok {
			return 0, fmt.Errorf("%q: %s is a number; nothing is below it", path, strings.Join(parts[:i], "."))
		}
		next, ok := m[part]
		if !ok {
			keys := make([]string, 0, len(m))
			for k := range m {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			return 0, fmt.Errorf("%q: no %q in the results here; there is %s", path, part, strings.Join(keys, ", "))
		}
		cur = next
	}
	x, ok := cur.(float64)
	if !ok {
		return 0, fmt.Errorf("%q is not a number in the results", path)
	}
	return x, nil
}
