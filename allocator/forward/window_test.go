package forward_test

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/quartermaster-dev/quartermaster/allocator/forward"
	"github.com/quartermaster-dev/quartermaster/allocator/pb/allocation"
	"github.com/quartermaster-dev/quartermaster/core"
)

func window(t testing.TB, from, until, during, except string) *core.Window {
	t.Helper()
	w, err := core.ParseWindow(from, until, during, except)
	if err != nil {
		t.Fatal(err)
	}
	return &w
}

func TestWindowAnnotations(t *testing.T) {
	ann := map[string]string{
		forward.WindowFromAnnotation:                       "2026-11-24T22:00:00+01:00",
		forward.WindowUntilAnnotation:                      "2026-12-24T00:00:00Z",
		forward.WindowDuringAnnotation:                     "weekdays 18:00-23:00 Europe/Paris; sat 12:00-02:00 Europe/Paris",
		forward.WindowExceptAnnotation:                     "fri 22:00-23:00 Europe/Paris",
		"kubectl.kubernetes.io/last-applied-configuration": "{}",
	}
	w, err := forward.WindowFromAnnotations(ann)
	if err != nil {
		t.Fatal(err)
	}
	if len(w.During) != 2 || len(w.Except) != 1 || !w.From.Equal(time.Date(2026, 11, 24, 21, 0, 0, 0, time.UTC)) {
		t.Fatalf("window read as %s", w)
	}
	back, err := forward.WindowFromAnnotations(forward.WindowAnnotations(&w))
	if err != nil || back.String() != w.String() {
		t.Fatalf("round trip: %s, %v; want %s", back, err, w)
	}
	if w, err := forward.WindowFromAnnotations(map[string]string{"other": "x"}); err != nil || !w.IsZero() {
		t.Fatalf("no window annotations: %s, %v", w, err)
	}
	if n := len(forward.WindowAnnotations(nil)) + len(forward.WindowAnnotations(&core.Window{})); n != 0 {
		t.Fatalf("the zero window wrote %d annotations", n)
	}

	for _, tc := range []struct {
		ann  map[string]string
		want []string
	}{
		{map[string]string{forward.WindowFromAnnotation: "tomorrow"},
			[]string{`metadata.annotations["quartermaster.dev/window-from"]`, "RFC 3339"}},
		{map[string]string{forward.WindowDuringAnnotation: "weekdays 18:00-23:00 Mars/Olympus"},
			[]string{`metadata.annotations["quartermaster.dev/window-during"]`, `unknown time zone "Mars/Olympus"`}},
		{map[string]string{forward.WindowFromAnnotation: "2026-11-25T00:00:00Z", forward.WindowUntilAnnotation: "2026-11-24T00:00:00Z"},
			[]string{"must be after from"}},
		{map[string]string{"quartermaster.dev/window-start": "2026-11-25T00:00:00Z"},
			[]string{`"quartermaster.dev/window-start"`, "unknown window annotation", forward.WindowFromAnnotation}},
	} {
		_, err := forward.WindowFromAnnotations(tc.ann)
		if err == nil {
			t.Errorf("%v accepted", tc.ann)
			continue
		}
		for _, w := range tc.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%v: error %q does not say %q", tc.ann, err, w)
			}
		}
	}
}

func TestLoadWindowPolicies(t *testing.T) {
	set, err := forward.LoadPolicies("testdata/valid-window-policies.yaml")
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]core.Policy{}
	for _, p := range set.Policies("default") {
		byName[p.Name] = p
	}
	if w := byName["on-prem"].Window; !w.IsZero() {
		t.Errorf("on-prem has a window: %s", w)
	}
	if got, want := byName["cloud-evening"].Window.String(), "during weekdays 18:00-23:00 Europe/Paris, except fri 22:00-23:00 Europe/Paris"; got != want {
		t.Errorf("cloud-evening: %q, want %q", got, want)
	}
	if got, want := byName["cloud-maintenance"].Window.String(), "from 2026-11-24T22:00:00+01:00, until 2026-11-25T06:00:00+01:00"; got != want {
		t.Errorf("cloud-maintenance: %q, want %q", got, want)
	}
	if ns := set.PolicyTable().Namespaces(); len(ns) != 1 || ns[0] != "default" {
		t.Errorf("namespaces %v", ns)
	}
}

