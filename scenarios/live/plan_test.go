package live

import (
	"io"
	"math"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/quartermaster-dev/quartermaster/scenarios"
	"github.com/quartermaster-dev/quartermaster/sim"
)

func load(t *testing.T, path string) *scenarios.Scenario {
	t.Helper()
	s, err := scenarios.Load(path)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// A plan divides the scenario's timeline by the scale and multiplies its
// rates, so the same requests arrive N times as fast and each server sees
// the load it sees in the simulator.
func TestPlanScalesTimeAndRates(t *testing.T) {
	s := load(t, "../burst-to-cloud.yaml")
	p, err := NewPlan(s, 120, "")
	if err != nil {
		t.Fatal(err)
	}
	if p.Duration != 90*time.Second || p.SampleInterval != 500*time.Millisecond {
		t.Errorf("duration %v, sample interval %v; want 90s and 500ms", p.Duration, p.SampleInterval)
	}
	if p.Entry != "on-prem" {
		t.Errorf("entry %q, want on-prem (the first cluster without an outage)", p.Entry)
	}
	st := p.Streams[0]
	want := []sim.Step{{At: 0, Rate: 120}, {At: 30 * time.Second, Rate: 360}, {At: time.Minute, Rate: 120}}
	for i, w := range want {
		if st.Rate.Steps[i] != w {
			t.Errorf("step %d: %+v, want %+v", i, st.Rate.Steps[i], w)
		}
	}
	if st.Session.Kind != sim.Exponential || st.Session.Mean != time.Second {
		t.Errorf("sessions %+v, want exponential with a 1s mean (2m / 120)", st.Session)
	}
	// The same expected number of requests as the simulator's 3 hours.
	orig, _ := sim.NewSchedule(mustConfig(t, s).Streams[0].Rate, 3*time.Hour)
	scaled, _ := sim.NewSchedule(st.Rate, p.Duration)
	if a, b := orig.Expected(3*time.Hour), scaled.Expected(p.Duration); math.Abs(a-b) > 1e-6*a {
		t.Errorf("expected requests %v scaled, %v in the simulator", b, a)
	}
	on, cloud := p.Clusters[0], p.Clusters[1]
	if on.Fleets.Fleets[0].Replicas != 200 || on.Fleets.Fleets[0].StartupDuration.Duration != time.Duration(math.Round(5e9/120)) {
		t.Errorf("on-prem fleet %+v, want 200 servers starting in 5s/120", on.Fleets.Fleets[0])
	}
	// The cloud's buffer autoscaler becomes a fixed fleet of its max, and
	// that is named.
	if cloud.Fleets.Fleets[0].Replicas != 600 {
		t.Errorf("cloud fleet has %d servers, want the buffer's max, 600", cloud.Fleets.Fleets[0].Replicas)
	}
	if on.CallerLink.Latency.D() != 2*time.Millisecond || on.CallerLink.Jitter != 0 {
		t.Errorf("on-prem link %+v, want 2ms each way (rtt 4ms)", on.CallerLink)
	}
	for _, want := range []string{
		"spec.clusters[1].fleets[0].buffer: no autoscaler live",
		"spec.clusters[0].apiServer.writeLatency:",
		"spec.clusters[0].allocator.replicas: one allocator process, not 2",
		"spec.clusters[1].rtt: a link of 12.5ms each way",
		"spec.clusters[1].rtt: a request served here pays the entry cluster's (on-prem) round trip too",
	} {
		if !containsPrefix(p.NotModelled, want) {
			t.Errorf("notModelled lacks %q:\n%s", want, strings.Join(p.NotModelled, "\n"))
		}
	}
}

// The callers reach the first cluster that has no outage; the outage's
// times are scaled, and so are the breakers' periods.
func TestPlanOutagesAndEntry(t *testing.T) {
	p, err := NewPlan(load(t, "../provider-preference.yaml"), 100, "")
	if err != nil {
		t.Fatal(err)
	}
	if p.Entry != "fallback" {
		t.Errorf("entry %q, want fallback (preferred has an outage)", p.Entry)
	}
	if len(p.Outages) != 1 || p.Outages[0] != (Outage{Cluster: "preferred", Start: 36 * time.Second, End: 54 * time.Second}) {
		t.Errorf("outages %+v, want preferred from 36s to 54s", p.Outages)
	}
	if p.BreakerOpen != 10*time.Millisecond || p.BreakerMaxOpen != 300*time.Millisecond {
		t.Errorf("breaker %v..%v, want 10ms..300ms", p.BreakerOpen, p.BreakerMaxOpen)
	}
	if p.ForwardTimeout != 2*time.Second || p.Deadline != 30*time.Second {
		t.Errorf("forward timeout %v, deadline %v: per-request times are not scaled", p.ForwardTimeout, p.Deadline)
	}
	if !containsPrefix(p.NotModelled, "spec.faults[0]: preferred's links refuse new connections") {
		t.Errorf("the outage's live form is not named:\n%s", strings.Join(p.NotModelled, "\n"))
	}
	// Streams sent to one cluster each never pass the entry, so no detour
	// through it is named.
	p, err = NewPlan(load(t, "../cache-staleness.yaml"), 60, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range p.NotModelled {
		if strings.Contains(n, "round trip too") {
			t.Errorf("single-cluster streams, yet: %s", n)
		}
	}
	if !containsPrefix(p.NotModelled, "spec.clusters[0].fleets[0].sessionEnd: a released server is shut down and replaced at once") {
		t.Errorf("sessionEnd Ready is not named:\n%s", strings.Join(p.NotModelled, "\n"))
	}
	if d := p.Clusters[0].Fleets.Fleets[0].StartupDuration.Duration; d != 0 {
		t.Errorf("sessionEnd Ready: replacements start in %v, want at once", d)
	}
}

// A field the live runner does not know (one added to the format later)
// is named, not silently ignored; bad scales and rates beyond one
// generator are refused with the reason.
func TestPlanNamesUnknownFieldsAndRefusesBadScales(t *testing.T) {
	s := load(t, "../load-spreading.yaml")
	got := unknownFieldsOf(t, s, map[string]any{"spec": map[string]any{"timeWindows": []any{map[string]any{"name": "w"}}}})
	if len(got) != 1 || !strings.HasPrefix(got[0], "spec.timeWindows[0].name: not modelled live") {
		t.Errorf("unknown fields %q, want spec.timeWindows[0].name named", got)
	}
	if got := unknownFields(s); len(got) != 0 {
		t.Errorf("a shipped scenario has fields the runner does not know: %q", got)
	}
	for _, scale := range []float64{0, 0.5, math.NaN(), MaxScale + 1} {
		if _, err := NewPlan(s, scale, ""); err == nil || !strings.Contains(err.Error(), "time scale") {
			t.Errorf("scale %v: error %v, want one naming the time scale", scale, err)
		}
	}
	if _, err := NewPlan(s, 1000, ""); err == nil || !strings.Contains(err.Error(), "--time-scale") {
		t.Errorf("6/s at scale 1000: error %v, want the generator's limit and the flag to change", err)
	}
}

// unknownFieldsOf adds extra to a minimal scenario's JSON form and lists
// the fields the runner does not know, as unknownFields does for a
// scenario whose type has grown.
func unknownFieldsOf(t *testing.T, _ *scenarios.Scenario, extra map[string]any) []string {
	t.Helper()
	spec := map[string]any{"duration": "1h"}
	for k, v := range extra["spec"].(map[string]any) {
		spec[k] = v
	}
	return unknownIn(map[string]any{"spec": spec})
}

func containsPrefix(list []string, prefix string) bool {
	for _, s := range list {
		if strings.HasPrefix(s, prefix) {
			return true
		}
	}
	return false
}

func mustConfig(t *testing.T, s *scenarios.Scenario) *sim.Config {
	t.Helper()
	c, err := s.Config()
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// The pacer's arrivals are a Poisson process of the schedule's rate: the
// count matches the expected one, the gaps' coefficient of variation is
// that of exponential gaps (1, where loadgen's even pacing gives 0), and
// the same seed gives the same arrivals.
func TestPoissonPacer(t *testing.T) {
	rate := 50.0
	s, err := sim.NewSchedule(sim.RateSpec{Constant: &rate}, 200*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	times := func(seed uint64) []time.Duration {
		p := newPoissonPacer(s, seed)
		var out []time.Duration
		for n := uint64(0); ; n++ {
			d, stop := p.Pace(0, n)
			if stop {
				return out
			}
			if again, _ := p.Pace(0, n); again != d {
				t.Fatalf("arrival %d asked twice: %v then %v", n, d, again)
			}
			out = append(out, d)
		}
	}
	a := times(7)
	if n := float64(len(a)); math.Abs(n-10000) > 4*100 { // 4 sigma of Poisson(10000)
		t.Errorf("%v arrivals in 200s at 50/s, want about 10000", n)
	}
	var sum, sq float64
	for i := 1; i < len(a); i++ {
		g := (a[i] - a[i-1]).Seconds()
		if g < 0 {
			t.Fatalf("arrival %d before arrival %d", i, i-1)
		}
		sum += g
		sq += g * g
	}
	m := sum / float64(len(a)-1)
	cv := math.Sqrt(sq/float64(len(a)-1)-m*m) / m
	if math.Abs(cv-1) > 0.05 {
		t.Errorf("gaps' coefficient of variation %.3f, want 1 (exponential)", cv)
	}
	b := times(7)
	if len(b) != len(a) || b[len(b)/2] != a[len(a)/2] {
		t.Error("the same seed gave different arrivals")
	}
}

// The entry's forwarding counters are read per cluster and outcome.
func TestParseTries(t *testing.T) {
	text := `# HELP qm_forward_tries_total Multi-cluster tries
# TYPE qm_forward_tries_total counter
qm_forward_tries_total{cluster="fallback",outcome="allocated"} 3554
qm_forward_tries_total{cluster="preferred",outcome="allocated"} 14532
qm_forward_tries_total{cluster="preferred",outcome="breaker_open"} 3500
qm_forward_tries_total{cluster="preferred",outcome="unavailable"} 54
qm_forward_duration_seconds_count{cluster="preferred"} 18086
`
	got, err := parseTries(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	if got["preferred"]["breaker_open"] != 3500 || got["preferred"]["unavailable"] != 54 || got["fallback"]["allocated"] != 3554 || len(got) != 2 {
		t.Errorf("parsed %v", got)
	}
	if _, err := parseTries(strings.NewReader(`qm_forward_tries_total{cluster="x",outcome="allocated"} many` + "\n")); err == nil {
		t.Error("a value that is not a number was accepted")
	}
}

// A gate down refuses new connections and cuts open ones; up again, it
// forwards on the same address.
func TestGateDownAndUp(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { _, _ = io.Copy(c, c); c.Close() }() // echo
		}
	}()
	g, err := newGate(ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer g.close()
	echo := func(c net.Conn) error {
		if _, err := c.Write([]byte("ping")); err != nil {
			return err
		}
		b := make([]byte, 4)
		_ = c.SetReadDeadline(time.Now().Add(2 * time.Second))
		_, err := io.ReadFull(c, b)
		return err
	}
	open, err := net.Dial("tcp", g.addr)
	if err != nil {
		t.Fatal(err)
	}
	defer open.Close()
	if err := echo(open); err != nil {
		t.Fatalf("through the gate: %v", err)
	}
	if err := g.setDown(true); err != nil {
		t.Fatal(err)
	}
	if err := echo(open); err == nil {
		t.Error("a connection open before the outage still works during it")
	}
	if c, err := net.Dial("tcp", g.addr); err == nil {
		c.Close()
		t.Error("a new connection was accepted during the outage")
	}
	if err := g.setDown(false); err != nil {
		t.Fatal(err)
	}
	c, err := net.Dial("tcp", g.addr)
	if err != nil {
		t.Fatalf("after the outage: %v", err)
	}
	defer c.Close()
	if err := echo(c); err != nil {
		t.Errorf("after the outage: %v", err)
	}
}

// The kubernetes rig has replicas and a real API server, names what it
// does differently, and refuses what it cannot do with the reason.
func TestPlanKubernetes(t *testing.T) {
	p, err := NewPlan(load(t, "testdata/kube-small.yaml"), 20, BackendKubernetes)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"spec.clusters[1].allocator.replicaShards: the rig's 2 replicas each prefer their own shard",
		"spec.clusters[0].fleets[0].startupDelay: the fleet agent starts a replacement in 100 ms",
	} {
		if !containsPrefix(p.NotModelled, want) {
			t.Errorf("notModelled lacks %q:\n%s", want, strings.Join(p.NotModelled, "\n"))
		}
	}
	for _, n := range p.NotModelled {
		if strings.Contains(n, "one allocator process") {
			t.Errorf("the rig runs the file's replicas, yet: %s", n)
		}
	}
	if _, err := NewPlan(load(t, "../provider-preference.yaml"), 10, BackendKubernetes); err == nil || !strings.Contains(err.Error(), "outages run on the memory backend only") {
		t.Errorf("an outage on the kubernetes rig: %v", err)
	}
	if _, err := NewPlan(load(t, "testdata/kube-small.yaml"), 60, BackendKubernetes); err == nil || !strings.Contains(err.Error(), "kubernetes rig's API servers") {
		t.Errorf("90 requests/s on the kubernetes rig: %v", err)
	}
	if _, err := NewPlan(load(t, "testdata/kube-small.yaml"), 20, "docker"); err == nil || !strings.Contains(err.Error(), `backend "docker"`) {
		t.Errorf("an unknown backend: %v", err)
	}
}

// A policy's time window (added to the format beside this runner) is
// named as not modelled live: the live policies carry no window.
func TestPlanNamesPolicyWindows(t *testing.T) {
	b, err := os.ReadFile("../burst-to-cloud.yaml")
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Replace(string(b), "    connectionInfo: {clusterName: cloud}\n",
		"    connectionInfo: {clusterName: cloud}\n    window: {from: 1h, until: 2h}\n", 1)
	s, err := scenarios.Parse([]byte(text))
	if err != nil {
		t.Skipf("this scenario format has no policy windows: %v", err)
	}
	p, err := NewPlan(s, 120, "")
	if err != nil {
		t.Fatal(err)
	}
	if !containsPrefix(p.NotModelled, "spec.policies[1].window") {
		t.Errorf("the policy window is not named:\n%s", strings.Join(p.NotModelled, "\n"))
	}
}
