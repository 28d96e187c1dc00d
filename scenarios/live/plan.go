package live

import (
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strings"
	"time"

	"github.com/quartermaster-dev/quartermaster/allocator/memory"
	"github.com/quartermaster-dev/quartermaster/core"
	"github.com/quartermaster-dev/quartermaster/kindcluster/rig"
	"github.com/quartermaster-dev/quartermaster/scenarios"
	"github.com/quartermaster-dev/quartermaster/sim"
)

// Plan is what a live run of a scenario brings up and sends, worked out
// before anything starts: every duration in it is wall-clock time, already
// divided by the time scale.
type Plan struct {
	Scenario *scenarios.Scenario
	// Backend is where the game servers live: BackendMemory (one
	// memory-backend allocator per cluster) or BackendKubernetes (the
	// multi-cluster rig: API servers, fleet agents, allocator replicas).
	Backend string
	// Scale is the time scale N: one wall second is N scenario seconds.
	Scale float64
	// Entry is the cluster whose allocator the callers send multi-cluster
	// requests to; it routes them by the policies, serving locally or
	// forwarding, as a matchmaker's own cluster does.
	Entry    string
	Clusters []ClusterPlan
	Streams  []StreamPlan
	Outages  []Outage
	// Duration and SampleInterval are the run's and the series' wall times.
	Duration       time.Duration
	SampleInterval time.Duration
	// ForwardTimeout bounds one forwarded call, Deadline a whole request
	// (the scenario's routing, not scaled: they are per-request times).
	ForwardTimeout, Deadline time.Duration
	// BreakerOpen and BreakerMaxOpen are the forwarders' breaker periods
	// (1s and 30s by default), scaled like the rest of the timeline, so that
	// a cluster back from an outage is probed as soon, in scenario time, as
	// it would be at scale 1.
	BreakerOpen, BreakerMaxOpen time.Duration
	// NotModelled names, by path in the file, what the live run does not
	// reproduce and why.
	NotModelled []string
}

// ClusterPlan is one cluster's allocator.
type ClusterPlan struct {
	Name, Provider, Region string
	// Fleets is the fleets file its `qm serve` runs with.
	Fleets memory.Config
	// CallerLink is the latency of the callers' link to it, ForwardLink
	// that of the entry's link to it: each the cluster's RTT, half each
	// way, as the simulator's router pays it.
	CallerLink, ForwardLink rig.Link
}

// StreamPlan is one workload stream, scaled.
type StreamPlan struct {
	Name    string
	Rate    sim.RateSpec
	Session sim.Dist
	// Cluster, when set, receives every request directly; otherwise the
	// requests are multi-cluster and go to the entry.
	Cluster string
	Request core.Request
}

// Outage is a cluster unreachable in [Start, End) of wall time from the
// run's start.
type Outage struct {
	Cluster    string
	Start, End time.Duration
}

// Bounds of a live run on one machine.
const (
	// MaxScale keeps sessions and start-up delays from shrinking below
	// what a process on a loaded machine can time.
	MaxScale = 3600
	// maxRate is the most arrivals per second one generator sends here
	// without falling behind on two shared cores.
	maxRate = 2000
	// maxServers bounds the game servers of all the allocators.
	maxServers = 50_000
)

// Backends a live run can use.
const (
	BackendMemory     = "memory"
	BackendKubernetes = "kubernetes"
)

// kubeMaxRate bounds the arrivals per second on the kubernetes rig: every
// allocation is an API write, its release another, and the fleet agent's
// replacement two more, on API servers that share these two cores (about
// 250 GameServer writes/s in all, docs/local-clusters.md).
const kubeMaxRate = 60

// Forwarder breaker defaults (allocator/forward's), scaled by the plan.
const (
	breakerOpen    = time.Second
	breakerMaxOpen = 30 * time.Second
)

