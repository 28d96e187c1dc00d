package kindcluster

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"
)

// The owner of a directory stops on SIGTERM and removes it: the caller
// sees it gone. This process, or one that no longer runs, is not asked.
func TestAskOwnerToStop(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "rig")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "state.json"), []byte(`{"ownerPID": 7}`), 0o644); err != nil {
		t.Fatal(err)
	}
	var s struct {
		OwnerPID int `json:"ownerPID"`
	}
	if err := ReadState(dir, "state.json", &s); err != nil || s.OwnerPID != 7 {
		t.Fatalf("ReadState: %+v, %v", s, err)
	}
	if err := ReadState(dir, "none.json", &s); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a missing state file: %v, want os.ErrNotExist", err)
	}

	if AskOwnerToStop(dir, os.Getpid(), time.Minute) {
		t.Error("this process was asked to stop itself")
	}
	owner := exec.Command("sh", "-c", `trap 'rm -rf "$0"; exit 0' TERM; touch "$0/ready"; while :; do sleep 0.05; done`, dir)
	if err := owner.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { _ = owner.Wait(); close(exited) }()
	t.Cleanup(func() { _ = owner.Process.Kill(); <-exited })
	// SIGTERM before the trap is set would kill the shell, not stop it.
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if _, err := os.Stat(filepath.Join(dir, "ready")); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the owner never became ready")
		}
	}
	if !AskOwnerToStop(dir, owner.Process.Pid, time.Minute) {
		t.Fatal("the owner was asked to stop and removed the directory, but AskOwnerToStop says it is still there")
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("dir still there: %v", err)
	}
	<-exited
	if AskOwnerToStop(t.TempDir(), owner.Process.Pid, time.Minute) {
		t.Error("an owner that no longer runs was waited for")
	}
}
