package loadgen

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"
)

// APIVersion and Kind identify a load result file. A change that an older
// reader would misread gets a new APIVersion; fields are only ever added.
const (
	APIVersion = "quartermaster.dev/v1alpha1"
	Kind       = "LoadResult"
)

// The latency histograms are all made with these bounds, so two results
// (two generators, two runs) merge bucket for bucket with no rounding:
// values are microseconds from 1 µs to 10 minutes, with 3 significant
// digits (a value is known to within 0.1%).
const (
	HistogramLowest  = 1
	HistogramHighest = int64(10 * time.Minute / time.Microsecond)
	HistogramDigits  = 3
)

// Result is what one `qm load` run (or the merge of several generators'
// runs) measured. It is written as JSON by `qm load --out` and read by
// `qm load merge` and `qm report`.
type Result struct {
	// APIVersion is always APIVersion, Kind always Kind.
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`

	// Config is the run's settings, as the flags gave them.
	Config Config `json:"config"`

	// Start is the wall-clock time the measured part of the run began
	// (after the warm-up), UTC. For a merge, the earliest Start.
	Start time.Time `json:"start"`
	// DurationSeconds is how long the measured part lasted. For a merge,
	// the longest of the inputs.
	DurationSeconds float64 `json:"durationSeconds"`
	// Interrupted is true when the run was stopped (Ctrl-C, a failed
	// target) before its end: the figures cover what ran until then.
	Interrupted bool `json:"interrupted,omitempty"`
	// Generators is how many generators' results this one holds: 1 for a
	// single run, N after merging N of them.
	Generators int `json:"generators"`

	// Targets has one entry per --target, in the order given.
	Targets []TargetResult `json:"targets"`
	// Ratios compares each target with the reference target (see
	// Config.Reference); empty with a single target.
	Ratios []Ratio `json:"ratios,omitempty"`
	// Expectations are the --expect thresholds and whether each held.
	Expectations []Expectation `json:"expectations,omitempty"`
}

// Config records the settings of a run, enough to repeat it.
type Config struct {
	// Mode is "open" (arrivals at a rate, whatever the answers) or
	// "closed" (Workers callers, each sending when its last call returned).
	Mode string `json:"mode"`
	// Arrival is the open-loop schedule as given to --rate, for example
	// "constant:1000", "poisson:1000", "ramp:100:2000" or
	// "steps:500@10s,1000@10s". Empty in closed mode.
	Arrival string `json:"arrival,omitempty"`
	// Seed drives Poisson arrivals and any random choice in the requests.
	Seed uint64 `json:"seed"`
	// Workers is the number of callers in closed mode.
	Workers int `json:"workers,omitempty"`
	// MaxInFlight bounds outstanding requests per target in open mode; an
	// arrival that finds the bound reached is counted as not sent.
	MaxInFlight int `json:"maxInFlight,omitempty"`
	// Connections is the number of gRPC connections (or HTTP/2
	// connections for REST) per target.
	Connections int `json:"connections"`
	// DurationSeconds is the measured duration asked for (0: until
	// Requests were sent or interrupted).
	DurationSeconds float64 `json:"durationSeconds,omitempty"`
	// Requests is the request count asked for per target (0: no limit).
	Requests int64 `json:"requests,omitempty"`
	// WarmupSeconds ran before the measurement and is not counted.
	WarmupSeconds float64 `json:"warmupSeconds,omitempty"`
	// WindowSeconds is the length of each target's turn when several
	// targets take turns.
	WindowSeconds float64 `json:"windowSeconds,omitempty"`
	// TimeoutSeconds is each request's deadline.
	TimeoutSeconds float64 `json:"timeoutSeconds"`
	// Request says where the AllocationRequest came from: "flags",
	// "file:NAME" or "scenario:NAME".
	Request string `json:"request"`
	// Release is true when allocated servers were given back with
	// Quartermaster's AllocationAdmin Release after their session.
	Release bool `json:"release,omitempty"`
	// AllocationKeys is true when every request carried an idempotency
	// key and lost answers were retried with it (Options.AllocationKeys).
	AllocationKeys bool `json:"allocationKeys,omitempty"`
	// Reference is the target the ratios divide by.
	Reference string `json:"reference,omitempty"`
	// Shard is set when this generator ran one share of a larger load.
	Shard *Shard `json:"shard,omitempty"`
	// Targets are the targets as configured.
	Targets []TargetConfig `json:"targets"`
}

// Shard is one generator's part of a load spread over several.
type Shard struct {
	// Index counts from 0; Count is the number of generators.
	Index int `json:"index"`
	Count int `json:"count"`
}

// TargetConfig is one --target.
type TargetConfig struct {
	Name string `json:"name"`
	Addr string `json:"addr"`
	// Protocol is "grpc" or "rest".
	Protocol string `json:"protocol"`
	// Call is "allocate" (Agones' Allocate) or "echo" (the gRPC health
	// check on the same server, a ceiling to compare with).
	Call string `json:"call"`
}

// TargetResult is what one target did during its turns.
type TargetResult struct {
	TargetConfig

	// ActiveSeconds is the time this target had its turn; the rates are
	// per active second, so targets sharing a run compare fairly.
	ActiveSeconds float64 `json:"activeSeconds"`

	// Intended is the number of requests the schedule asked for in the
	// measured time (open mode; in closed mode it equals Sent).
	Intended int64 `json:"intended"`
	// Sent is the number of requests that went out.
	Sent int64 `json:"sent"`
	// NotSent is Intended minus Sent: arrivals that found MaxInFlight
	// requests outstanding, or could not go out before their turn ended.
	NotSent int64 `json:"notSent"`
	// OK is the number of successful answers.
	OK int64 `json:"ok"`
	// Errors counts failed answers by gRPC code name ("ResourceExhausted",
	// "Unavailable", ...); REST answers are mapped to gRPC codes from the
	// body's code, else from the HTTP status.
	Errors map[string]int64 `json:"errors,omitempty"`
	// Released counts sessions given back with Release; ReleaseErrors
	// those whose Release failed.
	Released      int64 `json:"released,omitempty"`
	ReleaseErrors int64 `json:"releaseErrors,omitempty"`
	// With allocation keys: Retries counts tries sent again with their
	// key after a lost answer; of the requests given up without an
	// answer, Resolved found a server under their key (given back),
	// ResolvedEmpty found none, ResolveFailed got no answer in time.
	Retries       int64 `json:"retries,omitempty"`
	Resolved      int64 `json:"resolved,omitempty"`
	ResolvedEmpty int64 `json:"resolvedEmpty,omitempty"`
	ResolveFailed int64 `json:"resolveFailed,omitempty"`

	// IntendedRate is Intended per active second; AchievedRate is Sent
	// per active second; Throughput is OK per active second.
	IntendedRate float64 `json:"intendedRate"`
	AchievedRate float64 `json:"achievedRate"`
	Throughput   float64 `json:"throughput"`
	// SuccessRate is OK over the answered requests (0 when none).
	SuccessRate float64 `json:"successRate"`

	// Latency of every answered request (OK or not), from the time it was
	// meant to be sent to the time its answer arrived, so a server that
	// stalls is charged for the queue it makes (wrk2's correction).
	Latency Latency `json:"latency"`
	// SendLateness is how long after its intended time each request
	// actually went out: the generator's own timing error plus any wait
	// for an in-flight slot.
	SendLateness Latency `json:"sendLateness"`
	// Histogram is Latency's HDR histogram (see EncodeHistogram); merging
	// these gives the exact percentiles of several runs.
	Histogram string `json:"histogram"`
	// SendLatenessHistogram is SendLateness's HDR histogram.
	SendLatenessHistogram string `json:"sendLatenessHistogram"`
	// FromSend is the latency from when each request actually went out,
	// as a closed-loop tool such as ghz measures it: Latency without the
	// generator's own lateness. It compares generators like for like; it
	// hides a stalled server's queue, so Latency is the figure to trust.
	// (Absent from results written before it was added.)
	FromSend          Latency `json:"fromSend"`
	FromSendHistogram string  `json:"fromSendHistogram,omitempty"`
	// PreciseWaits counts the arrivals (open loop) whose last stretch was
	// waited precisely rather than on a timer, and Behind the times the
	// generator found itself behind its schedule and paused precise waits
	// (see Options.Precise).
	PreciseWaits int64 `json:"preciseWaits,omitempty"`
	Behind       int64 `json:"behind,omitempty"`

	// Series has one point per second of the measured run, by the
	// second in which a request was meant to be sent.
	Series []Point `json:"series"`

	// ServerCPUSeconds is the CPU time (user + system) the server process
	// used during this target's turns, answers included, when qm load was
	// given its pid (--server-pid, same machine); ServerCPUPerRequestMicros
	// divides it by the answered requests. Absent otherwise.
	ServerCPUSeconds          float64 `json:"serverCPUSeconds,omitempty"`
	ServerCPUPerRequestMicros float64 `json:"serverCPUPerRequestMicros,omitempty"`
}

// Latency summarises a latency histogram, in milliseconds.
type Latency struct {
	Count  int64   `json:"count"`
	MinMs  float64 `json:"minMs"`
	MeanMs float64 `json:"meanMs"`
	P50Ms  float64 `json:"p50Ms"`
	P90Ms  float64 `json:"p90Ms"`
	P99Ms  float64 `json:"p99Ms"`
	P999Ms float64 `json:"p999Ms"`
	MaxMs  float64 `json:"maxMs"`
}

// Point is one second of a target's time series.
type Point struct {
	// Second counts from the start of the measured run.
	Second int `json:"second"`
	// ActiveSeconds is how much of this second was the target's turn.
	ActiveSeconds float64 `json:"activeSeconds"`
	Intended      int64   `json:"intended"`
	Sent          int64   `json:"sent"`
	OK            int64   `json:"ok"`
	// Errors is the number of failed answers of any code.
	Errors int64 `json:"errors"`
	// Throughput is OK per active second within this second.
	Throughput float64 `json:"throughput"`
	P50Ms      float64 `json:"p50Ms"`
	P90Ms      float64 `json:"p90Ms"`
	P99Ms      float64 `json:"p99Ms"`
	MaxMs      float64 `json:"maxMs"`
	// Histogram is this second's latency histogram, so series merge
	// exactly too.
	Histogram string `json:"histogram,omitempty"`
}

// Ratio compares a target with the reference target: each figure is the
// target's over the reference's, measured in the same run.
type Ratio struct {
	Target    string `json:"target"`
	Reference string `json:"reference"`
	// Throughput is the ratio of OK per active second over the whole run.
	Throughput float64 `json:"throughput"`
	// ThroughputRounds has the ratio for each round of turns (each
	// target's window next to the reference's), and ThroughputMedian
	// their median, which shrugs off a round disturbed by other work on
	// the machine.
	ThroughputRounds []float64 `json:"throughputRounds,omitempty"`
	ThroughputMedian float64   `json:"throughputMedian,omitempty"`
	// P50 and P99 are latency ratios.
	P50 float64 `json:"p50"`
	P99 float64 `json:"p99"`
	// ServerCPUPerRequest is the ratio of the server's CPU per answered
	// request, when it was measured.
	ServerCPUPerRequest float64 `json:"serverCPUPerRequest,omitempty"`
}

// Expectation is one --expect threshold, such as "p99<50ms".
type Expectation struct {
	// Expr is the threshold as written.
	Expr string `json:"expr"`
	// Target is the target it applies to (every target is checked on its
	// own; "" when it concerns the ratios).
	Target string `json:"target,omitempty"`
	// Value is the measured figure in the expression's unit.
	Value float64 `json:"value"`
	Pass  bool    `json:"pass"`
}

// NewHistogram returns an empty latency histogram with the bounds every
// result uses.
func NewHistogram() *hdrhistogram.Histogram {
	return hdrhistogram.New(HistogramLowest, HistogramHighest, HistogramDigits)
}

// EncodeHistogram writes h in HdrHistogram's compressed V2 encoding,
// base64 ("HISTF..."), which the HdrHistogram libraries of other languages
// read too.
func EncodeHistogram(h *hdrhistogram.Histogram) (string, error) {
	b, err := h.Encode(hdrhistogram.V2CompressedEncodingCookieBase)
	if err != nil {
		return "", err
	}
	return string(b), nil
}

// DecodeHistogram reads what EncodeHistogram wrote. An empty string is an
// empty histogram.
func DecodeHistogram(s string) (h *hdrhistogram.Histogram, err error) {
	if s == "" {
		return NewHistogram(), nil
	}
	// The library indexes into its input without checking its length and
	// panics on some malformed input; a damaged file must give an error.
	raw, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		return nil, fmt.Errorf("histogram is not base64: %w", err)
	}
	if len(raw) < 8 {
		return nil, errors.New("histogram is truncated")
	}
	defer func() {
		if p := recover(); p != nil {
			h, err = nil, fmt.Errorf("histogram is damaged: %v", p)
		}
	}()
	h, err = hdrhistogram.Decode([]byte(s))
	if err != nil {
		return nil, fmt.Errorf("histogram: %w", err)
	}
	return h, nil
}

// ReadResult decodes a result file, refusing unknown fields and another
// apiVersion or kind, and checks that its histograms decode.
func ReadResult(r io.Reader) (*Result, error) {
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	var res Result
	if err := dec.Decode(&res); err != nil {
		return nil, fmt.Errorf("not a load result: %w", err)
	}
	if res.APIVersion != APIVersion || res.Kind != Kind {
		return nil, fmt.Errorf("apiVersion %q, kind %q: want %s, %s", res.APIVersion, res.Kind, APIVersion, Kind)
	}
	for i, t := range res.Targets {
		if _, err := DecodeHistogram(t.Histogram); err != nil {
			return nil, fmt.Errorf("targets[%d] (%s): %w", i, t.Name, err)
		}
		if _, err := DecodeHistogram(t.SendLatenessHistogram); err != nil {
			return nil, fmt.Errorf("targets[%d] (%s) sendLatenessHistogram: %w", i, t.Name, err)
		}
		if _, err := DecodeHistogram(t.FromSendHistogram); err != nil {
			return nil, fmt.Errorf("targets[%d] (%s) fromSendHistogram: %w", i, t.Name, err)
		}
		for j, p := range t.Series {
			if _, err := DecodeHistogram(p.Histogram); err != nil {
				return nil, fmt.Errorf("targets[%d] (%s) series[%d]: %w", i, t.Name, j, err)
			}
		}
	}
	return &res, nil
}

// WriteResult writes r as indented JSON.
func WriteResult(w io.Writer, r *Result) error {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return err
	}
	b = append(b, '\n')
	_, err = w.Write(b)
	return err
}

// Summarize turns a histogram of microseconds into a Latency.
func Summarize(h *hdrhistogram.Histogram) Latency {
	if h.TotalCount() == 0 {
		return Latency{}
	}
	ms := func(us int64) float64 { return float64(us) / 1000 }
	return Latency{
		Count:  h.TotalCount(),
		MinMs:  ms(h.Min()),
		MeanMs: h.Mean() / 1000,
		P50Ms:  ms(h.ValueAtPercentile(50)),
		P90Ms:  ms(h.ValueAtPercentile(90)),
		P99Ms:  ms(h.ValueAtPercentile(99)),
		P999Ms: ms(h.ValueAtPercentile(99.9)),
		MaxMs:  ms(h.Max()),
	}
}
