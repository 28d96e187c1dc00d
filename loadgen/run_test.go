package loadgen

import (
	"bytes"
	"context"
	"crypto/tls"
	"math"
	"net"
	"runtime"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/quartermaster-dev/quartermaster/allocator/pb/allocation"
)

func constant(rate float64) func() Pacer { return func() Pacer { return Constant{Rate: rate} } }

// A server that stalls for a second while arrivals keep coming: with only
// eight requests allowed in flight, the rest wait in the generator. Counted
// from when they were sent they would look fast; counted from when they
// were meant to go, as here, the p99 shows the stall.
func TestStallShowsInP99(t *testing.T) {
	f := newFake(t, false)
	tg := f.target(t, "stally", "allocate")
	time.AfterFunc(time.Second, func() { f.stallFor(time.Second) })
	res, err := Run(context.Background(), Config{Mode: "open"}, []Target{tg},
		Options{NewPacer: constant(200), Duration: 3 * time.Second, MaxInFlight: 8})
	if err != nil {
		t.Fatal(err)
	}
	r := res.Targets[0]
	t.Logf("intended %d sent %d ok %d, latency p50 %.1fms p99 %.1fms max %.1fms, lateness p99 %.1fms",
		r.Intended, r.Sent, r.OK, r.Latency.P50Ms, r.Latency.P99Ms, r.Latency.MaxMs, r.SendLateness.P99Ms)
	// (On a loaded machine the backlog may not all go out before the end:
	// what does not is counted as not sent.)
	if r.Intended != 600 || r.Sent+r.NotSent != 600 || r.Sent < 500 || r.OK != r.Sent {
		t.Errorf("intended %d, sent %d, not sent %d, ok %d: want 600 intended, nearly all sent, all answered", r.Intended, r.Sent, r.NotSent, r.OK)
	}
	if r.Latency.P99Ms < 800 || r.Latency.MaxMs < 900 {
		t.Errorf("p99 %.1fms, max %.1fms: the 1s stall must show (>= 800ms, >= 900ms)", r.Latency.P99Ms, r.Latency.MaxMs)
	}
	// The requests held back by the in-flight bound were sent late, and
	// that lateness is in their latency.
	if r.SendLateness.P99Ms < 700 {
		t.Errorf("send lateness p99 %.1fms: arrivals waited for a slot during the stall", r.SendLateness.P99Ms)
	}
	// Latency from the actual send (as ghz counts) is recorded too, for
	// comparing generators, and it is what hides the queue: only the
	// eight in flight when the stall began waited it out (over 1% of 600,
	// so in its p99, not its p90; a third of the arrivals are in Latency's).
	if r.FromSend.Count != r.Latency.Count || r.FromSend.MaxMs < 900 || r.Latency.P90Ms < 400 || r.FromSend.P90Ms >= r.Latency.P90Ms/4 {
		t.Errorf("from send: count %d (latency %d), p90 %.1fms, max %.1fms: want every answer, the stall in max only, p90 under a quarter of latency's %.1fms",
			r.FromSend.Count, r.Latency.Count, r.FromSend.P90Ms, r.FromSend.MaxMs, r.Latency.P90Ms)
	}
	// Two thirds of the requests were not near the stall. (Under 250ms,
	// a quarter of the stall: on a 2-core machine busy with other tests,
	// under -race, a fast answer can take tens of milliseconds.)
	if r.Latency.P50Ms > 250 {
		t.Errorf("p50 %.1fms: most requests came outside the stall", r.Latency.P50Ms)
	}
	// The series puts the slow requests in the seconds they were meant for.
	if len(r.Series) != 3 || r.Series[0].P50Ms > 250 || r.Series[2].P50Ms > 250 || r.Series[1].P50Ms < 400 || r.Series[1].MaxMs < 900 {
		t.Errorf("series: %+v", r.Series)
	}
}

