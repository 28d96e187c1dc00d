package forward

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/quartermaster-dev/quartermaster/core"
)

// Time windows live in annotations under Quartermaster's prefix, so that
// the GameServerAllocationPolicy CRD stays Agones' own: an Agones
// allocator reading the same objects ignores them (the policy is then
// always in force there), a Quartermaster allocator honours them.
const (
	WindowAnnotationPrefix = "quartermaster.dev/window-"
	// WindowFromAnnotation: the RFC 3339 instant the policy comes into
	// force.
	WindowFromAnnotation = WindowAnnotationPrefix + "from"
	// WindowUntilAnnotation: the RFC 3339 instant it leaves force (not
	// included).
	WindowUntilAnnotation = WindowAnnotationPrefix + "until"
	// WindowDuringAnnotation: recurring times it is in force, such as
	// "weekdays 18:00-23:00 Europe/Paris", several separated by ";".
	WindowDuringAnnotation = WindowAnnotationPrefix + "during"
	// WindowExceptAnnotation: recurring times it is not in force.
	WindowExceptAnnotation = WindowAnnotationPrefix + "except"
)

var windowKeys = []string{WindowFromAnnotation, WindowUntilAnnotation, WindowDuringAnnotation, WindowExceptAnnotation}

// WindowFromAnnotations reads a policy's window from its annotations; no
// window annotation gives the zero Window (always in force). Any other key
// under the prefix is an error, so that a misspelt one never leaves a
// policy in force around the clock. The error names the annotation.
func WindowFromAnnotations(ann map[string]string) (core.Window, error) {
	var errs []string
	for k := range ann {
		if strings.HasPrefix(k, WindowAnnotationPrefix) && !isWindowKey(k) {
			errs = append(errs, fmt.Sprintf("metadata.annotations[%q]: unknown window annotation (known: %s)", k, strings.Join(windowKeys, ", ")))
		}
	}
	sort.Strings(errs)
	get := func(k string) string { return ann[k] }
	w, err := core.ParseWindow(get(WindowFromAnnotation), get(WindowUntilAnnotation), get(WindowDuringAnnotation), get(WindowExceptAnnotation))
	if err != nil {
		// core names the part (from, until, during, except); name the
		// annotation instead.
		msg := err.Error()
		for _, part := range []string{"from", "until", "during", "except"} {
			msg = strings.ReplaceAll(msg, part+": ", fmt.Sprintf("metadata.annotations[%q]: ", WindowAnnotationPrefix+part))
		}
		errs = append(errs, msg)
	}
	if len(errs) > 0 {
		return core.Window{}, fmt.Errorf("%s", strings.Join(errs, ", "))
	}
	return w, nil
}

func isWindowKey(k string) bool {
	for _, w := range windowKeys {
		if k == w {
			return true
		}
	}
	return false
}

// windowOrNil is w for a policy: nil when w sets nothing, so that a policy
// without a window carries none.
func windowOrNil(w core.Window) *core.Window {
	if w.IsZero() {
		return nil
	}
	return &w
}

// WindowAnnotations is the inverse of WindowFromAnnotations: the
// annotations that give a policy window w (none for nil or the zero
// Window).
func WindowAnnotations(w *core.Window) map[string]string {
	out := map[string]string{}
	if w == nil {
		return out
	}
	if !w.From.IsZero() {
		out[WindowFromAnnotation] = w.From.Format(time.RFC3339Nano)
	}
	if !w.Until.IsZero() {
		out[WindowUntilAnnotation] = w.Until.Format(time.RFC3339Nano)
	}
	if len(w.During) > 0 {
		out[WindowDuringAnnotation] = core.FormatRecurrences(w.During)
	}
	if len(w.Except) > 0 {
		out[WindowExceptAnnotation] = core.FormatRecurrences(w.Except)
	}
	return out
}

// PolicyTable is every namespace's policies at one moment of a Source. It
// is never changed once made: a Source that changes makes a new one.
type PolicyTable struct {
	byNS map[string][]core.Policy
}

// NewPolicyTable wraps byNS, which the caller must not change afterwards.
func NewPolicyTable(byNS map[string][]core.Policy) *PolicyTable {
	if byNS == nil {
		byNS = map[string][]core.Policy{}
	}
	return &PolicyTable{byNS: byNS}
}

var emptyTable = NewPolicyTable(nil)

// Policies returns namespace's policies.
func (t *PolicyTable) Policies(namespace string) []core.Policy {
	if t == nil {
		return nil
	}
	return t.byNS[namespace]
}

