package live

import (
	"math"
	"sync"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"
	"google.golang.org/grpc/codes"

	"github.com/quartermaster-dev/quartermaster/sim"
)

// recorder keeps what the callers saw, request by request, in the shape of
// the simulator's results: totals, per cluster, per phase (by arrival
// time in scenario time) and per sample interval.
type recorder struct {
	mu       sync.Mutex
	start    time.Time
	scale    float64
	clusters map[string]int // name -> index
	names    []string
	phases   []phaseWindow

	requests, allocated, unAllocated, contention, unavailable, deadline uint64
	other                                                               map[string]uint64
	lat                                                                 *latencies
	perCluster                                                          []clusterRec
	phaseCounts                                                         []phaseRec
	// series, by sample index
	interval     time.Duration // wall
	allocations  [][]uint64    // [sample][cluster]
	heldAtSample [][]int
	held         []int // sessions each cluster holds now
}

type phaseWindow struct {
	name       string
	start, end time.Duration // scenario time
}

type clusterRec struct {
	allocated  uint64
	direct     clusterTries // tries of requests sent to the cluster itself
	lat        *latencies
	released   uint64
	relFailure uint64
}

type clusterTries struct {
	tries, unAllocated, unavailable uint64
}

type phaseRec struct {
	requests, allocated uint64
	perCluster          []uint64
}

func newRecorder(p *Plan, start time.Time) *recorder {
	r := &recorder{
		start: start, scale: p.Scale, clusters: map[string]int{}, other: map[string]uint64{},
		lat: newLatencies(), interval: p.SampleInterval,
	}
	for i, c := range p.Clusters {
		r.clusters[c.Name] = i
		r.names = append(r.names, c.Name)
		r.perCluster = append(r.perCluster, clusterRec{lat: newLatencies()})
	}
	r.held = make([]int, len(p.Clusters))
	for _, ph := range p.Scenario.Spec.Phases {
		r.phases = append(r.phases, phaseWindow{ph.Name, ph.Start.D(), ph.End.D()})
		r.phaseCounts = append(r.phaseCounts, phaseRec{perCluster: make([]uint64, len(p.Clusters))})
	}
	return r
}

// virtual is the scenario time of a wall instant.
func (r *recorder) virtual(t time.Time) time.Duration {
	return time.Duration(float64(t.Sub(r.start)) * r.scale)
}

// sample index of a wall instant: the interval that ends at the sample
// (the simulator's series count what happened up to each sample).
func (r *recorder) sampleOf(t time.Time) int {
	if r.interval <= 0 {
		return 0
	}
	return int(t.Sub(r.start) / r.interval)
}

// add records one answered request: sent at sent, answered after lat,
// with code, served by cluster (empty unless OK); direct names the cluster
// a single-cluster request went to.
func (r *recorder) add(sent time.Time, lat time.Duration, code codes.Code, cluster, direct string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.requests++
	at := r.virtual(sent)
	ci, served := r.clusters[cluster]
	served = served && code == codes.OK
	for i, ph := range r.phases {
		if at >= ph.start && at < ph.end {
			r.phaseCounts[i].requests++
			if served {
				r.phaseCounts[i].allocated++
				r.phaseCounts[i].perCluster[ci]++
			}
		}
	}
	if di, ok := r.clusters[direct]; ok {
		d := &r.perCluster[di].direct
		d.tries++
		switch code {
		case codes.ResourceExhausted:
			d.unAllocated++
		case codes.Unavailable, codes.DeadlineExceeded:
			d.unavailable++
		}
	}
	switch {
	case served:
		r.allocated++
		r.lat.add(lat)
		c := &r.perCluster[ci]
		c.allocated++
		c.lat.add(lat)
		r.held[ci]++
		s := r.sampleOf(sent.Add(lat))
		for len(r.allocations) <= s {
			r.allocations = append(r.allocations, make([]uint64, len(r.names)))
		}
		r.allocations[s][ci]++
	case code == codes.OK:
		// Allocated, but by a cluster the source does not name: counted
		// apart, never silently given to one.
		r.other["OK from an unknown source"]++
	case code == codes.ResourceExhausted:
		r.unAllocated++
	case code == codes.Aborted:
		r.contention++
	case code == codes.Unavailable:
		r.unavailable++
	case code == codes.DeadlineExceeded || code == codes.Canceled:
		r.deadline++
	default:
		r.other[code.String()]++
	}
}

// released records the end of a session on cluster.
func (r *recorder) released(cluster string, ok bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	ci, known := r.clusters[cluster]
	if !known {
		return
	}
	r.held[ci]--
	if ok {
		r.perCluster[ci].released++
	} else {
		r.perCluster[ci].relFailure++
	}
}

// sample stores the sessions each cluster holds at the end of sample k.
func (r *recorder) sample(k int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for len(r.heldAtSample) <= k {
		r.heldAtSample = append(r.heldAtSample, append([]int(nil), r.held...))
	}
}

// latencies is a latency distribution: an HDR histogram for the
// quantiles, and counts per doubling bucket from 1 ms for the
// simulator's latencyBuckets.
type latencies struct {
	h       *hdrhistogram.Histogram
	buckets []uint64
	sum     float64
}

func newLatencies() *latencies {
	return &latencies{h: hdrhistogram.New(1, int64(10*time.Minute/time.Microsecond), 3)}
}

func (l *latencies) add(d time.Duration) {
	us := max(int64(d/time.Microsecond), 1)
	_ = l.h.RecordValue(min(us, l.h.HighestTrackableValue()))
	l.sum += float64(d)
	i := 0
	if ms := float64(d) / float64(time.Millisecond); ms > 1 {
		i = int(math.Ceil(math.Log2(ms)))
	}
	for len(l.buckets) <= i {
		l.buckets = append(l.buckets, 0)
	}
	l.buckets[i]++
}

func (l *latencies) summary() sim.Latency {
	n := l.h.TotalCount()
	if n == 0 {
		return sim.Latency{}
	}
	ms := func(us int64) float64 { return round4(float64(us) / 1e3) }
	return sim.Latency{
		Count:  uint64(n),
		MeanMs: round4(l.sum / float64(n) / 1e6),
		P50Ms:  ms(l.h.ValueAtQuantile(50)),
		P90Ms:  ms(l.h.ValueAtQuantile(90)),
		P99Ms:  ms(l.h.ValueAtQuantile(99)),
		P999Ms: ms(l.h.ValueAtQuantile(99.9)),
		MaxMs:  ms(l.h.Max()),
	}
}

// bucketList is the distribution as the simulator writes it: bounds
// doubling from 1 ms, empty leading buckets dropped.
func (l *latencies) bucketList() []sim.Bucket {
	var out []sim.Bucket
	for i, c := range l.buckets {
		if len(out) == 0 && c == 0 {
			continue
		}
		out = append(out, sim.Bucket{UpToMs: math.Ldexp(1, i), Count: c})
	}
	return out
}

func round4(x float64) float64 {
	if math.IsNaN(x) || math.IsInf(x, 0) {
		return 0
	}
	return math.Round(x*1e4) / 1e4
}
