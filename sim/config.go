package sim

import (
	"errors"
	"fmt"
	"time"

	"github.com/quartermaster-dev/quartermaster/core"
)

// Epoch is virtual time zero. It is fixed so that everything a run stamps
// (agones.dev/last-allocated, for one) is the same on every run.
var Epoch = time.Date(2026, time.January, 1, 0, 0, 0, 0, time.UTC)

// Config is everything a run needs. The scenarios package builds it from a
// scenario file (with defaults applied and validated); tests build it
// directly.
type Config struct {
	Name     string
	Seed     uint64
	Duration time.Duration
	// SampleInterval is the time-series resolution (default: Duration/240,
	// at least one second).
	SampleInterval time.Duration

	Clusters []ClusterConfig
	// Policies route multi-cluster requests; Connection.ClusterName names a
	// cluster of Clusters.
	Policies []core.Policy
	Streams  []StreamConfig
	Outages  []Outage
	Phases   []Phase
	// Start is the instant of virtual time zero for the policies' windows
	// (a weekday evening is a time of a day of the week); zero: Epoch.
	Start time.Time

	// ForwardTimeout is what a try against a cluster that is down costs.
	ForwardTimeout time.Duration
	// Deadline bounds a request: once passed, no further cluster is tried
	// and the request ends as DeadlineExceeded.
	Deadline time.Duration

	// Losses sets how forwarders and allocators handle lost answers (see
	// loss.go). The loss model is on when Losses is set, a cluster has an
	// AnswerLoss or a stream a Caller; off, it costs nothing and the
	// results carry no losses section.
	Losses *Losses

	// Progress, when set, is called every ProgressEvery events (default
	// 1<<20) with the virtual time reached; it must not touch the run.
	Progress      func(now time.Duration, events uint64)
	ProgressEvery uint64
	// Stop, when set, is polled as often as Progress; returning true ends
	// the run early with ErrStopped (an interrupted command, a test's
	// deadline).
	Stop func() bool
}

// ClusterConfig is one cluster: its nodes, API server, allocator replicas
// and fleets.
type ClusterConfig struct {
	Name     string
	Provider string
	Region   string
	// CostPerNodeHour is charged for every node that hosts a game server.
	CostPerNodeHour float64
	// RTT is the round trip between the matchmaker's router and this
	// cluster's allocator.
	RTT          Dist
	Nodes        int
	SlotsPerNode int

	// WriteLatency is how long an API-server update takes to be confirmed.
	WriteLatency Dist
	// Replicas is the number of allocator replicas; each has its own cache.
	Replicas int
	// InformerDelay is how long a change takes to reach a replica's cache,
	// drawn per change and per replica (deliveries stay in order).
	InformerDelay Dist
	// Workers bounds the requests a replica works on at once (0: no bound);
	// the rest wait in a FIFO queue.
	Workers int
	// DecisionTime is the replica's own time per allocation attempt.
	DecisionTime Dist
	// MaxRetries is how many conflicts a request may meet in this cluster
	// before it ends as Contention.
	MaxRetries int
	// PackedSpread and ReplicaShards configure each replica's index as
	// core.Index.SetPackedSpread and SetReplicaShard (replica r of
	// Replicas) do in the live allocator.
	PackedSpread  int
	ReplicaShards bool
	// AnswerLoss is the fraction of this cluster's answers to forwarded
	// (multi-cluster) requests that carry an allocation and are lost on
	// the link back, after the allocation committed.
	AnswerLoss float64

	Fleets []FleetConfig
}

// Placement is how new game servers are placed on nodes (and which ones go
// first when a fleet shrinks).
type Placement string

// Placements, as Agones' fleet scheduling names them.
const (
	PlacePacked      Placement = "Packed"
	PlaceDistributed Placement = "Distributed"
)

// SessionEnd is what a game server does when its session ends.
type SessionEnd string

const (
	// EndShutdown deletes the server (the fleet creates a replacement that
	// is Ready after the start-up delay): the Agones default.
	EndShutdown SessionEnd = "Shutdown"
	// EndReady returns the server to Ready at once (SDK.Ready() again).
	EndReady SessionEnd = "Ready"
)

