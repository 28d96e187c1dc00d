package sim

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/quartermaster-dev/quartermaster/core"
	"gonum.org/v1/gonum/stat/distuv"
)

// Event kinds.
const (
	evArrival       = iota + 1 // id: stream
	evReach                    // id: request; it reaches the cluster's allocator
	evWriteDone                // id: request; the API server answers the write
	evBack                     // id: request; the cluster's answer reaches the router
	evSessionEnd               // c, id: server slot
	evServerReady              // c, id: server slot
	evDeliver                  // c, r: informer delivery to a replica
	evSync                     // c, id: fleet; buffer autoscaler
	evTick                     // time-series sample
	evFree                     // c, r: a replica's worker finishes a no-match decision
	evCreateDone               // id: request; its on-demand server is Ready and allocated
	evCreateExpired            // id: request; its deadline passed before that
)

// Server states in the API server's truth.
const (
	stStarting = iota
	stReady
	stAllocated
	stGone
)

// Outcomes of a try (per cluster) and of a request.
const (
	outNone = iota
	outOK
	outNoMatch
	outContention
	outTimeout
	outDeadline
	outLost // the answer, carrying an allocation, never reached the caller (loss.go)
)

type server struct {
	gs *core.GameServer // latest state (nil while Starting)
	// name is the fleet server's name, made at its first Ready: each
	// return to Ready names it again without reading the old object.
	name  string
	rev   uint64
	node  int32
	fleet int16
	state uint8
	pos   int32 // position in the fleet's ready list while Ready
	// onDemand: made for one request from the fleet's template, outside
	// the fleet's counts (see ondemand.go).
	onDemand bool
	// held: Allocated for an idempotency key whose caller has not had the
	// answer; leaked: Allocated for a caller who will never know of it
	// (see loss.go).
	held, leaked bool
}

type node struct {
	name  string
	used  int32 // game servers on the node, any state
	alloc int32 // Allocated ones
	pos   int32 // position in its placement bucket
}

type delivery struct {
	at   int64
	slot int32
	del  bool
	rev  uint64
	gs   *core.GameServer
}

// cached is what a replica's cache holds of one server: the newest
// revision applied to it, and where its index keeps the server.
type cached struct {
	rev uint64
	at  core.Slot
}

type replica struct {
	ix      *core.Index
	seen    []cached // per server slot
	delay   *sampler
	instant bool // the informer delay is zero: apply changes at once
	fifo    []delivery
	head    int
	lastAt  int64
	sched   bool
	busy    int
	waiting []int32
	wHead   int
}

type fleet struct {
	cfg      *FleetConfig
	idx      int
	labels   map[string]string
	startup  *sampler
	ready    []int32 // slots of Ready servers
	starting int
	alloc    int
	odLabels map[string]string // on-demand servers' labels, made once
}

type cluster struct {
	idx      int
	cfg      *ClusterConfig
	servers  []server
	rev      uint64
	nodes    []node
	buckets  [][]int32 // nodes by number of servers, below the slot count
	fleets   []*fleet
	replicas []*replica
	rtt      *sampler
	write    *sampler
	decision *sampler
	pick     *rand.Rand
	outages  [][2]int64

	// accounting
	lastT          int64
	nodesInUse     int
	nodesWithAlloc int
	allocated      int
	readyCount     int
	nodeArea       float64 // node-nanoseconds
	allocArea      float64 // allocated-server-nanoseconds
	m              clusterCounters
	lat            histogram
	series         clusterSeries
	packMin        float64 // sums over samples, for the packing efficiency
	packUsed       float64
	od             onDemandCounters
}

type stream struct {
	cfg      *StreamConfig
	req      *core.Request
	sched    *Schedule
	arrivals distuv.Exponential
	target   float64
	session  *sampler
	rng      *rand.Rand
	cluster  int
	sent     int // replay streams: arrivals scheduled so far
	// segs is which policies are in force when, by their windows: one
	// segment for a run without windows. seg is the current one (arrivals
	// come in time order).
	segs []policySegment
	seg  int
	salt uint64
	// memoized counts the policySets with memoized orders; past
	// maxMemoSets, orders are computed per request into scratch.
	memoized int
	scratch  []uint8
	// tmpl is, per cluster, the fleet a Create stream's servers take their
	// template from (-1: none there); nil for other streams. odStartup and
	// odWrite draw its start-ups and API writes there, from streams of
	// their own, so that adding a Create stream leaves the fleets' and
	// other streams' draws as they were.
	tmpl      []int
	odStartup []*sampler
	odWrite   []*sampler
}

// maxMemoSets bounds the policySets of a stream whose orders are memoized:
// a few distinct sets (day and evening) is the common case, and each memo
// is orderSeeds bytes per cluster, so a file whose windows make many
// distinct sets costs time per request rather than unbounded memory.
const maxMemoSets = 4

