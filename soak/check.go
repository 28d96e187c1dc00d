package soak

import (
	"fmt"
	"sort"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"
)

// Promise names, as results and reports carry them.
const (
	PromiseNoDoubleHold   = "no-double-hold"
	PromiseHeldAsAnswered = "held-as-answered"
	PromiseNoDangling     = "no-dangling"
	PromiseNoUnwrittenOK  = "no-unwritten-ok"
)

// promiseText says what each promise means, for the table.
var promiseText = map[string]string{
	PromiseNoDoubleHold:   "no server held by two live allocations at once",
	PromiseHeldAsAnswered: "every OK answer is a server Allocated to its caller, on the cluster source names, until its release",
	PromiseNoDangling:     "no server left Allocated that no live session holds",
	PromiseNoUnwrittenOK:  "nothing answered OK that was not written",
}

// Defaults for Config.
const (
	DefaultExamples      = 5
	DefaultWindow        = 10 * time.Second
	DefaultRecoverySlack = 0.01
)

// Config tunes the checker. The zero value takes the defaults.
type Config struct {
	// Examples bounds the examples kept per promise.
	Examples int
	// Window is the span after a fault whose failures count as "after"
	// it, and the step in which recovery is measured.
	Window time.Duration
	// RecoverySlack is how far above the error rate outside faults a
	// window's rate may be and still count as recovered.
	RecoverySlack float64
	// Strict counts every Allocated server without a live session as
	// dangling, and is taken whenever the history's requests carry
	// idempotency keys (a caller with keys retries a lost answer and
	// resolves what it gave up, so nothing is left to explain); otherwise a server whose last release failed, or one
	// allocated while a request whose outcome its caller could not know
	// was in flight (the run explains why it is still held), is reported
	// as explained.
	Strict bool
}

func (c Config) withDefaults() Config {
	if c.Examples <= 0 {
		c.Examples = DefaultExamples
	}
	if c.Window <= 0 {
		c.Window = DefaultWindow
	}
	if c.RecoverySlack <= 0 {
		c.RecoverySlack = DefaultRecoverySlack
	}
	return c
}

// ResultAPIVersion and ResultKind mark a result document, so that qm
// report tells it from its other inputs.
const (
	ResultAPIVersion = "quartermaster.dev/v1alpha1"
	ResultKind       = "SoakResult"
)

// Result is the checker's verdict on one run.
type Result struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	// Start and End are the run's; FaultSpans its faults in start order,
	// and Timeline its requests second by second, for drawing the faults
	// over the load.
	Start      time.Time `json:"start"`
	End        time.Time `json:"end"`
	FaultSpans []Fault   `json:"faultSpans,omitempty"`
	Timeline   []Second  `json:"timeline,omitempty"`

	// Requests are the callers' requests (a keyed request's tries are
	// one, History.Calls), OK those answered with a server. Retries are
	// the tries sent again within a request's deadline; Resolves the
	// requests given up without an answer whose keys were then asked
	// about, ResolvedHeld those whose key held a server (given back).
	Requests     int `json:"requests"`
	OK           int `json:"ok"`
	Retries      int `json:"retries,omitempty"`
	Resolves     int `json:"resolves,omitempty"`
	ResolvedHeld int `json:"resolvedHeld,omitempty"`
	// Released and Live split the answers with a server (OK and
	// ResolvedHeld) into those released and those still held when the
	// run ended.
	Released int `json:"released"`
	Live     int `json:"live"`
	// Strict says the no-dangling promise explained nothing
	// (Config.Strict, or a run whose requests carried keys).
	Strict   bool      `json:"strict,omitempty"`
	Promises []Promise `json:"promises"`
	// Unread are clusters the snapshot could not read: what was answered
	// on them is not checked against objects.
	Unread []string `json:"unread,omitempty"`
	// ErrorRateOutside is the share of requests sent outside every fault
	// and its after-window that failed; P99Outside their p99 latency.
	ErrorRateOutside float64       `json:"errorRateOutside"`
	P99Outside       time.Duration `json:"p99Outside"`
	Faults           []FaultStats  `json:"faults,omitempty"`
}