// NewPlan works out the live run of s at time scale scale on backend
// (BackendMemory when empty): its outages and entry, its clusters with
// their allocators and fleets, its streams, and everything the run will
// not reproduce, named.
func NewPlan(s *scenarios.Scenario, scale float64, backend string) (*Plan, error) {
	if math.IsNaN(scale) || scale < 1 || scale > MaxScale {
		return nil, fmt.Errorf("time scale %v: must be 1 to %d (N scenario seconds per wall second)", scale, MaxScale)
	}
	if backend == "" {
		backend = BackendMemory
	}
	if backend != BackendMemory && backend != BackendKubernetes {
		return nil, fmt.Errorf("backend %q: want %s or %s", backend, BackendMemory, BackendKubernetes)
	}
	cfg, err := s.Config()
	if err != nil {
		return nil, err
	}
	sp := &s.Spec
	p := &Plan{
		Scenario:       s,
		Backend:        backend,
		Scale:          scale,
		Duration:       div(cfg.Duration, scale),
		SampleInterval: div(sampleInterval(cfg), scale),
		ForwardTimeout: sp.Routing.ForwardTimeout.D(),
		Deadline:       sp.Routing.Deadline.D(),
		BreakerOpen:    max(div(breakerOpen, scale), time.Millisecond),
		BreakerMaxOpen: max(div(breakerMaxOpen, scale), time.Millisecond),
	}
	if err := p.planOutages(); err != nil {
		return nil, err
	}
	if err := p.planClusters(); err != nil {
		return nil, err
	}
	if err := p.planStreams(cfg); err != nil {
		return nil, err
	}
	p.note("spec.routing: per-request times (RTTs, forwardTimeout %v, deadline %v) are not scaled by the time scale", p.ForwardTimeout, p.Deadline)
	p.note("forwarding: the allocators' breakers skip a cluster after 3 transport failures in a row (probing after %v to %v of wall time), where the simulator tries it on every request and pays the forwardTimeout",
		p.BreakerOpen, p.BreakerMaxOpen)
	p.NotModelled = append(p.NotModelled, unknownFields(s)...)
	return p, nil
}

// note names something the live run does not reproduce.
func (p *Plan) note(format string, args ...any) {
	p.NotModelled = append(p.NotModelled, fmt.Sprintf(format, args...))
}

func (p *Plan) kube() bool { return p.Backend == BackendKubernetes }

// planOutages turns the scenario's outages into link outages on the wall
// clock, and picks the entry: the first cluster never in an outage, since
// the callers must reach it, as a matchmaker reaches its own cluster's
// allocator.
func (p *Plan) planOutages() error {
	sp := &p.Scenario.Spec
	down := map[string]bool{}
	for i, f := range sp.Faults {
		if f.Type != "outage" {
			p.note("spec.faults[%d]: fault type %q has no live form", i, f.Type)
			continue
		}
		if p.kube() {
			// Switching the rig's link faults while the links carry load
			// can deadlock inside toxiproxy; the memory rig puts gates of
			// its own in front of the links instead.
			return fmt.Errorf("spec.faults[%d]: outages run on the memory backend only (--backend memory)", i)
		}
		down[f.Cluster] = true
		p.note("spec.faults[%d]: %s's links refuse new connections and cut open ones from %v to %v (wall); the entry's breaker then skips it, so requests do not each pay the forwardTimeout the simulator charges",
			i, f.Cluster, div(f.Start.D(), p.Scale), div(f.End.D(), p.Scale))
		p.Outages = append(p.Outages, Outage{Cluster: f.Cluster, Start: div(f.Start.D(), p.Scale), End: div(f.End.D(), p.Scale)})
	}
	for _, c := range sp.Clusters {
		if !down[c.Name] {
			p.Entry = c.Name
			return nil
		}
	}
	p.Entry = sp.Clusters[0].Name
	p.note("spec.faults: every cluster has an outage; the callers reach %s, so its outages cut the callers off too", p.Entry)
	return nil
}

