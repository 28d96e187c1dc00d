package soak

import (
	"fmt"
	"sort"
	"time"
)

// Second is one second of a run: the requests sent in it, how many were
// answered OK and how many failed, and their latency (answer less send).
type Second struct {
	// At is the second's start, in whole seconds from the run's start.
	At     int           `json:"at"`
	Sent   int           `json:"sent"`
	OK     int           `json:"ok"`
	Failed int           `json:"failed"`
	P50    time.Duration `json:"p50"`
	P99    time.Duration `json:"p99"`
}

// Timeline buckets a history's requests (its Calls: a keyed request's
// tries are one) by the second they were sent in,
// from the run's start to its end; a second without requests is there
// with zero counts, so a fault that stopped everything shows as a gap.
func Timeline(h *History) []Second {
	if h.Run.End.Before(h.Run.Start) {
		return nil
	}
	n := int(h.Run.End.Sub(h.Run.Start)/time.Second) + 1
	out := make([]Second, n)
	lat := make([][]time.Duration, n)
	for i := range out {
		out[i].At = i
	}
	for _, s := range h.Calls() {
		k := int(s.Sent.Sub(h.Run.Start) / time.Second)
		if k < 0 || k >= n {
			continue
		}
		out[k].Sent++
		if s.OK {
			out[k].OK++
		} else {
			out[k].Failed++
		}
		lat[k] = append(lat[k], s.Answered.Sub(s.Sent))
	}
	for k, ls := range lat {
		if len(ls) == 0 {
			continue
		}
		sort.Slice(ls, func(i, j int) bool { return ls[i] < ls[j] })
		out[k].P50 = quantile(ls, 0.50)
		out[k].P99 = quantile(ls, 0.99)
	}
	return out
}

// quantile is the nearest-rank quantile q of sorted durations.
func quantile(sorted []time.Duration, q float64) time.Duration {
	i := int(q*float64(len(sorted))+0.999999) - 1
	if i < 0 {
		i = 0
	}
	if i >= len(sorted) {
		i = len(sorted) - 1
	}
	return sorted[i]
}

// ReadResult reads a result document (WriteJSON's), checking its kind;
// an error names the field.
func ReadResult(data []byte) (*Result, error) {
	var r Result
	if err := decodeStrict(data, &r); err != nil {
		return nil, fmt.Errorf("soak result: %s", fieldError(err))
	}
	if r.Kind != ResultKind {
		return nil, fmt.Errorf("soak result: kind %q, want %q", r.Kind, ResultKind)
	}
	return &r, nil
}