// FleetConfig is one fleet.
type FleetConfig struct {
	Name   string
	Labels map[string]string
	// Replicas is the fleet's size at the start (all Ready) and, without a
	// buffer autoscaler, its fixed size.
	Replicas     int
	Placement    Placement
	StartupDelay Dist
	SessionEnd   SessionEnd
	// Buffer, when set, is a buffer autoscaler: every SyncInterval the
	// fleet's size becomes Allocated+Size, within [Min, Max].
	Buffer *Buffer
	// IdleShutdown is how long a server that was allocated for a caller
	// who never learnt of it (a leaked server) stays Allocated before it
	// shuts itself down, as a game server that no player joins may; 0:
	// it stays Allocated to the end of the run, as Agones leaves it.
	IdleShutdown time.Duration
}

// Buffer is a FleetAutoscaler buffer policy.
type Buffer struct {
	Size, Min, Max int
	SyncInterval   time.Duration
}

// StreamConfig is one source of allocation requests.
type StreamConfig struct {
	Name string
	Rate RateSpec
	// Session is how long an allocated server stays Allocated.
	Session Dist
	// Request is the allocation request sent (Normalize is applied by the
	// run). Its MultiCluster setting decides the routing: enabled routes by
	// policy, otherwise the request goes to Cluster.
	Request core.Request
	Cluster string
	// Arrivals, when set, replace Rate: the requests arrive at exactly
	// these times (ascending), as a recorded trace's did (see
	// ReplayStreams). Sessions, when set, holds each arrival's session
	// length (negative: drawn from Session).
	Arrivals []time.Duration
	Sessions []time.Duration
	// Create makes each request ask for an on-demand server (the
	// AllocationAdmin API's Create) instead of a Ready one: the cluster
	// creates a server from Template, the request waits for its start-up
	// and is answered once it is Ready and allocated, or fails past the
	// Deadline (the server deleted); the session's end deletes it.
	Create bool
	// Template names the fleet whose template (labels, placement, start-up
	// delay) an on-demand server takes. Empty: the first fleet of the
	// cluster that one of the request's selectors matches (any fleet when
	// it has none). A cluster without the fleet answers no match.
	Template string
	// Caller, when set, models the caller behind the stream: answers it
	// loses, its timeout, its retries and its idempotency keys.
	Caller *Caller
}

// Caller is the matchmaker behind a stream, as the loss model sees it.
type Caller struct {
	// AnswerLoss is the fraction of answers carrying an allocation that
	// never reach the caller, after the allocation committed.
	AnswerLoss float64
	// Timeout is how long the caller waits for an answer before it gives
	// up (an allocation that commits later is one it never learns of);
	// 0: it waits as long as the request takes, and then AnswerLoss must
	// be 0, since the caller would never notice a loss.
	Timeout time.Duration
	// Retries is how many times the caller sends the request again after
	// giving up, each RetryDelay after it gave up.
	Retries    int
	RetryDelay time.Duration
	// Keys makes the caller send an idempotency key, the same on every
	// retry: a retry goes to the cluster holding the key's allocation
	// first and is answered with it (or joins the attempt still in
	// flight), and a forwarder that lost a keyed answer tries the same
	// cluster again and never moves on from it: it answers the caller
	// Unavailable, which the caller retries.
	Keys bool
}

// Losses are the forwarders' and allocators' settings for lost answers.
type Losses struct {
	// KeyRetries is how many times a forwarder tries the same cluster
	// again, with the key, after a keyed answer was lost, before it
	// answers the caller Unavailable.
	KeyRetries int
	// ReconcileDelay is accepted and has no effect: a forwarder
	// reconciles only allocations made with keys of its own, which the
	// model does not send, and a caller-keyed request never leaves one
	// behind.
	ReconcileDelay time.Duration
	// KeyWindow is how long an allocation made for a key waits for a
	// retry to take it; then it is released (0: DefaultKeyWindow).
	KeyWindow time.Duration
}

// DefaultKeyWindow is the allocator's default window for idempotency keys.
const DefaultKeyWindow = 10 * time.Minute

// Outage makes a cluster's allocator unreachable in [Start, End).
type Outage struct {
	Cluster    string
	Start, End time.Duration
}

// Phase is a named window for which the results report allocations and
// shares separately.
type Phase struct {
	Name       string
	Start, End time.Duration
}

// maxClusters bounds the clusters of one run (a request's try order is a
// fixed-size array).
const maxClusters = 64

// maxCallerRetries bounds a caller's retries (an attempt's number rides in
// an event's 16 bits).
const maxCallerRetries = 1000

// maxReplicas bounds the allocator replicas of one cluster.
const maxReplicas = 64