// planClusters plans every cluster: its links, its allocator and its
// fleets, within the servers one machine holds.
func (p *Plan) planClusters() error {
	sp := &p.Scenario.Spec
	// Only multi-cluster requests go through the entry.
	multi := false
	for _, w := range sp.Workload {
		multi = multi || w.MultiCluster != nil
	}
	servers := 0
	for i, c := range sp.Clusters {
		path := fmt.Sprintf("spec.clusters[%d]", i)
		cp := ClusterPlan{Name: c.Name, Provider: c.Provider, Region: c.Region}
		link, exact := linkOf(c.RTT)
		cp.CallerLink, cp.ForwardLink = link, link
		if !exact {
			p.note("%s.rtt: a link of %v each way with up to %v of uniform jitter, not the simulator's distribution", path, link.Latency.D(), link.Jitter.D())
		}
		if c.Name != p.Entry && multi {
			p.note("%s.rtt: a request served here pays the entry cluster's (%s) round trip too: callers reach %s through %s's allocator, where the simulator's router reaches it directly",
				path, p.Entry, c.Name, p.Entry)
		}
		cp.Fleets = memory.Config{APIVersion: memory.APIVersion, Kind: memory.Kind, Nodes: c.Nodes.Count}
		if p.kube() {
			p.note("%s.nodes: the fleet agent places servers on %d nodes of %d; packing, node-hours and cost are not measured live", path, c.Nodes.Count, c.Nodes.Slots)
		} else {
			p.note("%s.nodes: the memory backend's nodes have no slot limit; packing, node-hours and cost are not measured live", path)
		}
		if c.CostPerNodeHour != 0 {
			p.note("%s.costPerNodeHour: no cost is measured live", path)
		}
		p.planAllocator(path, c)
		for j, f := range c.Fleets {
			fs := p.planFleet(fmt.Sprintf("%s.fleets[%d]", path, j), c, f)
			servers += fs.Replicas
			cp.Fleets.Fleets = append(cp.Fleets.Fleets, fs)
		}
		p.Clusters = append(p.Clusters, cp)
	}
	if servers > maxServers {
		return fmt.Errorf("spec.clusters: %d game servers live in all; the live run holds at most %d on one machine", servers, maxServers)
	}
	return nil
}

// planAllocator names what of a cluster's allocator model (at path) the
// backend's real allocators do not follow.
func (p *Plan) planAllocator(path string, c scenarios.Cluster) {
	a := c.Allocator
	switch {
	case p.kube():
		p.note("%s.apiServer.writeLatency: the rig's API server is real (etcd without fsync, on this machine); its own write latency applies", path)
		if d := a.InformerDelay; d != nil && !isZero(d) {
			p.note("%s.allocator.informerDelay: the allocators' informers are real; their own delay applies", path)
		}
		if *a.Replicas > 1 && !a.ReplicaShards {
			p.note("%s.allocator.replicaShards: the rig's %d replicas each prefer their own shard of the servers (qm serve --replica-shard)", path, *a.Replicas)
		}
	default:
		if d := c.APIServer.WriteLatency; d != nil && !isZero(d) {
			p.note("%s.apiServer.writeLatency: the memory backend commits an allocation at once; there is no API server", path)
		}
		if *a.Replicas > 1 {
			p.note("%s.allocator.replicas: one allocator process, not %d replicas (memory backends cannot share servers), so no write conflicts", path, *a.Replicas)
		}
		if d := a.InformerDelay; d != nil && !isZero(d) {
			p.note("%s.allocator.informerDelay: the memory backend's cache is its source of truth; nothing is stale", path)
		}
	}
	if d := a.DecisionTime; d != nil && !isZero(d) {
		p.note("%s.allocator.decisionTime: the allocator's own decision time applies", path)
	}
	if a.Workers > 0 {
		p.note("%s.allocator.workers: the allocator serves requests concurrently without a worker bound", path)
	}
	if !p.kube() && (a.ReplicaShards || a.PackedSpread > 1) {
		p.note("%s.allocator.replicaShards/packedSpread: one replica allocates exact Packed", path)
	}
}

