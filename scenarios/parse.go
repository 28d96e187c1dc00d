package scenarios

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/quartermaster-dev/quartermaster/core"
	"github.com/quartermaster-dev/quartermaster/yamlfile"
)

// Load reads, decodes, defaults and validates the scenario file at path.
func Load(path string) (*Scenario, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	s, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return s, nil
}

// maxFileSize bounds what Parse reads: a scenario is a page of YAML, and a
// bound keeps a hostile file from costing unbounded memory.
const maxFileSize = 1 << 20

// fileFormat is a scenario file's version, kind and size bound.
var fileFormat = yamlfile.Format{Name: "scenario", APIVersion: APIVersion, Kind: Kind, MaxSize: maxFileSize, Reword: yamlError}

// Parse decodes a scenario strictly, applies defaults and validates it.
func Parse(data []byte) (*Scenario, error) {
	var s Scenario
	if err := fileFormat.Decode(data, &s); err != nil {
		return nil, err
	}
	s.Default()
	if err := s.Validate(); err != nil {
		return nil, err
	}
	// Building the run's configuration catches what only the whole file
	// shows (the expected number of requests, for one).
	if _, err := s.Config(); err != nil {
		return nil, err
	}
	return &s, nil
}

var notFound = regexp.MustCompile(`field (\S+) not found in type \S+`)

// yamlError rewords the decoder's messages for people who never saw the Go
// types: "field foo not found in type scenarios.Cluster" becomes
// "unknown field "foo"". A syntax error gets the line where the file stops
// being YAML (see syntaxLine).
func yamlError(data []byte, err error) error {
	msg := err.Error()
	if m := syntaxErr.FindStringSubmatch(msg); m != nil {
		if reported, convErr := strconv.Atoi(m[1]); convErr == nil {
			msg = fmt.Sprintf("line %d: %s", syntaxLine(data, reported, m[2]), m[2])
		}
	}
	msg = notFound.ReplaceAllString(msg, `unknown field "$1"`)
	msg = strings.TrimPrefix(msg, "yaml: ")
	msg = strings.ReplaceAll(msg, "unmarshal errors:\n  ", "")
	return errors.New(msg)
}

// syntaxErr is how the YAML library words a syntax error (type errors, such
// as an unknown field, come as "unmarshal errors" and carry exact lines).
var syntaxErr = regexp.MustCompile(`(?s)^yaml: line (\d+): (.*)$`)

// syntaxLineBudget bounds the bytes syntaxLine re-parses, so that a large
// hostile file costs milliseconds, not a quadratic scan.
const syntaxLineBudget = 16 << 20

// syntaxLine finds the line a syntax error is on. The YAML library reports
// where the enclosing block began when it knows that, not where parsing
// failed: a mis-indented key deep in spec is reported at "spec:" or even at
// line 1. The first line at which a prefix of the file stops parsing is
// where a reader has to look, so parse growing prefixes from the reported
// line on and return the first that fails with the same complaint (a
// prefix cut inside a flow mapping fails for its own reason, which is not
// the file's); if none does within the budget, keep the library's line.
func syntaxLine(data []byte, reported int, complaint string) int {
	lines := bytes.SplitAfter(data, []byte("\n"))
	if reported < 1 || reported > len(lines) {
		return reported
	}
	end := 0
	for _, l := range lines[:reported-1] {
		end += len(l)
	}
	spent := 0
	for n := reported; n <= len(lines); n++ {
		end += len(lines[n-1])
		if spent += end; spent > syntaxLineBudget {
			break
		}
		var v any
		if err := yaml.Unmarshal(data[:end], &v); err != nil {
			if m := syntaxErr.FindStringSubmatch(err.Error()); m != nil && m[2] == complaint {
				return n
			}
		}
	}
	return reported
}

