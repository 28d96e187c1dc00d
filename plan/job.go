package plan

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// A plan where one machine is not enough runs as a Kubernetes Indexed Job
// (qm plan --job-manifest): each index runs one value of JobValues alone
// (RunIndex, qm plan --index), and Merge folds their points through the
// same search as Run. When the search settles within those values the
// merged Result is the one Run gives (wall times aside); when it does not,
// Merge says which range the next Job is to search.

// PointKind identifies one value of a plan run alone.
const PointKind = "CapacityPlanPoint"

// PointReport is one value of a plan run alone: the question, which of
// JobValues it is, and its point.
type PointReport struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Scenario   string   `json:"scenario"`
	Seed       uint64   `json:"seed"`
	Vary       string   `json:"vary"`
	From       int      `json:"from"`
	To         int      `json:"to"`
	Target     []string `json:"target"`
	// Points is the plan's Points, which with From and To decides
	// JobValues.
	Points int   `json:"points"`
	Index  int   `json:"index"`
	Point  Point `json:"point"`
}

// JobValues returns the values a plan run as an Indexed Job runs, one per
// index, ascending: the range's ends, which the search runs first, and the
// Points values it runs between them next. Merge settles the answer from
// them alone when they are neighbours around it (Points >= To-From-1
// always is).
func (p *Plan) JobValues() []int {
	lo, hi := p.Vary.From, p.Vary.To
	if lo == hi {
		return []int{lo}
	}
	out := append([]int{lo}, between(lo, hi, max(p.Points, 1))...)
	return append(out, hi)
}

// RunIndex runs the i-th of JobValues.
func (p *Plan) RunIndex(i int, o Options) (*PointReport, error) {
	values := p.JobValues()
	if i < 0 || i >= len(values) {
		return nil, fmt.Errorf("index %d: the plan's job has %d values (indexes 0..%d)", i, len(values), len(values)-1)
	}
	pt, err := p.point(values[i], o)
	if err != nil {
		return nil, err
	}
	rep := &PointReport{
		APIVersion: APIVersion, Kind: PointKind,
		Scenario: p.sc.Metadata.Name, Seed: *p.sc.Spec.Seed,
		Vary: p.Vary.Path, From: p.Vary.From, To: p.Vary.To,
		Points: max(p.Points, 1), Index: i, Point: *pt,
	}
	for _, b := range p.Target {
		rep.Target = append(rep.Target, b.String())
	}
	return rep, nil
}

// Unsettled is Merge's answer when the values run do not settle the
// answer: it lies in Lo+1..Hi (Lo misses, Hi meets the target), and a
// plan over Lo..Hi finds it.
type Unsettled struct {
	Vary   string
	Lo, Hi int
}

func (u *Unsettled) Error() string {
	return fmt.Sprintf("the runs narrow the answer to %d..%d without settling it: run the next plan with --vary %s=%d..%d",
		u.Lo+1, u.Hi, u.Vary, u.Lo, u.Hi)
}

// errMissing stops Merge's search at a value no report has.
var errMissing = errors.New("value not run")

// Merge folds the reports of one plan's Indexed Job, in any order, into its
// Result through the search Run uses. Every index must be there once, and
// all of one question (scenario, seed, field, range, target, points). It
// returns *Unsettled when the search needs values beyond them.
func Merge(reps []*PointReport) (*Result, error) {
	if len(reps) == 0 {
		return nil, errors.New("no points to merge")
	}
	q := reps[0]
	p := &Plan{Vary: Vary{Path: q.Vary, From: q.From, To: q.To}, Points: q.Points}
	values := p.JobValues()
	byValue := map[int]*Point{}
	for i, r := range reps {
		if r.Kind != PointKind || r.APIVersion != APIVersion {
			return nil, fmt.Errorf("point %d: kind %q, apiVersion %q: not a plan's point (qm plan --index writes one)", i, r.Kind, r.APIVersion)
		}
		if r.Scenario != q.Scenario || r.Seed != q.Seed || r.Vary != q.Vary || r.From != q.From || r.To != q.To ||
			r.Points != q.Points || !slices.Equal(r.Target, q.Target) {
			return nil, fmt.Errorf("point %d (index %d) is of another plan: %s", i, r.Index, describe(r))
		}
		if r.Index < 0 || r.Index >= len(values) || values[r.Index] != r.Point.Value {
			return nil, fmt.Errorf("point %d: index %d with value %d is not one of the plan's %d values %v", i, r.Index, r.Point.Value, len(values), values)
		}
		if byValue[r.Point.Value] != nil {
			return nil, fmt.Errorf("index %d (value %d) is in the merge twice", r.Index, r.Point.Value)
		}
		pt := r.Point
		byValue[pt.Value] = &pt
	}
	var missing []string
	for i, v := range values {
		if byValue[v] == nil {
			missing = append(missing, fmt.Sprintf("%d (value %d)", i, v))
		}
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("indexes missing: %s", strings.Join(missing, ", "))
	}
	res := &Result{
		APIVersion: APIVersion, Kind: Kind, Scenario: q.Scenario, Seed: q.Seed,
		Vary: q.Vary, From: q.From, To: q.To, Target: slices.Clone(q.Target),
	}
	err := p.search(res, func(vs []int) ([]*Point, error) {
		pts := make([]*Point, len(vs))
		for i, v := range vs {
			if pts[i] = byValue[v]; pts[i] == nil {
				return nil, errMissing
			}
		}
		return pts, nil
	})
	if errors.Is(err, errMissing) {
		// The search has its bounds from the points so far: the
		// smallest pass and the largest miss below it.
		u := &Unsettled{Vary: q.Vary, Lo: q.From, Hi: q.To}
		for _, pt := range res.Points {
			if pt.Pass && pt.Value < u.Hi {
				u.Hi = pt.Value
			}
		}
		for _, pt := range res.Points {
			if !pt.Pass && pt.Value < u.Hi && pt.Value > u.Lo {
				u.Lo = pt.Value
			}
		}
		return nil, u
	}
	if err != nil {
		return nil, err
	}
	return res, nil
}

func describe(r *PointReport) string {
	return fmt.Sprintf("scenario %s seed %d, %s=%d..%d, --points %d, target %s", r.Scenario, r.Seed, r.Vary, r.From, r.To, r.Points, strings.Join(r.Target, ","))
}