// maxSegments bounds the changes of the policies in force a run follows
// (three a day for a year is about a thousand). A variable for tests.
var maxSegments = 100_000

// policySegment is a stretch of virtual time, up to end, during which set
// is in force.
type policySegment struct {
	end int64
	set *policySet
}

// policySet is the policies a stream is routed by while they are in force
// together.
type policySet struct {
	policies []core.Policy
	// orders memoizes core.OrderClusters per order seed (see orderFor);
	// width is the number of clusters in an order, 0xff marks "not yet".
	orders []uint8
	width  int
}

// orderSeeds is how many distinct seeds the router hands
// core.OrderClusters. Ordering the clusters is a pure function of the
// policies and the seed, and costs as much as the allocation itself, so the
// router draws the seed from this many values and remembers each answer. The
// orders' frequencies then differ from those of unbounded seeds only by the
// sampling noise of 2^18 draws (about 0.1 percentage points of a share), well
// below a run's own noise.
const orderSeeds = 1 << 18

type request struct {
	stream     int32
	start      int64
	seed       uint64
	order      [maxClusters]uint8
	n, next    uint8
	cluster    uint8
	replica    uint16
	outcome    uint8
	contention bool
	answered   bool
	retries    int32 // conflicts in the current cluster
	arrival    int32 // index among its stream's arrivals (replay streams)
	back       int64 // the return half of the current round trip
	slot       int32 // the on-demand server made for the request
	res        *core.Result
}

type world struct {
	cfg      *Config
	now      int64
	end      int64
	q        queue
	clusters []*cluster
	byName   map[string]int
	streams  []*stream
	reqs     []request
	free     []int32
	events   uint64
	inFlight int

	tot      totalCounters
	lat      histogram
	phases   []phaseCounters
	interval int64
	ticks    []float64

	loss *lossState // nil: the loss model is off
}

// Run simulates cfg and returns its results. The same Config (seed
// included) always gives the same results.
func Run(cfg *Config) (*Results, error) {
	if err := cfg.check(); err != nil {
		return nil, err
	}
	w, err := newWorld(cfg)
	if err != nil {
		return nil, err
	}
	if !w.run() {
		return nil, ErrStopped
	}
	return w.results(), nil
}

// ErrStopped is returned when Config.Stop ended a run.
var ErrStopped = errors.New("sim: run stopped before its end")

func newWorld(cfg *Config) (*world, error) {
	w := &world{cfg: cfg, end: int64(cfg.Duration), byName: map[string]int{}, lat: newHistogram(cfg.Duration)}
	w.interval = int64(cfg.SampleInterval)
	if w.interval <= 0 {
		w.interval = max(int64(cfg.Duration)/240, int64(time.Second))
	}
	for i := range cfg.Clusters {
		w.byName[cfg.Clusters[i].Name] = i
	}
	for i := range cfg.Clusters {
		cl, err := w.newCluster(i, &cfg.Clusters[i])
		if err != nil {
			return nil, err
		}
		w.clusters = append(w.clusters, cl)
	}
	for _, o := range cfg.Outages {
		cl := w.clusters[w.byName[o.Cluster]]
		cl.outages = append(cl.outages, [2]int64{int64(o.Start), int64(o.End)})
	}
	for i := range cfg.Streams {
		s, err := w.newStream(&cfg.Streams[i])
		if err != nil {
			return nil, fmt.Errorf("streams[%d] (%s): %w", i, cfg.Streams[i].Name, err)
		}
		w.streams = append(w.streams, s)
		w.startStream(i)
	}
	if w.lossModelOn() {
		w.loss = newLossState(w)
	}
	w.phases = make([]phaseCounters, len(cfg.Phases))
	for i := range w.phases {
		w.phases[i].perCluster = make([]uint64, len(w.clusters))
	}
	w.q.push(event{at: 0, kind: evTick})
	return w, nil
}

