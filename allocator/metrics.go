package allocator

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"

	"github.com/quartermaster-dev/quartermaster/allocator/wire"
	"github.com/quartermaster-dev/quartermaster/core"
)

// Metrics are the service's Prometheus metrics. They live on whatever
// registry Register is given, never the global one, so tests (and several
// servers in one process) each see their own values.
type Metrics struct {
	Latency    *prometheus.HistogramVec // namespace, fleet, source
	Outcomes   *prometheus.CounterVec   // namespace, fleet, source, code
	Retries    *prometheus.CounterVec   // namespace, fleet
	InFlight   prometheus.Gauge
	Rejections *prometheus.CounterVec // reason
	AdminCalls *prometheus.CounterVec // method, code
	// Idempotency keys (idempotency.go): requests that carried one, and
	// what became of them.
	Keys           prometheus.Counter
	KeyReplays     prometheus.Counter
	KeyConflicts   prometheus.Counter
	KeyReleased    prometheus.Counter
	KeyEvictions   prometheus.Counter
	AbandonedGiven prometheus.Counter
	nsLabels       boundedLabels
	fleetLabels    boundedLabels
	// srcLabels bounds the source label: cluster names come from the
	// policies, which an operator writes, but a policies file can name
	// any number of them.
	srcLabels boundedLabels
	cache     sync.Map // seriesKey → *series
}

// series are the metrics one outcome updates, looked up once per (namespace,
// fleet, code) rather than by label values on every request.
type series struct {
	latency prometheus.Observer
	outcome prometheus.Counter
	retries prometheus.Counter
}

type seriesKey struct {
	ns, fleet, source string
	code              codes.Code
}

// series returns the metrics of one outcome. source is the cluster that
// answered: wire.SourceLocal (or empty) for this allocator, every failure
// included; for a multi-cluster request another cluster's allocator
// allocated, that cluster's name from its policy.
func (m *Metrics) series(ns, fleet, source string, code codes.Code) *series {
	if source == "" {
		source = wire.SourceLocal
	}
	k := seriesKey{ns, fleet, source, code}
	if s, ok := m.cache.Load(k); ok {
		return s.(*series)
	}
	// Only a successful allocation gives a namespace or fleet a series of
	// its own (the default namespace has one from the start): those name
	// real servers. A failed request's names come from
	// the caller alone (any string, valid or not), so it uses a series only
	// if one exists and otherwise counts as _other; a caller inventing
	// names cannot use up the bound and push real namespaces out.
	var nsl, fl string
	if code == codes.OK {
		nsl, fl = m.nsLabels.get(ns), m.fleetLabels.get(fleet)
	} else {
		nsl, fl = m.nsLabels.known(ns), m.fleetLabels.known(fleet)
	}
	// Sources are names from the policies (or local), not the caller's:
	// the bound only stops an enormous policy set.
	src := m.srcLabels.get(source)
	s := &series{
		latency: m.Latency.WithLabelValues(nsl, fl, src),
		outcome: m.Outcomes.WithLabelValues(nsl, fl, src, code.String()),
		retries: m.Retries.WithLabelValues(nsl, fl),
	}
	if nsl != OtherLabel && fl != OtherLabel && src != OtherLabel {
		// Only bounded label values are cached, so the cache is bounded too.
		m.cache.Store(k, s)
	}
	return s
}

// LatencyBuckets start at 50 µs: an allocation on the memory backend takes
// tens of microseconds of server time, and Agones-style buckets starting at
// milliseconds would put every request in the first one.
var LatencyBuckets = []float64{
	50e-6, 100e-6, 250e-6, 500e-6,
	1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3, 50e-3, 100e-3, 250e-3, 500e-3,
	1, 2.5, 5, 10, 30,
}

