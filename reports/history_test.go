package reports

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestHistoryRecordAndTrend(t *testing.T) {
	th := gateAll(t, 0.1, "")
	path := filepath.Join(t.TempDir(), HistoryFile)
	h, err := LoadHistory(path)
	if err != nil || len(h.Entries) != 0 {
		t.Fatalf("a missing history: %v, %+v", err, h)
	}
	// Two recorded baselines, the figure drifting 5% each time.
	for i, v := range []float64{100, 105} {
		c := Compare(setOf("f", "sec/op", v, v, v, v, v), nil, th)
		if err := h.Record([]string{"aaaa", "bbbb"}[i], "2026-11-26T00:00:00Z", c); err != nil {
			t.Fatal(err)
		}
	}
	if err := h.Write(path); err != nil {
		t.Fatal(err)
	}
	h, err = LoadHistory(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(h.Entries) != 2 || h.Entries[1].Commit != "bbbb" || h.Entries[1].Figures["f"].Center != 105 {
		t.Fatalf("history read back: %+v", h)
	}
	r := &Report{Current: setOf("f", "sec/op", 110, 110, 110, 110, 110), Baseline: setOf("f", "sec/op", 105, 105, 105, 105, 105), Thresholds: th, History: h}
	r.Comparison = Compare(r.Current, r.Baseline, th)
	var page bytes.Buffer
	if err := r.WriteHTML(&page); err != nil {
		t.Fatal(err)
	}
	s := page.String()
	// One trend for the one gated figure, with every recorded baseline and
	// this run's two sides in its table, oldest first.
	i := strings.Index(s, `id="trend-0"`)
	if i < 0 || strings.Contains(s, `id="trend-1"`) {
		t.Fatalf("want one trend chart for the gated figure")
	}
	order := []string{"aaaa", "bbbb", "this run: baseline build", "this run: this build"}
	at := i
	for _, want := range order {
		j := strings.Index(s[at:], want)
		if j < 0 {
			t.Fatalf("trend table lacks %q after position %d", want, at)
		}
		at += j
	}

	c := Compare(setOf("g", "sec/op", 1, 2, 3, 4, 5), nil, th) // nothing gated
	if err := h.Record("cccc", "", c); err == nil {
		t.Error("recorded a baseline with no gated figure")
	}
	if err := os.WriteFile(path, []byte(`{"apiVersion": "quartermaster.dev/v1alpha1", "kind": "PerformanceHistory", "entries": [{"date": "x"}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadHistory(path); err == nil || !strings.Contains(err.Error(), "entries[0].commit") {
		t.Errorf("an entry without a commit: %v", err)
	}
}

func TestLoadNameRounds(t *testing.T) {
	for _, tc := range []struct{ file, name, round string }{
		{"out/load-echo.r3.json", "load-echo", "3"},
		{"load-echo.json", "load-echo", "0"},
		{"forward.r12.json", "forward", "12"},
		{"a.rx.json", "a.rx", "0"},
	} {
		if n, r := loadName(tc.file); n != tc.name || r != tc.round {
			t.Errorf("%s: got %q round %q, want %q round %q", tc.file, n, r, tc.name, tc.round)
		}
	}
}
