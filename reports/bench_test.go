package reports

import (
	"slices"
	"testing"
)

// TestBenchNamesKeepTheirOwnDigits: only the GOMAXPROCS suffix `go test`
// adds is dropped from a benchmark's name, never digits that are part of
// the name itself.
func TestBenchNamesKeepTheirOwnDigits(t *testing.T) {
	const head = "goos: linux\ngoarch: amd64\npkg: github.com/quartermaster-dev/quartermaster/allocator\n"
	cases := []struct {
		name, output string
		want         []string
	}{{
		name: "GOMAXPROCS 2: the suffix goes",
		output: head + "BenchmarkLone-2 \t 100\t 5000 ns/op\n" +
			"BenchmarkClosedLoop/callers-64-2 \t 100\t 7000 ns/op\n",
		want: []string{"allocator.ClosedLoop/callers-64 sec/op", "allocator.Lone sec/op"},
	}, {
		name: "GOMAXPROCS 1: no suffix, the names' own digits stay",
		output: head + "BenchmarkClosed/callers-64 \t 100\t 7000 ns/op\n" +
			"BenchmarkClosed/callers-8 \t 100\t 6000 ns/op\n",
		want: []string{"allocator.Closed/callers-64 sec/op", "allocator.Closed/callers-8 sec/op"},
	}, {
		name: "GOMAXPROCS 2 over names ending in digits",
		output: head + "BenchmarkClosed/callers-64-2 \t 100\t 7000 ns/op\n" +
			"BenchmarkClosed/callers-8-2 \t 100\t 6000 ns/op\n",
		want: []string{"allocator.Closed/callers-64 sec/op", "allocator.Closed/callers-8 sec/op"},
	}, {
		name:   "gomaxprocs 1 stated: one benchmark ending in digits keeps them",
		output: "gomaxprocs: 1\n" + head + "BenchmarkClosed/callers-64 \t 100\t 7000 ns/op\n",
		want:   []string{"allocator.Closed/callers-64 sec/op"},
	}, {
		name:   "gomaxprocs 4 stated: exactly -4 goes",
		output: "gomaxprocs: 4\n" + head + "BenchmarkClosed/callers-64-4 \t 100\t 7000 ns/op\n",
		want:   []string{"allocator.Closed/callers-64 sec/op"},
	}, {
		name:   "gomaxprocs 4 stated: a -2 is the name's own",
		output: "gomaxprocs: 4\n" + head + "BenchmarkClosed/callers-2 \t 100\t 7000 ns/op\n",
		want:   []string{"allocator.Closed/callers-2 sec/op"},
	}, {
		name:   "a lone benchmark at GOMAXPROCS 8",
		output: head + "BenchmarkLone-8 \t 100\t 5000 ns/op\n",
		want:   []string{"allocator.Lone sec/op"},
	}}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			set := newSet()
			if _, err := readBench(set, "bench.txt", []byte(c.output)); err != nil {
				t.Fatal(err)
			}
			got := set.Names()
			slices.Sort(got)
			if !slices.Equal(got, c.want) {
				t.Errorf("figures %q, want %q", got, c.want)
			}
		})
	}
}