func (w *world) newCluster(i int, cfg *ClusterConfig) (*cluster, error) {
	seed := w.cfg.Seed
	p := "cluster/" + cfg.Name + "/"
	cl := &cluster{
		idx:      i,
		cfg:      cfg,
		rtt:      newSampler(cfg.RTT, streamSource(seed, p+"rtt")),
		write:    newSampler(cfg.WriteLatency, streamSource(seed, p+"write")),
		decision: newSampler(cfg.DecisionTime, streamSource(seed, p+"decision")),
		pick:     rand.New(streamSource(seed, p+"replica")),
		lat:      newHistogram(w.cfg.Duration),
	}
	cl.nodes = make([]node, cfg.Nodes)
	cl.buckets = make([][]int32, cfg.SlotsPerNode)
	b0 := make([]int32, cfg.Nodes)
	for n := range cl.nodes {
		cl.nodes[n].name = cfg.Name + "-node-" + strconv.Itoa(n)
		// Reversed, so that the first node is taken first.
		b0[cfg.Nodes-1-n] = int32(n)
		cl.nodes[n].pos = int32(cfg.Nodes - 1 - n)
	}
	cl.buckets[0] = b0
	for r := range cfg.Replicas {
		d := cfg.InformerDelay
		ix := core.NewIndex()
		ix.SetPackedSpread(cfg.PackedSpread)
		if cfg.ReplicaShards {
			ix.SetReplicaShard(r, cfg.Replicas)
		}
		cl.replicas = append(cl.replicas, &replica{
			ix:      ix,
			delay:   newSampler(d, streamSource(seed, p+"informer/"+strconv.Itoa(r))),
			instant: (d.Kind == "" || d.Kind == Constant) && d.Value == 0,
		})
	}
	for fi := range cfg.Fleets {
		fc := &cfg.Fleets[fi]
		labels := map[string]string{}
		for k, v := range fc.Labels {
			labels[k] = v
		}
		labels[core.FleetLabel] = fc.Name
		f := &fleet{cfg: fc, idx: fi, labels: labels,
			startup: newSampler(fc.StartupDelay, streamSource(seed, p+"fleet/"+fc.Name+"/startup"))}
		cl.fleets = append(cl.fleets, f)
		// The initial servers are Ready at time zero and every cache starts
		// in sync, as after an informer's initial list.
		for range fc.Replicas {
			slot, ok := w.createServer(cl, f)
			if !ok {
				return nil, fmt.Errorf("cluster %s: fleet %s: %d replicas do not fit on %d nodes of %d slots",
					cfg.Name, fc.Name, fc.Replicas, cfg.Nodes, cfg.SlotsPerNode)
			}
			w.markReady(cl, slot, true)
		}
		if fc.Buffer != nil {
			w.q.push(event{at: int64(fc.Buffer.SyncInterval), kind: evSync, c: uint8(i), id: int32(fi)})
		}
	}
	return cl, nil
}

func (w *world) newStream(cfg *StreamConfig) (*stream, error) {
	req, err := core.Normalize(&cfg.Request)
	if err != nil {
		return nil, err
	}
	var sched *Schedule
	if cfg.Arrivals == nil {
		if sched, err = NewSchedule(cfg.Rate, w.cfg.Duration); err != nil {
			return nil, err
		}
	}
	seed := w.cfg.Seed
	p := "stream/" + cfg.Name + "/"
	s := &stream{
		cfg:      cfg,
		req:      req,
		sched:    sched,
		arrivals: distuv.Exponential{Rate: 1, Src: streamSource(seed, p+"arrivals")},
		session:  newSampler(cfg.Session, streamSource(seed, p+"session")),
		rng:      rand.New(streamSource(seed, p+"requests")),
	}
	if req.MultiCluster.Enabled {
		if s.segs, err = w.policySegments(core.SelectPolicies(w.cfg.Policies, req.MultiCluster.PolicySelector)); err != nil {
			return nil, fmt.Errorf("stream %s: %w", cfg.Name, err)
		}
		s.salt = mix(seed ^ 0x6f72646572)
	} else {
		s.cluster = w.byName[cfg.Cluster]
	}
	if cfg.Create {
		s.tmpl = make([]int, len(w.clusters))
		s.odStartup = make([]*sampler, len(w.clusters))
		s.odWrite = make([]*sampler, len(w.clusters))
		for c, cl := range w.clusters {
			s.tmpl[c] = templateFleet(cl.cfg, cfg)
			if fi := s.tmpl[c]; fi >= 0 {
				q := p + "create/" + cl.cfg.Name + "/"
				s.odStartup[c] = newSampler(cl.cfg.Fleets[fi].StartupDelay, streamSource(seed, q+"startup"))
				s.odWrite[c] = newSampler(cl.cfg.WriteLatency, streamSource(seed, q+"write"))
			}
			// Every cluster reports on-demand figures in such a run
			// (zeros where no Create request goes), so that which paths
			// exist depends on the file alone.
			cl.od.reachable = true
		}
	}
	return s, nil
}

func (w *world) startStream(i int) {
	s := w.streams[i]
	if w.replayNext(i) {
		return
	}
	s.target += s.arrivals.Rand()
	if t, ok := s.sched.NextAt(s.target); ok {
		w.q.push(event{at: int64(t), kind: evArrival, id: int32(i)})
	}
}