// refusingLocal is a local path that allocates nothing, so that a request
// tries every cluster in force and its error lists them.
func refusingLocal(context.Context, *allocation.AllocationRequest) (*allocation.AllocationResponse, error) {
	return nil, status.Error(codes.ResourceExhausted, "no game server")
}

func localPolicy(name, cluster string, priority int32, w *core.Window) core.Policy {
	return core.Policy{Name: name, Priority: priority, Weight: 1, Labels: map[string]string{"set": "w"},
		Connection: core.ConnectionInfo{ClusterName: cluster}, Window: w}
}

// triedClusters returns the clusters a failed multi-cluster request names.
func triedClusters(err error) []string {
	var out []string
	for _, part := range strings.Split(status.Convert(err).Message(), "cluster \"")[1:] {
		out = append(out, part[:strings.IndexByte(part, '"')])
	}
	return out
}

// TestForwarderFollowsWindows moves a fake clock across window edges: a
// request sees the policies in force at its instant, the log and the
// gauges say what changed, and a request with no policy in force is told
// which windows are closed and when the next opens.
func TestForwarderFollowsWindows(t *testing.T) {
	clk := &rigClock{now: time.Date(2026, 11, 23, 17, 59, 59, 0, time.UTC)} // a Monday
	evening := window(t, "", "", "daily 18:00-23:00 UTC", "")
	store := forward.NewStore(forward.NewSet(map[string][]core.Policy{"default": {
		localPolicy("always", "a", 1, nil),
		localPolicy("evening", "b", 0, evening),
		{Name: "night", Labels: map[string]string{"set": "night"}, Connection: core.ConnectionInfo{ClusterName: "n"},
			Window: window(t, "", "", "daily 01:00-05:00 UTC", "")},
	}}, nil))
	logs := &lockedBuffer{}
	reg := prometheus.NewRegistry()
	f, err := forward.New(forward.Options{Source: store, Self: "here", Clock: clk, Registerer: reg,
		Logger: slog.New(slog.NewTextHandler(logs, nil))})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	req := &allocation.AllocationRequest{MultiClusterSetting: &allocation.MultiClusterSetting{
		Enabled: true, PolicySelector: &allocation.LabelSelector{MatchLabels: map[string]string{"set": "w"}}}}
	tried := func() string {
		t.Helper()
		_, err := f.Allocate(context.Background(), req, 1, refusingLocal)
		if status.Code(err) != codes.ResourceExhausted {
			t.Fatalf("%v, want every cluster to refuse", err)
		}
		return strings.Join(triedClusters(err), ",")
	}
	gauge := func(name string) float64 { return counter(t, reg, name, map[string]string{"namespace": "default"}) }

	if got := tried(); got != "a" {
		t.Fatalf("at 17:59:59 tried %s, want a", got)
	}
	if g, c := gauge("qm_forward_policies_in_force"), gauge("qm_forward_policies_out_of_window"); g != 1 || c != 2 {
		t.Fatalf("gauges in force %v, out of window %v; want 1, 2", g, c)
	}
	if !strings.Contains(logs.String(), "reason=start") || !strings.Contains(logs.String(), `"next change"=2026-11-23T18:00:00Z`) {
		t.Fatalf("no start line with the next change:\n%s", logs)
	}

	clk.Advance(time.Second) // 18:00:00, the window's first instant
	if got := tried(); got != "b,a" {
		t.Fatalf("at 18:00 tried %s, want b then a", got)
	}
	if g := gauge("qm_forward_policies_in_force"); g != 2 {
		t.Fatalf("in force %v at 18:00, want 2", g)
	}
	if l := logs.String(); !strings.Contains(l, "reason=window") || !strings.Contains(l, "entered=evening") {
		t.Fatalf("the window's opening was not logged:\n%s", l)
	}

	// With no request to notice, the forwarder's own tick logs the
	// closing within a second.
	clk.Advance(5 * time.Hour) // 23:00:00
	deadline := time.Now().Add(3 * time.Second)
	for !strings.Contains(logs.String(), "left=evening") {
		if time.Now().After(deadline) {
			t.Fatalf("the window's closing was not logged without requests:\n%s", logs)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if got := tried(); got != "a" {
		t.Fatalf("at 23:00 tried %s, want a", got)
	}

	// Nothing the selector matches is in force: the error says which
	// windows are closed and when the next opens.
	night := &allocation.AllocationRequest{MultiClusterSetting: &allocation.MultiClusterSetting{
		Enabled: true, PolicySelector: &allocation.LabelSelector{MatchLabels: map[string]string{"set": "night"}}}}
	_, err = f.Allocate(context.Background(), night, 1, refusingLocal)
	st := status.Convert(err)
	for _, want := range []string{"night (during daily 01:00-05:00 UTC)", "in force at 2026-11-23T23:00:00Z", "next opens at 2026-11-24T01:00:00Z"} {
		if st.Code() != codes.FailedPrecondition || !strings.Contains(st.Message(), want) {
			t.Fatalf("%v: want FailedPrecondition saying %q", err, want)
		}
	}
	// A selector that matches nothing at all is still the caller's error.
	none := &allocation.AllocationRequest{MultiClusterSetting: &allocation.MultiClusterSetting{
		Enabled: true, PolicySelector: &allocation.LabelSelector{MatchLabels: map[string]string{"set": "nope"}}}}
	if _, err := f.Allocate(context.Background(), none, 1, refusingLocal); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("no policy matches: %v, want InvalidArgument", err)
	}

	// A new set of policies applies to the next request, windows and all.
	store.Replace(forward.NewSet(map[string][]core.Policy{"default": {
		localPolicy("late", "c", 0, window(t, "", "", "daily 22:00-02:00 UTC", "")),
	}}, nil))
	if got := tried(); got != "c" {
		t.Fatalf("after the replacement tried %s, want c", got)
	}
	if l := logs.String(); !strings.Contains(l, `reason="policies changed"`) {
		t.Fatalf("the replacement was not logged:\n%s", l)
	}
}

// TestNoHalfSwitchedSet: while requests run, the clock jumps back and
// forth across the instant one policy hands over to the next. Each request
// must see exactly one of them, never both or neither.
func TestNoHalfSwitchedSet(t *testing.T) {
	edge := time.Date(2026, 11, 23, 18, 0, 0, 0, time.UTC)
	clk := &rigClock{now: edge.Add(-time.Millisecond)}
	store := forward.NewStore(forward.NewSet(map[string][]core.Policy{"default": {
		localPolicy("day", "day", 1, window(t, "", edge.Format(time.RFC3339), "", "")),
		localPolicy("evening", "evening", 1, window(t, edge.Format(time.RFC3339), "", "", "")),
	}}, nil))
	f, err := forward.New(forward.Options{Source: store, Self: "here", Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	req := &allocation.AllocationRequest{MultiClusterSetting: &allocation.MultiClusterSetting{Enabled: true}}

	var stop atomic.Bool
	var flips sync.WaitGroup
	flips.Add(1)
	go func() {
		defer flips.Done()
		for i := 0; !stop.Load(); i++ {
			if i%2 == 0 {
				clk.Advance(2 * time.Millisecond)
			} else {
				clk.Advance(-2 * time.Millisecond)
			}
		}
	}()
	seen := map[string]int{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	// At least 500 requests each, and on until both sides were seen: on a
	// loaded machine the flipping goroutine may not run at all during the
	// first 2,000.
	crossed := func() bool { return seen["day"] > 0 && seen["evening"] > 0 }
	deadline := time.Now().Add(30 * time.Second)
	for range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				_, err := f.Allocate(context.Background(), req, 1, refusingLocal)
				got := strings.Join(triedClusters(err), ",")
				mu.Lock()
				seen[got]++
				done := i >= 500 && (crossed() || time.Now().After(deadline))
				mu.Unlock()
				if done {
					return
				}
			}
		}()
	}
	wg.Wait()
	stop.Store(true)
	flips.Wait()
	for set, n := range seen {
		if set != "day" && set != "evening" {
			t.Errorf("%d requests saw %q, want exactly one of day, evening", n, set)
		}
	}
	if seen["day"] == 0 || seen["evening"] == 0 {
		t.Errorf("the clock never crossed the edge under requests: %v", seen)
	}
}

// TestWindowOpensLive is the forwarding rig with the wall clock: three
// allocators on loopback mTLS, a (the entry) routing to b, and to c under
// a policy whose window opens during the test. Requests sent from that
// instant on go to c; those answered before it came from b; the entry logs
// the change and its gauge counts two policies in force within a second.
func TestWindowOpensLive(t *testing.T) {
	p := newRigPKI(t)
	a := startAllocator(t, p, "a", rigOptions{fleets: fleetsA})
	b := startAllocator(t, p, "b", rigOptions{fleets: fleetsB})
	c := startAllocator(t, p, "c", rigOptions{fleets: fleetsC})
	fwd := p.secret(t, "fwd", "fwd-1")
	opens := time.Now().Add(1500 * time.Millisecond).Truncate(time.Millisecond)
	toC := policy("to-c", "live", 0, 1, "c", "", "fwd", c.addr)
	toC.Window = window(t, opens.Format(time.RFC3339Nano), "", "", "")
	a.store.Replace(forward.NewSet(map[string][]core.Policy{"default": {
		policy("to-b", "live", 1, 1, "b", "", "fwd", b.addr), toC,
	}}, []forward.Secret{fwd}))
	client := dial(t, p, a.addr, "dev")

	type answer struct {
		sent, done time.Time
		source     string
	}
	var answers []answer
	for end := opens.Add(1500 * time.Millisecond); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		sent := time.Now()
		resp, err := client.Allocate(ctx, multiRequest("live", nil))
		cancel()
		if err != nil {
			t.Fatalf("allocate: %v", err)
		}
		answers = append(answers, answer{sent, time.Now(), resp.GetSource()})
	}
	var before, after int
	var lag time.Duration = -1
	for _, ans := range answers {
		switch {
		case ans.done.Before(opens):
			before++
			if ans.source != b.addr {
				t.Errorf("answered before the window opened by %q, want b (%s)", ans.source, b.addr)
			}
		case !ans.sent.Before(opens):
			after++
			if ans.source != c.addr {
				t.Errorf("sent %v after the window opened, answered by %q, want c (%s)", ans.sent.Sub(opens), ans.source, c.addr)
			}
		}
		if ans.source == c.addr && lag < 0 {
			lag = ans.done.Sub(opens)
		}
	}
	if before < 5 || after < 5 {
		t.Fatalf("too few requests on either side of the edge: %d before, %d after", before, after)
	}
	if lag > time.Second {
		t.Fatalf("the first answer from c came %v after the window opened, want within a second", lag)
	}
	t.Logf("%d requests before the window opened, %d after; the first answer from c %v after it opened", before, after, lag)
	if g := counter(t, a.reg, "qm_forward_policies_in_force", map[string]string{"namespace": "default"}); g != 2 {
		t.Errorf("a's gauge of policies in force: %v, want 2", g)
	}
	if l := a.logs.String(); !strings.Contains(l, "entered=to-c") {
		t.Errorf("a did not log the window's opening:\n%s", l)
	}
}