// Promise is one promise's count of violations, with examples.
type Promise struct {
	Name        string   `json:"name"`
	Description string   `json:"description"`
	Violations  int      `json:"violations"`
	Examples    []string `json:"examples,omitempty"`
	// Explained counts what looked like a violation but the run accounts
	// for (an Allocated server whose release failed under a fault).
	Explained int `json:"explained,omitempty"`
}

// FaultStats is the cost of one kind of fault over all its occurrences.
type FaultStats struct {
	Kind  string `json:"kind"`
	Count int    `json:"count"`
	// Requests sent during the faults, and in the Window after each.
	During       int `json:"during"`
	DuringFailed int `json:"duringFailed"`
	After        int `json:"after"`
	AfterFailed  int `json:"afterFailed"`
	// MaxRecovery is the longest time from a fault's end to the first
	// window whose error rate is back to the level outside faults;
	// Unrecovered counts faults after which no window was (which includes
	// a fault after which the run sent nothing).
	MaxRecovery time.Duration `json:"maxRecovery"`
	Unrecovered int           `json:"unrecovered"`
	// P99During is the p99 latency of the requests sent during them.
	P99During time.Duration `json:"p99During"`
}

// Violations is the total over all promises.
func (r *Result) Violations() int {
	n := 0
	for _, p := range r.Promises {
		n += p.Violations
	}
	return n
}

// promise collects one promise's violations.
type promise struct {
	p   Promise
	max int
}

func (p *promise) violate(format string, args ...any) {
	p.p.Violations++
	if len(p.p.Examples) < p.max {
		p.p.Examples = append(p.p.Examples, fmt.Sprintf(format, args...))
	}
}

// Check holds a history against the final snapshot. It is pure: every
// time it uses comes from its inputs. Run it on a snapshot taken after
// the settle period, when nothing the run started is still in flight.
func Check(h *History, snap *Snapshot, cfg Config) *Result {
	cfg = cfg.withDefaults()
	cfg.Strict = cfg.Strict || h.Keyed()
	c := checker{h: h, snap: snap, cfg: cfg, res: &Result{APIVersion: ResultAPIVersion, Kind: ResultKind,
		Start: h.Run.Start, End: h.Run.End, FaultSpans: h.Faults, Strict: cfg.Strict}}
	c.index()
	c.count()
	c.doubleHolds()
	c.asAnswered()
	c.dangling()
	c.faults()
	c.res.Timeline = Timeline(h)
	for _, name := range c.order {
		c.res.Promises = append(c.res.Promises, c.proms[name].p)
	}
	return c.res
}

type checker struct {
	h    *History
	snap *Snapshot
	cfg  Config
	res  *Result

	read    map[string]bool               // cluster -> read without error
	servers map[clusterName][]*GameServer // by cluster and name
	held    map[serverKey][]*Session      // OK sessions by the server answered
	proms   map[string]*promise           // by name
	order   []string                      // promise names in report order
	fwdKeys map[string]map[string]string  // by caller: forwarder's key -> caller's key
	_       struct{}                      // keep fields aligned for gofmt
}

type clusterName struct{ Cluster, Name string }

func (c *checker) promise(name string) *promise {
	if p, ok := c.proms[name]; ok {
		return p
	}
	p := &promise{p: Promise{Name: name, Description: promiseText[name]}, max: c.cfg.Examples}
	c.proms[name] = p
	c.order = append(c.order, name)
	return p
}

func (c *checker) index() {
	c.proms = map[string]*promise{}
	for _, name := range []string{PromiseNoDoubleHold, PromiseHeldAsAnswered, PromiseNoDangling, PromiseNoUnwrittenOK} {
		c.promise(name)
	}
	c.read = map[string]bool{}
	for _, cl := range c.snap.Clusters {
		c.read[cl.Name] = cl.Error == ""
		if cl.Error != "" {
			c.res.Unread = append(c.res.Unread, cl.Name)
		}
	}
	c.servers = map[clusterName][]*GameServer{}
	for i := range c.snap.GameServers {
		gs := &c.snap.GameServers[i]
		k := clusterName{gs.Cluster, gs.Name}
		c.servers[k] = append(c.servers[k], gs)
	}
	c.held = map[serverKey][]*Session{}
	for i := range c.h.Sessions {
		s := &c.h.Sessions[i]
		if s.Code == CodeOK {
			k := serverKey{s.ServingCluster(), s.Namespace, s.Server}
			c.held[k] = append(c.held[k], s)
		}
	}
}

