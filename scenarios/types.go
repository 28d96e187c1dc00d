package scenarios

import (
	"encoding/json"
	"fmt"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/quartermaster-dev/quartermaster/core"
	"github.com/quartermaster-dev/quartermaster/sim"
	"github.com/quartermaster-dev/quartermaster/yamlfile"
)

// APIVersion and Kind identify a scenario file.
const (
	APIVersion = "quartermaster.dev/v1alpha1"
	Kind       = "Scenario"
)

// Scenario is one scenario file.
type Scenario struct {
	APIVersion string   `yaml:"apiVersion" json:"apiVersion"`
	Kind       string   `yaml:"kind" json:"kind"`
	Metadata   Metadata `yaml:"metadata" json:"metadata"`
	Spec       Spec     `yaml:"spec" json:"spec"`
}

// Metadata names the scenario.
type Metadata struct {
	Name        string `yaml:"name" json:"name"`
	Description string `yaml:"description,omitempty" json:"description,omitempty"`
}

// Spec is what to simulate and what to expect.
type Spec struct {
	// Seed drives every random stream; default 1.
	Seed *uint64 `yaml:"seed,omitempty" json:"seed,omitempty"`
	// Duration of the run in virtual time.
	Duration Duration `yaml:"duration" json:"duration"`
	// SampleInterval is the time-series resolution (default duration/240).
	SampleInterval Duration `yaml:"sampleInterval,omitempty" json:"sampleInterval,omitempty"`
	// Start is the instant virtual time zero stands for, against which
	// the policies' windows are read (default 2026-01-01T00:00:00Z, a
	// Thursday: sim.Epoch).
	Start        *Instant      `yaml:"start,omitempty" json:"start,omitempty"`
	Routing      Routing       `yaml:"routing,omitempty" json:"routing,omitempty"`
	Clusters     []Cluster     `yaml:"clusters" json:"clusters"`
	Policies     []Policy      `yaml:"policies,omitempty" json:"policies,omitempty"`
	Workload     []Stream      `yaml:"workload" json:"workload"`
	Faults       []Fault       `yaml:"faults,omitempty" json:"faults,omitempty"`
	Phases       []Phase       `yaml:"phases,omitempty" json:"phases,omitempty"`
	Expectations []Expectation `yaml:"expectations,omitempty" json:"expectations,omitempty"`
}

// Routing sets how the matchmaker's router forwards multi-cluster requests.
type Routing struct {
	// ForwardTimeout is charged for a try against a cluster that is down
	// (default 10s, Agones' per-call timeout).
	ForwardTimeout Duration `yaml:"forwardTimeout,omitempty" json:"forwardTimeout,omitempty"`
	// Deadline ends a request that has taken this long without trying
	// further clusters (default 30s, Agones' total).
	Deadline Duration `yaml:"deadline,omitempty" json:"deadline,omitempty"`
	// KeyRetries is how many times the forwarder tries the same cluster
	// again, with the request's idempotency key, after its answer was
	// lost, before it answers the caller Unavailable (default 1).
	KeyRetries *int `yaml:"keyRetries,omitempty" json:"keyRetries,omitempty"`
	// ReconcileDelay is accepted, and has no effect: a keyed request
	// never moves on from a cluster that may hold its allocation, so the
	// model leaves nothing for the forwarder to reconcile (see
	// sim.Losses).
	ReconcileDelay Duration `yaml:"reconcileDelay,omitempty" json:"reconcileDelay,omitempty"`
	// KeyWindow is how long an allocation made for a key waits for a
	// retry to take it before it is released (default 10m).
	KeyWindow Duration `yaml:"keyWindow,omitempty" json:"keyWindow,omitempty"`
}

// Cluster is one cluster.
type Cluster struct {
	Name            string    `yaml:"name" json:"name"`
	Provider        string    `yaml:"provider" json:"provider"`
	Region          string    `yaml:"region,omitempty" json:"region,omitempty"`
	CostPerNodeHour float64   `yaml:"costPerNodeHour,omitempty" json:"costPerNodeHour,omitempty"`
	RTT             *Dist     `yaml:"rtt,omitempty" json:"rtt,omitempty"`
	Nodes           Nodes     `yaml:"nodes" json:"nodes"`
	APIServer       APIServer `yaml:"apiServer,omitempty" json:"apiServer,omitempty"`
	Allocator       Allocator `yaml:"allocator,omitempty" json:"allocator,omitempty"`
	// AnswerLoss is the fraction of the cluster's answers to forwarded
	// requests that are lost on the link back after the allocation they
	// carry committed (the loss model; default none).
	AnswerLoss *float64 `yaml:"answerLoss,omitempty" json:"answerLoss,omitempty"`
	Fleets     []Fleet  `yaml:"fleets" json:"fleets"`
}

