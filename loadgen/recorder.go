package loadgen

import (
	"sort"
	"sync"
	"time"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"
	"google.golang.org/grpc/codes"
)

// Sample is one answered request.
type Sample struct {
	// Second is the second of the measured run the request was meant to
	// go out in.
	Second int
	// Latency runs from the intended send time to the answer; Lateness
	// from the intended send time to the actual one.
	Latency, Lateness time.Duration
	Code              codes.Code
}

// Recorder adds up one target's samples. Add is safe from many goroutines.
// Its memory stays flat with the run's length: a second's histogram is
// encoded (a few hundred bytes) once every request meant for that second
// has been answered.
type Recorder struct {
	mu       sync.Mutex
	hist     *hdrhistogram.Histogram
	late     *hdrhistogram.Histogram
	fromSend *hdrhistogram.Histogram
	codes    map[codes.Code]int64
	intended int64
	sent     int64
	active   time.Duration
	seconds  []second
	done     int // seconds[:done] are encoded
	// spare histograms from encoded seconds, reused for later ones
	spare []*hdrhistogram.Histogram
}

type second struct {
	point   Point
	pending int64 // sent, not yet answered
	hist    *hdrhistogram.Histogram
}

// NewRecorder returns an empty Recorder.
func NewRecorder() *Recorder {
	return &Recorder{hist: NewHistogram(), late: NewHistogram(), fromSend: NewHistogram(), codes: map[codes.Code]int64{}}
}

// grow returns second s's entry, adding seconds up to it.
func (r *Recorder) grow(s int) *second {
	if s < 0 {
		s = 0
	}
	for len(r.seconds) <= s {
		r.seconds = append(r.seconds, second{point: Point{Second: len(r.seconds)}})
	}
	return &r.seconds[s]
}

// at returns second s's entry ready for another request: a second already
// encoded is opened again (its histogram decoded), and Flush encodes it
// and the ones after it again in order. Only s itself is decoded: the
// later seconds keep their encoded histograms, which finish leaves alone.
// (Decoding them all, as counting a turn's time at the end of a long run
// once did, held every second's histogram at once: memory that grew with
// the run's length.)
func (r *Recorder) at(s int) *second {
	sec := r.grow(s)
	if s < r.done {
		if sec.point.Histogram != "" {
			sec.hist, _ = DecodeHistogram(sec.point.Histogram) // we encoded it
			sec.point.Histogram = ""
		}
		r.done = max(s, 0)
	}
	return sec
}

// Intend counts n requests the schedule asked for in second s.
func (r *Recorder) Intend(s int, n int64) {
	r.mu.Lock()
	r.intended += n
	r.grow(s).point.Intended += n // counts only: no need to reopen it
	r.mu.Unlock()
}

// Sent counts a request that went out in second s; its answer is
// expected through Add.
func (r *Recorder) Sent(s int) {
	r.mu.Lock()
	r.sent++
	sec := r.at(s)
	sec.point.Sent++
	sec.pending++
	r.mu.Unlock()
}

// Dispatch counts a request that the schedule asked for in second s and
// that went out: Intend and Sent under one lock.
func (r *Recorder) Dispatch(s int) {
	r.mu.Lock()
	r.intended++
	r.sent++
	sec := r.at(s)
	sec.point.Intended++
	sec.point.Sent++
	sec.pending++
	r.mu.Unlock()
}

// Active adds d of turn time in second s (a turn spanning seconds is added
// one part per second).
func (r *Recorder) Active(s int, d time.Duration) {
	r.mu.Lock()
	r.active += d
	// Counts only: an encoded second stays encoded (Result works out
	// every second's throughput from its active time at the end).
	r.grow(s).point.ActiveSeconds += d.Seconds()
	r.mu.Unlock()
}

func record(h *hdrhistogram.Histogram, d time.Duration) {
	us := d.Microseconds()
	if us < HistogramLowest {
		us = HistogramLowest
	}
	if us > HistogramHighest {
		us = HistogramHighest
	}
	_ = h.RecordValue(us) // in range by construction
}

// Add records an answer to a request that Sent counted.
func (r *Recorder) Add(s Sample) {
	r.mu.Lock()
	defer r.mu.Unlock()
	record(r.hist, s.Latency)
	record(r.late, s.Lateness)
	record(r.fromSend, s.Latency-s.Lateness)
	r.codes[s.Code]++
	sec := r.at(s.Second)
	if sec.hist == nil {
		sec.hist = r.newHist()
	}
	record(sec.hist, s.Latency)
	if s.Code == codes.OK {
		sec.point.OK++
	} else {
		sec.point.Errors++
	}
	sec.pending--
}