// find is the snapshot's object for the server a session was answered
// with on cluster, or nil.
func (c *checker) find(cluster string, s *Session) *GameServer {
	for _, gs := range c.servers[clusterName{cluster, s.Server}] {
		if s.Namespace == "" || gs.Namespace == s.Namespace {
			return gs
		}
	}
	return nil
}

func (c *checker) count() {
	for _, call := range c.h.Calls() {
		c.res.Requests++
		if call.OK {
			c.res.OK++
		}
	}
	resolved := map[[2]string]bool{}
	for i := range c.h.Sessions {
		s := &c.h.Sessions[i]
		switch {
		case s.Resolve:
			k := [2]string{s.Caller, s.Key}
			if _, seen := resolved[k]; !seen {
				c.res.Resolves++
			}
			if s.Code == CodeOK && !resolved[k] {
				c.res.ResolvedHeld++
			}
			resolved[k] = resolved[k] || s.Code == CodeOK
		case s.Attempt > 0:
			c.res.Retries++
		}
		if s.Code != CodeOK {
			continue
		}
		if s.Release != nil {
			c.res.Released++
		} else {
			c.res.Live++
		}
	}
}

// at is t as an offset from the run's start, the way examples show times.
func (c *checker) at(t time.Time) string {
	return "+" + t.Sub(c.h.Run.Start).Round(time.Millisecond).String()
}

// hold is one allocation's span: requests of one caller with one key are
// one allocation, held from the first answer to the last release.
type hold struct {
	first      *Session
	start, end time.Time
	live       bool
}

func (c *checker) doubleHolds() {
	p := c.promise(PromiseNoDoubleHold)
	keys := make([]serverKey, 0, len(c.held))
	for k := range c.held {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool { return keys[i].String() < keys[j].String() })
	for _, k := range keys {
		var holds []*hold
		byKey := map[[2]string]*hold{}
		for _, s := range c.held[k] {
			// A hold ends when its release is sent: from then on the
			// allocator may hand the server to someone else.
			end, live := c.h.Run.End, s.Release == nil
			if !live {
				end = s.Release.At
			}
			if s.Key != "" {
				if hd, ok := byKey[[2]string{s.Caller, s.Key}]; ok {
					if s.Answered.Before(hd.start) {
						hd.start = s.Answered
					}
					if live || end.After(hd.end) {
						hd.end = end
					}
					hd.live = hd.live || live
					continue
				}
			}
			hd := &hold{first: s, start: s.Answered, end: end, live: live}
			holds = append(holds, hd)
			if s.Key != "" {
				byKey[[2]string{s.Caller, s.Key}] = hd
			}
		}
		sort.SliceStable(holds, func(i, j int) bool { return holds[i].start.Before(holds[j].start) })
		var longest *hold
		for _, hd := range holds {
			if longest != nil && hd.start.Before(longest.end) {
				p.violate("%s held by request %d (caller %s, answered %s, %s) and request %d (caller %s, answered %s)",
					k, longest.first.ID, longest.first.Caller, c.at(longest.start), c.until(longest),
					hd.first.ID, hd.first.Caller, c.at(hd.start))
			}
			if longest == nil || hd.end.After(longest.end) {
				longest = hd
			}
		}
	}
}

func (c *checker) until(hd *hold) string {
	if hd.live {
		return "held to the end"
	}
	return "released " + c.at(hd.end)
}

// notHeldCodes are release answers that say the caller held no such
// server, so it was not held until its release.
var notHeldCodes = map[string]bool{"NotFound": true, "FailedPrecondition": true, "PermissionDenied": true}

