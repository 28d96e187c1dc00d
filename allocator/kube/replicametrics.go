package kube

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// replicaMetrics says how this replica shares the servers with the others:
// how many it sees, its shard, its Packed spread now, and how many races
// its allocations lose. They exist whether or not anyone registers them, so
// the request path never checks.
type replicaMetrics struct {
	replicas  prometheus.Gauge
	shard     prometheus.Gauge
	spread    prometheus.GaugeFunc
	conflicts prometheus.Histogram
}

func newReplicaMetrics(spread func() float64) *replicaMetrics {
	m := &replicaMetrics{
		replicas: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "qm_allocator_replicas",
			Help: "Allocator replicas sharing the GameServers, this one included, as its membership (live Leases, or --replicas) sees them.",
		}),
		shard: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "qm_allocator_replica_shard",
			Help: "This replica's shard, 0 to qm_allocator_replicas-1: its preferred share of the best Packed matches.",
		}),
		spread: prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name: "qm_allocator_packed_spread",
			Help: "How many of the best Packed matches this replica chooses among now (1: exact Packed); conflicts widen it, quiet narrows it.",
		}, spread),
		conflicts: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "qm_allocator_conflicts_per_allocation",
			Help:    "Writes an allocation lost to concurrent updates before it succeeded or answered Contention (_sum/_count: conflicts per allocation).",
			Buckets: []float64{0, 1, 2, 4, 8, 16, 32},
		}),
	}
	m.replicas.Set(1)
	return m
}

func (m *replicaMetrics) allocated(conflicts int) { m.conflicts.Observe(float64(conflicts)) }

func (m *replicaMetrics) setReplicas(shard, n int) {
	if n < 1 {
		n, shard = 1, 0
	}
	m.replicas.Set(float64(n))
	m.shard.Set(float64(shard))
}

// newKeyMetrics counts what happened to idempotency key records, by event:
// claimed (a key allocated anew), replayed (answered with its server),
// released (answered ErrKeyReleased), conflict (another request's key),
// taken_over (a claimant's expired claim taken), overran (a claimant past
// its bound gave its server back), collected (expired records deleted).
func newKeyMetrics() *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "qm_allocator_key_records_total",
		Help: "Idempotency key records on the kubernetes backend, by event: claimed, replayed, released, conflict, taken_over, overran, collected.",
	}, []string{"event"})
}

// Register adds the backend's replica metrics (qm_allocator_replicas,
// qm_allocator_replica_shard, qm_allocator_packed_spread,
// qm_allocator_conflicts_per_allocation, qm_allocator_key_records_total)
// to reg.
func (b *Backend) Register(reg prometheus.Registerer) error {
	m := b.metrics
	return errors.Join(reg.Register(m.replicas), reg.Register(m.shard), reg.Register(m.spread), reg.Register(m.conflicts), reg.Register(b.keyMetrics))
}
