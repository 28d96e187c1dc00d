//go:build unix

// Package gatebench is what the performance gate's benchmarks share (the
// gate_*_test.go files mk/report.sh runs; reports/README.md, "The
// suite"): reading a process's usage (CPU time from getrusage, heap
// allocations and bytes from runtime/metrics), a child process of the test
// binary that serves the measured side and answers usage requests over its
// stdin and stdout, and a sampler that reads the usage every batch of
// operations and reports the lower quartile of the batches' CPU per
// operation as the gated figure.
//
// It is part of the gate's measuring instrument: mk/report.sh copies it
// into the baseline commit's tree with the gate benchmarks, so both sides
// measure with the same code.
package gatebench

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime/metrics"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// Usage is what a process has spent so far: CPU time (user and system),
// heap objects and heap bytes allocated.
type Usage struct{ CPUNs, Objects, Bytes uint64 }

// ReadUsage reads this process's usage.
func ReadUsage() (Usage, error) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return Usage{}, fmt.Errorf("getrusage: %w", err)
	}
	s := []metrics.Sample{{Name: "/gc/heap/allocs:objects"}, {Name: "/gc/heap/allocs:bytes"}}
	metrics.Read(s)
	return Usage{
		CPUNs:   uint64(ru.Utime.Nano() + ru.Stime.Nano()),
		Objects: s[0].Value.Uint64(),
		Bytes:   s[1].Value.Uint64(),
	}, nil
}

// Self reads this process's usage, failing tb on an error: the reader for
// a benchmark whose measured side runs in its own process.
func Self(tb testing.TB) Usage {
	tb.Helper()
	u, err := ReadUsage()
	if err != nil {
		tb.Fatal(err)
	}
	return u
}

// ServeUsage is the child's side of the usage channel: it writes "addr
// ADDR", then answers every line "usage" it reads with a line "usage CPU
// OBJECTS BYTES"; it returns when in closes, or with an error naming any
// other line.
func ServeUsage(addr string, in io.Reader, out io.Writer) error {
	if _, err := fmt.Fprintf(out, "addr %s\n", addr); err != nil {
		return err
	}
	sc := bufio.NewScanner(in)
	for sc.Scan() {
		if sc.Text() != "usage" {
			return fmt.Errorf("gate child: unknown command %q (want \"usage\")", sc.Text())
		}
		u, err := ReadUsage()
		if err != nil {
			return err
		}
		if _, err := fmt.Fprintf(out, "usage %d %d %d\n", u.CPUNs, u.Objects, u.Bytes); err != nil {
			return err
		}
	}
	return sc.Err()
}

// Child is a running child process of this test binary that serves the
// measured side and answers usage requests (ServeUsage).
type Child struct {
	// Addr is the address the child serves on, as it wrote it.
	Addr  string
	stdin io.WriteCloser
	lines *bufio.Scanner
}

// childExitWait is how long a child has to exit once its stdin closes
// before it is killed.
const childExitWait = 10 * time.Second

