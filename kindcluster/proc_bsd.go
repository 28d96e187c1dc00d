//go:build unix && !linux

package kindcluster

import "syscall"

// sysProcAttr puts the child in its own process group. There is no
// parent-death signal outside Linux: an interrupted test relies on Stop.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}