// Default fills in what the file left out. It is applied before validation
// so that validation sees the values the run will use.
func (s *Scenario) Default() {
	sp := &s.Spec
	if sp.Seed == nil {
		one := uint64(1)
		sp.Seed = &one
	}
	if sp.Routing.ForwardTimeout == 0 {
		sp.Routing.ForwardTimeout = Duration(10 * time.Second)
	}
	if sp.Routing.Deadline == 0 {
		sp.Routing.Deadline = Duration(30 * time.Second)
	}
	// The loss model's routing settings keep their zero values here and
	// are defaulted in Config, so that a file without the model reads the
	// same as before it existed (scenarios/live names every field a file
	// sets that it does not reproduce).
	for i := range sp.Clusters {
		c := &sp.Clusters[i]
		if c.RTT == nil {
			c.RTT = constDist(0)
		}
		if c.APIServer.WriteLatency == nil {
			c.APIServer.WriteLatency = &Dist{LogNormal: &LogNormal{
				Median: Duration(15 * time.Millisecond), P99: Duration(60 * time.Millisecond)}}
		}
		a := &c.Allocator
		if a.Replicas == nil {
			one := 1
			a.Replicas = &one
		}
		if a.InformerDelay == nil {
			a.InformerDelay = constDist(0)
		}
		if a.MaxRetries == nil {
			ten := 10
			a.MaxRetries = &ten
		}
		if a.DecisionTime == nil {
			a.DecisionTime = constDist(0)
		}
		if a.PackedSpread == 0 {
			a.PackedSpread = 1
			if a.ReplicaShards {
				a.PackedSpread = 64
			}
		}
		for j := range c.Fleets {
			f := &c.Fleets[j]
			if f.Scheduling == "" {
				f.Scheduling = "Packed"
			}
			if f.StartupDelay == nil {
				f.StartupDelay = constDist(10 * time.Second)
			}
			if f.SessionEnd == "" {
				f.SessionEnd = "Shutdown"
			}
			if f.Buffer != nil && f.Buffer.SyncInterval == 0 {
				f.Buffer.SyncInterval = Duration(30 * time.Second)
			}
		}
	}
	for i := range sp.Policies {
		if sp.Policies[i].Weight == nil {
			one := 1
			sp.Policies[i].Weight = &one
		}
	}
	for i := range sp.Workload {
		w := &sp.Workload[i]
		if w.Request.Scheduling == "" {
			w.Request.Scheduling = "Packed"
		}
		if d := w.Rate.Diurnal; d != nil && d.Period == 0 {
			d.Period = Duration(24 * time.Hour)
		}
	}
	for i := range sp.Faults {
		if sp.Faults[i].Type == "" {
			sp.Faults[i].Type = "outage"
		}
	}
}

func constDist(d time.Duration) *Dist {
	v := Duration(d)
	return &Dist{Constant: &v}
}

// FieldError is one problem in a scenario: where, and why.
type FieldError struct {
	Path   string
	Reason string
}

func (e FieldError) String() string { return e.Path + ": " + e.Reason }

// ValidationError lists every problem found in a scenario.
type ValidationError struct{ Errors []FieldError }

func (e *ValidationError) Error() string {
	parts := make([]string, len(e.Errors))
	for i, fe := range e.Errors {
		parts[i] = fe.String()
	}
	return "invalid scenario: " + strings.Join(parts, "; ")
}

type checker struct{ errs []FieldError }

func (c *checker) add(path, format string, args ...any) {
	c.errs = append(c.errs, FieldError{path, fmt.Sprintf(format, args...)})
}

var dnsLabel = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)

func (c *checker) name(path, n string) {
	if n == "" {
		c.add(path, "must be set")
	} else if len(n) > 63 || !dnsLabel.MatchString(n) {
		c.add(path, "%q must be a DNS label (lowercase letters, digits and '-', at most 63)", n)
	}
}

// checkCapacities checks named capacities: names not empty, capacities in
// [0, most] (lists hold at most 1000 values in Agones).
func checkCapacities(c *checker, path string, m map[string]Capacity, most int64) {
	for _, k := range sortedNames(m) {
		if k == "" {
			c.add(path, "a name must not be empty")
		}
		if v := m[k].Capacity; v < 0 || v > most {
			c.add(fmt.Sprintf("%s[%q].capacity", path, k), "must be between 0 and %d, got %d", most, v)
		}
	}
}

