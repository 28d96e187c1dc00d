package loadgen

import (
	"bytes"
	"os"
	"strings"
	"testing"
	"time"
)

func TestResultRoundTrip(t *testing.T) {
	h := NewHistogram()
	for v := int64(1); v <= 1000; v++ {
		if err := h.RecordValue(v * 100); err != nil {
			t.Fatal(err)
		}
	}
	enc, err := EncodeHistogram(h)
	if err != nil {
		t.Fatal(err)
	}
	in := &Result{
		APIVersion: APIVersion, Kind: Kind, Generators: 1,
		Start:   time.Date(2026, 11, 22, 15, 0, 0, 0, time.UTC),
		Config:  Config{Mode: "open", Arrival: "constant:1000", Connections: 1, TimeoutSeconds: 10, Request: "flags"},
		Targets: []TargetResult{{TargetConfig: TargetConfig{Name: "a", Addr: "x:1", Protocol: "grpc", Call: "allocate"}, OK: 1000, Histogram: enc, Latency: Summarize(h)}},
	}
	var buf bytes.Buffer
	if err := WriteResult(&buf, in); err != nil {
		t.Fatal(err)
	}
	out, err := ReadResult(&buf)
	if err != nil {
		t.Fatal(err)
	}
	got, err := DecodeHistogram(out.Targets[0].Histogram)
	if err != nil {
		t.Fatal(err)
	}
	if !got.Equals(h) {
		t.Errorf("histogram changed in the round trip")
	}
	if p := out.Targets[0].Latency.P50Ms; p < 49.9 || p > 50.1 {
		t.Errorf("p50 = %v ms, want 50", p)
	}
}

func TestReadResultRefusesBadInput(t *testing.T) {
	for name, c := range map[string]struct{ in, want string }{
		"not json":      {`{`, "not a load result"},
		"unknown field": {`{"apiVersion":"quartermaster.dev/v1alpha1","kind":"LoadResult","bogus":1}`, "bogus"},
		"other kind":    {`{"apiVersion":"quartermaster.dev/v1alpha1","kind":"Scenario"}`, `kind "Scenario"`},
		"short histogram": {`{"apiVersion":"quartermaster.dev/v1alpha1","kind":"LoadResult","targets":[{"name":"a","histogram":"AAA="}]}`,
			"targets[0] (a): histogram is truncated"},
		"damaged histogram": {`{"apiVersion":"quartermaster.dev/v1alpha1","kind":"LoadResult","targets":[{"name":"a","histogram":"HISTFAAAACh4nJNpmSzMwMDAxQABTFCaEUzOmNZg/wEi"}]}`,
			"targets[0] (a): histogram"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := ReadResult(strings.NewReader(c.in))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want it to mention %q", err, c.want)
			}
		})
	}
}

func TestParseStatCPU(t *testing.T) {
	// A command name with a space and a parenthesis, as a process may
	// have; utime 250 and stime 50 ticks.
	line := "4242 (qm (serve) x) S 1 4242 4242 0 -1 4194560 1234 0 0 0 250 50 0 0 20 0 12 0 100 0 0"
	got, err := parseStatCPU(line)
	if err != nil || got != 3*time.Second {
		t.Errorf("parseStatCPU = %v, %v; want 3s", got, err)
	}
	for _, bad := range []string{"", "4242 qm S 1", "1 (x) S 1 2 3"} {
		if _, err := parseStatCPU(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
	probe, err := ProcCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	a, _ := probe()
	for x, deadline := 0, time.Now().Add(50*time.Millisecond); time.Now().Before(deadline); x++ {
		_ = x * x
	}
	b, err := probe()
	if err != nil || b < a {
		t.Errorf("our own CPU went from %v to %v (%v)", a, b, err)
	}
	if _, err := ProcCPU(-1); err == nil {
		t.Error("ProcCPU(-1): no error")
	}
}

// Shard results merge only as one whole load: every shard of the same N
// once.
func TestMergeChecksShards(t *testing.T) {
	part := func(i, n int) *Result {
		h := NewHistogram()
		record(h, time.Millisecond)
		enc, err := EncodeHistogram(h)
		if err != nil {
			t.Fatal(err)
		}
		r := &Result{APIVersion: APIVersion, Kind: Kind, Generators: 1,
			Targets: []TargetResult{{TargetConfig: TargetConfig{Name: "a"}, OK: 10, Sent: 10, Histogram: enc, SendLatenessHistogram: enc}}}
		if n > 0 {
			r.Config.Shard = &Shard{Index: i, Count: n}
		}
		return r
	}
	m, err := Merge(part(0, 3), part(2, 3), part(1, 3))
	if err != nil {
		t.Fatal(err)
	}
	if m.Generators != 3 || m.Targets[0].OK != 30 || m.Config.Shard != nil {
		t.Errorf("merged: %d generators, ok %d, shard %+v", m.Generators, m.Targets[0].OK, m.Config.Shard)
	}
	for _, c := range []struct {
		name  string
		parts []*Result
		want  string
	}{
		{"twice", []*Result{part(0, 2), part(0, 2), part(1, 2)}, "shard 0/2 is given twice"},
		{"missing", []*Result{part(0, 4), part(2, 4)}, "shards 1/4, 3/4 are missing"},
		{"different N", []*Result{part(0, 2), part(1, 3)}, "split 2 and 3 ways"},
		{"shard and not", []*Result{part(0, 0), part(0, 2)}, "result 0 is not a shard"},
		{"not and shard", []*Result{part(0, 2), part(0, 0)}, "result 1 is not a shard"},
		{"out of range", []*Result{part(5, 2)}, "out of range"},
	} {
		if _, err := Merge(c.parts...); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: err %v, want %q", c.name, err, c.want)
		}
	}
}

// TestServerCPURatio: a server that sat idle through the reference's
// turns (a tick or two of CPU) gives no ratio, rather than one in the
// hundreds; a measured one does.
func TestServerCPURatio(t *testing.T) {
	for _, tc := range []struct {
		name     string
		tgt, ref TargetResult
		want     float64
	}{
		{"both measured", TargetResult{ServerCPUSeconds: 2, ServerCPUPerRequestMicros: 120}, TargetResult{ServerCPUSeconds: 1, ServerCPUPerRequestMicros: 40}, 3},
		{"reference idle", TargetResult{ServerCPUSeconds: 2, ServerCPUPerRequestMicros: 120}, TargetResult{ServerCPUSeconds: 0.01, ServerCPUPerRequestMicros: 0.3}, 0},
		{"not measured", TargetResult{}, TargetResult{}, 0},
	} {
		if got := serverCPURatio(tc.tgt, tc.ref); got != tc.want {
			t.Errorf("%s: ratio %v, want %v", tc.name, got, tc.want)
		}
	}
}
