package sim

import (
	"time"
)

// Results are a run's metrics: totals, per cluster, per provider, per phase,
// and time series. Every map is keyed by name, so expectations can address a
// figure by path (clusters.on-prem.share) and encoding/json writes the keys
// sorted: the same run gives the same bytes.
type Results struct {
	Scenario  string                    `json:"scenario"`
	Seed      uint64                    `json:"seed"`
	Duration  string                    `json:"duration"`
	Events    uint64                    `json:"events"`
	Totals    Totals                    `json:"totals"`
	Clusters  map[string]ClusterResult  `json:"clusters"`
	Providers map[string]ProviderResult `json:"providers"`
	Phases    map[string]PhaseResult    `json:"phases,omitempty"`
	// Losses are the loss model's figures (loss.go), in a run with the
	// model on.
	Losses *LossResult `json:"losses,omitempty"`
	Series Series      `json:"series"`
}

// Totals are the figures over every request.
type Totals struct {
	Requests         uint64 `json:"requests"`
	Allocated        uint64 `json:"allocated"`
	UnAllocated      uint64 `json:"unAllocated"`
	Contention       uint64 `json:"contention"`
	Unavailable      uint64 `json:"unavailable"`
	DeadlineExceeded uint64 `json:"deadlineExceeded"`
	// InFlight requests had not finished when the run ended; they count in
	// Requests only.
	InFlight int `json:"inFlight"`
	// Retries is the number of write conflicts that made a replica decide
	// again.
	Retries uint64 `json:"retries"`
	// SuccessRate is Allocated over finished requests.
	SuccessRate float64 `json:"successRate"`
	// UnAllocatedRate is UnAllocated over finished requests.
	UnAllocatedRate float64 `json:"unAllocatedRate"`
	// RetriesPerAllocation is Retries over Allocated.
	RetriesPerAllocation float64  `json:"retriesPerAllocation"`
	Latency              Latency  `json:"latency"`
	LatencyBuckets       []Bucket `json:"latencyBuckets"`
	PackingEfficiency    float64  `json:"packingEfficiency"`
	NodeHours            float64  `json:"nodeHours"`
	Cost                 float64  `json:"cost"`
}

// ClusterResult are one cluster's figures. Tries count every time the router
// sent a request to the cluster; UnAllocated, Contention and Unavailable are
// per try (the request may still have been served by the next cluster).
type ClusterResult struct {
	Provider string `json:"provider"`
	Region   string `json:"region"`
	clusterCounters
	// Share is this cluster's part of all allocations.
	Share float64 `json:"share"`
	// SuccessRate is Allocated over the tries the cluster answered.
	SuccessRate float64 `json:"successRate"`
	// RetriesPerAllocation is Retries over Allocated: how much a stale
	// cache costs per success.
	RetriesPerAllocation float64 `json:"retriesPerAllocation"`
	Latency              Latency `json:"latency"`
	// MeanAllocated is the time-average number of Allocated servers
	// (Little's law: arrival rate accepted × mean session).
	MeanAllocated float64 `json:"meanAllocated"`
	// PackingEfficiency is Σ ceil(allocated/slots) over Σ nodes holding an
	// Allocated server, across samples: 1 is perfectly packed.
	PackingEfficiency float64 `json:"packingEfficiency"`
	NodeHours         float64 `json:"nodeHours"`
	Cost              float64 `json:"cost"`
	Servers           int     `json:"serversCreated"`
	// OnDemand is set in a run with a Create stream.
	OnDemand *OnDemandResult `json:"onDemand,omitempty"`
}

type clusterCounters struct {
	Tries       uint64 `json:"tries"`
	Allocated   uint64 `json:"allocated"`
	UnAllocated uint64 `json:"unAllocated"`
	Contention  uint64 `json:"contention"`
	Unavailable uint64 `json:"unavailable"`
	Retries     uint64 `json:"retries"`
}

// ProviderResult sums the clusters of one provider.
type ProviderResult struct {
	Allocated uint64  `json:"allocated"`
	Share     float64 `json:"share"`
	NodeHours float64 `json:"nodeHours"`
	Cost      float64 `json:"cost"`
}

// PhaseResult are the figures for requests that arrived within a phase.
type PhaseResult struct {
	Requests  uint64                  `json:"requests"`
	Allocated uint64                  `json:"allocated"`
	Clusters  map[string]PhaseCluster `json:"clusters"`
}

// PhaseCluster is one cluster's part of a phase.
type PhaseCluster struct {
	Allocated uint64  `json:"allocated"`
	Share     float64 `json:"share"`
}

// Series are samples every IntervalSeconds; T is each sample's time in
// seconds. Counts per interval (Allocations, UnAllocated, Retries) cover the
// interval ending at the sample.
type Series struct {
	IntervalSeconds float64                   `json:"intervalSeconds"`
	T               []float64                 `json:"t"`
	Clusters        map[string]*clusterSeries `json:"clusters"`
}

type clusterSeries struct {
	Allocated          []int     `json:"allocated"`
	Ready              []int     `json:"ready"`
	NodesInUse         []int     `json:"nodesInUse"`
	NodesWithAllocated []int     `json:"nodesWithAllocated"`
	PackingEfficiency  []float64 `json:"packingEfficiency"`
	Allocations        []uint64  `json:"allocations"`
	UnAllocated        []uint64  `json:"unAllocated"`
	Retries            []uint64  `json:"retries"`

	lastAllocated, lastUnAllocated, lastRetries uint64
}

