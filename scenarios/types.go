package scenarios

import (
	"fmt"
	"time"

	"go.yaml.in/yaml/v3"
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
	SampleInterval Duration      `yaml:"sampleInterval,omitempty" json:"sampleInterval,omitempty"`
	Routing        Routing       `yaml:"routing,omitempty" json:"routing,omitempty"`
	Clusters       []Cluster     `yaml:"clusters" json:"clusters"`
	Policies       []Policy      `yaml:"policies,omitempty" json:"policies,omitempty"`
	Workload       []Stream      `yaml:"workload" json:"workload"`
	Faults         []Fault       `yaml:"faults,omitempty" json:"faults,omitempty"`
	Phases         []Phase       `yaml:"phases,omitempty" json:"phases,omitempty"`
	Expectations   []Expectation `yaml:"expectations,omitempty" json:"expectations,omitempty"`
}

// Routing sets how the matchmaker's router forwards multi-cluster requests.
type Routing struct {
	// ForwardTimeout is charged for a try against a cluster that is down
	// (default 10s, Agones' per-call timeout).
	ForwardTimeout Duration `yaml:"forwardTimeout,omitempty" json:"forwardTimeout,omitempty"`
	// Deadline ends a request that has taken this long without trying
	// further clusters (default 30s, Agones' total).
	Deadline Duration `yaml:"deadline,omitempty" json:"deadline,omitempty"`
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
	Fleets          []Fleet   `yaml:"fleets" json:"fleets"`
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

// nodeKind names a YAML node's kind the way a reader of the file sees it.
func nodeKind(n *yaml.Node) string {
	switch n.Kind {
	case yaml.SequenceNode:
		return "list"
	case yaml.MappingNode:
		return "mapping"
	case yaml.AliasNode:
		return "alias"
	default:
		return "value"
	}
}

// Duration is a time.Duration written as Go writes one ("1h30m", "250ms").
// A bare number is refused: it would be ambiguous.
type Duration time.Duration

// UnmarshalYAML accepts a duration string.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		// A list or mapping has no Value to quote; say what it is instead.
		return fmt.Errorf("line %d: a %s is not a duration: write one value with a unit, like 10s or 1h30m", n.Line, nodeKind(n))
	}
	if n.Tag != "!!str" {
		return fmt.Errorf("line %d: %q is not a duration: write it with a unit, like 10s or 1h30m", n.Line, n.Value)
	}
	v, err := time.ParseDuration(n.Value)
	if err != nil {
		return fmt.Errorf("line %d: %q is not a duration: write it with a unit, like 10s or 1h30m", n.Line, n.Value)
	}
	*d = Duration(v)
	return nil
}

// MarshalYAML writes the duration string.
func (d Duration) MarshalYAML() (any, error) { return time.Duration(d).String(), nil }

// MarshalJSON writes the duration string.
func (d Duration) MarshalJSON() ([]byte, error) {
	return []byte(`"` + time.Duration(d).String() + `"`), nil
}

// D is the value as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }
