package sim

import (
	"math/rand/v2"
	"time"
)

// The loss model: answers lost after the allocation they carry committed,
// callers that give up and retry, idempotency keys, and the servers that
// leak when there are none.
//
// Two places lose answers. A cluster's link (ClusterConfig.AnswerLoss)
// loses the answer of a forwarded request (a multi-cluster stream's try)
// on its way back to the forwarder, which notices at the forwarding
// timeout. The caller (StreamConfig.Caller) loses the final answer
// (Caller.AnswerLoss), or has given up already because it came after
// Caller.Timeout. Only answers that carry an allocation are lost: losing a
// refusal costs time only, which the model leaves out.
//
// Without a key, such an allocation is a leaked server: Allocated, with no
// session and nobody who will ever release it. It stays so to the end of
// the run, as Agones leaves it, unless its fleet's IdleShutdown reclaims
// it. The forwarder moves on to the next cluster, and the caller's retry
// is a new request that allocates again.
//
// With a key (Caller.Keys), the allocation is held for the key instead,
// and a keyed request never moves on from a cluster that may hold its
// key's allocation. The forwarder tries the same cluster again
// (Losses.KeyRetries times) and gets the same server; when those answers
// are lost too, or the cluster cannot be reached, it answers the caller
// Unavailable, and the caller sends the request again as its Retries and
// RetryDelay say (a caller past its timeout has given up on that try
// already). A caller's retry goes to the cluster holding the key's
// allocation first and is answered with it (or joins the attempt still in
// flight, which the allocator answers once); it goes on to the other
// clusters only when that allocation is gone and the cluster has no
// server for it. The session starts when an answer finally reaches the
// caller. An allocation that no retry takes is released when the key's
// window (KeyWindow) closes. Nothing leaks, and nothing is left for a
// forwarder's reconciliation, which in the live allocator only sees
// requests carrying keys of its own (not modelled): Losses.ReconcileDelay
// has no effect, and Reconciled stays 0.
//
// Every draw comes from random streams of the model's own (per cluster
// link and per caller), so a run with the model off, or with every rate
// at zero, draws exactly what it drew before, and gives the same results.

// LossResult are the loss model's figures, in a run with the model on.
type LossResult struct {
	// LostOnLinks is the forwarded answers lost between a cluster and the
	// forwarder after their allocation committed.
	LostOnLinks uint64 `json:"lostOnLinks"`
	// LostToCallers is the final answers lost on their way to the caller
	// after their allocation committed.
	LostToCallers uint64 `json:"lostToCallers"`
	// GaveUp is the allocations whose answer came after the caller had
	// given up (past its timeout, or after it had sent a retry).
	GaveUp uint64 `json:"gaveUp"`
	// CallerRetries is the requests callers sent again after giving up;
	// ForwardRetries the tries of the same cluster again with the key
	// after a lost answer; Retries both.
	CallerRetries  uint64 `json:"callerRetries"`
	ForwardRetries uint64 `json:"forwardRetries"`
	Retries        uint64 `json:"retries"`
	// CallersFailed is the callers that gave up after their last retry
	// without an answer.
	CallersFailed uint64 `json:"callersFailed"`
	// Leaked is the servers left Allocated for a caller who never learnt
	// of them; LeakedPerHour per hour of virtual time; Reclaimed those
	// that shut themselves down (IdleShutdown) and LeakedAtEnd those
	// still Allocated at the end; LeakedServerHours the time they held.
	Leaked            uint64  `json:"leaked"`
	LeakedPerHour     float64 `json:"leakedPerHour"`
	Reclaimed         uint64  `json:"reclaimed"`
	LeakedAtEnd       uint64  `json:"leakedAtEnd"`
	LeakedServerHours float64 `json:"leakedServerHours"`
	// DuplicatesAvoided is the keyed retries (the caller's and the
	// forwarder's) answered with the allocation the key already had, or
	// joined to the attempt in flight, where a request without a key
	// would have allocated again.
	DuplicatesAvoided uint64 `json:"duplicatesAvoided"`
	// Reconciled is the keyed allocations released by a forwarder's
	// reconciliation after it moved on from their cluster: none, as a
	// keyed request never moves on from a cluster that may hold its
	// allocation (the figure stays for files that name it). KeyReleases is
	// those released when the key's window closed with no retry to take
	// them.
	Reconciled  uint64 `json:"reconciled"`
	KeyReleases uint64 `json:"keyReleases"`
	// Clusters are the figures per cluster.
	Clusters map[string]ClusterLosses `json:"clusters"`
}

// ClusterLosses are one cluster's loss figures.
type ClusterLosses struct {
	LostOnLinks uint64 `json:"lostOnLinks"`
	Leaked      uint64 `json:"leaked"`
	// Reconciled is 0, as LossResult.Reconciled.
	Reconciled uint64 `json:"reconciled"`
}

// Event kinds of the loss model, after those of sim.go.
const (
	evReplay        = iota + 100 // id: request; a keyed try reaches the cluster holding its allocation
	evCallerTimeout              // id: call, r: attempt; the caller's timeout for an attempt
	evCallerRetry                // id: call; the caller sends its request again
	evRelease                    // id: pending release; a held allocation's key window closes
	evReclaim                    // c, id: server slot; a leaked server shuts itself down
)

type lossState struct {
	w   *world
	cfg Losses

	links     []float64    // per cluster: AnswerLoss
	linkRng   []*rand.Rand // per cluster, nil where AnswerLoss is 0
	callerRng []*rand.Rand // per stream, nil without a lossy caller

	reqs     []reqLoss // parallel to world.reqs
	calls    []call
	freeCall []int32
	pending  []pendingRelease
	freeRel  []int32

	tot       LossResult
	clusters  []ClusterLosses
	leakArea  float64 // leaked-server-nanoseconds up to the end of the run
	leakedNow uint64
}

// reqLoss is the model's part of a request.
type reqLoss struct {
	call     int32 // index+1 in calls; 0: no caller model
	attempt  int32
	sent     int64 // when the current try was sent
	keyTries int32 // tries of the current cluster again after lost answers
	// unavailable: the forwarder ends the try Unavailable, as a cluster
	// it cannot move on from may hold the key's allocation; the caller
	// retries that.
	unavailable bool
}

// call is one caller's request across its retries.
type call struct {
	stream  int32
	arrival int32
	current int32 // the request of the current attempt
	attempt int32
	start   int64 // when the current attempt was sent
	refs    int32 // requests in flight for it
	// inFlight: the current attempt's request has not finished; done:
	// the caller has its answer (or an error) and sends no more; closed:
	// it will send no more, answered or not.
	inFlight, done, closed bool
	timer, retrying        bool // a timeout or retry event is pending
	held                   heldAlloc
	seed                   uint64
}

// heldAlloc is an allocation made for a key and not yet answered to its
// caller.
type heldAlloc struct {
	ok      bool
	cluster uint8
	slot    int32
	rev     uint64
}

type pendingRelease struct {
	cluster uint8
	slot    int32
	rev     uint64
}

func (w *world) lossModelOn() bool {
	if w.cfg.Losses != nil {
		return true
	}
	for i := range w.cfg.Clusters {
		if w.cfg.Clusters[i].AnswerLoss > 0 {
			return true
		}
	}
	for i := range w.cfg.Streams {
		if w.cfg.Streams[i].Caller != nil {
			return true
		}
	}
	return false
}

func newLossState(w *world) *lossState {
	l := &lossState{w: w, clusters: make([]ClusterLosses, len(w.clusters))}
	if w.cfg.Losses != nil {
		l.cfg = *w.cfg.Losses
	}
	if l.cfg.KeyWindow == 0 {
		l.cfg.KeyWindow = DefaultKeyWindow
	}
	seed := w.cfg.Seed
	for _, cl := range w.clusters {
		p := cl.cfg.AnswerLoss
		l.links = append(l.links, p)
		var rng *rand.Rand
		if p > 0 {
			rng = rand.New(streamSource(seed, "cluster/"+cl.cfg.Name+"/link-loss"))
		}
		l.linkRng = append(l.linkRng, rng)
	}
	for _, s := range w.streams {
		var rng *rand.Rand
		if c := s.cfg.Caller; c != nil && c.AnswerLoss > 0 {
			rng = rand.New(streamSource(seed, "stream/"+s.cfg.Name+"/caller-loss"))
		}
		l.callerRng = append(l.callerRng, rng)
	}
	return l
}

// request grows the model's part of the requests to cover id, fresh.
func (l *lossState) request(id int32) *reqLoss {
	for int(id) >= len(l.reqs) {
		l.reqs = append(l.reqs, reqLoss{})
	}
	l.reqs[id] = reqLoss{}
	return &l.reqs[id]
}

func (l *lossState) callOf(id int32) *call {
	if c := l.reqs[id].call; c > 0 {
		return &l.calls[c-1]
	}
	return nil
}

func (l *lossState) callerOf(c *call) *Caller { return l.w.streams[c.stream].cfg.Caller }

// arrived takes a new request of a stream: with a caller model, it is the
// first attempt of a call.
func (l *lossState) arrived(id int32) {
	lr := l.request(id)
	r := &l.w.reqs[id]
	if l.w.streams[r.stream].cfg.Caller == nil {
		return
	}
	var ci int32
	if n := len(l.freeCall); n > 0 {
		ci = l.freeCall[n-1]
		l.freeCall = l.freeCall[:n-1]
	} else {
		l.calls = append(l.calls, call{})
		ci = int32(len(l.calls) - 1)
	}
	l.calls[ci] = call{stream: r.stream, arrival: r.arrival, seed: r.seed}
	l.attach(ci, id, lr)
}

// attach makes request id the call's current attempt and starts the
// caller's timeout for it.
func (l *lossState) attach(ci, id int32, lr *reqLoss) {
	c := &l.calls[ci]
	lr.call, lr.attempt = ci+1, c.attempt
	c.current = id
	c.refs++
	c.inFlight = true
	c.start = l.w.now
	l.armTimeout(ci)
}

func (l *lossState) armTimeout(ci int32) {
	c := &l.calls[ci]
	if t := l.callerOf(c).Timeout; t > 0 {
		c.timer = true
		l.w.q.push(event{at: l.w.now + int64(t), kind: evCallerTimeout, id: ci, r: uint16(c.attempt)})
	}
}

// sending is called as a try of request id goes to cluster c; it reports
// whether the try goes to the allocation its key holds there (a replay:
// no allocation, the same server).
func (l *lossState) sending(id int32, c int) bool {
	lr := &l.reqs[id]
	lr.sent = l.w.now
	k := l.callOf(id)
	return k != nil && k.held.ok && int(k.held.cluster) == c && l.callerOf(k).Keys
}

// answer decides the fate of an answer carrying the allocation of slot on
// request id's cluster: lost on the link (the forwarder learns of it at the
// forwarding timeout), lost to the caller or come too late for it, or
// delivered. It reports whether it was lost, having then dealt with the
// server and the request; when delivered the caller of answer starts the
// session and finishes the request.
func (l *lossState) answer(id, slot int32) bool {
	w := l.w
	r := &w.reqs[id]
	lr := &l.reqs[id]
	c := int(r.cluster)
	k := l.callOf(id)
	keyed := k != nil && l.callerOf(k).Keys
	if rng := l.linkRng[c]; rng != nil && w.streams[r.stream].req.MultiCluster.Enabled && rng.Float64() < l.links[c] {
		l.tot.LostOnLinks++
		l.clusters[c].LostOnLinks++
		if keyed {
			l.hold(k, c, slot)
		} else {
			l.leak(c, slot)
		}
		r.outcome = outLost
		w.q.push(event{at: max(w.now+r.back, lr.sent+int64(w.cfg.ForwardTimeout)), kind: evBack, id: id})
		return true
	}
	if k == nil {
		return false
	}
	cc := l.callerOf(k)
	late := lr.attempt != k.attempt || (cc.Timeout > 0 && w.now+r.back > k.start+int64(cc.Timeout))
	lost := false
	if !late {
		if rng := l.callerRng[r.stream]; rng != nil && rng.Float64() < cc.AnswerLoss {
			lost = true
		}
	}
	if !late && !lost {
		return false
	}
	if late {
		l.tot.GaveUp++
	} else {
		l.tot.LostToCallers++
	}
	if keyed {
		l.hold(k, c, slot)
	} else {
		l.leak(c, slot)
	}
	w.finish(id, outLost, r.back)
	return true
}

// hold keeps slot's allocation for the call's key until a retry takes it
// or the key's window closes.
func (l *lossState) hold(k *call, c int, slot int32) {
	sv := &l.w.clusters[c].servers[slot]
	if k.held.ok && int(k.held.cluster) == c && k.held.slot == slot && k.held.rev == sv.rev {
		return
	}
	sv.held = true
	k.held = heldAlloc{ok: true, cluster: uint8(c), slot: slot, rev: sv.rev}
	l.release(c, slot, sv.rev, l.w.now+int64(l.cfg.KeyWindow))
}

// leak leaves slot Allocated for nobody: until its fleet's idle shutdown,
// or to the end of the run.
func (l *lossState) leak(c int, slot int32) {
	w := l.w
	cl := w.clusters[c]
	sv := &cl.servers[slot]
	sv.leaked = true
	l.tot.Leaked++
	l.clusters[c].Leaked++
	l.leakedNow++
	l.leakArea += float64(w.end - w.now)
	if d := cl.fleets[sv.fleet].cfg.IdleShutdown; d > 0 {
		w.q.push(event{at: w.now + int64(d), kind: evReclaim, c: uint8(c), id: slot})
	}
}