// Namespaces returns the namespaces that have policies, sorted.
func (t *PolicyTable) Namespaces() []string {
	if t == nil {
		return nil
	}
	out := make([]string, 0, len(t.byNS))
	for ns, ps := range t.byNS {
		if len(ps) > 0 {
			out = append(out, ns)
		}
	}
	sort.Strings(out)
	return out
}

// Lister is a Source that can hand out all its policies at once. The
// forwarder then keeps the policies in force as one snapshot, re-evaluated
// when the table or a window changes, and says when that happens.
type Lister interface {
	Source
	// PolicyTable returns the policies in the source now. It returns the
	// same pointer for as long as they do not change.
	PolicyTable() *PolicyTable
}

// windowTick is how often the forwarder looks at its clock for a window
// that opened or closed with no request to notice it: the bound on how
// late the log line and the gauge can be. Requests notice at once.
const windowTick = time.Second

// horizon is how far ahead a snapshot looks for the next window change;
// with none by then, it is re-evaluated at the horizon anyway.
const horizon = 8 * 24 * time.Hour

// inForce is a snapshot: the policies in force at one instant, by
// namespace. Requests read one snapshot each, so none sees a set half
// switched from one window to the next.
type inForce struct {
	table *PolicyTable
	at    time.Time
	// next is the first instant at which a window changes (zero: never).
	next   time.Time
	byNS   map[string][]core.Policy
	closed map[string][]core.Policy // out of their window, by namespace
}

// windows keeps the snapshot of a Lister.
type windows struct {
	src   Lister // nil: the source cannot list, policies are filtered per request
	clock Clock
	log   *slog.Logger

	inForceGauge, closedGauge *prometheus.GaugeVec

	mu   sync.Mutex // one evaluation at a time
	cur  atomic.Pointer[inForce]
	stop context.CancelFunc
}

func newWindows(src Source, clock Clock, log *slog.Logger, reg prometheus.Registerer) (*windows, error) {
	w := &windows{
		clock: clock, log: log,
		inForceGauge: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "qm_forward_policies_in_force",
			Help: "GameServerAllocationPolicies in force now, by namespace (their time window, if any, is open).",
		}, []string{"namespace"}),
		closedGauge: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "qm_forward_policies_out_of_window",
			Help: "GameServerAllocationPolicies whose time window is closed now, by namespace.",
		}, []string{"namespace"}),
	}
	if l, ok := src.(Lister); ok {
		w.src = l
	}
	if reg != nil && w.src != nil {
		for _, c := range []prometheus.Collector{w.inForceGauge, w.closedGauge} {
			if err := reg.Register(c); err != nil {
				return nil, fmt.Errorf("forward: registering metrics: %w", err)
			}
		}
	}
	if w.src != nil {
		ctx, cancel := context.WithCancel(context.Background())
		w.stop = cancel
		w.snapshot() // the first log line and gauges before any request
		go w.loop(ctx)
	}
	return w, nil
}

func (w *windows) close() {
	if w.stop != nil {
		w.stop()
	}
}

func (w *windows) loop(ctx context.Context) {
	t := time.NewTicker(windowTick)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			w.snapshot()
		}
	}
}

