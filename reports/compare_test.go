package reports

import (
	"math/rand/v2"
	"strings"
	"testing"
)

// setOf builds a set with one bench figure and the given samples, one round
// each.
func setOf(name, unit string, vals ...float64) *Set {
	s := newSet()
	s.Files = []string{"synthetic"}
	for i, v := range vals {
		s.add(name, KindBench, unit, "synthetic", Sample{Value: v, Round: string(rune('a' + i))})
	}
	return s
}

func gateAll(t *testing.T, max float64, extra string) *Thresholds {
	t.Helper()
	th, err := ParseThresholds([]byte("apiVersion: quartermaster.dev/v1alpha1\nkind: ReportThresholds\n" + extra +
		"gates:\n- figure: 'f.*'\n  maxRegression: " + strings.TrimRight(strings.TrimRight(ftoa(max), "0"), ".") + "\n"))
	if err != nil {
		t.Fatal(err)
	}
	return th
}

func ftoa(f float64) string { return strings.TrimSpace(strings.ReplaceAll(num(f), " ", "")) }

func onlyRow(t *testing.T, c *Comparison, name string) Row {
	t.Helper()
	for _, r := range c.Rows {
		if r.Figure == name {
			return r
		}
	}
	t.Fatalf("no row %q in %+v", name, c.Rows)
	return Row{}
}

func TestCompareKnownAnswers(t *testing.T) {
	ten := func(scale float64) []float64 {
		out := make([]float64, 10)
		for i := range out {
			out[i] = scale * (100 + float64(i)) // 100..109, a 9% spread
		}
		return out
	}
	cases := []struct {
		name      string
		base, cur []float64
		max       float64
		verdict   string
		passed    bool
	}{
		{"no change", ten(1), ten(1), 0.05, VerdictNoChange, true},
		{"10% regression, 10 samples, 5% threshold", ten(1), ten(1.10), 0.05, VerdictRegression, false},
		{"10% regression beyond a 20% threshold's reach", ten(1), ten(1.10), 0.20, VerdictWorse, true},
		{"10% improvement", ten(1), ten(0.9), 0.05, VerdictImprovement, true},
		{"too few samples: a 10x slowdown is not gated", []float64{1, 1, 1}, []float64{10, 10, 10}, 0.05, VerdictTooFew, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := Compare(setOf("f", "sec/op", tc.cur...), setOf("f", "sec/op", tc.base...), gateAll(t, tc.max, ""))
			r := onlyRow(t, c, "f")
			if r.Verdict != tc.verdict || c.Passed != tc.passed {
				t.Fatalf("verdict %q passed %v, want %q %v (row %+v)", r.Verdict, c.Passed, tc.verdict, tc.passed, r)
			}
			if !r.Gated {
				t.Fatal("row not gated")
			}
			if tc.verdict == VerdictRegression {
				if len(c.Regressions) != 1 || !strings.HasPrefix(c.Regressions[0], "f: +10.0% (worse)") {
					t.Fatalf("regressions %q: want the figure named with its change", c.Regressions)
				}
				if r.P == nil || *r.P >= 0.05 {
					t.Fatalf("p = %v, want significant", r.P)
				}
			}
			if tc.verdict == VerdictTooFew && !strings.Contains(r.Note, "3 sample(s) in the baseline and 3 in this run") {
				t.Fatalf("note %q does not say how many samples there were", r.Note)
			}
		})
	}
}

// A throughput (higher is better) that drops is the regression; one that
// rises is not.
func TestCompareHigherIsBetter(t *testing.T) {
	base := []float64{100, 101, 102, 103, 104, 105}
	down := []float64{60, 61, 62, 63, 64, 65}
	c := Compare(setOf("f", "req/s", down...), setOf("f", "req/s", base...), gateAll(t, 0.2, ""))
	if r := onlyRow(t, c, "f"); r.Verdict != VerdictRegression || r.Better != "higher" {
		t.Fatalf("throughput down 40%%: %+v", r)
	}
	c = Compare(setOf("f", "req/s", base...), setOf("f", "req/s", down...), gateAll(t, 0.2, ""))
	if r := onlyRow(t, c, "f"); r.Verdict != VerdictImprovement {
		t.Fatalf("throughput up: %+v", r)
	}
}