// NewMetrics builds the metrics; Register puts them on a registry.
func NewMetrics() *Metrics {
	m := &Metrics{
		Latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "qm", Subsystem: "allocator", Name: "allocation_duration_seconds",
			Help:    "Time to answer an allocation request, from decoding to response, by namespace, fleet (empty when nothing was allocated) and source (local, or the cluster a multi-cluster request was forwarded to that allocated it).",
			Buckets: LatencyBuckets,
		}, []string{"namespace", "fleet", "source"}),
		Outcomes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "qm", Subsystem: "allocator", Name: "allocations_total",
			Help: "Allocation requests answered, by namespace, fleet, source (local, or the remote cluster that allocated) and gRPC status code (OK, ResourceExhausted, ...).",
		}, []string{"namespace", "fleet", "source", "code"}),
		Retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "qm", Subsystem: "allocator", Name: "allocation_retries_total",
			Help: "Allocation commits that lost a race and were retried, by namespace and fleet.",
		}, []string{"namespace", "fleet"}),
		InFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "qm", Subsystem: "allocator", Name: "allocations_in_flight",
			Help: "Allocation requests being handled now.",
		}),
		Rejections: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "qm", Subsystem: "allocator", Name: "limit_rejections_total",
			Help: "Allocation requests refused by the identity limits, by reason (unknown_identity, namespace, rate, max_allocations).",
		}, []string{"reason"}),
		AdminCalls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "qm", Subsystem: "allocator", Name: "admin_requests_total",
			Help: "List and Release requests, by method and gRPC status code.",
		}, []string{"method", "code"}),
		Keys: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "qm", Subsystem: "allocator", Name: "allocation_keys_total",
			Help: "Allocation requests that carried an idempotency key (the quartermaster.dev/allocation-key annotation or header).",
		}),
		KeyReplays: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "qm", Subsystem: "allocator", Name: "allocation_key_replays_total",
			Help: "Requests with an idempotency key already allocated, answered with that allocation as it stands and nothing applied again.",
		}),
		KeyConflicts: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "qm", Subsystem: "allocator", Name: "allocation_key_conflicts_total",
			Help: "Requests refused because their idempotency key was first used with a different request (InvalidArgument).",
		}),
		KeyReleased: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "qm", Subsystem: "allocator", Name: "allocation_key_released_total",
			Help: "Requests refused because the allocation their idempotency key made was released (FailedPrecondition).",
		}),
		KeyEvictions: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "qm", Subsystem: "allocator", Name: "allocation_key_evictions_total",
			Help: "Idempotency keys forgotten before their window ended because the table of keys was full (a duplicate of one is a new allocation).",
		}),
		AbandonedGiven: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "qm", Subsystem: "allocator", Name: "abandoned_allocations_released_total",
			Help: "Allocations without an idempotency key that committed after their caller cancelled or passed its deadline, given back since nobody knows of them.",
		}),
		nsLabels:    boundedLabels{max: maxLabelValues},
		fleetLabels: boundedLabels{max: maxLabelValues},
		srcLabels:   boundedLabels{max: maxSourceLabels},
	}
	// The default namespace is everyone's: its failures count under its
	// name from the first request on.
	m.nsLabels.get(core.DefaultNamespace)
	m.srcLabels.get(wire.SourceLocal)
	return m
}

// Register adds every metric to r.
func (m *Metrics) Register(r prometheus.Registerer) error {
	for _, c := range []prometheus.Collector{m.Latency, m.Outcomes, m.Retries, m.InFlight, m.Rejections, m.AdminCalls,
		m.Keys, m.KeyReplays, m.KeyConflicts, m.KeyReleased, m.KeyEvictions, m.AbandonedGiven} {
		if err := r.Register(c); err != nil {
			return err
		}
	}
	return nil
}

// maxLabelValues bounds the namespaces and fleets that get series of their
// own. Namespaces come from callers, so without a bound a caller could
// create series without end; past it, values are counted as "_other".
const maxLabelValues = 200

// maxSourceLabels bounds the clusters that get a source series of their
// own (local included); past it, sources are counted as "_other".
const maxSourceLabels = 64

// OtherLabel stands for label values past the bound.
const OtherLabel = "_other"

type boundedLabels struct {
	max  int
	seen sync.Map // string → struct{}
	mu   sync.Mutex
	n    int
}

// known returns v if it has a series already (or is empty: no fleet named),
// else OtherLabel.
func (b *boundedLabels) known(v string) string {
	if _, ok := b.seen.Load(v); ok || v == "" {
		return v
	}
	return OtherLabel
}

func (b *boundedLabels) get(v string) string {
	if _, ok := b.seen.Load(v); ok {
		return v
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.seen.Load(v); ok {
		return v
	}
	if b.n >= b.max {
		return OtherLabel
	}
	b.n++
	b.seen.Store(v, struct{}{})
	return v
}
