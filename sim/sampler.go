package sim

import (
	"math/rand/v2"
	"time"
)

// NewSampler returns a draw of durations from d with src as its random
// stream, drawn as the simulator draws its own latencies and session
// lengths, so that live load given the same stream draws the same
// durations. The draw is not safe for concurrent use.
func NewSampler(d Dist, src rand.Source) func() time.Duration {
	s := newSampler(d, src)
	return func() time.Duration { return time.Duration(s.next()) }
}
