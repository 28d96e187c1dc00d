//go:build linux

package kindcluster

import "syscall"

// sysProcAttr puts the child in its own process group (so a terminal's
// Ctrl-C reaches us first and we stop the API server before etcd) and asks
// the kernel to kill it if we die without cleaning up.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
