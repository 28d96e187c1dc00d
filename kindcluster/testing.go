package kindcluster

import (
	"context"
	"testing"
)

// NewForTest starts a cluster for a test and stops it when the test (or
// benchmark) ends, whether it passed, failed or called FailNow. Under
// `go test -short` it skips the test: these clusters cost seconds and
// hundreds of megabytes. Without -short, missing binaries fail the test with
// the make command that builds them, rather than skipping it silently.
func NewForTest(tb testing.TB, opts Options) *Cluster {
	tb.Helper()
	if testing.Short() {
		tb.Skip("starts a real kube-apiserver; skipped under -short")
	}
	if opts.BinDir == "" {
		d, err := DefaultBinDir()
		if err != nil {
			tb.Fatal(err)
		}
		opts.BinDir = d
	}
	if err := CheckBinaries(opts.BinDir, EtcdBinary, APIServerBinary); err != nil {
		tb.Fatal(err)
	}
	if opts.Name == "" {
		opts.Name = "test"
	}
	c, err := Start(context.Background(), opts)
	if err != nil {
		tb.Fatalf("start cluster: %v", err)
	}
	tb.Cleanup(func() {
		if tb.Failed() {
			tb.Logf("cluster %q logs:\n%s", c.Name(), c.LogTail())
		}
		if err := c.Stop(); err != nil {
			tb.Errorf("stop cluster: %v", err)
		}
	})
	return c
}