// check rejects a Config the engine cannot run. The scenarios package
// validates files far more thoroughly; this guards direct callers.
func (c *Config) check() error {
	if c.Duration <= 0 {
		return errors.New("duration must be positive")
	}
	if len(c.Clusters) == 0 || len(c.Clusters) > maxClusters {
		return fmt.Errorf("need 1 to %d clusters", maxClusters)
	}
	names := map[string]bool{}
	for i, cl := range c.Clusters {
		if cl.Name == "" || names[cl.Name] {
			return fmt.Errorf("clusters[%d]: name empty or repeated", i)
		}
		names[cl.Name] = true
		if cl.Nodes <= 0 || cl.SlotsPerNode <= 0 {
			return fmt.Errorf("clusters[%d]: nodes and slots per node must be positive", i)
		}
		if cl.Replicas <= 0 || cl.Replicas > maxReplicas {
			return fmt.Errorf("clusters[%d]: replicas must be 1 to %d", i, maxReplicas)
		}
		if cl.Workers < 0 || cl.MaxRetries < 0 {
			return fmt.Errorf("clusters[%d]: workers and maxRetries must not be negative", i)
		}
		if !(cl.AnswerLoss >= 0 && cl.AnswerLoss <= 1) {
			return fmt.Errorf("clusters[%d]: answerLoss must be in [0, 1], got %v", i, cl.AnswerLoss)
		}
		for _, d := range []Dist{cl.RTT, cl.WriteLatency, cl.InformerDelay, cl.DecisionTime} {
			if err := d.Validate(); err != nil {
				return fmt.Errorf("clusters[%d]: %v", i, err)
			}
		}
		for j, f := range cl.Fleets {
			if f.Name == "" || f.Replicas < 0 {
				return fmt.Errorf("clusters[%d].fleets[%d]: needs a name and replicas >= 0", i, j)
			}
			if err := f.StartupDelay.Validate(); err != nil {
				return fmt.Errorf("clusters[%d].fleets[%d]: %v", i, j, err)
			}
			if f.IdleShutdown < 0 {
				return fmt.Errorf("clusters[%d].fleets[%d]: idleShutdown must not be negative", i, j)
			}
			if b := f.Buffer; b != nil && (b.SyncInterval <= 0 || b.Min < 0 || b.Max < b.Min || b.Size < 0) {
				return fmt.Errorf("clusters[%d].fleets[%d]: buffer needs syncInterval > 0 and 0 <= min <= max", i, j)
			}
		}
	}
	for i, p := range c.Policies {
		if !names[p.Connection.ClusterName] {
			return fmt.Errorf("policies[%d]: unknown cluster %q", i, p.Connection.ClusterName)
		}
	}
	for i, s := range c.Streams {
		if !s.Request.MultiCluster.Enabled && !names[s.Cluster] {
			return fmt.Errorf("streams[%d]: unknown cluster %q", i, s.Cluster)
		}
		if err := s.Session.Validate(); err != nil {
			return fmt.Errorf("streams[%d]: %v", i, err)
		}
		if err := s.checkArrivals(); err != nil {
			return fmt.Errorf("streams[%d]: %v", i, err)
		}
		if err := c.checkTemplate(&s); err != nil {
			return fmt.Errorf("streams[%d]: %v", i, err)
		}
		if err := s.Caller.check(); err != nil {
			return fmt.Errorf("streams[%d].caller: %v", i, err)
		}
	}
	if l := c.Losses; l != nil && (l.KeyRetries < 0 || l.ReconcileDelay < 0 || l.KeyWindow < 0) {
		return errors.New("losses: keyRetries, reconcileDelay and keyWindow must not be negative")
	}
	for i, o := range c.Outages {
		if !names[o.Cluster] {
			return fmt.Errorf("outages[%d]: unknown cluster %q", i, o.Cluster)
		}
	}
	return nil
}

func (c *Caller) check() error {
	switch {
	case c == nil:
		return nil
	case !(c.AnswerLoss >= 0 && c.AnswerLoss <= 1):
		return fmt.Errorf("answerLoss must be in [0, 1], got %v", c.AnswerLoss)
	case c.Timeout < 0 || c.RetryDelay < 0 || c.Retries < 0:
		return errors.New("timeout, retries and retryDelay must not be negative")
	case c.Retries > maxCallerRetries:
		return fmt.Errorf("retries must be at most %d", maxCallerRetries)
	case c.AnswerLoss > 0 && c.Timeout == 0:
		return errors.New("answerLoss needs a timeout: a caller that waits for ever never notices a lost answer")
	case c.Retries > 0 && c.Timeout == 0:
		return errors.New("retries need a timeout: a caller retries after giving up at its timeout")
	}
	return nil
}
