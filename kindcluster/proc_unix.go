//go:build unix

package kindcluster

import (
	"os"
	"syscall"
)

// signalGroup signals the process group led by p (each child is started as
// a group leader), falling back to p alone if the group is gone.
func signalGroup(p *os.Process, kill bool) error {
	sig := syscall.SIGTERM
	if kill {
		sig = syscall.SIGKILL
	}
	if err := syscall.Kill(-p.Pid, sig); err == nil {
		return nil
	}
	return p.Signal(sig)
}

// processAlive reports whether a process with this pid exists (a zombie
// counts: it has not been reaped).
func processAlive(pid int) bool {
	return syscall.Kill(pid, 0) == nil
}
