//go:build unix

package allocator_test

// BenchmarkGateService is the allocation service as the performance gate
// measures it (mk/report.sh, reports/README.md): the server's CPU time per
// allocation, with its heap allocations and bytes per allocation.
//
// The server is the real one (allocator.NewServer on a memory backend,
// gRPC over mutual TLS on loopback), run in a child process of this test
// binary (TestGateServiceChild), so that its getrusage is the server's
// alone: the caller's CPU, in this process, is not in the figure. One
// caller sends one request at a time, so every request finds the server
// idle and costs it the same wake-up, read, allocation and write, however
// busy the machine is; with many callers a server's CPU per request
// follows how many requests each wake-up finds waiting, which the
// machine's load decides.
//
//	go test -run '^$' -bench GateService -benchtime 2000x ./allocator/
//
// Metrics: cpu-ns/op (over batches of gateBatch operations, the lower
// quartile of the server's user and system CPU per allocation;
// cpu-mean-ns/op is the same over the whole sample, reported only),
// server-allocs/op and server-B/op (the server's heap allocations and
// bytes per allocation, from its runtime/metrics; -benchmem's would count
// the caller).

import (
	"bufio"
	"context"
	"crypto/tls"
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

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/quartermaster-dev/quartermaster/allocator"
	"github.com/quartermaster-dev/quartermaster/allocator/memory"
	"github.com/quartermaster-dev/quartermaster/allocator/mtls"
	"github.com/quartermaster-dev/quartermaster/allocator/pb/allocation"
	"github.com/quartermaster-dev/quartermaster/certs"
)

// gateServiceChildEnv names the directory holding the child server's
// certificates; set only in the child.
const gateServiceChildEnv = "QM_GATE_SERVICE_CHILD"

// gateServiceServers is the child's fleet: more servers than a sample
// allocates with its warm-up, so no request finds the fleet empty.
const gateServiceServers = 20000

const gateServiceFleet = `
apiVersion: quartermaster.dev/v1alpha1
kind: Fleets
nodes: 64
fleets:
- name: gate
  replicas: %d
  labels: {mode: gate}
`

var gateServiceRequest = &allocation.AllocationRequest{
	Namespace: "default",
	GameServerSelectors: []*allocation.GameServerSelector{
		{MatchLabels: map[string]string{"agones.dev/fleet": "gate"}},
	},
}

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

// TestGateServiceChild is BenchmarkGateService's server. It runs only in
// the child process the benchmark starts.
func TestGateServiceChild(t *testing.T) {
	dir := os.Getenv(gateServiceChildEnv)
	if dir == "" {
		t.Skip("the server side of BenchmarkGateService: runs only in the benchmark's child process")
	}
	tlsSrv, err := mtls.NewServer(mtls.ServerOptions{CertDir: filepath.Join(dir, "server"), ClientCADir: filepath.Join(dir, "client-ca"), PollInterval: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := memory.ParseConfig(fmt.Appendf(nil, gateServiceFleet, gateServiceServers))
	if err != nil {
		t.Fatal(err)
	}
	svc, err := allocator.NewService(allocator.Options{Backend: memory.New(cfg, memory.Options{Seed: 1})})
	if err != nil {
		t.Fatal(err)
	}
	srv, err := allocator.NewServer(allocator.ServerOptions{Service: svc, TLS: tlsSrv, Addr: "127.0.0.1:0"})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Listen(); err != nil {
		t.Fatal(err)
	}
	srv.Start()
	defer srv.Shutdown(context.Background())
	addr, _, _ := srv.Addrs()
	if err := serveGateUsage(addr, os.Stdin, os.Stdout); err != nil {
		t.Fatal(err)
	}
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
	line := c.next(b, "addr")
	c.addr = line[0]
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

// gatePKI writes a CA, a server key pair and the client CA to dir and
// returns a client TLS configuration for identity "dev".
func gatePKI(b *testing.B, dir string) *tls.Config {
	valid := certs.ValidFor(time.Now(), 24*time.Hour)
	ca, err := certs.NewCA("gate CA", valid)
	if err != nil {
		b.Fatal(err)
	}
	kp, err := ca.IssueServer([]string{"localhost", "127.0.0.1"}, valid)
	if err != nil {
		b.Fatal(err)
	}
	for _, d := range []string{"server", "client-ca"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o700); err != nil {
			b.Fatal(err)
		}
	}
	if err := certs.WriteKeyPair(filepath.Join(dir, "server"), kp); err != nil {
		b.Fatal(err)
	}
	if err := certs.WriteFileAtomic(filepath.Join(dir, "client-ca", "ca.crt"), ca.CertPEM, 0o644); err != nil {
		b.Fatal(err)
	}
	ckp, err := ca.IssueClient("dev", valid)
	if err != nil {
		b.Fatal(err)
	}
	cert, err := ckp.TLSCertificate()
	if err != nil {
		b.Fatal(err)
	}
	return &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: ca.CertPool(), ServerName: "localhost", MinVersion: tls.VersionTLS12}
}

func BenchmarkGateService(b *testing.B) {
	dir := b.TempDir()
	clientTLS := gatePKI(b, dir)
	child := startGateChild(b, "TestGateServiceChild", gateServiceChildEnv+"="+dir)
	conn, err := grpc.NewClient(child.addr, grpc.WithTransportCredentials(credentials.NewTLS(clientTLS)))
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	client := allocation.NewAllocationServiceClient(conn)
	ctx := context.Background()
	// The connection, the server's caches and its heap warm up off the
	// measurement.
	for range 200 {
		if _, err := client.Allocate(ctx, gateServiceRequest); err != nil {
			b.Fatal(err)
		}
	}
	before := child.usage(b)
	last := before
	var batches []float64
	ops := 0
	for b.Loop() {
		if ops+200 >= gateServiceServers {
			b.Fatalf("more allocations than the child's %d servers: use a smaller -benchtime", gateServiceServers)
		}
		if _, err := client.Allocate(ctx, gateServiceRequest); err != nil {
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