// planFleet is a fleet (at path fp) of cluster c as the live run holds it:
// a fixed size, replacements started in the scaled start-up delay.
func (p *Plan) planFleet(fp string, c scenarios.Cluster, f scenarios.Fleet) memory.FleetSpec {
	size := f.Replicas
	if b := f.Buffer; b != nil {
		// A fixed fleet as large as the autoscaler could grow it: the
		// live fleet never waits for a scale-up, and the difference is
		// named.
		size = max(f.Replicas, min(b.Max, c.Nodes.Count*c.Nodes.Slots))
		p.note("%s.buffer: no autoscaler live; the fleet has a fixed %d servers (the buffer's max, within the nodes' slots), so it never waits for a scale-up", fp, size)
	}
	start, exact := meanOf(f.StartupDelay)
	switch {
	case p.kube():
		p.note("%s.startupDelay: the fleet agent starts a replacement in 100 ms of wall time, whatever the file says", fp)
		if f.SessionEnd == "Ready" {
			p.note("%s.sessionEnd: a released server is shut down and replaced by the fleet agent", fp)
		}
	case f.SessionEnd == "Ready":
		// The memory backend shuts a released server down; a new one
		// Ready at once keeps the capacity a server Ready again gives. A
		// fixed fleet never scales up, so the start-up delay has nothing
		// else to apply to.
		start = 0
		p.note("%s.sessionEnd: a released server is shut down and replaced at once by a new Ready one (the same capacity, another name)", fp)
	case !exact:
		p.note("%s.startupDelay: every replacement starts in the distribution's mean, %v (scaled)", fp, div(start, p.Scale))
	}
	if !p.kube() && f.Scheduling == "Distributed" {
		p.note("%s.scheduling: the memory backend spreads servers over its nodes whatever the fleet's scheduling", fp)
	}
	fs := memory.FleetSpec{
		Name: f.Name, Namespace: "default", Replicas: size, Labels: f.Labels,
		StartupDuration: memory.Duration{Duration: div(start, p.Scale)},
	}
	if len(f.Counters) > 0 {
		fs.Counters = map[string]memory.CounterSpec{}
		for k, v := range f.Counters {
			fs.Counters[k] = memory.CounterSpec{Capacity: v.Capacity}
		}
	}
	if len(f.Lists) > 0 {
		fs.Lists = map[string]memory.ListSpec{}
		for k, v := range f.Lists {
			fs.Lists[k] = memory.ListSpec{Capacity: v.Capacity}
		}
	}
	return fs
}

// planStreams scales every stream's rate and session lengths, within the
// rate one generator (and, on kubernetes, the rig's API servers) takes.
func (p *Plan) planStreams(cfg *sim.Config) error {
	for i, st := range cfg.Streams {
		rate := scaleRate(st.Rate, p.Scale)
		sched, err := sim.NewSchedule(rate, p.Duration)
		if err != nil {
			return fmt.Errorf("spec.workload[%d].rate: scaled by %v: %v", i, p.Scale, err)
		}
		if peak := peakRate(sched, p.Duration); peak > maxRate {
			return fmt.Errorf("spec.workload[%d]: at time scale %v the rate reaches %.0f requests/s; one generator here sends at most %d/s (choose a smaller --time-scale)",
				i, p.Scale, peak, maxRate)
		} else if p.kube() && peak > kubeMaxRate {
			return fmt.Errorf("spec.workload[%d]: at time scale %v the rate reaches %.0f requests/s; the kubernetes rig's API servers on this machine take about %d/s with releases and replacements (choose a smaller --time-scale)",
				i, p.Scale, peak, kubeMaxRate)
		}
		p.Streams = append(p.Streams, StreamPlan{
			Name: st.Name, Rate: rate, Session: scaleDist(st.Session, p.Scale),
			Cluster: st.Cluster, Request: st.Request,
		})
	}
	return nil
}

