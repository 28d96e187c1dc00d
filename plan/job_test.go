package plan

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

// jobPoints runs every index of p's Indexed Job alone, as the pods do, and
// returns their reports shuffled (the logs come back in any order).
func jobPoints(t *testing.T, p *Plan) []*PointReport {
	t.Helper()
	values := p.JobValues()
	var reps []*PointReport
	for i := range values {
		rep, err := p.RunIndex(i, Options{})
		if err != nil {
			t.Fatal(err)
		}
		if rep.Kind != PointKind || rep.Index != i || rep.Point.Value != values[i] {
			t.Fatalf("index %d: %+v", i, rep)
		}
		reps = append(reps, rep)
	}
	r := rand.New(rand.NewPCG(1, 2))
	r.Shuffle(len(reps), func(i, j int) { reps[i], reps[j] = reps[j], reps[i] })
	return reps
}

// TestMergeIsRun: the points of a plan's Indexed Job, merged in any order,
// give exactly the plan Run gives (wall times aside) when they settle the
// answer; when they do not, the range they name holds Run's answer, and a
// plan over that range, merged, finds it.
func TestMergeIsRun(t *testing.T) {
	src := []byte(fmt.Sprintf(erlangScenario, "400s", 3.0, "1s"))
	tg, _ := ParseTarget("successRate>=0.95")
	plan := func(vary string, points int) *Plan {
		t.Helper()
		v, err := ParseVary(vary)
		if err != nil {
			t.Fatal(err)
		}
		p, err := New(src, v, tg)
		if err != nil {
			t.Fatal(err)
		}
		p.Points = points
		return p
	}

	// 1..12 with 10 points between: every value runs, so one Job settles.
	p := plan("fleets.game.replicas=1..12", 10)
	if got := fmt.Sprint(p.JobValues()); got != "[1 2 3 4 5 6 7 8 9 10 11 12]" {
		t.Fatalf("job values %s", got)
	}
	want, err := p.Run(Options{})
	if err != nil {
		t.Fatal(err)
	}
	merged, err := Merge(jobPoints(t, p))
	if err != nil {
		t.Fatal(err)
	}
	if a, b := planJSON(t, merged), planJSON(t, want); a != b {
		t.Fatalf("merged:\n%s\nrun:\n%s", a, b)
	}
	if !merged.Found || merged.Answer <= 1 || merged.Answer >= 12 {
		t.Fatalf("answer %d (found %v): the range should bracket it", merged.Answer, merged.Found)
	}

	// 1..40 with 2 points: 1, 14, 27, 40 narrow it but do not settle it.
	p = plan("fleets.game.replicas=1..40", 2)
	want, err = p.Run(Options{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = Merge(jobPoints(t, p))
	var u *Unsettled
	if !errors.As(err, &u) {
		t.Fatalf("merge of 4 points over 1..40: %v, want Unsettled", err)
	}
	if u.Lo >= want.Answer || u.Hi < want.Answer || u.Vary != "fleets.game.replicas" || u.Hi-u.Lo >= 39 {
		t.Fatalf("unsettled %+v, Run's answer %d", u, want.Answer)
	}
	if !strings.Contains(err.Error(), fmt.Sprintf("--vary fleets.game.replicas=%d..%d", u.Lo, u.Hi)) {
		t.Errorf("message %q does not say the next range", err)
	}
	next := plan(fmt.Sprintf("fleets.game.replicas=%d..%d", u.Lo, u.Hi), u.Hi-u.Lo-1)
	res, err := Merge(jobPoints(t, next))
	if err != nil || !res.Found || res.Answer != want.Answer {
		t.Fatalf("the next range's plan: %+v, %v; Run's answer %d", res, err, want.Answer)
	}

	// Points that are not one Job's, all there once, refuse to merge.
	reps := jobPoints(t, p)
	if _, err := Merge(reps[1:]); err == nil || !strings.Contains(err.Error(), "indexes missing: ") {
		t.Errorf("a point missing: %v", err)
	}
	if _, err := Merge(append(reps, reps[0])); err == nil || !strings.Contains(err.Error(), "in the merge twice") {
		t.Errorf("a point twice: %v", err)
	}
	other := *reps[1]
	other.Seed++
	if _, err := Merge([]*PointReport{reps[0], &other}); err == nil || !strings.Contains(err.Error(), "is of another plan") {
		t.Errorf("points of two plans: %v", err)
	}
	moved := *reps[0]
	moved.Index = (moved.Index + 1) % 4
	if _, err := Merge([]*PointReport{&moved}); err == nil || !strings.Contains(err.Error(), "is not one of the plan's 4 values") {
		t.Errorf("a point at another index: %v", err)
	}
	if _, err := Merge(nil); err == nil {
		t.Error("merged nothing")
	}
	if _, err := p.RunIndex(4, Options{}); err == nil || !strings.Contains(err.Error(), "indexes 0..3") {
		t.Errorf("index past the Job: %v", err)
	}
}