func (w *world) run() bool {
	every := w.cfg.ProgressEvery
	if every == 0 {
		every = 1 << 20
	}
	for w.q.len() > 0 && w.q.peek() <= w.end {
		e := w.q.pop()
		w.now = e.at
		w.events++
		if w.events%every == 0 {
			if w.cfg.Progress != nil {
				w.cfg.Progress(time.Duration(w.now), w.events)
			}
			if w.cfg.Stop != nil && w.cfg.Stop() {
				return false
			}
		}
		switch e.kind {
		case evArrival:
			w.arrival(int(e.id))
		case evReach:
			w.reach(e.id)
		case evWriteDone:
			w.writeDone(e.id)
		case evBack:
			w.back(e.id)
		case evSessionEnd:
			w.sessionEnd(w.clusters[e.c], e.id)
		case evServerReady:
			cl := w.clusters[e.c]
			if cl.servers[e.id].state == stStarting {
				w.markReady(cl, e.id, false)
			}
		case evDeliver:
			w.deliver(w.clusters[e.c], int(e.r))
		case evSync:
			w.sync(w.clusters[e.c], int(e.id))
		case evTick:
			w.tick()
		case evFree:
			w.release(w.clusters[e.c], int(e.r))
		case evCreateDone:
			w.createDone(e.id)
		case evCreateExpired:
			w.createExpired(e.id)
		default:
			w.loss.event(&e)
		}
	}
	w.now = w.end
	for _, cl := range w.clusters {
		w.account(cl)
	}
	return true
}

// --- requests -------------------------------------------------------------

func (w *world) arrival(si int) {
	s := w.streams[si]
	k := int32(s.sent - 1) // this arrival's index, before the next is scheduled
	w.startStream(si)
	id := w.begin(si, k, s.rng.Uint64())
	w.route(s, id)
	if w.loss != nil {
		w.loss.arrived(id)
	}
	w.tryNext(id)
}

// begin makes and counts a request of stream si, its arrival k (replay
// streams), sent now.
func (w *world) begin(si int, k int32, seed uint64) int32 {
	id := w.newRequest()
	r := &w.reqs[id]
	r.stream = int32(si)
	r.arrival = k
	r.start = w.now
	r.seed = seed
	w.tot.requests++
	w.inFlight++
	for i := range w.phases {
		if p := w.cfg.Phases[i]; w.now >= int64(p.Start) && w.now < int64(p.End) {
			w.phases[i].requests++
		}
	}
	return id
}

// route sets the clusters request id tries, in order.
func (w *world) route(s *stream, id int32) {
	r := &w.reqs[id]
	if s.req.MultiCluster.Enabled {
		r.n = uint8(copy(r.order[:], w.orderFor(s, r.seed)))
	} else {
		r.order[0] = uint8(s.cluster)
		r.n = 1
	}
}

// orderFor returns the clusters (indexes) in the order core.OrderClusters
// gives for the stream's policies in force now and a seed derived from
// seed.
func (w *world) orderFor(s *stream, seed uint64) []uint8 {
	for s.seg < len(s.segs)-1 && w.now >= s.segs[s.seg].end {
		s.seg++
	}
	ps := s.segs[s.seg].set
	if ps.width <= 1 {
		// No choice to make: no cluster, or one (maybe under several
		// policies).
		if ps.orders == nil {
			ps.orders = []uint8{}
			if ps.width == 1 {
				ps.orders = append(ps.orders, uint8(w.byName[ps.policies[0].Connection.ClusterName]))
			}
		}
		return ps.orders
	}
	k := int(seed % orderSeeds)
	if ps.orders == nil && s.memoized >= maxMemoSets {
		s.scratch = s.scratch[:0]
		for _, p := range core.OrderClusters(ps.policies, mix(uint64(k)^s.salt)) {
			s.scratch = append(s.scratch, uint8(w.byName[p.Connection.ClusterName]))
		}
		return s.scratch
	}
	if ps.orders == nil {
		s.memoized++
		ps.orders = make([]uint8, orderSeeds*ps.width)
		for i := 0; i < len(ps.orders); i += ps.width {
			ps.orders[i] = 0xff
		}
	}
	o := ps.orders[k*ps.width : (k+1)*ps.width]
	if o[0] == 0xff {
		for i, p := range core.OrderClusters(ps.policies, mix(uint64(k)^s.salt)) {
			o[i] = uint8(w.byName[p.Connection.ClusterName])
		}
	}
	return o
}

// policySegments splits the run at the instants at which one of policies
// enters or leaves its window (virtual time zero is cfg.Start), each
// stretch with the policies in force in it. Stretches with the same
// policies share one policySet, and so its memoized orders.
func (w *world) policySegments(policies []core.Policy) ([]policySegment, error) {
	start := w.cfg.Start
	if start.IsZero() {
		start = Epoch
	}
	end := start.Add(w.cfg.Duration)
	sets := map[string]*policySet{}
	var segs []policySegment
	for at := start; ; {
		in := core.PoliciesAt(policies, at)
		key := make([]byte, 0, 16*len(in))
		for _, p := range in {
			key = append(append(key, p.Name...), 0)
		}
		set := sets[string(key)]
		if set == nil {
			seen := map[string]bool{}
			for _, p := range in {
				seen[p.Connection.ClusterName] = true
			}
			set = &policySet{policies: in, width: len(seen)}
			sets[string(key)] = set
		}
		next, ok := core.NextPolicyChange(policies, at, end)
		if !ok {
			return append(segs, policySegment{end: math.MaxInt64, set: set}), nil
		}
		if len(segs) >= maxSegments {
			return nil, fmt.Errorf("the policies' windows change the policies in force more than %d times in the run; shorten the run or simplify the windows", maxSegments)
		}
		segs = append(segs, policySegment{end: int64(next.Sub(start)), set: set})
		at = next
	}
}