func (r *Recorder) newHist() *hdrhistogram.Histogram {
	if n := len(r.spare); n > 0 {
		h := r.spare[n-1]
		r.spare = r.spare[:n-1]
		return h
	}
	return NewHistogram()
}

// Flush encodes the seconds before now whose requests have all been
// answered, freeing their histograms.
func (r *Recorder) Flush(now int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for r.done < len(r.seconds) && r.done < now && r.seconds[r.done].pending <= 0 {
		r.finish(&r.seconds[r.done])
		r.done++
	}
}

func (r *Recorder) finish(sec *second) {
	p := &sec.point
	if p.ActiveSeconds > 0 {
		p.Throughput = float64(p.OK) / p.ActiveSeconds
	}
	if sec.hist == nil {
		return
	}
	l := Summarize(sec.hist)
	p.P50Ms, p.P90Ms, p.P99Ms, p.MaxMs = l.P50Ms, l.P90Ms, l.P99Ms, l.MaxMs
	p.Histogram, _ = EncodeHistogram(sec.hist) // cannot fail for V2
	sec.hist.Reset()
	r.spare = append(r.spare, sec.hist)
	sec.hist = nil
}

// Snapshot is the figures so far, for progress lines.
type Snapshot struct {
	Sent, OK int64
	Errors   map[string]int64
	P50, P99 time.Duration
}

// Snapshot returns the figures so far.
func (r *Recorder) Snapshot() Snapshot {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := Snapshot{Sent: r.sent, Errors: map[string]int64{}}
	for c, n := range r.codes {
		if c == codes.OK {
			s.OK = n
		} else {
			s.Errors[c.String()] = n
		}
	}
	s.P50 = time.Duration(r.hist.ValueAtPercentile(50)) * time.Microsecond
	s.P99 = time.Duration(r.hist.ValueAtPercentile(99)) * time.Microsecond
	return s
}

// Result fills in a TargetResult from everything recorded. Requests still
// unanswered are left out of the latencies (the runner waits for them, or
// counts them as cancelled, before asking).
func (r *Recorder) Result(cfg TargetConfig) TargetResult {
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := r.done; i < len(r.seconds); i++ {
		r.finish(&r.seconds[i])
	}
	r.done = len(r.seconds)
	t := TargetResult{
		TargetConfig:  cfg,
		ActiveSeconds: r.active.Seconds(),
		Intended:      r.intended,
		Sent:          r.sent,
		NotSent:       r.intended - r.sent,
		Latency:       Summarize(r.hist),
		SendLateness:  Summarize(r.late),
		FromSend:      Summarize(r.fromSend),
		Series:        make([]Point, len(r.seconds)),
	}
	var answered int64
	for c, n := range r.codes {
		answered += n
		if c == codes.OK {
			t.OK = n
			continue
		}
		if t.Errors == nil {
			t.Errors = map[string]int64{}
		}
		t.Errors[c.String()] += n
	}
	if answered > 0 {
		t.SuccessRate = float64(t.OK) / float64(answered)
	}
	if s := r.active.Seconds(); s > 0 {
		t.IntendedRate = float64(t.Intended) / s
		t.AchievedRate = float64(t.Sent) / s
		t.Throughput = float64(t.OK) / s
	}
	t.Histogram, _ = EncodeHistogram(r.hist)
	t.SendLatenessHistogram, _ = EncodeHistogram(r.late)
	t.FromSendHistogram, _ = EncodeHistogram(r.fromSend)
	for i := range r.seconds {
		p := r.seconds[i].point
		if p.ActiveSeconds > 0 {
			p.Throughput = float64(p.OK) / p.ActiveSeconds
		}
		t.Series[i] = p
	}
	return t
}

// ErrorCodes lists the codes in an Errors map, most frequent first, for
// summaries.
func ErrorCodes(errs map[string]int64) []string {
	out := make([]string, 0, len(errs))
	for c := range errs {
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool {
		if errs[out[i]] != errs[out[j]] {
			return errs[out[i]] > errs[out[j]]
		}
		return out[i] < out[j]
	})
	return out
}
