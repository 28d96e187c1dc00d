package main

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/quartermaster-dev/quartermaster/kindcluster"
)

// TestClusterUpInterrupted: Ctrl-C while `qm cluster up` waits for its API
// server is the user changing their mind. The command stops what it
// started, removes the directory and exits 0 with one line, not a failure
// with the API server's log.
func TestClusterUpInterrupted(t *testing.T) {
	binDir, err := kindcluster.DefaultBinDir()
	if err == nil {
		err = kindcluster.CheckBinaries(binDir, kindcluster.EtcdBinary, kindcluster.APIServerBinary)
	}
	if err != nil {
		t.Skipf("no etcd/kube-apiserver binaries (make bin/etcd bin/kube-apiserver): %v", err)
	}
	dir := filepath.Join(t.TempDir(), "c")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout, stderr syncBuf
	done := make(chan error, 1)
	go func() {
		done <- commands["cluster"].run(ctx, []string{"up", "--name", "interrupted", "--dir", dir}, &stdout, &stderr)
	}()
	// Interrupt once etcd is up and kube-apiserver is starting: the middle
	// of the start-up, where a stop has the most to undo.
	for deadline := time.Now().Add(60 * time.Second); !strings.Contains(stderr.String(), "etcd ready"); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("etcd did not come up:\n%s", stderr.String())
		}
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("interrupted start-up returned %v\nstderr:\n%s", err, stderr.String())
		}
	case <-time.After(60 * time.Second):
		t.Fatal("cluster up did not stop after the interrupt")
	}
	if !strings.Contains(stderr.String(), "interrupted during start-up") || strings.Contains(stderr.String(), "last lines of") {
		t.Errorf("stderr should say it was interrupted, without a log dump:\n%s", stderr.String())
	}
	if strings.Contains(stdout.String(), "is up") {
		t.Errorf("the cluster was reported up:\n%s", stdout.String())
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("cluster dir left behind: %v", err)
	}
}