func (c *checker) asAnswered() {
	p := c.promise(PromiseHeldAsAnswered)
	unwritten := c.promise(PromiseNoUnwrittenOK)
	for i := range c.h.Sessions {
		s := &c.h.Sessions[i]
		if s.Code != CodeOK {
			continue
		}
		cluster := s.ServingCluster()
		ok, listed := c.read[cluster]
		if !listed {
			p.violate("request %d (caller %s): answered %s on cluster %s, which the run does not have", s.ID, s.Caller, s.Server, cluster)
			continue
		}
		if s.Release != nil && notHeldCodes[s.Release.Result] && !s.Release.Retried {
			if gs := c.find(cluster, s); ok && gs != nil && c.stillHeld(gs, s) {
				p.violate("request %d (caller %s): %s/%s answered %s, its release %s answered %s, yet the server is still Allocated to %s at the end and no later session holds it: the release was refused for a server the caller held",
					s.ID, s.Caller, cluster, s.Server, c.at(s.Answered), c.at(s.Release.At), s.Release.Result, s.ExpectedOwner())
			} else {
				p.violate("request %d (caller %s): %s/%s answered %s, its release %s answered %s: not held until its release",
					s.ID, s.Caller, cluster, s.Server, c.at(s.Answered), c.at(s.Release.At), s.Release.Result)
			}
		}
		if !ok {
			continue // the cluster's objects are unknown
		}
		gs := c.find(cluster, s)
		if gs == nil {
			if other := c.elsewhere(cluster, s); other != "" {
				p.violate("request %d (caller %s): answered %s with source %s, but the server is on %s", s.ID, s.Caller, s.Server, cluster, other)
				continue
			}
		}
		if s.Release != nil {
			continue // what the server did after its release is its own
		}
		switch {
		case gs == nil:
			unwritten.violate("request %d (caller %s): answered %s/%s %s and still held at the end, but there is no such server", s.ID, s.Caller, cluster, s.Server, c.at(s.Answered))
		case gs.State != StateAllocated:
			unwritten.violate("request %d (caller %s): answered %s/%s %s and still held at the end, but the server is %s", s.ID, s.Caller, cluster, s.Server, c.at(s.Answered), gs.State)
		case gs.Owner != "" && gs.Owner != s.ExpectedOwner():
			p.violate("request %d (caller %s): %s/%s is Allocated to %s, not to %s", s.ID, s.Caller, cluster, s.Server, gs.Owner, s.ExpectedOwner())
		}
	}
}

// stillHeld says whether gs is Allocated to s's owner at the end with no
// session answered after s holding it: the allocation s was answered is
// the one still there.
func (c *checker) stillHeld(gs *GameServer, s *Session) bool {
	if gs.State != StateAllocated || (gs.Owner != "" && gs.Owner != s.ExpectedOwner()) {
		return false
	}
	for _, o := range c.held[serverKey{gs.Cluster, s.Namespace, gs.Name}] {
		if o != s && o.Answered.After(s.Answered) {
			return false
		}
	}
	return true
}

// elsewhere names another read cluster with a server of the session's
// name, or "".
func (c *checker) elsewhere(cluster string, s *Session) string {
	for _, cl := range c.snap.Clusters {
		if cl.Name != cluster && c.find(cl.Name, s) != nil {
			return cl.Name
		}
	}
	return ""
}

func (c *checker) dangling() {
	p := c.promise(PromiseNoDangling)
	for i := range c.snap.GameServers {
		gs := &c.snap.GameServers[i]
		if gs.State != StateAllocated {
			continue
		}
		// Answers name the namespace when the driver knows it; match both.
		sessions := c.held[serverKey{gs.Cluster, gs.Namespace, gs.Name}]
		if gs.Namespace != "" {
			sessions = append(sessions[:len(sessions):len(sessions)], c.held[serverKey{gs.Cluster, "", gs.Name}]...)
		}
		var last *Session
		live := false
		for _, s := range sessions {
			if s.Release == nil {
				live = true
				break
			}
			if last == nil || s.Release.At.After(last.Release.At) {
				last = s
			}
		}
		switch {
		case live:
		case last != nil && notHeldCodes[last.Release.Result] && !last.Release.Retried:
			// Its release was refused as not held: held-as-answered
			// reports it, once.
		case last == nil && !c.cfg.Strict && c.unknownOutcomeAt(gs.LastAllocated):
			p.p.Explained++
		case last == nil:
			p.violate("%s is Allocated (owner %q, last allocated %q) and was never answered to a caller%s", serverKey{gs.Cluster, gs.Namespace, gs.Name}, gs.Owner, gs.LastAllocated, c.keyedElsewhere(gs))
		case last.Release.Result != CodeOK && !c.cfg.Strict:
			p.p.Explained++
		default:
			p.violate("%s is Allocated (owner %q, last allocated %q), but its last session, request %d (caller %s), was released %s with %s",
				serverKey{gs.Cluster, gs.Namespace, gs.Name}, gs.Owner, gs.LastAllocated, last.ID, last.Caller, c.at(last.Release.At), last.Release.Result)
		}
	}
}

