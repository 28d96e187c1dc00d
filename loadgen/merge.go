package loadgen

import (
	"errors"
	"fmt"
	"math"
	"strings"

	hdrhistogram "github.com/HdrHistogram/hdrhistogram-go"
)

// Merge adds up results of generators that ran at the same time against
// the same targets (each a shard of the load): counts add, rates add (each
// is per the generator's active time, which the generators share), the
// histograms merge bucket for bucket, so the percentiles are those of all
// requests together, and the series line up by wall-clock second.
// Targets are matched by name; every input must have the same ones.
func Merge(results ...*Result) (*Result, error) {
	if len(results) == 0 {
		return nil, errors.New("nothing to merge")
	}
	if err := checkShards(results); err != nil {
		return nil, err
	}
	first := results[0]
	out := &Result{APIVersion: APIVersion, Kind: Kind, Config: first.Config, Start: first.Start}
	out.Config.Shard = nil
	for _, r := range results {
		if len(r.Targets) != len(first.Targets) {
			return nil, fmt.Errorf("results have different targets: %d and %d", len(first.Targets), len(r.Targets))
		}
		if r.Start.Before(out.Start) {
			out.Start = r.Start
		}
		out.DurationSeconds = math.Max(out.DurationSeconds, r.DurationSeconds)
		out.Interrupted = out.Interrupted || r.Interrupted
		g := r.Generators
		if g < 1 {
			g = 1
		}
		out.Generators += g
	}
	for _, ft := range first.Targets {
		parts := make([]TargetResult, 0, len(results))
		offsets := make([]int, 0, len(results))
		for _, r := range results {
			t, ok := findTarget(r, ft.Name)
			if !ok {
				return nil, fmt.Errorf("target %q is missing from a result", ft.Name)
			}
			parts = append(parts, t)
			offsets = append(offsets, int(math.Round(r.Start.Sub(out.Start).Seconds())))
		}
		mt, err := mergeTarget(parts, offsets)
		if err != nil {
			return nil, fmt.Errorf("target %q: %w", ft.Name, err)
		}
		out.Targets = append(out.Targets, mt)
	}
	if len(out.Targets) > 1 {
		ref := 0
		for i, t := range out.Targets {
			if t.Name == out.Config.Reference {
				ref = i
			}
		}
		refT := out.Targets[ref]
		for k, t := range out.Targets {
			if k == ref {
				continue
			}
			ra := Ratio{Target: t.Name, Reference: refT.Name,
				Throughput: div(t.Throughput, refT.Throughput),
				P50:        div(t.Latency.P50Ms, refT.Latency.P50Ms),
				P99:        div(t.Latency.P99Ms, refT.Latency.P99Ms)}
			ra.ServerCPUPerRequest = serverCPURatio(t, refT)
			// Rounds are per generator; all of them are kept.
			for _, r := range results {
				for _, x := range r.Ratios {
					if x.Target == t.Name && x.Reference == refT.Name {
						ra.ThroughputRounds = append(ra.ThroughputRounds, x.ThroughputRounds...)
					}
				}
			}
			ra.ThroughputMedian = median(ra.ThroughputRounds)
			out.Ratios = append(out.Ratios, ra)
		}
	}
	return out, nil
}