// Noise alone must not trip the gate: 200 pairs of runs drawn from the same
// noisy distribution (±10% uniform), each compared at a 25% threshold. About
// one pair in twenty differs significantly, as alpha says, and the threshold
// is what keeps those from failing.
func TestCompareNoiseOnly(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	draw := func() []float64 {
		out := make([]float64, 6)
		for i := range out {
			out[i] = 100 * (0.9 + 0.2*rng.Float64())
		}
		return out
	}
	th := gateAll(t, 0.25, "")
	significant := 0
	for range 200 {
		c := Compare(setOf("f", "sec/op", draw()...), setOf("f", "sec/op", draw()...), th)
		r := onlyRow(t, c, "f")
		if r.Verdict == VerdictRegression {
			t.Fatalf("noise tripped the gate: %+v", r)
		}
		if r.P != nil && *r.P < 0.05 {
			significant++
		}
	}
	// The test itself is sound: about alpha of the pairs look significant.
	if significant == 0 || significant > 30 {
		t.Fatalf("%d of 200 noise-only pairs significant; want about 10", significant)
	}
}

// A ratio to an in-run reference removes the machine's speed: every round
// is 0-60% slower at random, which hides nothing in the ratio.
func TestCompareRatioToReference(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	mk := func(slow float64) *Set {
		s := newSet()
		s.Files = []string{"synthetic"}
		for i := range 8 {
			m := 1 + 0.6*rng.Float64()
			round := string(rune('a' + i))
			s.add("fast sec/op", KindBench, "sec/op", "x", Sample{Value: 100 * m * slow * (1 + 0.02*rng.Float64()), Round: round})
			s.add("ref sec/op", KindBench, "sec/op", "x", Sample{Value: 10000 * m * (1 + 0.02*rng.Float64()), Round: round})
		}
		return s
	}
	th, err := ParseThresholds([]byte(`apiVersion: quartermaster.dev/v1alpha1
kind: ReportThresholds
gates:
- {figure: 'fast (sec/op)', reference: 'ref $1', maxRegression: 0.15}
`))
	if err != nil {
		t.Fatal(err)
	}
	c := Compare(mk(1.2), mk(1), th)
	r := onlyRow(t, c, "fast sec/op ÷ ref sec/op")
	if r.Verdict != VerdictRegression || r.Reference != "ref sec/op" || r.Current.N != 8 {
		t.Fatalf("20%% slower against its reference: %+v", r)
	}
	if raw := onlyRow(t, c, "fast sec/op"); raw.Gated {
		t.Fatalf("the raw figure is gated too: %+v", raw)
	}
	c = Compare(mk(1), mk(1), th)
	if r := onlyRow(t, c, "fast sec/op ÷ ref sec/op"); r.Verdict == VerdictRegression {
		t.Fatalf("unchanged code regressed: %+v", r)
	}
}

func TestCompareNewMissingAndZero(t *testing.T) {
	th := gateAll(t, 0.1, "")
	c := Compare(setOf("f-new", "sec/op", 1, 2, 3, 4, 5), setOf("f-old", "sec/op", 1, 2, 3, 4, 5), th)
	if r := onlyRow(t, c, "f-new"); r.Verdict != VerdictNew {
		t.Fatalf("new figure: %+v", r)
	}
	if r := onlyRow(t, c, "f-old"); r.Verdict != VerdictMissing {
		t.Fatalf("missing figure: %+v", r)
	}
	// The new figure is not gated (nothing to compare it with); the gated
	// figure this run lacks fails, by name: a renamed benchmark must not
	// turn its gate off.
	if c.Passed || len(c.Missing) != 1 || !strings.HasPrefix(c.Missing[0], "f-old: gated") || len(c.Regressions) != 0 {
		t.Fatalf("passed %v, missing %q, regressions %q", c.Passed, c.Missing, c.Regressions)
	}
	c = Compare(setOf("f-new", "sec/op", 1, 2, 3, 4, 5), newSet(), th)
	if !c.Passed {
		t.Fatalf("a figure only this run has failed the gate: %q", c.Missing)
	}
	c = Compare(setOf("f", "B/op", 8, 8, 8, 8, 8), setOf("f", "B/op", 0, 0, 0, 0, 0), th)
	if r := onlyRow(t, c, "f"); r.Verdict != VerdictZeroReference {
		t.Fatalf("zero baseline: %+v", r)
	}
}

