package loadgen

import (
	"bytes"
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
