package reports

import (
	"bytes"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"golang.org/x/perf/benchfmt"
)

// modulePath is trimmed from package paths in figure names, which keeps
// them short ("core.Allocate/packed-1k") without losing anything.
const modulePath = "github.com/quartermaster-dev/quartermaster/"

// procsSuffix matches a trailing "-N" on a benchmark name. `go test`
// appends "-N" with N = GOMAXPROCS to every name it prints, and nothing when
// GOMAXPROCS is 1, so a trailing "-64" may be the suffix or part of the
// benchmark's own name (a sub-benchmark "callers-64"). procsSuffixOf decides
// which, and only the suffix is dropped: a baseline from a machine with
// another core count then still matches by name.
var procsSuffix = regexp.MustCompile(`-(\d+)$`)

// gomaxprocsKey is a configuration line ("gomaxprocs: N") that says which
// GOMAXPROCS the following results ran with; mk/report.sh writes it.
const gomaxprocsKey = "gomaxprocs"

// procsSuffixOf returns the suffix `go test` added to the names of one run
// ("-N", or "" for none). With a "gomaxprocs: N" configuration line it is
// "-N" for N > 1 and "" for 1. Without one, a run's names all carry the
// same suffix, so "-N" is taken as the suffix only when every name of the
// run ends in the same "-N" (N > 1, which go test never prints as a
// suffix): a run mixing "callers-8" and "callers-64" has none. A run of one
// benchmark whose own name ends in "-N", at GOMAXPROCS 1 and without the
// configuration line, cannot be told apart from the suffix.
func procsSuffixOf(gomaxprocs string, names []string) string {
	if gomaxprocs != "" {
		if n, err := strconv.Atoi(strings.TrimSpace(gomaxprocs)); err == nil && n > 1 {
			return "-" + strconv.Itoa(n)
		}
		return ""
	}
	common := ""
	for i, name := range names {
		m := procsSuffix.FindStringSubmatch(name)
		if m == nil || m[1] == "1" || (i > 0 && m[0] != common) {
			return ""
		}
		common = m[0]
	}
	return common
}

// runKey is what the results of one `go test` run share: its package and
// its stated GOMAXPROCS (and the file they are in).
func runKey(rec *benchfmt.Result) string {
	return rec.GetConfig("pkg") + "\x00" + rec.GetConfig(gomaxprocsKey)
}

// readBench adds every benchmark result in data to set. The file name is
// used in errors and as each figure's source. It returns how many results it
// read, so the caller can tell "not benchmark output" from "no benchmarks".
//
// Output from several `go test` runs may be concatenated; a configuration
// line "round: N" before each run says which samples belong together, so a
// figure can be divided by its reference round by round (mk/report.sh writes
// it). Without it, the k-th sample of each benchmark forms round k.
func readBench(set *Set, file string, data []byte) (int, error) {
	r := benchfmt.NewReader(bytes.NewReader(data), file)
	// The suffix of a run can only be told from all its names, so the
	// results are read first, then added.
	var results []*benchfmt.Result
	names := map[string][]string{}
	for r.Scan() {
		switch rec := r.Result().(type) {
		case *benchfmt.SyntaxError:
			return len(results), fmt.Errorf("%s:%d: %s", rec.FileName, rec.Line, rec.Msg)
		case *benchfmt.Result:
			rec = rec.Clone()
			results = append(results, rec)
			k := runKey(rec)
			names[k] = append(names[k], rec.Name.String())
		}
	}
	if err := r.Err(); err != nil {
		return len(results), fmt.Errorf("%s: %w", file, err)
	}
	suffix := map[string]string{}
	for k, ns := range names {
		suffix[k] = procsSuffixOf(strings.SplitN(k, "\x00", 2)[1], ns)
	}
	// ordinal counts samples per figure and round, so repeated samples
	// within one round (-count N) still pair up one to one.
	ordinal := map[string]int{}
	for _, rec := range results {
		pkg := strings.TrimPrefix(rec.GetConfig("pkg"), modulePath)
		name := strings.TrimSuffix(rec.Name.String(), suffix[runKey(rec)])
		if pkg != "" {
			name = pkg + "." + name
		}
		round := rec.GetConfig("round")
		for _, v := range rec.Values {
			// A benchmark that reports 0 ns/op says its time per op means
			// nothing (one run of minutes); keep it out of the figures.
			if v.Unit == "sec/op" && v.Value == 0 {
				continue
			}
			fig := name + " " + v.Unit
			key := fig + "\x00" + round
			k := ordinal[key]
			ordinal[key]++
			id := strconv.Itoa(k)
			if round != "" {
				id = round + "#" + id
			}
			set.add(fig, KindBench, v.Unit, file, Sample{Value: v.Value, Round: id})
		}
	}
	return len(results), nil
}
