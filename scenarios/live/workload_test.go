package live

import (
	"math"
	"strings"
	"testing"

	"github.com/quartermaster-dev/quartermaster/loadgen"
)

// A scenario's stream as qm load drives it: the simulator's schedule
// (scaled for a generator's share), the stream's request and session
// lengths; a stream that is not there is named with the ones that are.
func TestWorkloadOf(t *testing.T) {
	s := load(t, "../burst-to-cloud.yaml")
	count := func(p loadgen.Pacer, d float64) float64 {
		var k uint64
		for ; ; k++ {
			at, stop := p.Pace(0, k)
			if stop || at.Seconds() >= d {
				return float64(k)
			}
		}
	}
	whole, err := WorkloadOf(s, "", 1, 1)
	if err != nil {
		t.Fatal(err)
	}
	quarter, err := WorkloadOf(s, whole.Stream, 1, 0.25)
	if err != nil {
		t.Fatal(err)
	}
	d := whole.Duration.Seconds()
	n, q := count(whole.NewPacer(), d), count(quarter.NewPacer(), d)
	if n < 100 || math.Abs(q-n/4) > 0.01*n {
		t.Errorf("%0.f arrivals for the whole stream, %0.f for a quarter share: want a quarter", n, q)
	}
	if whole.Request.GetNamespace() == "" && len(whole.Request.GetGameServerSelectors()) == 0 {
		t.Errorf("the stream's request is empty: %v", whole.Request)
	}
	if l := whole.SessionLength(); l <= 0 {
		t.Errorf("session length %v", l)
	}
	if _, err := WorkloadOf(s, "nope", 1, 1); err == nil || !strings.Contains(err.Error(), `no workload stream "nope" (it has `+whole.Stream) {
		t.Errorf("unknown stream: %v", err)
	}
}
