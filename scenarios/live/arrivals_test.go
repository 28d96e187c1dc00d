package live

import (
	"math"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/quartermaster-dev/quartermaster/sim"
)

// Session lengths follow the stream's distribution, and a seed gives one
// sequence however many goroutines draw from it.
func TestSessionSampler(t *testing.T) {
	const n = 20000
	draws := func(d sim.Dist, seed uint64) []time.Duration {
		draw := sessionSampler(d, seed)
		out := make([]time.Duration, n)
		for i := range out {
			out[i] = draw()
		}
		return out
	}
	quantile := func(xs []time.Duration, q float64) time.Duration {
		s := slices.Clone(xs)
		slices.Sort(s)
		return s[int(q*float64(len(s)-1))]
	}
	near := func(what string, got, want time.Duration, tol float64) {
		t.Helper()
		if math.Abs(float64(got-want)) > tol*float64(want) {
			t.Errorf("%s %v, want %v within %.0f%%", what, got, want, tol*100)
		}
	}

	exp := draws(sim.Exp(30*time.Second), 7)
	var sum time.Duration
	for _, x := range exp {
		sum += x
	}
	near("exponential mean", sum/n, 30*time.Second, 0.03)

	logn := draws(sim.Dist{Kind: sim.LogNormal, Median: 90 * time.Second, P99: 40 * time.Minute}, 7)
	near("lognormal median", quantile(logn, 0.5), 90*time.Second, 0.04)
	near("lognormal p99", quantile(logn, 0.99), 40*time.Minute, 0.15)

	for _, x := range draws(sim.Dist{Kind: sim.Uniform, Min: time.Second, Max: time.Minute}, 7) {
		if x < time.Second || x > time.Minute {
			t.Fatalf("uniform draw %v outside [1s, 1m]", x)
		}
	}
	for _, x := range draws(sim.Dist{Kind: sim.Normal, Mean: time.Second, Stddev: 2 * time.Second}, 7) {
		if x < 0 {
			t.Fatalf("normal draw %v below zero", x)
		}
	}
	if got := draws(sim.Const(4*time.Second), 7); got[0] != 4*time.Second || got[n-1] != 4*time.Second {
		t.Errorf("constant draws %v, %v, want 4s", got[0], got[n-1])
	}

	if again := draws(sim.Exp(30*time.Second), 7); !slices.Equal(again, exp) {
		t.Error("the same seed drew another sequence")
	}
	if other := draws(sim.Exp(30*time.Second), 8); slices.Equal(other, exp) {
		t.Error("another seed drew the same sequence")
	}

	// Drawn from many goroutines at once (loadgen's answer goroutines),
	// the draws are the sequence's, each once.
	draw := sessionSampler(sim.Exp(30*time.Second), 7)
	var mu sync.Mutex
	var got []time.Duration
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			mine := make([]time.Duration, 0, n/8)
			for range n / 8 {
				mine = append(mine, draw())
			}
			mu.Lock()
			got = append(got, mine...)
			mu.Unlock()
		})
	}
	wg.Wait()
	want := slices.Clone(exp)
	slices.Sort(want)
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Error("concurrent draws are not the seed's sequence")
	}
}