func (w *world) newRequest() int32 {
	if n := len(w.free); n > 0 {
		id := w.free[n-1]
		w.free = w.free[:n-1]
		w.reqs[id] = request{}
		return id
	}
	w.reqs = append(w.reqs, request{})
	return int32(len(w.reqs) - 1)
}

// tryNext sends the request to the next cluster in its order, or ends it.
func (w *world) tryNext(id int32) {
	r := &w.reqs[id]
	if r.next >= r.n {
		switch {
		case r.contention:
			w.finish(id, outContention, 0)
		case !r.answered && r.n > 0:
			w.finish(id, outTimeout, 0)
		default:
			w.finish(id, outNoMatch, 0)
		}
		return
	}
	if w.now-r.start >= int64(w.cfg.Deadline) && w.cfg.Deadline > 0 {
		w.finish(id, outDeadline, 0)
		return
	}
	c := int(r.order[r.next])
	r.next++
	r.cluster = uint8(c)
	r.retries = 0
	cl := w.clusters[c]
	cl.m.Tries++
	if cl.down(w.now) {
		r.outcome = outTimeout
		w.q.push(event{at: w.now + int64(w.cfg.ForwardTimeout), kind: evBack, id: id})
		return
	}
	rtt := cl.rtt.next()
	r.back = rtt - rtt/2
	kind := uint8(evReach)
	if w.loss != nil && w.loss.sending(id, c) {
		kind = evReplay
	}
	w.q.push(event{at: w.now + rtt/2, kind: kind, id: id})
}

func (cl *cluster) down(t int64) bool {
	for _, o := range cl.outages {
		if t >= o[0] && t < o[1] {
			return true
		}
	}
	return false
}

func (w *world) reach(id int32) {
	r := &w.reqs[id]
	if w.streams[r.stream].tmpl != nil {
		w.create(id)
		return
	}
	cl := w.clusters[r.cluster]
	ri := 0
	if n := len(cl.replicas); n > 1 {
		ri = cl.pick.IntN(n)
	}
	r.replica = uint16(ri)
	rp := cl.replicas[ri]
	if cl.cfg.Workers > 0 && rp.busy >= cl.cfg.Workers {
		rp.waiting = append(rp.waiting, id)
		return
	}
	rp.busy++
	w.attempt(id)
}

// attempt runs one allocation decision on the replica's cache and, when it
// finds a server, sends the write to the API server.
func (w *world) attempt(id int32) {
	r := &w.reqs[id]
	cl := w.clusters[r.cluster]
	rp := cl.replicas[r.replica]
	s := w.streams[r.stream]
	seed := mix(r.seed + uint64(r.next)<<32 + uint64(r.retries))
	res, err := rp.ix.Allocate(s.req, Epoch.Add(time.Duration(w.now)), seed)
	dt := cl.decision.next()
	if err != nil {
		r.outcome = outNoMatch
		w.q.push(event{at: w.now + dt + r.back, kind: evBack, id: id})
		if dt == 0 {
			w.release(cl, int(r.replica))
		} else {
			w.q.push(event{at: w.now + dt, kind: evFree, c: r.cluster, r: r.replica})
		}
		return
	}
	r.res = res
	w.q.push(event{at: w.now + dt + cl.write.next(), kind: evWriteDone, id: id})
}

// release frees a replica's worker and starts the next waiting request.
func (w *world) release(cl *cluster, ri int) {
	rp := cl.replicas[ri]
	if rp.wHead < len(rp.waiting) {
		id := rp.waiting[rp.wHead]
		rp.wHead++
		if rp.wHead == len(rp.waiting) {
			rp.waiting, rp.wHead = rp.waiting[:0], 0
		}
		w.attempt(id)
		return
	}
	rp.busy--
}

