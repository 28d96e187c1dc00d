package reports

import (
	"os"
	"testing"
)

// FuzzRead feeds arbitrary bytes to the input reader: whatever the file
// holds, the answer is figures or an error naming the file, never a panic.
// go test ./reports -fuzz FuzzRead -fuzztime 1m
func FuzzRead(f *testing.F) {
	for _, p := range []string{"testdata/bench-same.txt", "testdata/sim-small.json", "testdata/load-small.json"} {
		b, err := os.ReadFile(p)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(`{"apiVersion":"quartermaster.dev/v1alpha1","kind":"SimulationReport","scenario":"x","results":{"series":{"t":[1,2],"clusters":{"a":{}}}}}`))
	f.Add([]byte("round: 1\nBenchmarkX-2 10 5 ns/op 3 B/op\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		s := newSet()
		if err := s.read("fuzz.in", data); err != nil {
			return
		}
		// What was read must be usable: compare it with itself and draw it.
		c := Compare(s, s, DefaultThresholds())
		r := &Report{Current: s, Thresholds: DefaultThresholds(), Comparison: c}
		if err := r.WriteHTML(discard{}); err != nil {
			t.Fatalf("read fine but the page failed: %v", err)
		}
	})
}

type discard struct{}

func (discard) Write(b []byte) (int, error) { return len(b), nil }