// keyedElsewhere says, for a dangling server allocated with a key, what
// the key's request was answered with: another server means one key
// holds two; no server at all, the answer that left it. A server a
// forwarder allocated carries the forwarder's key, a digest of the
// caller's identity and key (ForwardedKey), which names the caller's
// request.
func (c *checker) keyedElsewhere(gs *GameServer) string {
	key := gs.Annotations[KeyAnnotation]
	if key == "" {
		return ""
	}
	caller, callerKey, what := gs.Owner, key, fmt.Sprintf("key %q", key)
	if forCaller := gs.Annotations[ForwardedForAnnotation]; forCaller != "" {
		if k, ok := c.forwardedKeys(forCaller)[key]; ok {
			caller, callerKey = forCaller, k
			what = fmt.Sprintf("the forwarder's key for %s's key %q", forCaller, k)
		}
	}
	var last *Session
	for i := range c.h.Sessions {
		s := &c.h.Sessions[i]
		if s.Key != callerKey || (caller != "" && s.Caller != caller) {
			continue
		}
		if s.Code == CodeOK {
			return fmt.Sprintf("; it carries %s, whose request %d (caller %s) was answered with %s/%s: one key, two servers",
				what, s.ID, s.Caller, s.ServingCluster(), s.Server)
		}
		if last == nil || s.Answered.After(last.Answered) {
			last = s
		}
	}
	if last != nil {
		return fmt.Sprintf("; it carries %s, whose request (caller %s) was never answered with a server: its last try, %d, was answered %s",
			what, last.Caller, last.ID, last.Code)
	}
	return fmt.Sprintf("; it carries key %q, which no request names", key)
}

// forwardedKeys maps the forwarder's keys for caller's requests to the
// caller's own keys.
func (c *checker) forwardedKeys(caller string) map[string]string {
	if m, ok := c.fwdKeys[caller]; ok {
		return m
	}
	m := map[string]string{}
	for i := range c.h.Sessions {
		s := &c.h.Sessions[i]
		if s.Key != "" && s.Caller == caller {
			m[ForwardedKey(caller, s.Key)] = s.Key
		}
	}
	if c.fwdKeys == nil {
		c.fwdKeys = map[string]map[string]string{}
	}
	c.fwdKeys[caller] = m
	return m
}

// unknownOutcomeCodes are request answers that leave the caller not
// knowing whether a server was allocated for it: the allocator (or the
// one it forwarded to) may have written the allocation and then failed to
// answer, or died first.
var unknownOutcomeCodes = map[string]bool{
	"Unavailable": true, "DeadlineExceeded": true, "Canceled": true, "Unknown": true, "Internal": true,
}

// allocatedSlack is how far an allocation's time (the allocator's clock,
// in the server's last-allocated annotation) may lie outside a request's
// span (the caller's clock) and still be taken as that request's.
const allocatedSlack = time.Second

// unknownOutcomeAt says whether a request whose outcome the caller could
// not know was in flight when a server was allocated (at, the server's
// last-allocated annotation): the allocation may be that request's. Such
// a server is explained, not dangling, unless Config.Strict.
func (c *checker) unknownOutcomeAt(at string) bool {
	t, err := time.Parse(time.RFC3339Nano, at)
	if err != nil {
		return false
	}
	for i := range c.h.Sessions {
		s := &c.h.Sessions[i]
		if unknownOutcomeCodes[s.Code] && !t.Before(s.Sent.Add(-allocatedSlack)) && !t.After(s.Answered.Add(allocatedSlack)) {
			return true
		}
	}
	return false
}