func sortedNames[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func finite(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }

// Validate checks a defaulted scenario; the error lists every problem with
// its field path, section by section.
func (s *Scenario) Validate() error {
	c := &checker{}
	sp := &s.Spec
	c.name("metadata.name", s.Metadata.Name)
	c.timing(sp)
	c.listSizes(sp)
	clusters := c.clusters(sp.Clusters)
	c.policies(sp, clusters)
	c.workload(sp, clusters)
	c.faults(sp.Faults, clusters)
	c.phases(sp.Phases)
	c.expectations(s)
	if len(c.errs) == 0 {
		return nil
	}
	return &ValidationError{Errors: c.errs}
}

// timing checks the duration, the sample interval and the routing's times.
func (c *checker) timing(sp *Spec) {
	if sp.Duration <= 0 {
		c.add("spec.duration", "must be positive")
	} else if sp.Duration.D() > 400*24*time.Hour {
		c.add("spec.duration", "must be at most 400 days")
	}
	if sp.SampleInterval < 0 {
		c.add("spec.sampleInterval", "must not be negative")
	} else if sp.SampleInterval > 0 && sp.Duration > 0 && sp.Duration.D()/sp.SampleInterval.D() > 100000 {
		c.add("spec.sampleInterval", "gives more than 100000 samples; make it longer")
	} else if sp.SampleInterval == 0 && sp.Duration > 0 && sp.Duration.D()/240 < time.Second && sp.Duration.D() > 100000*time.Second {
		c.add("spec.sampleInterval", "must be set for a run this long")
	}
	if sp.Routing.ForwardTimeout < 0 {
		c.add("spec.routing.forwardTimeout", "must not be negative")
	}
	if sp.Routing.Deadline < 0 {
		c.add("spec.routing.deadline", "must not be negative")
	}
	if k := sp.Routing.KeyRetries; k != nil && (*k < 0 || *k > 100) {
		c.add("spec.routing.keyRetries", "must be 0 to 100, got %d", *k)
	}
	if sp.Routing.ReconcileDelay < 0 {
		c.add("spec.routing.reconcileDelay", "must not be negative")
	}
	if sp.Routing.KeyWindow < 0 {
		c.add("spec.routing.keyWindow", "must not be negative")
	}
}

// listSizes bounds the lists: they keep a hostile or mistaken file from
// turning into a run that never ends, since every list here is walked per
// event or per request somewhere.
func (c *checker) listSizes(sp *Spec) {
	for _, l := range []struct {
		path   string
		n, max int
	}{
		{"spec.policies", len(sp.Policies), 1000},
		{"spec.workload", len(sp.Workload), 100},
		{"spec.faults", len(sp.Faults), 1000},
		{"spec.phases", len(sp.Phases), 100},
		{"spec.expectations", len(sp.Expectations), 1000},
	} {
		if l.n > l.max {
			c.add(l.path, "at most %d entries", l.max)
		}
	}
}

// clusters checks every cluster and the totals over them, and returns the
// clusters' names.
func (c *checker) clusters(cls []Cluster) map[string]bool {
	names := map[string]bool{}
	if len(cls) == 0 {
		c.add("spec.clusters", "at least one cluster is needed")
	}
	if len(cls) > 64 {
		c.add("spec.clusters", "at most 64 clusters")
	}
	totalSlots, cached := 0, 0
	for i, cl := range cls {
		p := fmt.Sprintf("spec.clusters[%d]", i)
		c.name(p+".name", cl.Name)
		if names[cl.Name] {
			c.add(p+".name", "%q is used by another cluster", cl.Name)
		}
		names[cl.Name] = true
		slots, servers := c.cluster(p, cl)
		totalSlots += max(slots, 0)
		cached += servers * max(*cl.Allocator.Replicas, 1)
	}
	if totalSlots > 20_000_000 {
		c.add("spec.clusters", "at most 20 million slots in all")
	}
	if cached > 20_000_000 {
		c.add("spec.clusters", "fleet replicas times allocator replicas come to %d cached servers; the limit is 20 million", cached)
	}
	return names
}

// cluster checks one cluster (at path p) but its name, and returns its
// slots and its fleets' servers.
func (c *checker) cluster(p string, cl Cluster) (slots, servers int) {
	c.name(p+".provider", cl.Provider)
	if cl.CostPerNodeHour < 0 || !finite(cl.CostPerNodeHour) {
		c.add(p+".costPerNodeHour", "must be a number >= 0")
	}
	c.dist(p+".rtt", cl.RTT)
	if cl.Nodes.Count <= 0 {
		c.add(p+".nodes.count", "must be positive")
	}
	if cl.Nodes.Slots <= 0 || cl.Nodes.Slots > 1000 {
		c.add(p+".nodes.slots", "must be 1 to 1000")
	}
	slots = cl.Nodes.Count * cl.Nodes.Slots
	if cl.Nodes.Count > 1_000_000 || slots > 10_000_000 {
		c.add(p+".nodes", "at most 10 million slots per cluster")
	}
	c.dist(p+".apiServer.writeLatency", cl.APIServer.WriteLatency)
	c.allocator(p+".allocator", cl.Allocator)
	if cl.AnswerLoss != nil {
		c.fraction(p+".answerLoss", *cl.AnswerLoss)
	}
	fleets := map[string]bool{}
	for j, f := range cl.Fleets {
		fp := fmt.Sprintf("%s.fleets[%d]", p, j)
		c.name(fp+".name", f.Name)
		if fleets[f.Name] {
			c.add(fp+".name", "%q is used by another fleet of this cluster", f.Name)
		}
		fleets[f.Name] = true
		c.fleet(fp, f)
		servers += max(f.Replicas, 0)
	}
	if len(cl.Fleets) > 100 {
		c.add(p+".fleets", "at most 100 fleets per cluster")
	}
	if slots > 0 && servers > slots {
		c.add(p+".fleets", "%d replicas do not fit on %d nodes of %d slots", servers, cl.Nodes.Count, cl.Nodes.Slots)
	}
	return slots, servers
}

// allocator checks a cluster's allocator (at path p).
func (c *checker) allocator(p string, a Allocator) {
	if r := *a.Replicas; r < 1 || r > 64 {
		c.add(p+".replicas", "must be 1 to 64")
	}
	c.dist(p+".informerDelay", a.InformerDelay)
	c.dist(p+".decisionTime", a.DecisionTime)
	if a.Workers < 0 {
		c.add(p+".workers", "must not be negative (0 means no bound)")
	}
	if *a.MaxRetries < 0 || *a.MaxRetries > 1000 {
		c.add(p+".maxRetries", "must be 0 to 1000")
	}
	if a.PackedSpread < 0 || a.PackedSpread > 1024 {
		c.add(p+".packedSpread", "must be 0 to 1024 (0: the default)")
	}
	if a.ReplicaShards && *a.Replicas < 2 {
		c.add(p+".replicaShards", "needs at least 2 replicas")
	}
}

// fleet checks one fleet (at path fp) but its name.
func (c *checker) fleet(fp string, f Fleet) {
	if f.Replicas < 0 {
		c.add(fp+".replicas", "must not be negative")
	}
	if f.Scheduling != "Packed" && f.Scheduling != "Distributed" {
		c.add(fp+".scheduling", "must be Packed or Distributed, not %q", f.Scheduling)
	}
	if f.SessionEnd != "Shutdown" && f.SessionEnd != "Ready" {
		c.add(fp+".sessionEnd", "must be Shutdown or Ready, not %q", f.SessionEnd)
	}
	c.dist(fp+".startupDelay", f.StartupDelay)
	if f.IdleShutdown < 0 {
		c.add(fp+".idleShutdown", "must not be negative")
	}
	checkCapacities(c, fp+".counters", f.Counters, math.MaxInt64)
	checkCapacities(c, fp+".lists", f.Lists, 1000)
	for k, v := range f.Labels {
		if k == "" || len(k) > 316 || len(v) > 63 {
			c.add(fp+".labels", "label %q=%q is not a valid Kubernetes label", k, v)
		}
	}
	if b := f.Buffer; b != nil {
		if b.Size < 0 {
			c.add(fp+".buffer.size", "must not be negative")
		}
		if b.Min < 0 {
			c.add(fp+".buffer.min", "must not be negative")
		}
		if b.Max <= 0 || b.Max < b.Min {
			c.add(fp+".buffer.max", "must be positive and at least min")
		}
		if b.SyncInterval < Duration(time.Second) {
			c.add(fp+".buffer.syncInterval", "must be at least 1s")
		}
	}
}

// policies checks the policies against the clusters.
func (c *checker) policies(sp *Spec, clusters map[string]bool) {
	names := map[string]bool{}
	recurrences := 0
	for i, pol := range sp.Policies {
		p := fmt.Sprintf("spec.policies[%d]", i)
		c.name(p+".name", pol.Name)
		if names[pol.Name] {
			c.add(p+".name", "%q is used by another policy", pol.Name)
		}
		names[pol.Name] = true
		if pol.Priority < 0 {
			c.add(p+".priority", "must not be negative")
		}
		if *pol.Weight < 0 {
			c.add(p+".weight", "must not be negative")
		}
		if !clusters[pol.ConnectionInfo.ClusterName] {
			c.add(p+".connectionInfo.clusterName", "%q is not a cluster of spec.clusters", pol.ConnectionInfo.ClusterName)
		}
		if pol.Window != nil {
			if err := pol.Window.Core(sp.StartTime()).Validate(); err != nil {
				c.add(p+".window", "%v", err)
			}
			recurrences += len(pol.Window.During) + len(pol.Window.Except)
		}
	}
	// Each recurrence is walked at every change of the policies in force.
	if recurrences > 200 {
		c.add("spec.policies", "at most 200 window recurrences in all, got %d", recurrences)
	}
}

// workload checks the streams against the clusters and policies.
func (c *checker) workload(sp *Spec, clusters map[string]bool) {
	if len(sp.Workload) == 0 {
		c.add("spec.workload", "at least one stream is needed")
	}
	streams := map[string]bool{}
	for i, w := range sp.Workload {
		p := fmt.Sprintf("spec.workload[%d]", i)
		c.name(p+".name", w.Name)
		if streams[w.Name] {
			c.add(p+".name", "%q is used by another stream", w.Name)
		}
		streams[w.Name] = true
		c.rate(p+".rate", w.Rate, sp.Duration.D())
		if w.SessionLength == nil {
			c.add(p+".sessionLength", "must be set")
		} else {
			c.dist(p+".sessionLength", w.SessionLength)
		}
		switch {
		case w.Cluster != "" && w.MultiCluster != nil:
			c.add(p, "set cluster or multiCluster, not both")
		case w.Cluster == "" && w.MultiCluster == nil:
			c.add(p, "set cluster (send to one cluster) or multiCluster (route by policy)")
		case w.Cluster != "" && !clusters[w.Cluster]:
			c.add(p+".cluster", "%q is not a cluster of spec.clusters", w.Cluster)
		case w.MultiCluster != nil && len(sp.Policies) == 0:
			c.add(p+".multiCluster", "needs spec.policies")
		}
		if s := w.Request.Scheduling; s != "Packed" && s != "Distributed" {
			c.add(p+".request.scheduling", "must be Packed or Distributed, not %q", s)
		}
		c.create(p, sp, &w)
		c.caller(p+".caller", w.Caller)
	}
}

// fraction checks a rate that is a fraction of something.
func (c *checker) fraction(path string, x float64) {
	if !finite(x) || x < 0 || x > 1 {
		c.add(path, "must be a fraction from 0 to 1, got %v", x)
	}
}

// caller checks a stream's caller (at path p): rates are fractions, and a
// caller that loses answers or retries needs a timeout, since it notices
// a lost answer only by waiting that long.
func (c *checker) caller(p string, k *Caller) {
	if k == nil {
		return
	}
	c.fraction(p+".answerLoss", k.AnswerLoss)
	if k.Timeout < 0 {
		c.add(p+".timeout", "must not be negative")
	} else if k.Timeout == 0 && k.AnswerLoss > 0 {
		c.add(p+".timeout", "must be set when answerLoss is above 0: a caller that waits for ever never notices a lost answer")
	} else if k.Timeout == 0 && k.Retries > 0 {
		c.add(p+".timeout", "must be set when retries is above 0: a caller retries after giving up at its timeout")
	}
	if k.Retries < 0 || k.Retries > 1000 {
		c.add(p+".retries", "must be 0 to 1000, got %d", k.Retries)
	}
	if k.RetryDelay < 0 {
		c.add(p+".retryDelay", "must not be negative")
	}
}

// faults checks the outages against the clusters.
func (c *checker) faults(faults []Fault, clusters map[string]bool) {
	for i, f := range faults {
		p := fmt.Sprintf("spec.faults[%d]", i)
		if f.Type != "outage" {
			c.add(p+".type", "must be outage, not %q", f.Type)
		}
		if !clusters[f.Cluster] {
			c.add(p+".cluster", "%q is not a cluster of spec.clusters", f.Cluster)
		}
		if f.Start < 0 {
			c.add(p+".start", "must not be negative")
		}
		if f.End <= f.Start {
			c.add(p+".end", "must be after start")
		}
	}
}

// phases checks the phases' names and spans.
func (c *checker) phases(phases []Phase) {
	names := map[string]bool{}
	for i, ph := range phases {
		p := fmt.Sprintf("spec.phases[%d]", i)
		c.name(p+".name", ph.Name)
		if names[ph.Name] {
			c.add(p+".name", "%q is used by another phase", ph.Name)
		}
		names[ph.Name] = true
		if ph.Start < 0 {
			c.add(p+".start", "must not be negative")
		}
		if ph.End <= ph.Start {
			c.add(p+".end", "must be after start")
		}
	}
}

// expectations checks the bounds and that each metric names something
// the scenario has.
func (c *checker) expectations(s *Scenario) {
	for i, e := range s.Spec.Expectations {
		p := fmt.Sprintf("spec.expectations[%d]", i)
		if e.Min == nil && e.Max == nil {
			c.add(p, "set min, max or both")
		}
		if e.Min != nil && e.Max != nil && *e.Min > *e.Max {
			c.add(p, "min %v is above max %v", *e.Min, *e.Max)
		}
		for _, b := range []*float64{e.Min, e.Max} {
			if b != nil && !finite(*b) {
				c.add(p, "bounds must be finite numbers")
			}
		}
		if e.Metric == "" {
			c.add(p+".metric", "must be set")
		} else if err := checkMetric(s, e.Metric); err != nil {
			c.add(p+".metric", "%v", err)
		}
	}
}

func (c *checker) dist(path string, d *Dist) {
	if d == nil {
		c.add(path, "must be set")
		return
	}
	n := 0
	bad := func(field, reason string) { c.add(path+"."+field, "%s", reason) }
	if d.Constant != nil {
		n++
		if *d.Constant < 0 {
			bad("constant", "must not be negative")
		}
	}
	if e := d.Exponential; e != nil {
		n++
		if e.Mean <= 0 {
			bad("exponential.mean", "must be positive")
		}
	}
	if l := d.LogNormal; l != nil {
		n++
		if l.Median <= 0 {
			bad("lognormal.median", "must be positive")
		}
		if l.P99 < l.Median {
			bad("lognormal.p99", "must be at least the median")
		}
	}
	if u := d.Uniform; u != nil {
		n++
		if u.Min < 0 {
			bad("uniform.min", "must not be negative")
		}
		if u.Max < u.Min {
			bad("uniform.max", "must be at least min")
		}
	}
	if m := d.Normal; m != nil {
		n++
		if m.Mean < 0 {
			bad("normal.mean", "must not be negative")
		}
		if m.Stddev < 0 {
			bad("normal.stddev", "must not be negative")
		}
	}
	if n != 1 {
		c.add(path, "set exactly one of constant, exponential, lognormal, uniform, normal")
	}
}

func (c *checker) rate(path string, r Rate, dur time.Duration) {
	n := 0
	if r.Constant != nil {
		n++
		if !finite(*r.Constant) || *r.Constant < 0 || *r.Constant > 1e6 {
			c.add(path+".constant", "must be 0 to 1e6 requests per second")
		}
	}
	if len(r.Steps) > 1000 {
		c.add(path+".steps", "at most 1000 steps")
	}
	if len(r.Spikes) > 100 {
		c.add(path+".spikes", "at most 100 spikes")
	}
	if len(r.Steps) > 0 {
		n++
		for i, s := range r.Steps {
			p := fmt.Sprintf("%s.steps[%d]", path, i)
			if !finite(s.Rate) || s.Rate < 0 || s.Rate > 1e6 {
				c.add(p+".rate", "must be 0 to 1e6 requests per second")
			}
			if s.At < 0 {
				c.add(p+".at", "must not be negative")
			}
			if i > 0 && s.At <= r.Steps[i-1].At {
				c.add(p+".at", "must be after the previous step's")
			}
		}
	}
	if d := r.Diurnal; d != nil {
		n++
		if !finite(d.Mean) || d.Mean < 0 || d.Mean > 1e6 {
			c.add(path+".diurnal.mean", "must be 0 to 1e6 requests per second")
		}
		if !finite(d.Amplitude) || d.Amplitude < 0 || d.Amplitude > d.Mean {
			c.add(path+".diurnal.amplitude", "must be between 0 and mean (the rate cannot go negative)")
		}
		if d.Period < Duration(time.Minute) {
			c.add(path+".diurnal.period", "must be at least 1m")
		} else if dur/d.Period.D() > 1000 {
			c.add(path+".diurnal.period", "is too short for the run's duration (over 1000 periods)")
		}
	}
	if n != 1 {
		c.add(path, "set exactly one of constant, steps, diurnal")
	}
	for i, s := range r.Spikes {
		p := fmt.Sprintf("%s.spikes[%d]", path, i)
		if s.Start < 0 {
			c.add(p+".start", "must not be negative")
		}
		if s.Duration <= 0 {
			c.add(p+".duration", "must be positive")
		}
		if !finite(s.Factor) || s.Factor < 0 || s.Factor > 1e4 {
			c.add(p+".factor", "must be 0 to 1e4 (0 means 1)")
		}
		if !finite(s.Add) || s.Add < 0 || s.Add > 1e6 {
			c.add(p+".add", "must be 0 to 1e6 requests per second")
		}
	}
}

// Names returns the names of a map's keys, sorted, for messages.
func names[V any](m map[string]V) string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, strconv.Quote(k))
	}
	sort.Strings(ks)
	return strings.Join(ks, ", ")
}