// sampleInterval is the simulator's default: duration/240.
func sampleInterval(cfg *sim.Config) time.Duration {
	if cfg.SampleInterval > 0 {
		return cfg.SampleInterval
	}
	return cfg.Duration / 240
}

func div(d time.Duration, scale float64) time.Duration {
	return time.Duration(math.Round(float64(d) / scale))
}

func isZero(d *scenarios.Dist) bool {
	m, exact := meanOf(d)
	return exact && m == 0
}

// meanOf is a distribution's mean, and whether the distribution is that
// one value.
func meanOf(d *scenarios.Dist) (time.Duration, bool) {
	sd := d.Sim()
	return sd.MeanValue(), sd.Kind == "" || sd.Kind == sim.Constant
}

// linkOf turns a round-trip distribution into a link (half of it each way).
// Only a constant is exact: toxiproxy's jitter is uniform.
func linkOf(d *scenarios.Dist) (rig.Link, bool) {
	half := func(x time.Duration) rig.Duration { return rig.Duration(x / 2) }
	switch {
	case d == nil:
		return rig.Link{}, true
	case d.Constant != nil:
		return rig.Link{Latency: half(d.Constant.D())}, true
	case d.LogNormal != nil:
		// The median each way, jitter reaching a quarter of the way to the
		// p99 round trip on each leg, as the rig's topology files do.
		return rig.Link{Latency: half(d.LogNormal.Median.D()), Jitter: rig.Duration((d.LogNormal.P99.D() - d.LogNormal.Median.D()) / 4)}, false
	case d.Uniform != nil:
		mid := (d.Uniform.Min.D() + d.Uniform.Max.D()) / 2
		return rig.Link{Latency: half(mid), Jitter: rig.Duration((d.Uniform.Max.D() - d.Uniform.Min.D()) / 4)}, false
	}
	m, _ := meanOf(d)
	return rig.Link{Latency: half(m), Jitter: half(m) / 2}, false
}

// scaleRate compresses a rate schedule's time axis by f and multiplies its
// rates by f: the same requests, f times as fast.
func scaleRate(r sim.RateSpec, f float64) sim.RateSpec {
	out := sim.RateSpec{}
	if r.Constant != nil {
		c := *r.Constant * f
		out.Constant = &c
	}
	for _, s := range r.Steps {
		out.Steps = append(out.Steps, sim.Step{At: div(s.At, f), Rate: s.Rate * f})
	}
	if r.Diurnal != nil {
		d := *r.Diurnal
		d.Mean, d.Amplitude = d.Mean*f, d.Amplitude*f
		d.Period, d.Peak = div(d.Period, f), div(d.Peak, f)
		out.Diurnal = &d
	}
	for _, s := range r.Spikes {
		// The factor multiplies the already scaled rate; what is added is
		// a rate and scales with it.
		out.Spikes = append(out.Spikes, sim.Spike{Start: div(s.Start, f), Duration: div(s.Duration, f), Factor: s.Factor, Add: s.Add * f})
	}
	return out
}

// scaleDist divides every duration of a distribution by f.
func scaleDist(d sim.Dist, f float64) sim.Dist {
	d.Value, d.Mean, d.Median, d.P99 = div(d.Value, f), div(d.Mean, f), div(d.Median, f), div(d.P99, f)
	d.Min, d.Max, d.Stddev = div(d.Min, f), div(d.Max, f), div(d.Stddev, f)
	return d
}

// peakRate is the schedule's highest rate, sampled finely enough for any
// step or spike to show.
func peakRate(s *sim.Schedule, horizon time.Duration) float64 {
	peak := 0.0
	const n = 4096
	for i := 0; i <= n; i++ {
		t := time.Duration(float64(horizon) * float64(i) / n)
		peak = math.Max(peak, s.Rate(min(t, horizon-1)))
	}
	return peak
}

