package reports

import (
	"bytes"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"

	"github.com/quartermaster-dev/quartermaster/loadgen"
)

// LoadInput is one `qm load` result.
type LoadInput struct {
	File   string
	Name   string
	Result *loadgen.Result
	// Histograms are the targets' decoded latency histograms, by target
	// index.
	Histograms []*hdrhistogram.Histogram
}

func isLoadKind(kind string) bool { return kind == loadgen.Kind }

// readLoad decodes a load result (strictly, with its histograms checked by
// loadgen itself) and adds its figures. The run is named after its file
// ("load.json" gives "load/load"), so a baseline and a run written under the
// same file name line up.
func readLoad(set *Set, file string, data []byte) error {
	res, err := loadgen.ReadResult(bytes.NewReader(data))
	if err != nil {
		return fmt.Errorf("%s: %w", file, err)
	}
	name, round := loadName(file)
	in := &LoadInput{File: file, Name: name, Result: res}
	for _, t := range res.Targets {
		h, err := loadgen.DecodeHistogram(t.Histogram)
		if err != nil {
			return fmt.Errorf("%s: target %s: %w", file, t.Name, err)
		}
		in.Histograms = append(in.Histograms, h)
	}
	set.Loads = append(set.Loads, in)
	p := "load/" + name + " "
	one := func(fig, unit string, v float64) {
		set.add(p+fig, KindLoad, unit, file, Sample{Value: v, Round: round})
	}
	for _, t := range res.Targets {
		if t.ServerCPUPerRequestMicros > 0 {
			// The server's CPU per answered request, charged turn by turn
			// (qm load --server-pid): what the gate compares for the
			// service and forwarding from outside.
			one(t.Name+" serverCPU", "cpu-us/op", t.ServerCPUPerRequestMicros)
		}
		one(t.Name+" throughput", "allocations/s", t.Throughput)
		one(t.Name+" successRate", "fraction", t.SuccessRate)
		one(t.Name+" latency.p50Ms", "ms", t.Latency.P50Ms)
		one(t.Name+" latency.p99Ms", "ms", t.Latency.P99Ms)
		one(t.Name+" sendLateness.p99Ms", "ms", t.SendLateness.P99Ms)
	}
	for _, r := range res.Ratios {
		q := r.Target + "÷" + r.Reference
		// Each round of turns is one sample of the ratio, measured next to
		// its reference: what the gate can compare with a test.
		for i, v := range r.ThroughputRounds {
			set.add(p+q+" throughput", KindLoad, "x", file, Sample{Value: v, Round: round + "#" + fmt.Sprint(i)})
		}
		if len(r.ThroughputRounds) == 0 {
			one(q+" throughput", "x", r.Throughput)
		}
		set.Figure(p + q + " throughput").Better = "higher"
		one(q+" p50", "x", r.P50)
		one(q+" p99", "x", r.P99)
	}
	return nil
}

// roundSuffix is the ".rN" before a load result's extension that names the
// round of a suite it was measured in (mk/report.sh writes
// load-echo.r3.json): such files are samples of one run, "load/load-echo".
var roundSuffix = regexp.MustCompile(`\.r(\d+)$`)

// loadName returns the run name a load result file gives its figures and
// the round its samples belong to ("0" when the name has no round).
func loadName(file string) (name, round string) {
	name = strings.TrimSuffix(filepath.Base(file), filepath.Ext(file))
	if m := roundSuffix.FindStringSubmatch(name); m != nil {
		return strings.TrimSuffix(name, m[0]), m[1]
	}
	return name, "0"
}

func (in *LoadInput) expectations() []Expectation {
	var out []Expectation
	for _, e := range in.Result.Expectations {
		m := e.Expr
		if e.Target != "" {
			m = e.Target + " " + e.Expr
		}
		out = append(out, Expectation{Source: "load/" + in.Name, Metric: m, Value: e.Value, Want: e.Expr, Pass: e.Pass})
	}
	return out
}