func TestGateMatchingNothingFails(t *testing.T) {
	c := Compare(setOf("g", "sec/op", 1, 2, 3, 4, 5), nil, gateAll(t, 0.1, ""))
	if c.Passed || len(c.Missing) != 1 || !strings.Contains(c.Missing[0], `"f.*" matched no figure`) {
		t.Fatalf("passed %v, missing %q", c.Passed, c.Missing)
	}
}

func exactGate(t *testing.T, changes string) *Thresholds {
	t.Helper()
	th, err := ParseThresholds([]byte("apiVersion: quartermaster.dev/v1alpha1\nkind: ReportThresholds\ngates:\n- {figure: 'f.*', exact: true}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if changes != "" {
		if th.Declared, err = ParseChanges([]byte("apiVersion: quartermaster.dev/v1alpha1\nkind: DeclaredChanges\n" + changes)); err != nil {
			t.Fatal(err)
		}
	}
	return th
}

func TestExactGate(t *testing.T) {
	same := Compare(setOf("f", "events/op", 7, 7, 7), setOf("f", "events/op", 7, 7), exactGate(t, ""))
	if r := onlyRow(t, same, "f"); !same.Passed || r.Verdict != VerdictSame {
		t.Fatalf("the same value failed: %+v", r)
	}
	// One event more is a change of behaviour, however small, and whichever
	// way: it fails unless declared.
	for _, v := range []float64{8, 6} {
		c := Compare(setOf("f", "events/op", v, v, v), setOf("f", "events/op", 7, 7, 7), exactGate(t, ""))
		if r := onlyRow(t, c, "f"); c.Passed || r.Verdict != VerdictChanged || len(c.Regressions) != 1 || !strings.Contains(c.Regressions[0], "f: changed from 7 to") {
			t.Fatalf("a changed value passed: %+v %q", r, c.Regressions)
		}
	}
	c := Compare(setOf("f", "events/op", 8, 8, 8), setOf("f", "events/op", 7, 7, 7),
		exactGate(t, "changes:\n- {figure: 'f', reason: 'one more arrival'}\n"))
	if r := onlyRow(t, c, "f"); !c.Passed || r.Verdict != VerdictDeclared || r.Note != "one more arrival" {
		t.Fatalf("a declared change failed: %+v", r)
	}
	c = Compare(setOf("f", "events/op", 8, 8, 8), setOf("f", "events/op", 7, 7, 7),
		exactGate(t, "changes:\n- {figure: 'g', reason: 'another figure'}\n"))
	if c.Passed {
		t.Fatal("a change declared for another figure covered this one")
	}
}

func TestParseChangesErrors(t *testing.T) {
	for _, tc := range []struct{ doc, want string }{
		{"kind: DeclaredChanges\nchanges: []\n", "apiVersion"},
		{"apiVersion: quartermaster.dev/v1alpha1\nkind: DeclaredChanges\nchanges:\n- {figure: 'f'}\n", "changes[0].reason: missing"},
		{"apiVersion: quartermaster.dev/v1alpha1\nkind: DeclaredChanges\nchanges:\n- {figure: '(', reason: r}\n", "changes[0].figure"},
		{"apiVersion: quartermaster.dev/v1alpha1\nkind: DeclaredChanges\nchanges:\n- {figur: 'f', reason: r}\n", "figur"},
	} {
		if _, err := ParseChanges([]byte(tc.doc)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want one naming %q", tc.doc, err, tc.want)
		}
	}
	if _, err := ParseThresholds([]byte("apiVersion: quartermaster.dev/v1alpha1\nkind: ReportThresholds\ngates:\n- {figure: f, exact: true, maxRegression: 0.1}\n")); err == nil {
		t.Error("an exact gate with a maxRegression was accepted")
	}
}