// release schedules the release of an allocation held for a key, at or
// after at and once the cluster is reachable.
func (l *lossState) release(c int, slot int32, rev uint64, at int64) {
	cl := l.w.clusters[c]
	for moved := true; moved; {
		moved = false
		for _, o := range cl.outages {
			if at >= o[0] && at < o[1] {
				at, moved = o[1], true
			}
		}
	}
	var pi int32
	if n := len(l.freeRel); n > 0 {
		pi = l.freeRel[n-1]
		l.freeRel = l.freeRel[:n-1]
	} else {
		l.pending = append(l.pending, pendingRelease{})
		pi = int32(len(l.pending) - 1)
	}
	l.pending[pi] = pendingRelease{cluster: uint8(c), slot: slot, rev: rev}
	l.w.q.push(event{at: at, kind: evRelease, id: pi})
}

// lostBack is the forwarder learning that a try's answer was lost: with a
// key it tries the same cluster again, up to KeyRetries times, and then
// answers the caller Unavailable (the cluster may hold the key's
// allocation, so it does not move on); without one it moves on at once.
func (l *lossState) lostBack(id int32) {
	w := l.w
	r := &w.reqs[id]
	lr := &l.reqs[id]
	if l.holdsKey(id) {
		if int(lr.keyTries) < l.cfg.KeyRetries {
			lr.keyTries++
			l.tot.ForwardRetries++
			r.next--
			w.tryNext(id)
			return
		}
		l.failUnavailable(id)
		return
	}
	lr.keyTries = 0
	w.tryNext(id)
}

// holdsKey says whether request id carries its caller's key and its
// current cluster may hold the key's allocation.
func (l *lossState) holdsKey(id int32) bool {
	k := l.callOf(id)
	return k != nil && k.held.ok && k.held.cluster == l.w.reqs[id].cluster && l.callerOf(k).Keys
}

// unreachable is told of a try of request id that could not reach its
// cluster; it reports whether it ended the request, as a keyed request
// whose allocation that cluster may hold cannot go past it.
func (l *lossState) unreachable(id int32) bool {
	if !l.holdsKey(id) {
		return false
	}
	l.failUnavailable(id)
	return true
}

// failUnavailable ends keyed request id Unavailable, an answer its
// caller retries; the key's allocation stays held for that retry.
func (l *lossState) failUnavailable(id int32) {
	l.reqs[id].unavailable = true
	l.w.finish(id, outTimeout, 0)
}

// replay answers a keyed try at the cluster holding its key's allocation:
// the same server, nothing allocated again. When the allocation is gone
// (released), the try allocates afresh.
func (l *lossState) replay(id int32) {
	w := l.w
	r := &w.reqs[id]
	k := l.callOf(id)
	h := k.held
	cl := w.clusters[r.cluster]
	if !h.ok || int(h.cluster) != int(r.cluster) || cl.servers[h.slot].state != stAllocated ||
		cl.servers[h.slot].rev != h.rev || !cl.servers[h.slot].held {
		k.held = heldAlloc{}
		w.reach(id)
		return
	}
	l.tot.DuplicatesAvoided++
	if l.answer(id, h.slot) {
		return
	}
	cl.servers[h.slot].held = false
	k.held = heldAlloc{}
	w.q.push(event{at: w.now + w.sessionFor(w.streams[r.stream], r), kind: evSessionEnd, c: r.cluster, id: h.slot})
	w.finish(id, outOK, r.back)
}

// finished is told of every request that ends (finish), before its id is
// reused.
func (l *lossState) finished(id int32, out int) {
	lr := &l.reqs[id]
	if lr.call == 0 {
		return
	}
	ci := lr.call - 1
	k := &l.calls[ci]
	k.refs--
	if lr.attempt == k.attempt && k.inFlight {
		k.inFlight = false
		t := l.callerOf(k).Timeout
		waiting := t == 0 || l.w.now <= k.start+int64(t)
		switch {
		case waiting && lr.unavailable:
			l.retryAfterFailure(ci)
		case waiting && out != outLost:
			k.done, k.closed = true, true
		}
	}
	lr.call = 0
	l.maybeFree(ci)
}

