package reports

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sort"
)

// HistoryFile is the name, beside thresholds.yaml, of the record of every
// baseline `make perf-baseline` measured: each gated figure's median then.
// The page draws each gated figure across it, so a slow drift that every
// step passed is still seen.
const HistoryFile = "history.json"

const historyKind = "PerformanceHistory"

// History is the gated figures of every recorded baseline, oldest first.
type History struct {
	APIVersion string         `json:"apiVersion"`
	Kind       string         `json:"kind"`
	Entries    []HistoryEntry `json:"entries"`
}

// HistoryEntry is one recorded baseline.
type HistoryEntry struct {
	// Commit is the commit measured; Date when (RFC 3339, UTC).
	Commit string `json:"commit"`
	Date   string `json:"date"`
	// Figures are the gated figures' medians and intervals, by name.
	Figures map[string]HistoryPoint `json:"figures"`
}

// HistoryPoint is one figure of one baseline.
type HistoryPoint struct {
	Unit   string  `json:"unit"`
	N      int     `json:"n"`
	Center float64 `json:"center"`
	Lo     float64 `json:"lo"`
	Hi     float64 `json:"hi"`
}

// LoadHistory reads a history file; a missing file is an empty history.
func LoadHistory(path string) (*History, error) {
	h := &History{APIVersion: apiVersion, Kind: historyKind}
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return h, nil
	}
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(h); err != nil {
		return nil, fmt.Errorf("%s: %s", path, jsonError(data, err))
	}
	if h.Kind != historyKind || h.APIVersion != apiVersion {
		return nil, fmt.Errorf("%s: want apiVersion %q and kind %q, got %q and %q", path, apiVersion, historyKind, h.APIVersion, h.Kind)
	}
	for i, e := range h.Entries {
		if e.Commit == "" {
			return nil, fmt.Errorf("%s: entries[%d].commit: missing", path, i)
		}
	}
	return h, nil
}

// Record appends an entry for commit measured at date: the current side of
// every gated row of c but the scenarios' outputs (gated exactly).
func (h *History) Record(commit, date string, c *Comparison) error {
	if commit == "" {
		return errors.New("history: a recorded baseline needs its commit")
	}
	e := HistoryEntry{Commit: commit, Date: date, Figures: map[string]HistoryPoint{}}
	for _, r := range c.Rows {
		if r.Gated && r.Current != nil && r.Kind != KindSim {
			e.Figures[r.Figure] = HistoryPoint{Unit: r.Unit, N: r.Current.N, Center: r.Current.Center, Lo: r.Current.Lo, Hi: r.Current.Hi}
		}
	}
	if len(e.Figures) == 0 {
		return errors.New("history: the run has no gated figure to record (is thresholds.yaml given?)")
	}
	h.Entries = append(h.Entries, e)
	return nil
}

// Write writes the history as indented JSON, whole or not at all.
func (h *History) Write(path string) error {
	b, err := json.MarshalIndent(h, "", "  ")
	if err != nil {
		return err
	}
	return writeAtomic(path, append(b, '\n'))
}

// trendSection draws each gated figure across the recorded baselines,
// then this run's two sides, as github-action-benchmark draws a
// benchmark's history: one line a figure.
func (r *Report) trendSection() (section, error) {
	s := section{ID: "trend", Title: "Gated figures across the recorded baselines",
		Intro: "Each gated figure's median at every baseline recorded in " + HistoryFile +
			" (make perf-baseline), oldest first, then this run's baseline build and this build. Each step may pass the gate while the line drifts; the line shows it."}
	var names []string
	for _, row := range r.Comparison.Rows {
		// A scenario's outputs are gated exactly, so their history is a
		// flat line until a declared change: no trend to draw.
		if row.Gated && row.Kind != KindSim {
			names = append(names, row.Figure)
		}
	}
	sort.Strings(names)
	rows := map[string]Row{}
	for _, row := range r.Comparison.Rows {
		rows[row.Figure] = row
	}
	for i, name := range names {
		row := rows[name]
		var xs, ys, los, his []float64
		t := table{Head: []string{"#", "baseline", "date", "median (" + row.Unit + ")", "interval"}}
		add := func(label, date string, center, lo, hi float64) {
			x := float64(len(xs) + 1)
			xs, ys, los, his = append(xs, x), append(ys, center), append(los, lo), append(his, hi)
			t.Rows = append(t.Rows, []string{fmt.Sprint(len(xs)), label, date, num(center), num(lo) + " .. " + num(hi)})
		}
		for _, e := range r.History.Entries {
			if p, ok := e.Figures[name]; ok {
				add(shortCommit(e.Commit), e.Date, p.Center, p.Lo, p.Hi)
			}
		}
		if st := row.Baseline; st != nil {
			add("this run: baseline build", "", st.Center, st.Lo, st.Hi)
		}
		if st := row.Current; st != nil {
			add("this run: this build", "", st.Center, st.Lo, st.Hi)
		}
		if len(xs) == 0 {
			continue
		}
		p, err := lineChart(name, "baseline (numbered as in the table)", row.Unit,
			[]series{{name: "median", x: xs, y: ys}, {name: "interval low", x: xs, y: los}, {name: "interval high", x: xs, y: his}})
		if err != nil {
			return s, err
		}
		p.Y.Min = 0
		svg, err := svgOf(p)
		if err != nil {
			return s, err
		}
		s.Charts = append(s.Charts, chart{ID: fmt.Sprintf("trend-%d", i), Title: name, SVG: svg, Table: t})
	}
	return s, nil
}

func shortCommit(c string) string {
	if len(c) > 12 {
		return c[:12]
	}
	return c
}