// create checks a stream's on-demand fields: a template only with create,
// and a fleet to take the template from where the stream sends (its
// cluster, or at least one cluster for a multi-cluster stream; the others
// answer no match).
func (c *checker) create(p string, sp *Spec, w *Stream) {
	if !w.Create {
		if w.Template != "" {
			c.add(p+".template", "is only read with create: true")
		}
		return
	}
	if w.Template != "" {
		c.name(p+".template", w.Template)
	}
	found := false
	for _, cl := range sp.Clusters {
		if w.Cluster != "" && cl.Name != w.Cluster {
			continue
		}
		for _, f := range cl.Fleets {
			if templateFits(f, w) {
				found = true
			}
		}
	}
	if found {
		return
	}
	what := "no fleet matches the request's gameServerSelectors"
	if w.Template != "" {
		what = fmt.Sprintf("no fleet is named %q", w.Template)
	}
	where := "in any cluster"
	if w.Cluster != "" {
		where = "in cluster " + w.Cluster
	}
	c.add(p+".create", "%s %s to take the on-demand servers' template from", what, where)
}

// templateFits reports whether a Create request of w can take f's
// template: f is the one named, or (none named) one of the selectors
// matches f's labels, the fleet label (agones.dev/fleet) included; no
// selector takes any fleet. The simulator picks the same way.
func templateFits(f Fleet, w *Stream) bool {
	if w.Template != "" {
		return f.Name == w.Template
	}
	if len(w.Request.Selectors) == 0 {
		return true
	}
	for _, sel := range w.Request.Selectors {
		ok := true
		for k, v := range sel.MatchLabels {
			got, has := f.Labels[k]
			if k == core.FleetLabel {
				got, has = f.Name, true
			}
			if !has || got != v {
				ok = false
			}
		}
		if ok {
			return true
		}
	}
	return false
}