// Histogram bounds: latencies in microseconds, from one to ten minutes.
const (
	histLowest  = 1
	histHighest = int64(10 * time.Minute / time.Microsecond)
	histDigits  = 3
)

func newHist() *hdrhistogram.Histogram { return hdrhistogram.New(histLowest, histHighest, histDigits) }

func record(h *hdrhistogram.Histogram, d time.Duration) {
	us := int64(d / time.Microsecond)
	if us < histLowest {
		us = histLowest
	}
	if us > histHighest {
		us = histHighest
	}
	_ = h.RecordValue(us) // in range by the clamps above
}

func p99(h *hdrhistogram.Histogram) time.Duration {
	if h.TotalCount() == 0 {
		return 0
	}
	return time.Duration(h.ValueAtQuantile(99)) * time.Microsecond
}

func (c *checker) faults() {
	// Availability is the callers': a keyed request's tries are one
	// request, failed only if no try within its deadline was answered.
	sessions := c.h.Calls()
	sort.SliceStable(sessions, func(i, j int) bool { return sessions[i].Sent.Before(sessions[j].Sent) })
	// between returns the requests sent in [from, to).
	between := func(from, to time.Time) []Call {
		lo := sort.Search(len(sessions), func(i int) bool { return !sessions[i].Sent.Before(from) })
		hi := sort.Search(len(sessions), func(i int) bool { return !sessions[i].Sent.Before(to) })
		return sessions[lo:hi]
	}
	failed := func(ss []Call) int {
		n := 0
		for _, s := range ss {
			if !s.OK {
				n++
			}
		}
		return n
	}

	// Outside: sent in no fault and no fault's after-window.
	outside := newHist()
	outN, outFailed := 0, 0
	for _, s := range sessions {
		if c.inAnyFault(s.Sent, c.cfg.Window) {
			continue
		}
		outN++
		if !s.OK {
			outFailed++
		}
		record(outside, s.Answered.Sub(s.Sent))
	}
	if outN > 0 {
		c.res.ErrorRateOutside = float64(outFailed) / float64(outN)
	}
	c.res.P99Outside = p99(outside)

	byKind := map[string]*FaultStats{}
	hists := map[string]*hdrhistogram.Histogram{}
	var kinds []string
	for _, f := range c.h.Faults {
		st, ok := byKind[f.Kind]
		if !ok {
			st = &FaultStats{Kind: f.Kind}
			byKind[f.Kind] = st
			hists[f.Kind] = newHist()
			kinds = append(kinds, f.Kind)
		}
		st.Count++
		during := between(f.Start, f.End)
		st.During += len(during)
		st.DuringFailed += failed(during)
		for _, s := range during {
			record(hists[f.Kind], s.Answered.Sub(s.Sent))
		}
		after := between(f.End, f.End.Add(c.cfg.Window))
		st.After += len(after)
		st.AfterFailed += failed(after)

		recovered := false
		for from := f.End; from.Before(c.h.Run.End); from = from.Add(c.cfg.Window) {
			win := between(from, from.Add(c.cfg.Window))
			if len(win) == 0 {
				continue
			}
			if float64(failed(win))/float64(len(win)) <= c.res.ErrorRateOutside+c.cfg.RecoverySlack {
				if d := from.Sub(f.End); d > st.MaxRecovery {
					st.MaxRecovery = d
				}
				recovered = true
				break
			}
		}
		if !recovered {
			st.Unrecovered++
		}
	}
	sort.Strings(kinds)
	for _, k := range kinds {
		byKind[k].P99During = p99(hists[k])
		c.res.Faults = append(c.res.Faults, *byKind[k])
	}
}

// inAnyFault says whether t falls in a fault or the after-window of one.
func (c *checker) inAnyFault(t time.Time, after time.Duration) bool {
	for _, f := range c.h.Faults {
		if !t.Before(f.Start) && t.Before(f.End.Add(after)) {
			return true
		}
	}
	return false
}