// snapshot returns the snapshot in force, evaluating a new one first when
// the source's table changed or a window opened or closed since.
func (w *windows) snapshot() *inForce {
	now := w.clock.Now()
	table := w.src.PolicyTable()
	if s := w.cur.Load(); s != nil && !stale(s, table, now) {
		return s
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	prev := w.cur.Load()
	now = w.clock.Now()
	if prev != nil && !stale(prev, table, now) {
		return prev // another request evaluated it meanwhile
	}
	s := evaluate(table, now)
	w.cur.Store(s)
	w.report(prev, s)
	return s
}

func stale(s *inForce, table *PolicyTable, now time.Time) bool {
	return s.table != table || now.Before(s.at) || !s.next.IsZero() && !now.Before(s.next)
}

func evaluate(table *PolicyTable, at time.Time) *inForce {
	if table == nil {
		table = emptyTable
	}
	s := &inForce{table: table, at: at, byNS: map[string][]core.Policy{}, closed: map[string][]core.Policy{}}
	windowed := false
	for ns, ps := range table.byNS {
		open := core.PoliciesAt(ps, at)
		s.byNS[ns] = open
		if len(open) == len(ps) {
			for _, p := range ps {
				if !p.Window.IsZero() {
					windowed = true
					break
				}
			}
			continue
		}
		windowed = true
		for _, p := range ps {
			if !p.Window.Open(at) {
				s.closed[ns] = append(s.closed[ns], p)
			}
		}
	}
	if windowed {
		s.next = at.Add(horizon)
		for _, ps := range table.byNS {
			if c, ok := core.NextPolicyChange(ps, at, s.next); ok {
				s.next = c
			}
		}
	}
	return s
}

// report logs what changed from prev to s and sets the gauges.
func (w *windows) report(prev, s *inForce) {
	seen := map[string]bool{}
	for ns := range s.table.byNS {
		seen[ns] = true
	}
	if prev != nil {
		for ns := range prev.table.byNS {
			seen[ns] = true
		}
	}
	nss := make([]string, 0, len(seen))
	for ns := range seen {
		nss = append(nss, ns)
	}
	sort.Strings(nss)
	for _, ns := range nss {
		open, closed := s.byNS[ns], s.closed[ns]
		if len(open)+len(closed) == 0 {
			w.inForceGauge.DeleteLabelValues(ns)
			w.closedGauge.DeleteLabelValues(ns)
		} else {
			w.inForceGauge.WithLabelValues(ns).Set(float64(len(open)))
			w.closedGauge.WithLabelValues(ns).Set(float64(len(closed)))
		}
		var before []string
		if prev != nil {
			before = names(prev.byNS[ns])
		} else if len(closed) == 0 {
			continue // nothing scheduled here: the source's own log says what was read
		}
		after := names(open)
		entered, left := diff(before, after), diff(after, before)
		if prev != nil && len(entered) == 0 && len(left) == 0 {
			continue
		}
		reason := "window"
		if prev == nil {
			reason = "start"
		} else if prev.table != s.table {
			reason = "policies changed"
		}
		attrs := []any{"namespace", ns, "at", s.at.Format(time.RFC3339), "reason", reason,
			"in force", strings.Join(after, ","), "entered", strings.Join(entered, ","), "left", strings.Join(left, ","),
			"out of window", strings.Join(names(closed), ",")}
		if !s.next.IsZero() {
			attrs = append(attrs, "next change", s.next.Format(time.RFC3339))
		}
		w.log.Info("multi-cluster policies in force", attrs...)
	}
}

func names(ps []core.Policy) []string {
	out := make([]string, len(ps))
	for i, p := range ps {
		out[i] = p.Name
	}
	sort.Strings(out)
	return out
}

// diff returns the names of b that a lacks.
func diff(a, b []string) []string {
	have := map[string]bool{}
	for _, x := range a {
		have[x] = true
	}
	var out []string
	for _, x := range b {
		if !have[x] {
			out = append(out, x)
		}
	}
	return out
}

// policiesInForce returns the policies of ns in force now that selector
// matches, or the error to answer when there are none: no policy matches
// at all (InvalidArgument, as without windows), or some match but their
// windows are all closed (FailedPrecondition, naming them and their
// windows).
func (f *Forwarder) policiesInForce(ns string, selector map[string]string) ([]core.Policy, error) {
	var open, closed []core.Policy
	var at time.Time
	if f.windows.src != nil {
		s := f.windows.snapshot()
		open, closed, at = s.byNS[ns], s.closed[ns], s.at
	} else {
		at = f.clock.Now()
		for _, p := range f.src.Policies(ns) {
			if p.Window.Open(at) {
				open = append(open, p)
			} else {
				closed = append(closed, p)
			}
		}
	}
	selected := core.SelectPolicies(open, selector)
	if len(selected) > 0 {
		return selected, nil
	}
	out := core.SelectPolicies(closed, selector)
	if len(out) == 0 {
		return nil, status.Errorf(codes.InvalidArgument,
			"multiClusterSetting.enabled is true but no GameServerAllocationPolicy in namespace %q matches the policySelector %s (%d policies in that namespace)",
			ns, formatSelector(selector), len(open)+len(closed))
	}
	parts := make([]string, len(out))
	for i, p := range out {
		parts[i] = fmt.Sprintf("%s (%s)", p.Name, p.Window)
	}
	msg := fmt.Sprintf("no GameServerAllocationPolicy in namespace %q that matches the policySelector %s is in force at %s: their windows are closed: %s",
		ns, formatSelector(selector), at.UTC().Format(time.RFC3339), strings.Join(parts, "; "))
	if next, ok := core.NextPolicyChange(out, at, at.Add(366*24*time.Hour)); ok {
		msg += "; the next opens at " + next.UTC().Format(time.RFC3339)
	}
	return nil, status.Error(codes.FailedPrecondition, msg)
}