// writeDone is the API server's answer to an allocation write: applied when
// the server's version is still the one the replica read, a conflict
// otherwise.
func (w *world) writeDone(id int32) {
	r := &w.reqs[id]
	cl := w.clusters[r.cluster]
	rp := cl.replicas[r.replica]
	res := r.res
	r.res = nil
	slot := slotOf(res.Previous.Name)
	sv := &cl.servers[slot]
	if sv.state == stReady && sv.gs.Version == res.Previous.Version {
		w.account(cl)
		f := cl.fleets[sv.fleet]
		f.removeReady(cl, slot)
		f.alloc++
		cl.readyCount--
		cl.allocated++
		n := &cl.nodes[sv.node]
		if n.alloc == 0 {
			cl.nodesWithAlloc++
		}
		n.alloc++
		cl.rev++
		gs := res.GameServer
		gs.Version = strconv.FormatUint(cl.rev, 10)
		sv.gs, sv.rev, sv.state = gs, cl.rev, stAllocated
		rp.ix.Commit(res, nil)
		rp.seen[slot].rev = cl.rev
		w.propagate(cl, slot, gs, false, int(r.replica))
		if w.loss != nil {
			ri := int(r.replica)
			if w.loss.answer(id, slot) {
				cl.m.Allocated++
				w.release(cl, ri)
				return
			}
		}
		s := w.streams[r.stream]
		w.q.push(event{at: w.now + w.sessionFor(s, r), kind: evSessionEnd, c: r.cluster, id: slot})
		// Nothing else happens to a success on its way back to the router,
		// so it is recorded now, with the return trip in its latency: one
		// event fewer per allocation.
		cl.m.Allocated++
		w.release(cl, int(r.replica))
		w.finish(id, outOK, r.back)
		return
	}
	// Conflict: take the fresh state, drop the hold, decide again.
	cl.m.Retries++
	w.tot.retries++
	c := &rp.seen[slot]
	if sv.state == stGone {
		rp.ix.Remove(res.Previous.Key())
		c.at = core.Slot{}
	} else {
		c.at = rp.ix.UpsertSlot(c.at, sv.gs)
	}
	c.rev = sv.rev
	rp.ix.Abort(res)
	r.retries++
	if int(r.retries) > cl.cfg.MaxRetries {
		r.outcome = outContention
		w.q.push(event{at: w.now + r.back, kind: evBack, id: id})
		w.release(cl, int(r.replica))
		return
	}
	w.attempt(id)
}

// back handles a cluster's answer arriving at the router.
func (w *world) back(id int32) {
	r := &w.reqs[id]
	cl := w.clusters[r.cluster]
	switch r.outcome {
	case outNoMatch:
		cl.m.UnAllocated++
		r.answered = true
	case outContention:
		cl.m.Contention++
		r.answered = true
		r.contention = true
	case outTimeout:
		cl.m.Unavailable++
		if w.loss != nil && w.loss.unreachable(id) {
			return
		}
	case outLost:
		w.loss.lostBack(id)
		return
	}
	w.tryNext(id)
}

// finish ends a request; back is the part of its latency still to come (the
// return trip of a success).
func (w *world) finish(id int32, out int, back int64) {
	r := &w.reqs[id]
	if w.loss != nil {
		w.loss.finished(id, out)
	}
	w.inFlight--
	t := &w.tot
	switch out {
	case outOK:
		t.allocated++
		lat := w.now + back - r.start
		w.lat.add(lat)
		w.clusters[r.cluster].lat.add(lat)
	case outNoMatch:
		t.unallocated++
	case outContention:
		t.contention++
	case outTimeout:
		t.unavailable++
	case outDeadline:
		t.deadline++
	}
	for i := range w.phases {
		if p := w.cfg.Phases[i]; r.start >= int64(p.Start) && r.start < int64(p.End) && out == outOK {
			w.phases[i].allocated++
			w.phases[i].perCluster[r.cluster]++
		}
	}
	w.free = append(w.free, id)
}

// --- game servers ---------------------------------------------------------

// slotOf recovers the server slot from a name "<fleet>-<slot>".
func slotOf(name string) int32 {
	i := strings.LastIndexByte(name, '-')
	n, _ := strconv.Atoi(name[i+1:])
	return int32(n)
}

// createServer places a new server of f on a node; it is Starting until
// markReady. It reports false when no node has a free slot.
func (w *world) createServer(cl *cluster, f *fleet) (int32, bool) {
	n := cl.place(f.cfg.Placement)
	if n < 0 {
		return 0, false
	}
	w.account(cl)
	nd := &cl.nodes[n]
	if nd.used == 0 {
		cl.nodesInUse++
	}
	cl.setUsed(n, nd.used+1)
	slot := int32(len(cl.servers))
	cl.servers = append(cl.servers, server{node: n, fleet: int16(f.idx), state: stStarting, pos: -1})
	for _, rp := range cl.replicas {
		rp.seen = append(rp.seen, cached{})
	}
	f.starting++
	return slot, true
}