// Nodes is a cluster's node pool: Count nodes of Slots game servers each.
type Nodes struct {
	Count int `yaml:"count" json:"count"`
	Slots int `yaml:"slots" json:"slots"`
}

// APIServer models the cluster's Kubernetes API server.
type APIServer struct {
	// WriteLatency of an update (default lognormal, median 15ms, p99 60ms).
	WriteLatency *Dist `yaml:"writeLatency,omitempty" json:"writeLatency,omitempty"`
}

// Allocator models the cluster's allocator service.
type Allocator struct {
	Replicas *int `yaml:"replicas,omitempty" json:"replicas,omitempty"` // default 1
	// InformerDelay is how late each replica's cache sees a change
	// (default constant 0).
	InformerDelay *Dist `yaml:"informerDelay,omitempty" json:"informerDelay,omitempty"`
	Workers       int   `yaml:"workers,omitempty" json:"workers,omitempty"`
	MaxRetries    *int  `yaml:"maxRetries,omitempty" json:"maxRetries,omitempty"` // default 10
	DecisionTime  *Dist `yaml:"decisionTime,omitempty" json:"decisionTime,omitempty"`
	// ReplicaShards gives each replica a preferred share of the servers
	// (as `qm serve --replicas N --replica-shard I`), so that replicas stop
	// racing for the same Packed server. PackedSpread is how many of the
	// best matches a Packed choice is drawn from (default 1, or 64 with
	// replica shards).
	ReplicaShards bool `yaml:"replicaShards,omitempty" json:"replicaShards,omitempty"`
	PackedSpread  int  `yaml:"packedSpread,omitempty" json:"packedSpread,omitempty"`
}

// Fleet is one fleet of a cluster.
type Fleet struct {
	Name   string            `yaml:"name" json:"name"`
	Labels map[string]string `yaml:"labels,omitempty" json:"labels,omitempty"`
	// Replicas at the start, all Ready (and the fixed size without a buffer).
	Replicas int `yaml:"replicas" json:"replicas"`
	// Scheduling places servers on nodes: Packed (default) or Distributed.
	Scheduling   string `yaml:"scheduling,omitempty" json:"scheduling,omitempty"`
	StartupDelay *Dist  `yaml:"startupDelay,omitempty" json:"startupDelay,omitempty"` // default constant 10s
	// SessionEnd: Shutdown (default; replaced by a new server) or Ready.
	SessionEnd string  `yaml:"sessionEnd,omitempty" json:"sessionEnd,omitempty"`
	Buffer     *Buffer `yaml:"buffer,omitempty" json:"buffer,omitempty"`
	// Counters and Lists give every server of the fleet these Agones
	// counters (count 0) and lists (no values) of the given capacity. A
	// live rig creates them on its GameServers; the simulator's requests
	// select by labels only, so there they change nothing.
	Counters map[string]Capacity `yaml:"counters,omitempty" json:"counters,omitempty"`
	Lists    map[string]Capacity `yaml:"lists,omitempty" json:"lists,omitempty"`
	// IdleShutdown is how long a server allocated for a caller who never
	// learnt of it (a leaked server) stays Allocated before it shuts
	// itself down, as a game server no player joins may (default: never
	// within the run, as Agones leaves it).
	IdleShutdown Duration `yaml:"idleShutdown,omitempty" json:"idleShutdown,omitempty"`
}

// Capacity is a counter's or list's capacity.
type Capacity struct {
	Capacity int64 `yaml:"capacity" json:"capacity"`
}

// Buffer is a buffer FleetAutoscaler.
type Buffer struct {
	Size         int      `yaml:"size" json:"size"`
	Min          int      `yaml:"min,omitempty" json:"min,omitempty"`
	Max          int      `yaml:"max" json:"max"`
	SyncInterval Duration `yaml:"syncInterval,omitempty" json:"syncInterval,omitempty"` // default 30s
}

