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
// Metrics: cpu-ns/op (over batches of gateBatch operations, the lower
// quartile of the entry's user and system CPU per forwarded
// request;
// cpu-mean-ns/op is the same over the whole sample, reported only), server-allocs/op and server-B/op (the entry's heap allocations
// and bytes per request, from its runtime/metrics).

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/metrics"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/quartermaster-dev/quartermaster/allocator/forward"
	"github.com/quartermaster-dev/quartermaster/allocator/pb/allocation"
	"github.com/quartermaster-dev/quartermaster/core"
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

// gateUsage is what a process has spent so far: CPU time, heap objects
// and heap bytes allocated.
type gateUsage struct{ cpuNs, objects, bytes uint64 }

func readGateUsage() (gateUsage, error) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return gateUsage{}, err
	}
	s := []metrics.Sample{{Name: "/gc/heap/allocs:objects"}, {Name: "/gc/heap/allocs:bytes"}}
	metrics.Read(s)
	return gateUsage{
		cpuNs:   uint64(ru.Utime.Nano() + ru.Stime.Nano()),
		objects: s[0].Value.Uint64(),
		bytes:   s[1].Value.Uint64(),
	}, nil
}

// serveGateUsage answers the parent over stdin and stdout: it writes
// "addr ADDR", then for every line "usage" it reads, a line "usage CPU
// OBJECTS BYTES"; it returns when stdin closes.
func serveGateUsage(addr string, in io.Reader, out io.Writer) error {
	if _, err := fmt.Fprintf(out, "addr %s\n", addr); err != nil {
		return err
	}
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		if sc.Text() != "usage" {
			return fmt.Errorf("gate child: unknown command %q", sc.Text())
		}
		u, err := readGateUsage()
		if err != nil {
			return err
		}
		if _, err := fmt.Fprintf(out, "usage %d %d %d\n", u.cpuNs, u.objects, u.bytes); err != nil {
			return err
		}
	}
	return sc.Err()
}

// gateChild is a running child process and its usage channel.
type gateChild struct {
	addr  string
	stdin io.WriteCloser
	lines *bufio.Scanner
}

// startGateChild runs this test binary's test named run as a child with
// env added, and reads the address it serves on.
func startGateChild(b *testing.B, run string, env ...string) *gateChild {
	cmd := exec.Command(os.Args[0], "-test.run", "^"+run+"$", "-test.count", "1")
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	c := &gateChild{stdin: stdin, lines: bufio.NewScanner(stdout)}
	b.Cleanup(func() {
		stdin.Close()
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	c.addr = c.next(b, "addr")[0]
	return c
}

// next returns the fields after the first line starting with word (the
// test framework's own output is skipped).
func (c *gateChild) next(b *testing.B, word string) []string {
	for c.lines.Scan() {
		f := strings.Fields(c.lines.Text())
		if len(f) > 0 && f[0] == word {
			return f[1:]
		}
	}
	b.Fatalf("gate child ended before writing %q (%v)", word, c.lines.Err())
	return nil
}

func (c *gateChild) usage(b *testing.B) gateUsage {
	if _, err := io.WriteString(c.stdin, "usage\n"); err != nil {
		b.Fatal(err)
	}
	f := c.next(b, "usage")
	var v [3]uint64
	for i := range v {
		n, err := strconv.ParseUint(f[i], 10, 64)
		if err != nil {
			b.Fatalf("gate child: usage %q: %v", f, err)
		}
		v[i] = n
	}
	return gateUsage{cpuNs: v[0], objects: v[1], bytes: v[2]}
}

// reportGateUsage reports the child's usage between two readings, per op,
// and its CPU per op in the batches between them (gateQuartile).
func reportGateUsage(b *testing.B, before, after gateUsage, ops int, batches []float64) {
	n := float64(ops)
	mean := float64(after.cpuNs-before.cpuNs) / n
	b.ReportMetric(gateQuartile(batches, mean), "cpu-ns/op")
	b.ReportMetric(mean, "cpu-mean-ns/op")
	b.ReportMetric(float64(after.objects-before.objects)/n, "server-allocs/op")
	b.ReportMetric(float64(after.bytes-before.bytes)/n, "server-B/op")
}

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
	if err := serveGateUsage(entry.addr, os.Stdin, os.Stdout); err != nil {
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
	child := startGateChild(b, "TestGateForwardChild", gateForwardChildEnv+"="+dir, gateForwardRemoteEnv+"="+remote.addr)
	entry := allocation.NewAllocationServiceClient((&benchRig{pki: p}).client(b, child.addr))
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
	before := child.usage(b)
	last := before
	var batches []float64
	ops := 0
	for b.Loop() {
		if ops+warmUp >= gateForwardServers {
			b.Fatalf("more forwarded requests than the remote's %d servers: use a smaller -benchtime", gateForwardServers)
		}
		if _, err := entry.Allocate(ctx, multiReq); err != nil {
			b.Fatal(err)
		}
		ops++
		if ops%gateBatch == 0 {
			u := child.usage(b)
			batches = append(batches, float64(u.cpuNs-last.cpuNs)/gateBatch)
			last = u
		}
	}
	after := child.usage(b)
	reportGateUsage(b, before, after, ops, batches)
}

// gateBatch is how many operations one reading of the measured process's
// CPU covers. The figure is the lower quartile of a sample's batches:
// another process on the machine can only add to a batch's CPU (cold
// caches, migrations), never take from it, so the least disturbed
// batches say best what an operation costs, and a slowdown of the code
// moves them all alike. Heap allocations and bytes are over the whole
// sample.
const gateBatch = 100

// gateQuartile returns the lower quartile of per-operation CPU over the
// batches, or total/ops when the sample held no whole batch.
func gateQuartile(perOp []float64, total float64) float64 {
	if len(perOp) == 0 {
		return total
	}
	s := slices.Clone(perOp)
	slices.Sort(s)
	return s[(len(s)-1)/4]
}