// markReady turns a Starting server Ready. initial servers reach every cache
// at once.
func (w *world) markReady(cl *cluster, slot int32, initial bool) {
	sv := &cl.servers[slot]
	f := cl.fleets[sv.fleet]
	f.starting--
	cl.rev++
	sv.rev = cl.rev
	sv.state = stReady
	if sv.name == "" {
		sv.name = f.cfg.Name + "-" + strconv.Itoa(int(slot))
	}
	sv.gs = &core.GameServer{
		Namespace: core.DefaultNamespace,
		Name:      sv.name,
		Labels:    f.labels,
		State:     core.StateReady,
		NodeName:  cl.nodes[sv.node].name,
		Version:   strconv.FormatUint(cl.rev, 10),
	}
	f.addReady(cl, slot)
	cl.readyCount++
	if initial {
		for _, rp := range cl.replicas {
			rp.seen[slot] = cached{rev: sv.rev, at: rp.ix.UpsertSlot(core.Slot{}, sv.gs)}
		}
		return
	}
	w.propagate(cl, slot, sv.gs, false, -1)
}

func (w *world) sessionEnd(cl *cluster, slot int32) {
	sv := &cl.servers[slot]
	if sv.state != stAllocated {
		return
	}
	if sv.onDemand {
		w.endOnDemand(cl, slot)
		return
	}
	w.account(cl)
	f := cl.fleets[sv.fleet]
	f.alloc--
	cl.allocated--
	n := &cl.nodes[sv.node]
	n.alloc--
	if n.alloc == 0 {
		cl.nodesWithAlloc--
	}
	if f.cfg.SessionEnd == EndReady {
		f.starting++ // markReady counts it out again
		sv.state = stStarting
		w.markReady(cl, slot, false)
		return
	}
	w.deleteServer(cl, slot)
	if f.cfg.Buffer == nil {
		w.reconcile(cl, f, f.cfg.Replicas)
	}
}

// deleteServer removes a Ready or Allocated server from the truth.
func (w *world) deleteServer(cl *cluster, slot int32) {
	sv := &cl.servers[slot]
	w.account(cl)
	if sv.state == stReady {
		cl.fleets[sv.fleet].removeReady(cl, slot)
		cl.readyCount--
	}
	cl.rev++
	sv.rev = cl.rev
	sv.state = stGone
	n := sv.node
	cl.setUsed(n, cl.nodes[n].used-1)
	if cl.nodes[n].used == 0 {
		cl.nodesInUse--
	}
	w.propagate(cl, slot, sv.gs, true, -1)
	// The deliveries keep what they need; a slot must not keep a dead
	// server's object alive for the rest of the run.
	sv.gs = nil
}

// reconcile creates or deletes servers of f until it has want (Allocated
// servers are never deleted; creation stops when the nodes are full).
func (w *world) reconcile(cl *cluster, f *fleet, want int) {
	have := len(f.ready) + f.starting + f.alloc
	for ; have < want; have++ {
		slot, ok := w.createServer(cl, f)
		if !ok {
			break
		}
		if d := f.startup.next(); d > 0 {
			w.q.push(event{at: w.now + d, kind: evServerReady, c: uint8(cl.idx), id: slot})
		} else {
			w.markReady(cl, slot, false)
		}
	}
	if have <= want || len(f.ready) == 0 {
		return
	}
	// Scale down Ready servers: Packed empties the least used nodes first,
	// Distributed trims the busiest; ties by slot, for reproducibility.
	victims := slices.Clone(f.ready)
	packed := f.cfg.Placement != PlaceDistributed
	slices.SortFunc(victims, func(a, b int32) int {
		ua, ub := cl.nodes[cl.servers[a].node].used, cl.nodes[cl.servers[b].node].used
		if ua != ub {
			if (ua < ub) == packed {
				return -1
			}
			return 1
		}
		return int(a - b)
	})
	for _, slot := range victims[:min(have-want, len(victims))] {
		w.deleteServer(cl, slot)
	}
}

func (w *world) sync(cl *cluster, fi int) {
	f := cl.fleets[fi]
	b := f.cfg.Buffer
	want := min(max(f.alloc+b.Size, b.Min), b.Max)
	w.reconcile(cl, f, want)
	w.q.push(event{at: w.now + int64(b.SyncInterval), kind: evSync, c: uint8(cl.idx), id: int32(fi)})
}

func (f *fleet) addReady(cl *cluster, slot int32) {
	cl.servers[slot].pos = int32(len(f.ready))
	f.ready = append(f.ready, slot)
}

func (f *fleet) removeReady(cl *cluster, slot int32) {
	i := cl.servers[slot].pos
	last := f.ready[len(f.ready)-1]
	f.ready[i] = last
	cl.servers[last].pos = i
	f.ready = f.ready[:len(f.ready)-1]
	cl.servers[slot].pos = -1
}

// place returns the node for a new server, or -1 when every node is full.
func (cl *cluster) place(p Placement) int32 {
	if p == PlaceDistributed {
		for u := range cl.buckets {
			if b := cl.buckets[u]; len(b) > 0 {
				return b[len(b)-1]
			}
		}
		return -1
	}
	for u := len(cl.buckets) - 1; u >= 0; u-- {
		if b := cl.buckets[u]; len(b) > 0 {
			return b[len(b)-1]
		}
	}
	return -1
}