// Policy is a GameServerAllocationPolicy.
type Policy struct {
	Name           string            `yaml:"name" json:"name"`
	Labels         map[string]string `yaml:"labels,omitempty" json:"labels,omitempty"`
	Priority       int32             `yaml:"priority" json:"priority"`
	Weight         *int              `yaml:"weight,omitempty" json:"weight,omitempty"` // default 1
	ConnectionInfo ConnectionInfo    `yaml:"connectionInfo" json:"connectionInfo"`
	// Window is when the policy is in force (default: always). A live
	// allocator reads the same from the policy's quartermaster.dev/window-*
	// annotations.
	Window *PolicyWindow `yaml:"window,omitempty" json:"window,omitempty"`
}

// PolicyWindow is a policy's time window (core.Window): in force from
// From until Until, only during the During recurrences when there are
// any, and never during Except's.
type PolicyWindow struct {
	From   *WindowTime `yaml:"from,omitempty" json:"from,omitempty"`
	Until  *WindowTime `yaml:"until,omitempty" json:"until,omitempty"`
	During Recurrences `yaml:"during,omitempty" json:"during,omitempty"`
	Except Recurrences `yaml:"except,omitempty" json:"except,omitempty"`
}

// Instant is an RFC 3339 instant with its offset ("2026-11-23T00:00:00+01:00").
type Instant struct{ time.Time }

// UnmarshalYAML reads an RFC 3339 instant.
func (i *Instant) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("line %d: a %s is not an instant: write one like 2026-11-23T00:00:00+01:00", n.Line, yamlfile.NodeKind(n))
	}
	t, err := core.ParseInstant(n.Value)
	if err != nil {
		return fmt.Errorf("line %d: %v", n.Line, err)
	}
	i.Time = t
	return nil
}

// MarshalYAML writes the instant as RFC 3339.
func (i Instant) MarshalYAML() (any, error) { return i.Format(time.RFC3339Nano), nil }

// MarshalJSON writes the instant as RFC 3339.
func (i Instant) MarshalJSON() ([]byte, error) {
	return []byte(`"` + i.Format(time.RFC3339Nano) + `"`), nil
}

// WindowTime is a window's edge: an RFC 3339 instant, or a duration after
// spec.start ("36h"), as the scenario's phases and faults are written.
type WindowTime struct {
	At     time.Time     // when an instant
	Offset time.Duration // when a duration
	IsAt   bool
}

// UnmarshalYAML reads an instant or a duration.
func (w *WindowTime) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("line %d: a %s is not a window edge: write an instant like 2026-11-23T18:00:00+01:00 or a duration after spec.start like 42h", n.Line, yamlfile.NodeKind(n))
	}
	if d, err := time.ParseDuration(n.Value); err == nil {
		*w = WindowTime{Offset: d}
		return nil
	}
	t, err := core.ParseInstant(n.Value)
	if err != nil {
		return fmt.Errorf("line %d: %q is neither an RFC 3339 instant (like 2026-11-23T18:00:00+01:00) nor a duration after spec.start (like 42h)", n.Line, n.Value)
	}
	*w = WindowTime{At: t, IsAt: true}
	return nil
}

// resolve is the edge's instant for a run starting at start.
func (w *WindowTime) resolve(start time.Time) time.Time {
	if w.IsAt {
		return w.At
	}
	return start.Add(w.Offset)
}

func (w WindowTime) String() string {
	if w.IsAt {
		return w.At.Format(time.RFC3339Nano)
	}
	return w.Offset.String()
}

// MarshalYAML writes the edge as it was read.
func (w WindowTime) MarshalYAML() (any, error) { return w.String(), nil }

// MarshalJSON writes the edge as it was read.
func (w WindowTime) MarshalJSON() ([]byte, error) { return []byte(`"` + w.String() + `"`), nil }

// Recurrences is one recurrence ("weekdays 18:00-23:00 Europe/Paris") or a
// list of them; see core.ParseRecurrence.
type Recurrences []core.Recurrence

// UnmarshalYAML reads a string or a list of strings.
func (r *Recurrences) UnmarshalYAML(n *yaml.Node) error {
	items := []*yaml.Node{n}
	switch n.Kind {
	case yaml.ScalarNode:
	case yaml.SequenceNode:
		items = n.Content
	default:
		return fmt.Errorf("line %d: a %s is not a recurrence: write %s, or a list of them", n.Line, yamlfile.NodeKind(n), core.RecurrenceSyntax)
	}
	out := Recurrences{}
	for _, it := range items {
		if it.Kind != yaml.ScalarNode {
			return fmt.Errorf("line %d: a %s is not a recurrence: write %s", it.Line, yamlfile.NodeKind(it), core.RecurrenceSyntax)
		}
		rec, err := core.ParseRecurrence(it.Value)
		if err != nil {
			return fmt.Errorf("line %d: %v", it.Line, err)
		}
		out = append(out, rec)
	}
	*r = out
	return nil
}

