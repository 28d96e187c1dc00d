//go:build linux || darwin || freebsd

package loadgen

import (
	"syscall"
	"time"
)

// preciseSleep sleeps d in the kernel, which wakes within tens of
// microseconds where a Go timer can be a millisecond late. It blocks the
// thread (see precision for when that is affordable). A sleep cut short by
// a signal (the runtime's own preemption) just ends early: the caller
// checks the clock.
func preciseSleep(d time.Duration) {
	ts := syscall.NsecToTimespec(int64(d))
	_ = syscall.Nanosleep(&ts, nil)
}
