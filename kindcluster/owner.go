package kindcluster

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// ReadState decodes the JSON state file name in dir, which the process
// that started something there wrote for a later `qm cluster down`. A
// missing file is an error that wraps os.ErrNotExist.
func ReadState(dir, name string, v any) error {
	path := filepath.Join(dir, name)
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	return nil
}

// AskOwnerToStop asks the process that owns what runs in dir (ownerPID,
// from its state file) to stop it, with SIGTERM, and waits up to wait for
// it to remove dir, which is the clean path. It reports whether dir is
// gone; it returns false at once when the owner is this process or no
// longer runs, and the caller then stops what the state file records.
func AskOwnerToStop(dir string, ownerPID int, wait time.Duration) bool {
	if ownerPID == os.Getpid() || !OwnerAlive(ownerPID) {
		return false
	}
	_ = syscall.Kill(ownerPID, syscall.SIGTERM)
	for deadline := time.Now().Add(wait); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
			return true
		}
	}
	return false
}
