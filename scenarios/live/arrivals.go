package live

import (
	"math/rand/v2"
	"sync"
	"time"

	"github.com/quartermaster-dev/quartermaster/sim"
)

// poissonPacer is a loadgen.Pacer whose arrivals are a time-changed Poisson
// process of the schedule's rate, the process the simulator draws its own
// arrivals from: each arrival is where the schedule's expected count
// reaches the previous one's plus a unit exponential draw. (loadgen's own
// use of a schedule spaces arrivals evenly, which would take the bursts out
// of the load the simulator predicts for.)
type poissonPacer struct {
	s    *sim.Schedule
	rng  *rand.Rand
	n    uint64 // arrivals drawn so far
	cum  float64
	at   time.Duration // due time of arrival n-1
	stop bool
}

func newPoissonPacer(s *sim.Schedule, seed uint64) *poissonPacer {
	return &poissonPacer{s: s, rng: rand.New(rand.NewPCG(seed, 0xa77))}
}

// Pace implements loadgen.Pacer. The runner asks for arrivals in order
// (hits never goes back), so each is drawn once.
func (p *poissonPacer) Pace(elapsed time.Duration, hits uint64) (time.Duration, bool) {
	for !p.stop && p.n <= hits {
		p.cum += p.rng.ExpFloat64()
		t, ok := p.s.NextAt(p.cum)
		if !ok {
			p.stop = true
			break
		}
		p.at = t
		p.n++
	}
	if p.n <= hits {
		return 0, true // the schedule ended before arrival hits
	}
	if p.at <= elapsed {
		return 0, false
	}
	return p.at - elapsed, false
}

// sessionSampler draws session lengths from d as the simulator draws them,
// from a stream seeded with seed; safe for concurrent use (loadgen calls it
// from its answer goroutines).
func sessionSampler(d sim.Dist, seed uint64) func() time.Duration {
	var mu sync.Mutex
	draw := sim.NewSampler(d, rand.NewPCG(seed, 0x5e55))
	return func() time.Duration {
		mu.Lock()
		defer mu.Unlock()
		return draw()
	}
}
