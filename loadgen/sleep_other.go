//go:build !(linux || darwin || freebsd)

package loadgen

import "time"

// fineSleep is 0 where there is no nanosleep: the open loop sleeps on Go
// timers all the way.
const fineSleep = 0

func preciseSleep(d time.Duration) { time.Sleep(d) }