// setUsed moves node n between placement buckets.
func (cl *cluster) setUsed(n int32, used int32) {
	nd := &cl.nodes[n]
	if old := nd.used; int(old) < len(cl.buckets) {
		b := cl.buckets[old]
		last := b[len(b)-1]
		b[nd.pos] = last
		cl.nodes[last].pos = nd.pos
		cl.buckets[old] = b[:len(b)-1]
	}
	nd.used = used
	if int(used) < len(cl.buckets) {
		nd.pos = int32(len(cl.buckets[used]))
		cl.buckets[used] = append(cl.buckets[used], n)
	}
}

// --- informers ------------------------------------------------------------

// propagate sends a change of the truth, at a revision no cache has yet,
// to every replica's cache but the writer's (-1: none), which has it
// already.
func (w *world) propagate(cl *cluster, slot int32, gs *core.GameServer, del bool, writer int) {
	rev := cl.servers[slot].rev
	for ri, rp := range cl.replicas {
		if ri == writer {
			continue
		}
		d := delivery{at: w.now, slot: slot, del: del, rev: rev, gs: gs}
		if rp.instant && len(rp.fifo) == rp.head {
			rp.apply(&d)
			continue
		}
		d.at = max(w.now+rp.delay.next(), rp.lastAt)
		rp.lastAt = d.at
		rp.fifo = append(rp.fifo, d)
		if !rp.sched {
			rp.sched = true
			w.q.push(event{at: d.at, kind: evDeliver, c: uint8(cl.idx), r: uint16(ri)})
		}
	}
}

func (w *world) deliver(cl *cluster, ri int) {
	rp := cl.replicas[ri]
	for rp.head < len(rp.fifo) && rp.fifo[rp.head].at <= w.now {
		rp.apply(&rp.fifo[rp.head])
		rp.fifo[rp.head] = delivery{}
		rp.head++
	}
	if rp.head == len(rp.fifo) {
		rp.fifo, rp.head = rp.fifo[:0], 0
		rp.sched = false
		return
	}
	if rp.head > 4096 && rp.head*2 > len(rp.fifo) {
		n := copy(rp.fifo, rp.fifo[rp.head:])
		clear(rp.fifo[n:])
		rp.fifo, rp.head = rp.fifo[:n], 0
	}
	w.q.push(event{at: rp.fifo[rp.head].at, kind: evDeliver, c: uint8(cl.idx), r: uint16(ri)})
}

// apply puts one change into the cache, unless the cache already holds that
// server at the same or a newer revision (its own write, or fresh state
// fetched on a conflict).
func (rp *replica) apply(d *delivery) {
	c := &rp.seen[d.slot]
	if d.rev <= c.rev {
		return
	}
	c.rev = d.rev
	if d.del {
		rp.ix.Remove(d.gs.Key())
		c.at = core.Slot{}
	} else {
		c.at = rp.ix.UpsertSlot(c.at, d.gs)
	}
}

// --- accounting -----------------------------------------------------------

// account integrates node and allocation counts up to now; call it before
// changing them.
func (w *world) account(cl *cluster) {
	dt := float64(w.now - cl.lastT)
	if dt > 0 {
		cl.nodeArea += dt * float64(cl.nodesInUse)
		cl.allocArea += dt * float64(cl.allocated)
		cl.lastT = w.now
	}
}

func (w *world) tick() {
	w.ticks = append(w.ticks, time.Duration(w.now).Seconds())
	for _, cl := range w.clusters {
		s := &cl.series
		s.Allocated = append(s.Allocated, cl.allocated)
		s.Ready = append(s.Ready, cl.readyCount)
		s.NodesInUse = append(s.NodesInUse, cl.nodesInUse)
		s.NodesWithAllocated = append(s.NodesWithAllocated, cl.nodesWithAlloc)
		minNodes := (cl.allocated + cl.cfg.SlotsPerNode - 1) / cl.cfg.SlotsPerNode
		eff := 1.0
		if cl.nodesWithAlloc > 0 {
			eff = float64(minNodes) / float64(cl.nodesWithAlloc)
		}
		s.PackingEfficiency = append(s.PackingEfficiency, round4(eff))
		cl.packMin += float64(minNodes)
		cl.packUsed += float64(cl.nodesWithAlloc)
		s.Allocations = append(s.Allocations, cl.m.Allocated-s.lastAllocated)
		s.UnAllocated = append(s.UnAllocated, cl.m.UnAllocated-s.lastUnAllocated)
		s.Retries = append(s.Retries, cl.m.Retries-s.lastRetries)
		s.lastAllocated, s.lastUnAllocated, s.lastRetries = cl.m.Allocated, cl.m.UnAllocated, cl.m.Retries
	}
	if next := w.now + w.interval; next <= w.end {
		w.q.push(event{at: next, kind: evTick})
	}
}