func (r Recurrences) strings() []string {
	out := make([]string, len(r))
	for i, x := range r {
		out[i] = x.String()
	}
	return out
}

// MarshalYAML writes the recurrences as a list of strings.
func (r Recurrences) MarshalYAML() (any, error) { return r.strings(), nil }

// MarshalJSON writes the recurrences as a list of strings.
func (r Recurrences) MarshalJSON() ([]byte, error) { return json.Marshal(r.strings()) }

// Core is the window for a run whose virtual time zero is start; nil
// (always) when w is.
func (w *PolicyWindow) Core(start time.Time) *core.Window {
	if w == nil {
		return nil
	}
	out := &core.Window{During: w.During, Except: w.Except}
	if w.From != nil {
		out.From = w.From.resolve(start)
	}
	if w.Until != nil {
		out.Until = w.Until.resolve(start)
	}
	return out
}

// StartTime is the instant of virtual time zero: spec.start, else
// sim.Epoch.
func (sp *Spec) StartTime() time.Time {
	if sp.Start == nil {
		return sim.Epoch
	}
	return sp.Start.Time
}

// ConnectionInfo names the cluster a policy points at.
type ConnectionInfo struct {
	ClusterName string `yaml:"clusterName" json:"clusterName"`
}

// Stream is one source of allocation requests from the matchmaker.
type Stream struct {
	Name          string `yaml:"name" json:"name"`
	Rate          Rate   `yaml:"rate" json:"rate"`
	SessionLength *Dist  `yaml:"sessionLength" json:"sessionLength"`
	// Cluster sends every request to one cluster; MultiCluster routes by
	// the policies instead. Exactly one is set.
	Cluster      string        `yaml:"cluster,omitempty" json:"cluster,omitempty"`
	MultiCluster *MultiCluster `yaml:"multiCluster,omitempty" json:"multiCluster,omitempty"`
	Request      Request       `yaml:"request,omitempty" json:"request,omitempty"`
	// Create asks for on-demand servers (the allocator's Create): each
	// request makes a server from a fleet's template on the cluster it
	// tries, waits for its start-up within spec.routing.deadline, and
	// the session's end deletes it. The fleet (it may keep 0 replicas)
	// never counts these servers.
	Create bool `yaml:"create,omitempty" json:"create,omitempty"`
	// Template names that fleet (default: the first fleet the request's
	// selectors match, in the cluster tried); only with create.
	Template string `yaml:"template,omitempty" json:"template,omitempty"`
	// Caller models the matchmaker behind the stream: the answers it
	// loses, when it gives up, its retries and its idempotency keys (the
	// loss model; default: it loses nothing and never retries).
	Caller *Caller `yaml:"caller,omitempty" json:"caller,omitempty"`
}

// Caller is the matchmaker behind a stream, as the loss model sees it.
type Caller struct {
	// AnswerLoss is the fraction of answers carrying an allocation that
	// never reach the caller, after the allocation committed.
	AnswerLoss float64 `yaml:"answerLoss,omitempty" json:"answerLoss,omitempty"`
	// Timeout is how long the caller waits for an answer before it gives
	// up (default: as long as the request takes; needed with answerLoss
	// or retries).
	Timeout Duration `yaml:"timeout,omitempty" json:"timeout,omitempty"`
	// Retries is how many times the caller sends the request again after
	// giving up, RetryDelay after it gave up (default 0 and 0s).
	Retries    int      `yaml:"retries,omitempty" json:"retries,omitempty"`
	RetryDelay Duration `yaml:"retryDelay,omitempty" json:"retryDelay,omitempty"`
	// Keys makes the caller send an idempotency key, the same on every
	// retry of a request (default false).
	Keys bool `yaml:"keys,omitempty" json:"keys,omitempty"`
}

// MultiCluster selects the policies a request is routed by.
type MultiCluster struct {
	PolicySelector map[string]string `yaml:"policySelector,omitempty" json:"policySelector,omitempty"`
}

