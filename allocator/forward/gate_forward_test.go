//go:build unix

package forward_test

// BenchmarkGateForward is forwarding as the performance gate measures it
// (mk/report.sh, reports/README.md): the entry allocator's CPU time per
// forwarded request, with its heap allocations and bytes per request.
//
// The entry is the rig's real allocator (allocator.Server with a
// forwarder whose only policy points at the remote, mutual TLS on both
// hops), run in a child process of this test binary (TestGateForwardChild)
// so that its getrusage is the entry's alone; the remote and the caller
// run in this process, on loopback. One caller sends one request at a
// time, so every request costs the entry the same wake-ups, whatever else
// the machine does.
//
//	go test -run '^$' -bench GateForward -benchtime 2000x ./allocator/forward/
//
// Metrics: cpu-ns/op (over batches of gateForwardBatch operations, the
// lower quartile of the entry's user and system CPU per forwarded
// request; cpu-mean-ns/op is the same over the whole sample, reported
// only), server-allocs/op and server-B/op (the entry's heap allocations
// and bytes per request, from its runtime/metrics).

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/quartermaster-dev/quartermaster/allocator/forward"
	"github.com/quartermaster-dev/quartermaster/allocator/pb/allocation"
	"github.com/quartermaster-dev/quartermaster/core"
	"github.com/quartermaster-dev/quartermaster/internal/gatebench"
)

// gateForwardChildEnv names the directory with the child's certificates
// and the Secret it forwards with; gateForwardRemoteEnv the remote's
// address. Both are set only in the child.
const (
	gateForwardChildEnv  = "QM_GATE_FORWARD_CHILD"
	gateForwardRemoteEnv = "QM_GATE_FORWARD_REMOTE"
)

// gateForwardServers bounds the forwarded requests of one sample: the
// remote's fleet (benchFleets) less the warm-up.
const gateForwardServers = 30000

// The Secret the entry forwards with, as files in the child's directory.
const (
	gateSecretCert = "secret-tls.crt"
	gateSecretKey  = "secret-tls.key"
	gateSecretCA   = "secret-ca.crt"
)

// TestGateForwardChild is BenchmarkGateForward's entry allocator. It runs
// only in the child process the benchmark starts.
func TestGateForwardChild(t *testing.T) {
	dir, remote := os.Getenv(gateForwardChildEnv), os.Getenv(gateForwardRemoteEnv)
	if dir == "" || remote == "" {
		t.Skip("the entry side of BenchmarkGateForward: runs only in the benchmark's child process")
	}
	data := map[string][]byte{}
	for key, file := range map[string]string{forward.SecretCertKey: gateSecretCert, forward.SecretKeyKey: gateSecretKey, forward.SecretCAKey: gateSecretCA} {
		b, err := os.ReadFile(filepath.Join(dir, file))
		if err != nil {
			t.Fatal(err)
		}
		data[key] = b
	}
	p := &rigPKI{certDir: filepath.Join(dir, "server"), clientCA: filepath.Join(dir, "client-ca")}
	entry := startAllocator(t, p, "entry", rigOptions{fleets: smallFleets})
	entry.store.Replace(forward.NewSet(
		map[string][]core.Policy{"default": {remotePolicy("remote", remote, 1)}},
		[]forward.Secret{{Namespace: "default", Name: "to-remote", Data: data}}))
	if err := gatebench.ServeUsage(entry.addr, os.Stdin, os.Stdout); err != nil {
		t.Fatal(err)
	}
}

func BenchmarkGateForward(b *testing.B) {
	p := newRigPKI(b)
	remote := startAllocator(b, p, "remote", rigOptions{fleets: benchFleets})
	dir := b.TempDir()
	sec := p.secret(b, "to-remote", "entry")
	for key, file := range map[string]string{forward.SecretCertKey: gateSecretCert, forward.SecretKeyKey: gateSecretKey, forward.SecretCAKey: gateSecretCA} {
		if err := os.WriteFile(filepath.Join(dir, file), sec.Data[key], 0o600); err != nil {
			b.Fatal(err)
		}
	}
	// The child serves with the rig's server certificate and trusts its
	// client CA: links to the parent's files.
	if err := os.Symlink(p.certDir, filepath.Join(dir, "server")); err != nil {
		b.Fatal(err)
	}
	if err := os.Symlink(p.clientCA, filepath.Join(dir, "client-ca")); err != nil {
		b.Fatal(err)
	}
	child := gatebench.StartChild(b, "TestGateForwardChild", gateForwardChildEnv+"="+dir, gateForwardRemoteEnv+"="+remote.addr)
	entry := allocation.NewAllocationServiceClient((&benchRig{pki: p}).client(b, child.Addr))
	ctx := context.Background()
	// The connections (caller to entry, entry to remote), caches and heaps
	// warm up off the measurement; every answer must come from the remote.
	const warmUp = 200
	for range warmUp {
		resp, err := entry.Allocate(ctx, multiReq)
		if err != nil {
			b.Fatal(err)
		}
		if resp.GetSource() != remote.addr {
			b.Fatalf("answer from %q, want one forwarded to the remote (%s)", resp.GetSource(), remote.addr)
		}
	}
	sample := gatebench.NewSampler(b, gateForwardBatch, child.Usage)
	for b.Loop() {
		if sample.Ops()+warmUp >= gateForwardServers {
			b.Fatalf("more forwarded requests than the remote's %d servers: use a smaller -benchtime", gateForwardServers)
		}
		if _, err := entry.Allocate(ctx, multiReq); err != nil {
			b.Fatal(err)
		}
		sample.Done()
	}
	sample.Report(b)
}

// gateForwardBatch is how many forwarded requests one reading of the
// entry's CPU covers (gatebench.Sampler).
const gateForwardBatch = 100