// StartChild runs this test binary's test named run (which calls
// ServeUsage) as a child with env added, and reads the address it serves
// on. The child's stderr is this process's; it is stopped at tb's cleanup.
func StartChild(tb testing.TB, run string, env ...string) *Child {
	tb.Helper()
	cmd := exec.Command(os.Args[0], "-test.run", "^"+run+"$", "-test.count", "1")
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		tb.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		tb.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		tb.Fatal(err)
	}
	c := &Child{stdin: stdin, lines: bufio.NewScanner(stdout)}
	tb.Cleanup(func() {
		stdin.Close()
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case <-done:
		case <-time.After(childExitWait):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	c.Addr = c.next(tb, "addr", 1)[0]
	return c
}

// next returns the fields after the first line starting with word (the
// test framework's own output is skipped), at least n of them.
func (c *Child) next(tb testing.TB, word string, n int) []string {
	tb.Helper()
	for c.lines.Scan() {
		f := strings.Fields(c.lines.Text())
		if len(f) > 0 && f[0] == word {
			if len(f)-1 < n {
				tb.Fatalf("gate child: %q has %d fields, want %d", c.lines.Text(), len(f)-1, n)
			}
			return f[1:]
		}
	}
	tb.Fatalf("gate child ended before writing %q (%v)", word, c.lines.Err())
	return nil
}

// Usage asks the child for its usage.
func (c *Child) Usage(tb testing.TB) Usage {
	tb.Helper()
	if _, err := io.WriteString(c.stdin, "usage\n"); err != nil {
		tb.Fatal(err)
	}
	f := c.next(tb, "usage", 3)
	var v [3]uint64
	for i := range v {
		n, err := strconv.ParseUint(f[i], 10, 64)
		if err != nil {
			tb.Fatalf("gate child: usage %q: %v", f, err)
		}
		v[i] = n
	}
	return Usage{CPUNs: v[0], Objects: v[1], Bytes: v[2]}
}

// Sampler reads the measured process's usage before a sample, after every
// batch of operations, and at its end. The gated figure is the lower
// quartile of the batches' CPU per operation: another process on the
// machine can only add to a batch's CPU (cold caches, migrations), never
// take from it, so the least disturbed batches say best what an operation
// costs, and a slowdown of the code moves them all alike. Heap allocations
// and bytes are over the whole sample.
type Sampler struct {
	tb      testing.TB
	read    func(testing.TB) Usage
	batch   int
	before  Usage
	last    Usage
	ops     int
	batches []float64
}

// NewSampler reads the usage now (call it after the warm-up) and returns a
// sampler that reads it again after every batch operations.
func NewSampler(tb testing.TB, batch int, read func(testing.TB) Usage) *Sampler {
	tb.Helper()
	if batch <= 0 {
		tb.Fatalf("gatebench: batch %d, want at least 1 operation", batch)
	}
	u := read(tb)
	return &Sampler{tb: tb, read: read, batch: batch, before: u, last: u}
}

// Done counts one finished operation, reading the usage when it ends a
// batch.
func (s *Sampler) Done() {
	s.ops++
	if s.ops%s.batch == 0 {
		u := s.read(s.tb)
		s.batches = append(s.batches, float64(u.CPUNs-s.last.CPUNs)/float64(s.batch))
		s.last = u
	}
}

// Ops is how many operations the sample has finished.
func (s *Sampler) Ops() int { return s.ops }

// Result is a finished sample's figures, per operation.
type Result struct {
	// CPUNs is the lower quartile of the batches' CPU per operation (the
	// whole sample's mean when it held no whole batch).
	CPUNs float64
	// MeanCPUNs is the whole sample's CPU per operation.
	MeanCPUNs float64
	// Allocs and Bytes are the heap objects and bytes allocated per
	// operation over the whole sample.
	Allocs, Bytes float64
}

// Finish reads the usage a last time and returns the sample's figures.
func (s *Sampler) Finish() Result {
	after := s.read(s.tb)
	if s.ops == 0 {
		s.tb.Fatal("gatebench: a sample of no operations")
	}
	n := float64(s.ops)
	mean := float64(after.CPUNs-s.before.CPUNs) / n
	return Result{
		CPUNs:     LowerQuartile(s.batches, mean),
		MeanCPUNs: mean,
		Allocs:    float64(after.Objects-s.before.Objects) / n,
		Bytes:     float64(after.Bytes-s.before.Bytes) / n,
	}
}

// Report finishes the sample and reports its figures as the gate reads
// them: cpu-ns/op (gated), cpu-mean-ns/op (reported only),
// server-allocs/op and server-B/op (the measured process's; -benchmem's
// would count the caller's).
func (s *Sampler) Report(b *testing.B) {
	r := s.Finish()
	b.ReportMetric(r.CPUNs, "cpu-ns/op")
	b.ReportMetric(r.MeanCPUNs, "cpu-mean-ns/op")
	b.ReportMetric(r.Allocs, "server-allocs/op")
	b.ReportMetric(r.Bytes, "server-B/op")
}

// LowerQuartile returns the lower quartile of perOp (the element a
// quarter of the way up the sorted values, rounding down), or otherwise
// when perOp is empty.
func LowerQuartile(perOp []float64, otherwise float64) float64 {
	if len(perOp) == 0 {
		return otherwise
	}
	s := slices.Clone(perOp)
	slices.Sort(s)
	return s[(len(s)-1)/4]
}
