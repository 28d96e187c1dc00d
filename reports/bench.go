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

// procsSuffix is the "-2" GOMAXPROCS suffix `go test` appends to a name. It
// is dropped so a baseline from a machine with another core count still
// matches by name; the comparison's ratios to in-run references are what
// make such baselines meaningful.
var procsSuffix = regexp.MustCompile(`-\d+$`)

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
	n := 0
	// ordinal counts samples per figure and round, so repeated samples
	// within one round (-count N) still pair up one to one.
	ordinal := map[string]int{}
	for r.Scan() {
		switch rec := r.Result().(type) {
		case *benchfmt.SyntaxError:
			return n, fmt.Errorf("%s:%d: %s", rec.FileName, rec.Line, rec.Msg)
		case *benchfmt.Result:
			n++
			pkg := strings.TrimPrefix(rec.GetConfig("pkg"), modulePath)
			name := procsSuffix.ReplaceAllString(rec.Name.String(), "")
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
	}
	if err := r.Err(); err != nil {
		return n, fmt.Errorf("%s: %w", file, err)
	}
	return n, nil
}
