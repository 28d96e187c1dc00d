package kindcluster

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
	"time"
)

// StopDir stops a cluster that another process started in dir (`qm cluster
// down`). It asks the owning process to stop the cluster itself, which is
// the clean path; if the owner is gone (killed with SIGKILL on a system
// without parent-death signals, say), it stops the recorded etcd and
// kube-apiserver process groups directly and removes dir.
func StopDir(dir string, grace time.Duration) error {
	b, err := os.ReadFile(filepath.Join(dir, stateFile))
	if errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("no cluster in %s (no %s)", dir, stateFile)
	}
	if err != nil {
		return err
	}
	var s state
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("%s: %w", filepath.Join(dir, stateFile), err)
	}
	if s.OwnerPID != os.Getpid() && processAlive(s.OwnerPID) && cmdlineHas(s.OwnerPID, "") {
		_ = syscall.Kill(s.OwnerPID, syscall.SIGTERM)
		deadline := time.Now().Add(grace + 30*time.Second)
		for time.Now().Before(deadline) {
			if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
				return nil
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	var errs []error
	for _, p := range []struct {
		pid  int
		path string
	}{{s.APIServerPID, s.APIServerPath}, {s.EtcdPID, s.EtcdPath}} {
		if p.pid <= 0 || !processAlive(p.pid) || !cmdlineHas(p.pid, filepath.Base(p.path)) {
			continue
		}
		if err := killGroup(p.pid, grace); err != nil {
			errs = append(errs, err)
		}
	}
	if err := os.RemoveAll(dir); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// killGroup sends SIGTERM to the process group pid leads, then SIGKILL
// after grace. The processes are not our children, so we cannot reap
// them: we watch for the pid to disappear instead.
func killGroup(pid int, grace time.Duration) error {
	_ = syscall.Kill(-pid, syscall.SIGTERM)
	deadline := time.Now().Add(grace)
	for time.Now().Before(deadline) {
		if !processAlive(pid) {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	for i := 0; i < 100; i++ {
		if !processAlive(pid) {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("process %d survived SIGKILL", pid)
}

// cmdlineHas guards against pid reuse: where /proc exists, the process must
// still be the one recorded (its argv[0] ends in want; any process when want
// is empty, as long as it exists). Without /proc we take the pid on trust.
func cmdlineHas(pid int, want string) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/cmdline")
	if err != nil {
		return !dirExists("/proc/self")
	}
	if want == "" {
		return true
	}
	argv0, _, _ := bytes.Cut(b, []byte{0})
	return filepath.Base(string(argv0)) == want
}

func dirExists(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.IsDir()
}

// StopProcess stops the process group led by pid, if pid is still a process
// running binary (the base name of its argv[0]; "" for any): SIGTERM, then
// SIGKILL after grace. It is for owners that recorded what they started and
// must stop it from another process (`qm cluster down`).
func StopProcess(pid int, binary string, grace time.Duration) error {
	if pid <= 0 || !processAlive(pid) || !cmdlineHas(pid, binary) {
		return nil
	}
	return killGroup(pid, grace)
}

// OwnerAlive reports whether pid is a live process (the owner recorded in a
// state file, say).
func OwnerAlive(pid int) bool { return pid > 0 && processAlive(pid) }
