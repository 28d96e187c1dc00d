//go:build linux || darwin || freebsd

package loadgen

import (
	"syscall"
	"time"
)

// fineSleep is the last stretch before an arrival that the open loop
// sleeps in the kernel rather than on a Go timer. The runtime's timers
// wake through the network poller, whose wait has millisecond resolution
// on Linux, so a timer is up to a millisecond late (half of one on
// average); nanosleep(2) wakes within tens of microseconds. It blocks a
// thread, which is why only the last 2 ms are slept this way.
const fineSleep = 2 * time.Millisecond

// preciseSleep sleeps d in the kernel. An interrupted sleep (EINTR, from
// the runtime's own signals) just ends early; the caller's clock check
// covers it.
func preciseSleep(d time.Duration) {
	ts := syscall.NsecToTimespec(int64(d))
	_ = syscall.Nanosleep(&ts, nil)
}
