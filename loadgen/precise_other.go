//go:build !(linux || darwin || freebsd)

package loadgen

import (
	"runtime"
	"time"
)

// preciseSleep yields in a loop where there is no nanosleep: punctual,
// but it keeps a core busy for d.
func preciseSleep(d time.Duration) {
	for end := time.Now().Add(d); time.Now().Before(end); {
		runtime.Gosched()
	}
}