type totalCounters struct {
	requests, allocated, unallocated, contention, unavailable, deadline, retries uint64
}

type phaseCounters struct {
	requests, allocated uint64
	perCluster          []uint64
}

func ratio(a, b float64) float64 {
	if b == 0 {
		return 0
	}
	return round4(a / b)
}

func (w *world) results() *Results {
	t := w.tot
	finished := float64(t.requests) - float64(w.inFlight)
	r := &Results{
		Scenario:  w.cfg.Name,
		Seed:      w.cfg.Seed,
		Duration:  w.cfg.Duration.String(),
		Events:    w.events,
		Clusters:  map[string]ClusterResult{},
		Providers: map[string]ProviderResult{},
		Series: Series{
			IntervalSeconds: time.Duration(w.interval).Seconds(),
			T:               w.ticks,
			Clusters:        map[string]*clusterSeries{},
		},
	}
	r.Totals = Totals{
		Requests:             t.requests,
		Allocated:            t.allocated,
		UnAllocated:          t.unallocated,
		Contention:           t.contention,
		Unavailable:          t.unavailable,
		DeadlineExceeded:     t.deadline,
		InFlight:             w.inFlight,
		Retries:              t.retries,
		SuccessRate:          ratio(float64(t.allocated), finished),
		UnAllocatedRate:      ratio(float64(t.unallocated), finished),
		RetriesPerAllocation: ratio(float64(t.retries), float64(t.allocated)),
		Latency:              w.lat.summary(),
		LatencyBuckets:       w.lat.buckets(),
	}
	// The success rate is the one figure where four decimals hide what
	// matters (99.95% vs 99.99%).
	if finished > 0 {
		r.Totals.SuccessRate = float64(t.allocated) / finished
		r.Totals.UnAllocatedRate = float64(t.unallocated) / finished
	}
	var packMin, packUsed float64
	dur := float64(w.end)
	// Shares are of the allocations made. Every one is answered OK but
	// those whose answers the loss model lost, so without it this is
	// t.allocated.
	var made uint64
	for _, cl := range w.clusters {
		made += cl.m.Allocated
	}
	for _, cl := range w.clusters {
		cfg := cl.cfg
		nh := cl.nodeArea / float64(time.Hour)
		// An on-demand server given up at the deadline is an answer too
		// (none in a run without Create streams) in the success rate.
		cr := ClusterResult{
			Provider:             cfg.Provider,
			Region:               cfg.Region,
			clusterCounters:      cl.m,
			Share:                ratio(float64(cl.m.Allocated), float64(made)),
			SuccessRate:          float64(cl.m.Allocated) / max(1, float64(cl.m.Allocated+cl.m.UnAllocated+cl.m.Contention+cl.od.deadline)),
			Latency:              cl.lat.summary(),
			RetriesPerAllocation: ratio(float64(cl.m.Retries), float64(cl.m.Allocated)),
			MeanAllocated:        round4(cl.allocArea / dur),
			PackingEfficiency:    1,
			NodeHours:            round4(nh),
			Cost:                 round4(nh * cfg.CostPerNodeHour),
			Servers:              len(cl.servers),
			OnDemand:             cl.od.result(),
		}
		if cl.packUsed > 0 {
			cr.PackingEfficiency = round4(cl.packMin / cl.packUsed)
		}
		packMin += cl.packMin
		packUsed += cl.packUsed
		r.Clusters[cfg.Name] = cr
		p := r.Providers[cfg.Provider]
		p.Allocated += cl.m.Allocated
		p.NodeHours += nh
		p.Cost += nh * cfg.CostPerNodeHour
		r.Providers[cfg.Provider] = p
		r.Totals.NodeHours += nh
		r.Totals.Cost += nh * cfg.CostPerNodeHour
		r.Series.Clusters[cfg.Name] = &cl.series
	}
	for k, p := range r.Providers {
		p.Share = ratio(float64(p.Allocated), float64(made))
		p.NodeHours, p.Cost = round4(p.NodeHours), round4(p.Cost)
		r.Providers[k] = p
	}
	r.Totals.NodeHours, r.Totals.Cost = round4(r.Totals.NodeHours), round4(r.Totals.Cost)
	r.Totals.PackingEfficiency = 1
	if packUsed > 0 {
		r.Totals.PackingEfficiency = round4(packMin / packUsed)
	}
	if w.loss != nil {
		r.Losses = w.loss.result()
	}
	if len(w.phases) > 0 {
		r.Phases = map[string]PhaseResult{}
		for i, pc := range w.phases {
			pr := PhaseResult{Requests: pc.requests, Allocated: pc.allocated, Clusters: map[string]PhaseCluster{}}
			for c, n := range pc.perCluster {
				pr.Clusters[w.clusters[c].cfg.Name] = PhaseCluster{Allocated: n, Share: ratio(float64(n), float64(pc.allocated))}
			}
			r.Phases[w.cfg.Phases[i].Name] = pr
		}
	}
	return r
}