// handled are the fields of a scenario file the live run reproduces, or
// names in NotModelled itself when it does not, by their path with list
// indexes dropped. A field the file sets outside these (one added to the
// format after this runner) is named as not modelled live.
var handled = []string{
	"apiVersion", "kind", "metadata",
	"spec.seed", "spec.duration", "spec.sampleInterval", "spec.routing.forwardTimeout", "spec.routing.deadline",
	"spec.clusters[].name", "spec.clusters[].provider", "spec.clusters[].region", "spec.clusters[].costPerNodeHour",
	"spec.clusters[].rtt", "spec.clusters[].nodes", "spec.clusters[].apiServer.writeLatency",
	"spec.clusters[].allocator.replicas", "spec.clusters[].allocator.informerDelay", "spec.clusters[].allocator.workers",
	"spec.clusters[].allocator.maxRetries", "spec.clusters[].allocator.decisionTime",
	"spec.clusters[].allocator.replicaShards", "spec.clusters[].allocator.packedSpread",
	"spec.clusters[].fleets[].name", "spec.clusters[].fleets[].labels", "spec.clusters[].fleets[].replicas",
	"spec.clusters[].fleets[].scheduling", "spec.clusters[].fleets[].startupDelay", "spec.clusters[].fleets[].sessionEnd",
	"spec.clusters[].fleets[].buffer", "spec.clusters[].fleets[].counters", "spec.clusters[].fleets[].lists",
	"spec.policies[].name", "spec.policies[].labels", "spec.policies[].priority", "spec.policies[].weight",
	"spec.policies[].connectionInfo.clusterName",
	"spec.workload[].name", "spec.workload[].rate", "spec.workload[].sessionLength", "spec.workload[].cluster",
	"spec.workload[].multiCluster.policySelector", "spec.workload[].request.gameServerSelectors",
	"spec.workload[].request.scheduling",
	"spec.faults[].type", "spec.faults[].cluster", "spec.faults[].start", "spec.faults[].end",
	"spec.phases[].name", "spec.phases[].start", "spec.phases[].end",
	"spec.expectations",
}

// unknownFields names every field s sets that handled does not cover.
func unknownFields(s *scenarios.Scenario) []string {
	b, err := json.Marshal(s)
	if err != nil {
		return []string{"the scenario could not be read field by field (" + err.Error() + "); fields added after this runner may not be modelled live"}
	}
	var tree any
	if err := json.Unmarshal(b, &tree); err != nil {
		return []string{"the scenario could not be read field by field (" + err.Error() + ")"}
	}
	return unknownIn(tree)
}

// unknownIn names the leaves of a scenario's JSON form outside handled.
func unknownIn(tree any) []string {
	seen := map[string]string{} // normalised path -> first concrete path
	var walk func(v any, path, norm string)
	walk = func(v any, path, norm string) {
		if norm != "" && covered(norm) {
			return
		}
		switch x := v.(type) {
		case map[string]any:
			if len(x) == 0 {
				break
			}
			for k, c := range x {
				p, n := k, k
				if path != "" {
					p, n = path+"."+k, norm+"."+k
				}
				walk(c, p, n)
			}
			return
		case []any:
			for i, c := range x {
				walk(c, fmt.Sprintf("%s[%d]", path, i), norm+"[]")
			}
			return
		}
		if _, ok := seen[norm]; !ok {
			seen[norm] = path
		}
	}
	walk(tree, "", "")
	var out []string
	for _, path := range seen {
		out = append(out, path+": not modelled live (this live runner does not know the field)")
	}
	sort.Strings(out)
	return out
}

func covered(norm string) bool {
	for _, h := range handled {
		if norm == h || strings.HasPrefix(norm, h+".") || strings.HasPrefix(norm, h+"[") {
			return true
		}
	}
	return false
}
