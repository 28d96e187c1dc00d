//go:build unix

package gatebench

import (
	"bytes"
	"os"
	"slices"
	"strings"
	"testing"
)

func TestLowerQuartile(t *testing.T) {
	for _, tc := range []struct {
		name  string
		perOp []float64
		want  float64
	}{
		{"no batch: the whole sample's figure", nil, 42},
		{"one batch", []float64{7}, 7},
		{"four batches: the least", []float64{4, 1, 3, 2}, 1},
		{"five batches: the second least", []float64{50, 10, 40, 20, 30}, 20},
		{"eight batches: the second least", []float64{8, 3, 6, 1, 7, 2, 5, 4}, 2},
		{"nine batches: the third least", []float64{9, 3, 6, 1, 7, 2, 5, 4, 8}, 3},
		{"a disturbed batch above changes nothing", []float64{10, 11, 12, 13, 900}, 11},
	} {
		t.Run(tc.name, func(t *testing.T) {
			in := slices.Clone(tc.perOp)
			if got := LowerQuartile(tc.perOp, 42); got != tc.want {
				t.Errorf("LowerQuartile(%v) = %v, want %v", in, got, tc.want)
			}
			if !slices.Equal(in, tc.perOp) {
				t.Errorf("LowerQuartile reordered its input: %v, was %v", tc.perOp, in)
			}
		})
	}
}

// scripted is a usage reader that returns what the sample's operations
// have spent so far: reads counts the readings.
type scripted struct {
	now   Usage
	reads int
}

func (s *scripted) read(testing.TB) Usage { s.reads++; return s.now }

func TestSamplerBatches(t *testing.T) {
	u := &scripted{now: Usage{CPUNs: 1000, Objects: 50, Bytes: 5000}}
	s := NewSampler(t, 2, u.read)
	// Seven operations in batches of two: three whole batches, whose CPU
	// per operation is 10, 30 and 20 (the quartile is the least), and a
	// seventh whose CPU only the mean counts.
	for _, cpu := range []uint64{10, 10, 30, 30, 20, 20, 200} {
		u.now.CPUNs += cpu
		u.now.Objects += 3
		u.now.Bytes += 64
		s.Done()
	}
	if s.Ops() != 7 {
		t.Errorf("Ops() = %d, want 7", s.Ops())
	}
	got := s.Finish()
	want := Result{CPUNs: 10, MeanCPUNs: 320.0 / 7, Allocs: 3, Bytes: 64}
	if got != want {
		t.Errorf("Finish() = %+v, want %+v", got, want)
	}
	// Before, after each of the three batches, and at the end.
	if u.reads != 5 {
		t.Errorf("the usage was read %d times, want 5 (start, three batches, end)", u.reads)
	}
}

func TestSamplerWithoutAWholeBatchGivesTheMean(t *testing.T) {
	u := &scripted{}
	s := NewSampler(t, 100, u.read)
	for range 4 {
		u.now.CPUNs += 25
		s.Done()
	}
	if got := s.Finish(); got.CPUNs != 25 || got.MeanCPUNs != 25 {
		t.Errorf("Finish() = %+v, want CPU per op 25 (the mean) when no batch finished", got)
	}
}

func TestServeUsageAnswersAndRefusesOtherCommands(t *testing.T) {
	var out bytes.Buffer
	err := ServeUsage("127.0.0.1:7000", strings.NewReader("usage\nusage\nstop\n"), &out)
	if err == nil || !strings.Contains(err.Error(), `"stop"`) {
		t.Errorf("ServeUsage on an unknown command: error %v, want one naming \"stop\"", err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 3 || lines[0] != "addr 127.0.0.1:7000" {
		t.Fatalf("ServeUsage wrote %q, want the address and two usage lines", lines)
	}
	for _, l := range lines[1:] {
		if f := strings.Fields(l); len(f) != 4 || f[0] != "usage" {
			t.Errorf("usage line %q, want \"usage CPU OBJECTS BYTES\"", l)
		}
	}
}

// childEnv marks the child process TestChildReportsItsUsage starts.
const childEnv = "GATEBENCH_TEST_CHILD"

// TestChildServer is the child of TestChildReportsItsUsage.
func TestChildServer(t *testing.T) {
	if os.Getenv(childEnv) == "" {
		t.Skip("the child of TestChildReportsItsUsage")
	}
	if err := ServeUsage("127.0.0.1:"+os.Getenv(childEnv), os.Stdin, os.Stdout); err != nil {
		t.Fatal(err)
	}
}

func TestChildReportsItsUsage(t *testing.T) {
	c := StartChild(t, "TestChildServer", childEnv+"=9123")
	if c.Addr != "127.0.0.1:9123" {
		t.Errorf("child's address %q, want the one it wrote, 127.0.0.1:9123", c.Addr)
	}
	first := c.Usage(t)
	second := c.Usage(t)
	if first.CPUNs == 0 || first.Objects == 0 || first.Bytes == 0 {
		t.Errorf("the child's first usage %+v: a running Go process has spent CPU and allocated", first)
	}
	if second.CPUNs < first.CPUNs || second.Objects < first.Objects || second.Bytes < first.Bytes {
		t.Errorf("the child's usage went back: %+v then %+v", first, second)
	}
	// This process's own usage is another process's figures.
	self := Self(t)
	if self == first {
		t.Errorf("the child's usage equals this process's (%+v)", self)
	}
}
