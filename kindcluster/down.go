package kindcluster

import (
	"bytes"
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
	var s state
	err := ReadState(dir, stateFile, &s)
	if errors.Is(err, os.ErrNotExist) {
		return removeHalfMade(dir)
	}
	if err != nil {
		return err
	}
	if AskOwnerToStop(dir, s.OwnerPID, grace+30*time.Second) {
		return nil
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

// halfMadeEntries are the names a cluster directory holds before its
// state file is written (see writeFiles and the commands' paths).
var halfMadeEntries = map[string]bool{
	"pki": true, "certs": true, kubeconfigFile: true, "etcd": true, etcdLog: true, apiserverLog: true,
}

// removeHalfMade removes a cluster directory whose start-up never finished
// (no state file: the start was killed, or the machine went down), once it
// is sure of two things: the directory holds nothing but what a start-up
// writes, so a mistyped --dir cannot delete someone's files, and no process
// still runs from it, so a start-up in progress is not pulled from under
// its own etcd.
func removeHalfMade(dir string) error {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	if len(entries) == 0 {
		return fmt.Errorf("no cluster in %s (it is empty; nothing to stop)", dir)
	}
	for _, e := range entries {
		if !halfMadeEntries[e.Name()] {
			return fmt.Errorf("no cluster in %s (no %s, and %s is not a file a cluster start-up writes): leaving it alone", dir, stateFile, e.Name())
		}
	}
	pids, known := processesUsing(dir)
	if !known {
		return fmt.Errorf("%s has no %s (a start-up that did not finish) and this system cannot list processes: stop any etcd or kube-apiserver using it, then remove it by hand", dir, stateFile)
	}
	if len(pids) > 0 {
		return fmt.Errorf("%s has no %s yet but processes %v still run from it (a start-up in progress?): stop that first (Ctrl-C where it runs)", dir, stateFile, pids)
	}
	return os.RemoveAll(dir)
}

// processesUsing lists the processes whose command line names dir or a path
// inside it (etcd's --data-dir, kube-apiserver's --cert-dir). known is false
// where there is no /proc to read.
func processesUsing(dir string) (pids []int, known bool) {
	if !dirExists("/proc/self") {
		return nil, false
	}
	procs, err := os.ReadDir("/proc")
	if err != nil {
		return nil, false
	}
	inside := []byte(filepath.Clean(dir) + string(filepath.Separator))
	exact := []byte(filepath.Clean(dir))
	for _, p := range procs {
		pid, err := strconv.Atoi(p.Name())
		if err != nil || pid == os.Getpid() {
			continue
		}
		b, err := os.ReadFile("/proc/" + p.Name() + "/cmdline")
		if err != nil {
			continue // gone, or not ours to read
		}
		for _, arg := range bytes.Split(b, []byte{0}) {
			// "--data-dir=/x/etcd" and "/x/etcd" both count.
			if _, v, ok := bytes.Cut(arg, []byte("=")); ok {
				arg = v
			}
			if bytes.Equal(arg, exact) || bytes.HasPrefix(arg, inside) {
				pids = append(pids, pid)
				break
			}
		}
	}
	return pids, true
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