// retryAfterFailure is call ci's caller answered with a failure it
// retries: it sends the request again RetryDelay later, or gives up when
// it has no retries left.
func (l *lossState) retryAfterFailure(ci int32) {
	k := &l.calls[ci]
	cc := l.callerOf(k)
	if int(k.attempt) >= cc.Retries {
		l.tot.CallersFailed++
		k.done, k.closed = true, true
		return
	}
	// The attempt's timeout, still pending, must not send it again too.
	k.retrying = true
	l.w.q.push(event{at: l.w.now + int64(cc.RetryDelay), kind: evCallerRetry, id: ci})
}

// timeout is the caller's timeout for attempt a of call ci.
func (l *lossState) timeout(ci int32, a uint16) {
	k := &l.calls[ci]
	if uint16(k.attempt) != a || !k.timer {
		return
	}
	k.timer = false
	if k.done || k.retrying {
		l.maybeFree(ci)
		return
	}
	cc := l.callerOf(k)
	if int(k.attempt) >= cc.Retries {
		l.tot.CallersFailed++
		k.closed = true
		l.maybeFree(ci)
		return
	}
	k.retrying = true
	l.w.q.push(event{at: l.w.now + int64(cc.RetryDelay), kind: evCallerRetry, id: ci})
}

// retry sends call ci's request again: with a key, joined to the attempt
// in flight, or sent to the cluster holding the key's allocation first
// (answered Unavailable when no policy in force names that cluster); a
// new request routed afresh otherwise.
func (l *lossState) retry(ci int32) {
	w := l.w
	k := &l.calls[ci]
	k.retrying = false
	k.attempt++
	l.tot.CallerRetries++
	keyed := l.callerOf(k).Keys
	if keyed && k.inFlight {
		// The allocator answers both with one allocation: the attempt in
		// flight becomes this one.
		l.tot.DuplicatesAvoided++
		l.reqs[k.current].attempt = k.attempt
		k.start = w.now
		l.armTimeout(ci)
		return
	}
	s := w.streams[k.stream]
	id := w.begin(int(k.stream), k.arrival, mix(k.seed+uint64(k.attempt)))
	lr := l.request(id)
	l.attach(ci, id, lr)
	w.route(s, id)
	if keyed && k.held.ok && !heldFirst(&w.reqs[id], k.held.cluster) {
		// No policy in force names the cluster that may hold the key's
		// allocation: the forwarder cannot ask it, nor go past it.
		l.failUnavailable(id)
		return
	}
	w.tryNext(id)
}

// heldFirst puts cluster c first in r's order, the others after it in
// their order; it reports false, leaving the order as it is, when the
// order lacks c (no policy in force names it now).
func heldFirst(r *request, c uint8) bool {
	for i := 0; i < int(r.n); i++ {
		if r.order[i] == c {
			copy(r.order[1:i+1], r.order[:i])
			r.order[0] = c
			return true
		}
	}
	return false
}

func (l *lossState) maybeFree(ci int32) {
	k := &l.calls[ci]
	if k.closed && k.refs == 0 && !k.timer && !k.retrying {
		l.calls[ci] = call{}
		l.freeCall = append(l.freeCall, ci)
	}
}

// event handles the model's events.
func (l *lossState) event(e *event) {
	w := l.w
	switch e.kind {
	case evReplay:
		l.replay(e.id)
	case evCallerTimeout:
		l.timeout(e.id, e.r)
	case evCallerRetry:
		l.retry(e.id)
	case evRelease:
		p := l.pending[e.id]
		l.freeRel = append(l.freeRel, e.id)
		cl := w.clusters[p.cluster]
		sv := &cl.servers[p.slot]
		if sv.state != stAllocated || !sv.held || sv.rev != p.rev {
			return
		}
		sv.held = false
		l.tot.KeyReleases++
		w.sessionEnd(cl, p.slot)
	case evReclaim:
		cl := w.clusters[e.c]
		sv := &cl.servers[e.id]
		if !sv.leaked {
			return
		}
		sv.leaked = false
		l.tot.Reclaimed++
		l.leakedNow--
		l.leakArea -= float64(w.end - w.now)
		w.sessionEnd(cl, e.id)
	}
}

func (l *lossState) result() *LossResult {
	r := l.tot
	w := l.w
	r.Retries = r.CallerRetries + r.ForwardRetries
	r.LeakedAtEnd = l.leakedNow
	r.LeakedPerHour = ratio(float64(r.Leaked), w.cfg.Duration.Hours())
	r.LeakedServerHours = round4(l.leakArea / float64(time.Hour))
	r.Clusters = map[string]ClusterLosses{}
	for i, cl := range w.clusters {
		r.Clusters[cl.cfg.Name] = l.clusters[i]
	}
	return &r
}