// Closed loop waits for each answer before sending the next, so the same
// stall is one slow request among thousands: the coordinated omission the
// open loop avoids.
//
// A 1s stall in a 3s run: two seconds of fast requests. (With a 500ms
// stall in 1.2s, a 2-core machine busy with other tests under -race,
// where a round trip can take several milliseconds, sent as few as 164
// requests, with a p99 over 100ms, and the one request that met the
// stall, sent a round trip after it began, waited only 375ms of it.)
func TestClosedLoopHidesAStall(t *testing.T) {
	f := newFake(t, false)
	tg := f.target(t, "stally", "allocate")
	time.AfterFunc(300*time.Millisecond, func() { f.stallFor(time.Second) })
	res, err := Run(context.Background(), Config{Mode: "closed"}, []Target{tg},
		Options{Closed: true, Workers: 1, Duration: 3 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	r := res.Targets[0]
	t.Logf("sent %d, latency p50 %.1fms p99 %.1fms max %.1fms", r.Sent, r.Latency.P50Ms, r.Latency.P99Ms, r.Latency.MaxMs)
	if r.Latency.MaxMs < 800 {
		t.Errorf("max %.1fms: the one stalled request took up to 1s", r.Latency.MaxMs)
	}
	// Over 100 requests, the one slow request is beyond the p99.
	if r.Sent < 200 || r.Latency.P99Ms > 250 {
		t.Errorf("sent %d, p99 %.1fms: want hundreds of fast requests hiding the stall (p99 under a quarter of it)", r.Sent, r.Latency.P99Ms)
	}
	if r.Intended != r.Sent || r.SendLateness.P99Ms > 1 {
		t.Errorf("closed loop: intended %d sent %d lateness %.2fms", r.Intended, r.Sent, r.SendLateness.P99Ms)
	}
}

func TestTargetsTakeTurns(t *testing.T) {
	f := newFake(t, false)
	alloc, echo := f.target(t, "alloc", "allocate"), f.target(t, "echo", "echo")
	res, err := Run(context.Background(), Config{Mode: "closed"}, []Target{alloc, echo},
		Options{Closed: true, Workers: 4, Duration: time.Second, Window: 250 * time.Millisecond, Reference: 1})
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res.Targets {
		if r.ActiveSeconds < 0.99 || r.ActiveSeconds > 2 || r.OK == 0 || r.OK != r.Sent {
			t.Errorf("%s: active %.2fs, sent %d, ok %d", r.Name, r.ActiveSeconds, r.Sent, r.OK)
		}
		var act float64
		var ok int64
		for _, p := range r.Series {
			act += p.ActiveSeconds
			ok += p.OK
		}
		if math.Abs(act-r.ActiveSeconds) > 0.01 || ok != r.OK {
			t.Errorf("%s: series adds up to %.3fs and %d ok; totals %.3fs and %d", r.Name, act, ok, r.ActiveSeconds, r.OK)
		}
	}
	// The fake's Allocate only counts; the health check does a map
	// lookup: both reached the server, and only Allocate counted.
	if f.allocs.Load() != res.Targets[0].OK {
		t.Errorf("server counted %d allocations, the result %d", f.allocs.Load(), res.Targets[0].OK)
	}
	if len(res.Ratios) != 1 || res.Ratios[0].Target != "alloc" || res.Ratios[0].Reference != "echo" {
		t.Fatalf("ratios: %+v", res.Ratios)
	}
	ra := res.Ratios[0]
	if len(ra.ThroughputRounds) != 4 || ra.Throughput <= 0 || ra.ThroughputMedian <= 0 {
		t.Errorf("ratio: %+v, want 4 rounds", ra)
	}
	if want := res.Targets[0].Throughput / res.Targets[1].Throughput; math.Abs(ra.Throughput-want) > 1e-9 {
		t.Errorf("throughput ratio %v, want %v", ra.Throughput, want)
	}
}

func TestReleaseAndErrorCodes(t *testing.T) {
	f := newFake(t, true)
	tg := f.target(t, "qm", "allocate")
	res, err := Run(context.Background(), Config{}, []Target{tg},
		Options{NewPacer: constant(500), Requests: 100, Release: true})
	if err != nil {
		t.Fatal(err)
	}
	r := res.Targets[0]
	if r.Sent != 100 || r.OK != 100 || r.Released != 100 || f.releases.Load() != 100 {
		t.Errorf("sent %d ok %d released %d (server saw %d): want 100 each", r.Sent, r.OK, r.Released, f.releases.Load())
	}
	if r.Latency.Count != 100 {
		t.Errorf("latency count %d, want 100", r.Latency.Count)
	}

	// A server without the admin API (as Agones): sessions are held, and
	// no error is charged for it.
	g := newFake(t, false)
	g.fail.Store(int32(codes.OK))
	res, err = Run(context.Background(), Config{}, []Target{g.target(t, "agones", "allocate")},
		Options{NewPacer: constant(500), Requests: 50, Release: true, SessionLength: func() time.Duration { return time.Millisecond }})
	if err != nil {
		t.Fatal(err)
	}
	if r := res.Targets[0]; r.OK != 50 || r.Released != 0 || r.ReleaseErrors != 0 {
		t.Errorf("ok %d released %d release errors %d: want 50, 0, 0", r.OK, r.Released, r.ReleaseErrors)
	}

	f.fail.Store(int32(codes.ResourceExhausted))
	res, err = Run(context.Background(), Config{}, []Target{tg}, Options{NewPacer: constant(1000), Requests: 30})
	if err != nil {
		t.Fatal(err)
	}
	if r := res.Targets[0]; r.OK != 0 || r.Errors["ResourceExhausted"] != 30 || r.SuccessRate != 0 {
		t.Errorf("ok %d errors %v: want 30 ResourceExhausted", r.OK, r.Errors)
	}
}

// Arrivals that find the in-flight bound full until their turn ends are
// counted, not dropped silently.
func TestNotSentIsCounted(t *testing.T) {
	f := newFake(t, false)
	tg := f.target(t, "stuck", "allocate")
	f.stallFor(1500 * time.Millisecond)
	res, err := Run(context.Background(), Config{}, []Target{tg},
		Options{NewPacer: constant(100), Duration: time.Second, MaxInFlight: 2})
	if err != nil {
		t.Fatal(err)
	}
	r := res.Targets[0]
	if r.Intended != 100 || r.Sent != 2 || r.NotSent != 98 || r.OK != 2 {
		t.Errorf("intended %d sent %d not sent %d ok %d: want 100, 2, 98, 2", r.Intended, r.Sent, r.NotSent, r.OK)
	}
}

func TestInterruptedRunKeepsItsResult(t *testing.T) {
	f := newFake(t, false)
	tg := f.target(t, "t", "allocate")
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	start := time.Now()
	res, err := Run(ctx, Config{}, []Target{tg}, Options{NewPacer: constant(100), Duration: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	// About 30 arrivals were due before the interruption; a machine
	// loaded by other work may answer fewer in time, but the result must
	// hold what was answered, and its schedule up to then.
	r := res.Targets[0]
	if time.Since(start) > 3*time.Second || !res.Interrupted || r.OK < 5 || r.Intended < 20 || r.Intended > 60 {
		t.Errorf("took %v, interrupted %v, intended %d, ok %d", time.Since(start), res.Interrupted, r.Intended, r.OK)
	}
}

func TestMergeIsExact(t *testing.T) {
	f := newFake(t, false)
	var parts []*Result
	for i := 0; i < 2; i++ {
		res, err := Run(context.Background(), Config{Mode: "open", Connections: 1}, []Target{f.target(t, "a", "allocate"), f.target(t, "b", "echo")},
			Options{NewPacer: constant(400), Duration: 500 * time.Millisecond, Window: 250 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		// Through JSON and back, as files from two generators.
		var buf bytes.Buffer
		if err := WriteResult(&buf, res); err != nil {
			t.Fatal(err)
		}
		back, err := ReadResult(&buf)
		if err != nil {
			t.Fatal(err)
		}
		parts = append(parts, back)
	}
	m, err := Merge(parts...)
	if err != nil {
		t.Fatal(err)
	}
	if m.Generators != 2 || len(m.Targets) != 2 || len(m.Ratios) != 1 {
		t.Fatalf("merged: %d generators, %d targets, %d ratios", m.Generators, len(m.Targets), len(m.Ratios))
	}
	for i, mt := range m.Targets {
		a, b := parts[0].Targets[i], parts[1].Targets[i]
		if mt.OK != a.OK+b.OK || mt.Sent != a.Sent+b.Sent {
			t.Errorf("%s: ok %d sent %d, want the sums", mt.Name, mt.OK, mt.Sent)
		}
		ha, _ := DecodeHistogram(a.Histogram)
		hb, _ := DecodeHistogram(b.Histogram)
		ha.Merge(hb)
		hm, err := DecodeHistogram(mt.Histogram)
		if err != nil {
			t.Fatal(err)
		}
		if !hm.Equals(ha) || mt.Latency.Count != a.Latency.Count+b.Latency.Count {
			t.Errorf("%s: merged histogram differs from the merge of the parts", mt.Name)
		}
		fa, _ := DecodeHistogram(a.FromSendHistogram)
		fb, _ := DecodeHistogram(b.FromSendHistogram)
		fa.Merge(fb)
		fm, err := DecodeHistogram(mt.FromSendHistogram)
		if err != nil {
			t.Fatal(err)
		}
		if a.FromSend.Count == 0 || !fm.Equals(fa) || mt.FromSend.Count != a.FromSend.Count+b.FromSend.Count {
			t.Errorf("%s: merged from-send histogram differs from the merge of the parts", mt.Name)
		}
		// A part from before the field (none recorded) leaves the merge
		// without it rather than passing a part for the whole.
		old := *parts[1]
		old.Targets = append([]TargetResult(nil), old.Targets...)
		old.Targets[i].FromSendHistogram, old.Targets[i].FromSend = "", Latency{}
		if mo, err := Merge(parts[0], &old); err != nil || mo.Targets[i].FromSendHistogram != "" || mo.Targets[i].FromSend.Count != 0 {
			t.Errorf("%s: merge with a part lacking fromSend: %v, count %d", mt.Name, err, mo.Targets[i].FromSend.Count)
		}
		var ok int64
		for _, p := range mt.Series {
			ok += p.OK
		}
		if ok != mt.OK {
			t.Errorf("%s: merged series has %d ok, total %d", mt.Name, ok, mt.OK)
		}
	}
	if _, err := Merge(parts[0], &Result{Targets: []TargetResult{{TargetConfig: TargetConfig{Name: "x"}}, {}}}); err == nil || !strings.Contains(err.Error(), "missing") {
		t.Errorf("merging different targets: %v", err)
	}
}

func TestExpectations(t *testing.T) {
	res := &Result{
		Targets: []TargetResult{
			{TargetConfig: TargetConfig{Name: "a", Call: "allocate"}, SuccessRate: 0.9995, Latency: Latency{P99Ms: 40}},
			{TargetConfig: TargetConfig{Name: "e", Call: "echo"}, SuccessRate: 0.5, Latency: Latency{P99Ms: 400}},
		},
		Ratios: []Ratio{{Target: "a", Reference: "e", Throughput: 0.8}},
	}
	ths, err := ParseThresholds("p99<50ms, successRate>=0.999,ratio.throughput>=0.75")
	if err != nil {
		t.Fatal(err)
	}
	if !Check(res, ths) || len(res.Expectations) != 3 {
		t.Errorf("want all three to pass (the echo is not held to them): %+v", res.Expectations)
	}
	ths, _ = ParseThresholds("p99<=30ms")
	if Check(res, ths) || res.Expectations[0].Value != 40 {
		t.Errorf("p99 40ms must fail <=30ms: %+v", res.Expectations)
	}
	for expr, want := range map[string]string{
		"p99<50":           "write it with a unit",
		"latency<5ms":      "unknown metric",
		"successRate~1":    "want METRIC<VALUE",
		"successRate>=abc": "not a number",
		"<5":               "want METRIC<VALUE",
	} {
		if _, err := ParseThresholds(expr); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: err %v, want %q", expr, err, want)
		}
	}
}

func TestNewCallerFailsEarly(t *testing.T) {
	f := newFake(t, false)
	// A port nobody listens on.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := l.Addr().String()
	l.Close()
	ctx := context.Background()
	req := &allocation.AllocationRequest{}
	for _, c := range []struct {
		name string
		d    Dial
		want string
	}{
		{"unreachable grpc", Dial{Target: TargetConfig{Name: "x", Addr: closed, Protocol: "grpc", Call: "allocate"}, TLS: f.client, Request: req}, "cannot reach it"},
		{"unreachable rest", Dial{Target: TargetConfig{Name: "x", Addr: closed, Protocol: "rest", Call: "allocate"}, TLS: f.client, Request: req}, "cannot reach it"},
		{"no client certificate", Dial{Target: TargetConfig{Name: "x", Addr: f.addr, Protocol: "grpc", Call: "allocate"},
			TLS: &tls.Config{RootCAs: f.client.RootCAs, ServerName: "localhost"}, Request: req}, "target x"},
		{"untrusted server", Dial{Target: TargetConfig{Name: "x", Addr: f.addr, Protocol: "grpc", Call: "allocate"},
			TLS: &tls.Config{Certificates: f.client.Certificates, ServerName: "localhost"}, Request: req}, "certificate"},
		{"rest echo", Dial{Target: TargetConfig{Name: "x", Addr: f.addr, Protocol: "rest", Call: "echo"}, TLS: f.client, Request: req}, "no REST form"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cl, err := NewCaller(ctx, c.d)
			if err == nil {
				cl.Close()
				t.Fatal("no error")
			}
			if !strings.Contains(err.Error(), c.want) {
				t.Errorf("err %q, want it to mention %q", err, c.want)
			}
		})
	}
}

func TestParseTarget(t *testing.T) {
	for in, want := range map[string]TargetConfig{
		"a=localhost:8443":         {Name: "a", Addr: "localhost:8443", Protocol: "grpc", Call: "allocate"},
		"r=rest://10.0.0.1:443":    {Name: "r", Addr: "10.0.0.1:443", Protocol: "rest", Call: "allocate"},
		"localhost:8443":           {Name: "localhost:8443", Addr: "localhost:8443", Protocol: "grpc", Call: "allocate"},
		"grpc://allocator:443":     {Name: "allocator:443", Addr: "allocator:443", Protocol: "grpc", Call: "allocate"},
		"x=grpc://[::1]:8443":      {Name: "x", Addr: "[::1]:8443", Protocol: "grpc", Call: "allocate"},
		"echo=rest://x:1":          {Name: "echo", Addr: "x:1", Protocol: "rest", Call: "allocate"},
		"n=allocator.example:8443": {Name: "n", Addr: "allocator.example:8443", Protocol: "grpc", Call: "allocate"},
	} {
		got, err := ParseTarget(in, "grpc")
		if err != nil || got != want {
			t.Errorf("%q: %+v, %v; want %+v", in, got, err, want)
		}
	}
	for in, want := range map[string]string{
		"a=localhost":       "want HOST:PORT",
		"=localhost:1":      "empty name",
		"a=http://x:1":      `scheme "http"`,
		"a=localhost:":      "want HOST:PORT",
		"a=rest://nowhere":  "want HOST:PORT",
		"just-a-name-no-ip": "want HOST:PORT",
	} {
		if _, err := ParseTarget(in, "grpc"); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: err %v, want %q", in, err, want)
		}
	}
}

// A run interrupted while it holds sessions (meant to last an hour) gives
// every one back before Run returns, and leaves no goroutine of its own
// behind: no sender, release timer, progress printer or call in flight.
func TestRunLeavesNothingRunning(t *testing.T) {
	f := newFake(t, true)
	tg := f.target(t, "t", "allocate")
	before := runtime.NumGoroutine()
	ctx, cancel := context.WithTimeout(context.Background(), 400*time.Millisecond)
	defer cancel()
	var progress bytes.Buffer
	res, err := Run(ctx, Config{}, []Target{tg}, Options{NewPacer: constant(300), Duration: time.Hour, Release: true,
		SessionLength: func() time.Duration { return time.Hour }, Progress: &progress, ProgressEvery: 50 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	r := res.Targets[0]
	if !res.Interrupted || r.OK == 0 || r.Released != r.OK || f.releases.Load() != r.OK {
		t.Errorf("interrupted %v, ok %d, released %d (server saw %d): want every session given back", res.Interrupted, r.OK, r.Released, f.releases.Load())
	}
	// Goroutines that are ending may take a moment to be gone.
	deadline := time.Now().Add(3 * time.Second)
	for runtime.NumGoroutine() > before && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if n := runtime.NumGoroutine(); n > before {
		buf := make([]byte, 1<<16)
		t.Errorf("%d goroutines before the run, %d after:\n%s", before, n, buf[:runtime.Stack(buf, true)])
	}
}

// A run ended by Requests lasts until its last answer, not a day: its
// active time spans the schedule it sent (up to the last arrival's due
// time) and the rates are counts over that time.
func TestRequestsEndTheRun(t *testing.T) {
	f := newFake(t, false)
	for _, opt := range []Options{
		{NewPacer: constant(500), Requests: 100},
		{Closed: true, Workers: 4, Requests: 100},
	} {
		res, err := Run(context.Background(), Config{}, []Target{f.target(t, "t", "allocate")}, opt)
		if err != nil {
			t.Fatal(err)
		}
		r := res.Targets[0]
		if r.Sent != 100 || r.OK != 100 {
			t.Fatalf("closed %v: sent %d ok %d, want 100 each", opt.Closed, r.Sent, r.OK)
		}
		if r.ActiveSeconds > res.DurationSeconds+1e-6 || (!opt.Closed && r.ActiveSeconds < 99.0/500) || r.ActiveSeconds <= 0 {
			t.Errorf("closed %v: active %.3fs over a run of %.3fs", opt.Closed, r.ActiveSeconds, res.DurationSeconds)
		}
		for name, got := range map[string][2]float64{
			"intended/s": {r.IntendedRate, float64(r.Intended)},
			"sent/s":     {r.AchievedRate, float64(r.Sent)},
			"ok/s":       {r.Throughput, float64(r.OK)},
		} {
			if want := got[1] / r.ActiveSeconds; math.Abs(got[0]-want) > 1e-6*want || got[0] == 0 {
				t.Errorf("closed %v: %s %.3f, want %.3f (%v over %.3fs)", opt.Closed, name, got[0], want, got[1], r.ActiveSeconds)
			}
		}
	}
}