// checkShards refuses a set of shard results that is not one whole load:
// a shard twice (the same file given twice, or a generator run again)
// would count its requests twice, and a missing one would pass off part of
// the load as all of it.
func checkShards(results []*Result) error {
	first := results[0].Config.Shard
	if first == nil {
		for i, r := range results {
			if r.Config.Shard != nil {
				return fmt.Errorf("result %d is shard %d/%d and result 0 is not a shard", i, r.Config.Shard.Index, r.Config.Shard.Count)
			}
		}
		return nil
	}
	seen := make([]bool, first.Count)
	for i, r := range results {
		s := r.Config.Shard
		switch {
		case s == nil:
			return fmt.Errorf("result %d is not a shard and result 0 is shard %d/%d", i, first.Index, first.Count)
		case s.Count != first.Count:
			return fmt.Errorf("result %d is shard %d/%d and result 0 is shard %d/%d: a load split %d and %d ways", i, s.Index, s.Count, first.Index, first.Count, first.Count, s.Count)
		case s.Index < 0 || s.Index >= s.Count:
			return fmt.Errorf("result %d: shard %d/%d is out of range", i, s.Index, s.Count)
		case seen[s.Index]:
			return fmt.Errorf("shard %d/%d is given twice (result %d)", s.Index, s.Count, i)
		}
		seen[s.Index] = true
	}
	var missing []string
	for i, ok := range seen {
		if !ok {
			missing = append(missing, fmt.Sprintf("%d/%d", i, first.Count))
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("shards %s are missing: the merge would be part of the load", strings.Join(missing, ", "))
	}
	return nil
}

func findTarget(r *Result, name string) (TargetResult, bool) {
	for _, t := range r.Targets {
		if t.Name == name {
			return t, true
		}
	}
	return TargetResult{}, false
}

func mergeHist(dst *hdrhistogram.Histogram, enc string) error {
	h, err := DecodeHistogram(enc)
	if err != nil {
		return err
	}
	if dropped := dst.Merge(h); dropped > 0 {
		return fmt.Errorf("%d values out of the histogram's range", dropped)
	}
	return nil
}

func mergeTarget(parts []TargetResult, offsets []int) (TargetResult, error) {
	out := TargetResult{TargetConfig: parts[0].TargetConfig}
	hist, late, fromSend := NewHistogram(), NewHistogram(), NewHistogram()
	allFromSend := true // every part has it (older results do not)
	var series []Point
	var secHists []*hdrhistogram.Histogram
	var answered int64
	for i, t := range parts {
		out.ActiveSeconds = math.Max(out.ActiveSeconds, t.ActiveSeconds)
		out.Intended += t.Intended
		out.Sent += t.Sent
		out.NotSent += t.NotSent
		out.OK += t.OK
		answered += t.OK
		out.Released += t.Released
		out.ReleaseErrors += t.ReleaseErrors
		out.Retries += t.Retries
		out.Resolved += t.Resolved
		out.ResolvedEmpty += t.ResolvedEmpty
		out.ResolveFailed += t.ResolveFailed
		out.ServerCPUSeconds += t.ServerCPUSeconds
		out.PreciseWaits += t.PreciseWaits
		out.Behind += t.Behind
		for c, n := range t.Errors {
			if out.Errors == nil {
				out.Errors = map[string]int64{}
			}
			out.Errors[c] += n
			answered += n
		}
		if err := mergeHist(hist, t.Histogram); err != nil {
			return out, err
		}
		if err := mergeHist(late, t.SendLatenessHistogram); err != nil {
			return out, err
		}
		if t.FromSendHistogram == "" && t.Latency.Count > 0 {
			allFromSend = false
		} else if err := mergeHist(fromSend, t.FromSendHistogram); err != nil {
			return out, err
		}
		for _, p := range t.Series {
			s := p.Second + offsets[i]
			for len(series) <= s {
				series = append(series, Point{Second: len(series)})
				secHists = append(secHists, nil)
			}
			q := &series[s]
			q.ActiveSeconds = math.Max(q.ActiveSeconds, p.ActiveSeconds)
			q.Intended += p.Intended
			q.Sent += p.Sent
			q.OK += p.OK
			q.Errors += p.Errors
			if p.Histogram != "" {
				if secHists[s] == nil {
					secHists[s] = NewHistogram()
				}
				if err := mergeHist(secHists[s], p.Histogram); err != nil {
					return out, err
				}
			}
		}
	}
	if out.ActiveSeconds > 0 {
		out.IntendedRate = float64(out.Intended) / out.ActiveSeconds
		out.AchievedRate = float64(out.Sent) / out.ActiveSeconds
		out.Throughput = float64(out.OK) / out.ActiveSeconds
	}
	if answered > 0 {
		out.SuccessRate = float64(out.OK) / float64(answered)
	}
	out.Latency, out.SendLateness = Summarize(hist), Summarize(late)
	if out.ServerCPUSeconds > 0 && out.Latency.Count > 0 {
		out.ServerCPUPerRequestMicros = out.ServerCPUSeconds * 1e6 / float64(out.Latency.Count)
	}
	out.Histogram, _ = EncodeHistogram(hist)
	out.SendLatenessHistogram, _ = EncodeHistogram(late)
	if allFromSend {
		// Left out when a part lacks it: a merge of some parts would
		// pass for the whole.
		out.FromSend = Summarize(fromSend)
		out.FromSendHistogram, _ = EncodeHistogram(fromSend)
	}
	for s := range series {
		p := &series[s]
		if p.ActiveSeconds > 0 {
			p.Throughput = float64(p.OK) / p.ActiveSeconds
		}
		if h := secHists[s]; h != nil {
			l := Summarize(h)
			p.P50Ms, p.P90Ms, p.P99Ms, p.MaxMs = l.P50Ms, l.P90Ms, l.P99Ms, l.MaxMs
			p.Histogram, _ = EncodeHistogram(h)
		}
	}
	out.Series = series
	return out, nil
}
