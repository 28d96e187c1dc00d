package plan

import (
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/quartermaster-dev/quartermaster/scenarios"
)

// planJSON is a plan's result without its wall times, the one part that
// may differ between two runs of it.
func planJSON(t *testing.T, res *Result) string {
	t.Helper()
	for i := range res.Points {
		res.Points[i].WallSeconds = 0
	}
	b, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestPlanWorkersDoNotChangeResult: a plan with several points per round
// finds the same answer as bisection, and the same points and figures on
// one worker as on three; its rounds test the ends together, then points
// strictly inside the bounds.
func TestPlanWorkersDoNotChangeResult(t *testing.T) {
	src := []byte(fmt.Sprintf(erlangScenario, "400s", 3.0, "1s"))
	v, _ := ParseVary("fleets.game.replicas=1..40")
	tg, _ := ParseTarget("successRate>=0.95")
	p, err := New(src, v, tg)
	if err != nil {
		t.Fatal(err)
	}
	bisect, err := p.Run(Options{})
	if err != nil {
		t.Fatal(err)
	}
	p.Points = 3
	var want string
	for _, workers := range []int{1, 3} {
		var order []int
		res, err := p.Run(Options{Workers: workers, Progress: func(v int, done *Point) {
			if done != nil {
				order = append(order, v)
			}
		}})
		if err != nil {
			t.Fatal(err)
		}
		if !res.Found || res.Answer != bisect.Answer {
			t.Fatalf("%d workers: answer %d (found %v), bisection's %d", workers, res.Answer, res.Found, bisect.Answer)
		}
		if len(order) != len(res.Points) {
			t.Fatalf("%d workers: progress told of %d runs, %d points", workers, len(order), len(res.Points))
		}
		got := planJSON(t, res)
		if want == "" {
			want = got
			// 1..40: the ends, then 3 points a round: 10 20 30, ...
			if res.Points[0].Value != 1 || res.Points[len(res.Points)-1].Value != 40 || len(res.Points) >= len(bisect.Points)+6 {
				t.Fatalf("points %+v", res.Points)
			}
			continue
		}
		if got != want {
			t.Fatalf("%d workers:\n%s\none worker:\n%s", workers, got, want)
		}
	}
}

func TestBetween(t *testing.T) {
	for _, tc := range []struct {
		lo, hi, k int
		want      string
	}{
		{0, 10, 1, "[5]"},
		{0, 9, 1, "[4]"},
		{0, 100, 3, "[25 50 75]"},
		{0, 3, 4, "[1 2]"},
		{5, 7, 2, "[6]"},
	} {
		if got := fmt.Sprint(between(tc.lo, tc.hi, tc.k)); got != tc.want {
			t.Errorf("between(%d, %d, %d) = %s, want %s", tc.lo, tc.hi, tc.k, got, tc.want)
		}
	}
}

// TestParallelReportsLowestFailure: the error returned is the lowest
// index's, whatever order the workers finish in.
func TestParallelReportsLowestFailure(t *testing.T) {
	for _, workers := range []int{1, 2, 8} {
		err := parallel(20, workers, func(i int) error {
			if i == 3 || i == 11 {
				return fmt.Errorf("index %d", i)
			}
			return nil
		})
		if err == nil || err.Error() != "index 3" {
			t.Fatalf("%d workers: %v", workers, err)
		}
	}
	ran := make([]bool, 5)
	if err := parallel(5, 2, func(i int) error { ran[i] = true; return nil }); err != nil || fmt.Sprint(ran) != "[true true true true true]" {
		t.Fatalf("%v %v", err, ran)
	}
}

// TestSeedsSpread: a multi-seed run is the same on one worker as on two,
// each of its runs is that seed's own run, and every figure's values are
// the runs' own numbers, with their mean and extremes.
func TestSeedsSpread(t *testing.T) {
	src := []byte(fmt.Sprintf(erlangScenario, "300s", 3.0, "1s"))
	src = []byte(strings.Replace(string(src), "replicas: 1\n", "replicas: 4\n", 1))
	sc, err := scenarios.Parse(src)
	if err != nil {
		t.Fatal(err)
	}
	seeds := Seeds(sc, 3)
	if fmt.Sprint(seeds) != "[7 8 9]" {
		t.Fatalf("seeds %v", seeds)
	}
	one, err := RunSeeds(src, seeds, Options{Workers: 1})
	if err != nil {
		t.Fatal(err)
	}
	two, err := RunSeeds(src, seeds, Options{Workers: 2})
	if err != nil {
		t.Fatal(err)
	}
	a, _ := json.Marshal(one)
	b, _ := json.Marshal(two)
	if string(a) != string(b) {
		t.Fatalf("one worker and two differ:\n%s\n%s", a, b)
	}
	if one.Kind != SpreadKind || fmt.Sprint(one.Seeds) != "[7 8 9]" || len(one.Runs) != 3 {
		t.Fatalf("%+v", one)
	}
	var allocated []float64
	for i, seed := range seeds {
		rep, err := RunSeed(src, seed, scenarios.Options{})
		if err != nil {
			t.Fatal(err)
		}
		if !reflect.DeepEqual(rep, one.Runs[i]) {
			t.Fatalf("seed %d: the run in the spread is not the seed's own run", seed)
		}
		allocated = append(allocated, float64(rep.Results.Totals.Allocated))
	}
	f, ok := one.Figure("totals.allocated")
	if !ok || !reflect.DeepEqual(f.Values, allocated) {
		t.Fatalf("totals.allocated: %+v, runs %v", f, allocated)
	}
	if allocated[0] == allocated[1] && allocated[1] == allocated[2] {
		t.Fatalf("three seeds allocated the same %v: are the seeds used?", allocated)
	}
	mean := (allocated[0] + allocated[1] + allocated[2]) / 3
	if f.Mean != mean || f.Min != min(allocated[0], allocated[1], allocated[2]) || f.Max != max(allocated[0], allocated[1], allocated[2]) || f.SD <= 0 {
		t.Fatalf("totals.allocated %+v, values %v (mean %v)", f, allocated, mean)
	}
	if _, ok := one.Figure("seed"); ok {
		t.Fatal("the seed is a figure")
	}
	if _, ok := one.Figure("clusters.only.latency.p99Ms"); !ok {
		t.Fatal("no clusters.only.latency.p99Ms")
	}

	// Reports that are not one scenario's under distinct seeds refuse to
	// merge.
	if _, err := MergeSeeds([]*scenarios.Report{one.Runs[0], one.Runs[0]}); err == nil || !strings.Contains(err.Error(), "seed 7 is in the merge twice") {
		t.Errorf("same seed twice: %v", err)
	}
	other := *one.Runs[1]
	other.Scenario = "another"
	if _, err := MergeSeeds([]*scenarios.Report{one.Runs[0], &other}); err == nil || !strings.Contains(err.Error(), `scenario "another"`) {
		t.Errorf("two scenarios: %v", err)
	}
	if _, err := MergeSeeds(nil); err == nil {
		t.Error("merged nothing")
	}
	// A bad file fails with its parse error.
	if _, err := RunSeeds([]byte("kind: Nope"), seeds, Options{Workers: 2}); err == nil {
		t.Error("a bad file ran")
	}
}
