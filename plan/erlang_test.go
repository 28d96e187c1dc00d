package plan

import (
	"fmt"
	"testing"
)

// erlangB is the blocking probability of an M/M/n/n system (n servers, no
// queue) offered e erlangs, by the recurrence B(0) = 1,
// B(k) = e·B(k-1) / (k + e·B(k-1)), which is stable where the closed form
// overflows.
func erlangB(e float64, n int) float64 {
	b := 1.0
	for k := 1; k <= n; k++ {
		b = e * b / (float64(k) + e*b)
	}
	return b
}

// erlangServers is the smallest n whose blocking is at most target.
func erlangServers(e, target float64) int {
	n := 0
	for erlangB(e, n) > target {
		n++
	}
	return n
}

func TestErlangBRecurrence(t *testing.T) {
	// Published values: B(E=10, n=10) = 0.2146, B(E=10, n=20) = 0.0019,
	// B(E=2, n=5) = 0.0367.
	for _, tc := range []struct {
		e    float64
		n    int
		want float64
	}{{10, 10, 0.2146}, {10, 20, 0.0019}, {2, 5, 0.0367}, {5, 0, 1}} {
		if got := erlangB(tc.e, tc.n); got < tc.want-0.00005 || got > tc.want+0.00005 {
			t.Errorf("B(%v, %d) = %.5f, want %.4f", tc.e, tc.n, got, tc.want)
		}
	}
}

// erlangScenario is a single fleet of Ready servers that return to Ready
// the moment their session ends (so the fleet is exactly n servers), with
// Poisson arrivals at rate λ and exponential sessions of mean h, no
// latency anywhere: an M/M/n/n loss system offered λ·h erlangs, whose
// refused share is Erlang B.
const erlangScenario = `apiVersion: quartermaster.dev/v1alpha1
kind: Scenario
metadata: {name: erlang-b}
spec:
  seed: 7
  duration: %s
  clusters:
  - name: only
    provider: onprem
    nodes: {count: 10, slots: 10}
    apiServer: {writeLatency: {constant: 0s}}
    fleets:
    - name: game
      replicas: 1
      sessionEnd: Ready
      startupDelay: {constant: 0s}
  workload:
  - name: mm
    rate: {constant: %g}
    sessionLength: {exponential: {mean: %s}}
    cluster: only
    request: {gameServerSelectors: [{matchLabels: {agones.dev/fleet: game}}]}
`

// TestPlanFindsErlangB: qm plan's bisection over the fleet's size finds
// the server count Erlang B gives for a blocking target. 2 erlangs (4
// requests a second, sessions of half a second) and 2% blocking: B(5) =
// 3.67%, B(6) = 1.21%, so the answer is 6, with both neighbours far enough
// from the target (+83%, -40%) that 20,000 arrivals leave no doubt.
func TestPlanFindsErlangB(t *testing.T) {
	const (
		rate     = 4.0 // per second
		hold     = 0.5 // seconds
		blocking = 0.02
	)
	e := rate * hold
	want := erlangServers(e, blocking)
	if b1, b := erlangB(e, want-1), erlangB(e, want); b1 < 1.5*blocking || b > 0.7*blocking {
		t.Fatalf("parameters too close to call: B(%d) = %.4f, B(%d) = %.4f around %.4f", want-1, b1, want, b, blocking)
	}
	src := fmt.Sprintf(erlangScenario, "5000s", rate, "500ms")
	v, err := ParseVary("fleets.game.replicas=1..32")
	if err != nil {
		t.Fatal(err)
	}
	tg, err := ParseTarget(fmt.Sprintf("successRate>=%g", 1-blocking))
	if err != nil {
		t.Fatal(err)
	}
	p, err := New([]byte(src), v, tg)
	if err != nil {
		t.Fatal(err)
	}
	res, err := p.Run(Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Found || res.Answer != want {
		t.Fatalf("plan found %d (found=%v), Erlang B says %d; points: %+v", res.Answer, res.Found, want, res.Points)
	}
	// The curve explored: every point's blocking near Erlang B's for its
	// size, the pass/fail split at the answer, and bisection's economy.
	if len(res.Points) > 8 {
		t.Errorf("%d runs for a range of 32: not a bisection", len(res.Points))
	}
	for _, pt := range res.Points {
		got := 1 - pt.Metrics["successRate"]
		exp := erlangB(e, pt.Value)
		if d := got - exp; d > 0.2*exp+0.001 || d < -0.2*exp-0.001 {
			t.Errorf("%d servers: blocking %.4f, Erlang B %.4f", pt.Value, got, exp)
		}
		if pt.Pass != (pt.Value >= want) {
			t.Errorf("%d servers: pass=%v, want %v", pt.Value, pt.Pass, pt.Value >= want)
		}
		t.Logf("n=%2d blocking %.4f (Erlang B %.4f) pass=%v, %d events in %.2fs", pt.Value, got, exp, pt.Pass, pt.Events, pt.WallSeconds)
	}
}