// Request is the allocation request a stream sends.
type Request struct {
	Selectors  []Selector `yaml:"gameServerSelectors,omitempty" json:"gameServerSelectors,omitempty"`
	Scheduling string     `yaml:"scheduling,omitempty" json:"scheduling,omitempty"` // Packed (default) or Distributed
}

// Selector is a GameServerSelector's label part.
type Selector struct {
	MatchLabels map[string]string `yaml:"matchLabels,omitempty" json:"matchLabels,omitempty"`
}

// Rate is an arrival-rate schedule in requests per second: exactly one of
// constant, steps or diurnal, plus optional spikes.
type Rate struct {
	Constant *float64 `yaml:"constant,omitempty" json:"constant,omitempty"`
	Steps    []Step   `yaml:"steps,omitempty" json:"steps,omitempty"`
	Diurnal  *Diurnal `yaml:"diurnal,omitempty" json:"diurnal,omitempty"`
	Spikes   []Spike  `yaml:"spikes,omitempty" json:"spikes,omitempty"`
}

// Step sets the rate from At on.
type Step struct {
	At   Duration `yaml:"at" json:"at"`
	Rate float64  `yaml:"rate" json:"rate"`
}

// Diurnal is mean + amplitude·cos(2π(t-peakAt)/period).
type Diurnal struct {
	Mean      float64  `yaml:"mean" json:"mean"`
	Amplitude float64  `yaml:"amplitude" json:"amplitude"`
	Period    Duration `yaml:"period,omitempty" json:"period,omitempty"` // default 24h
	PeakAt    Duration `yaml:"peakAt,omitempty" json:"peakAt,omitempty"`
}

// Spike multiplies the rate by factor and adds add during [start, start+duration).
type Spike struct {
	Start    Duration `yaml:"start" json:"start"`
	Duration Duration `yaml:"duration" json:"duration"`
	Factor   float64  `yaml:"factor,omitempty" json:"factor,omitempty"`
	Add      float64  `yaml:"add,omitempty" json:"add,omitempty"`
}

// Fault is something going wrong during the run. The one type is outage:
// the cluster's allocator is unreachable in [start, end).
type Fault struct {
	Type    string   `yaml:"type" json:"type"`
	Cluster string   `yaml:"cluster" json:"cluster"`
	Start   Duration `yaml:"start" json:"start"`
	End     Duration `yaml:"end" json:"end"`
}

// Phase is a named window that the results report separately.
type Phase struct {
	Name  string   `yaml:"name" json:"name"`
	Start Duration `yaml:"start" json:"start"`
	End   Duration `yaml:"end" json:"end"`
}

// Expectation bounds one metric of the results, addressed by its path in the
// results JSON (totals.successRate, clusters.on-prem.share,
// phases.outage.clusters.cloud.share).
type Expectation struct {
	Metric      string   `yaml:"metric" json:"metric"`
	Min         *float64 `yaml:"min,omitempty" json:"min,omitempty"`
	Max         *float64 `yaml:"max,omitempty" json:"max,omitempty"`
	Description string   `yaml:"description,omitempty" json:"description,omitempty"`
}

// Dist is a distribution of durations: exactly one of its fields.
type Dist struct {
	Constant    *Duration    `yaml:"constant,omitempty" json:"constant,omitempty"`
	Exponential *ExpParams   `yaml:"exponential,omitempty" json:"exponential,omitempty"`
	LogNormal   *LogNormal   `yaml:"lognormal,omitempty" json:"lognormal,omitempty"`
	Uniform     *UniformDist `yaml:"uniform,omitempty" json:"uniform,omitempty"`
	Normal      *NormalDist  `yaml:"normal,omitempty" json:"normal,omitempty"`
}

// ExpParams is an exponential distribution.
type ExpParams struct {
	Mean Duration `yaml:"mean" json:"mean"`
}

// LogNormal is given by its median and 99th percentile.
type LogNormal struct {
	Median Duration `yaml:"median" json:"median"`
	P99    Duration `yaml:"p99" json:"p99"`
}

// UniformDist is uniform on [min, max].
type UniformDist struct {
	Min Duration `yaml:"min" json:"min"`
	Max Duration `yaml:"max" json:"max"`
}

// NormalDist is normal, truncated at zero.
type NormalDist struct {
	Mean   Duration `yaml:"mean" json:"mean"`
	Stddev Duration `yaml:"stddev" json:"stddev"`
}

// Duration is yamlfile.Duration, the duration every versioned file uses.
type Duration = yamlfile.Duration
