package soak

import (
	"bytes"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"
)

func TestScheduleFiles(t *testing.T) {
	valid, _ := filepath.Glob("testdata/valid-*.yaml")
	invalid, _ := filepath.Glob("testdata/invalid-*.yaml")
	if len(valid) == 0 || len(invalid) == 0 {
		t.Fatal("no testdata")
	}
	for _, path := range valid {
		t.Run(filepath.Base(path), func(t *testing.T) {
			if _, err := LoadSchedule(path); err != nil {
				t.Fatal(err)
			}
		})
	}
	for _, path := range invalid {
		t.Run(filepath.Base(path), func(t *testing.T) {
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			first, _, _ := bytes.Cut(data, []byte("\n"))
			want, found := strings.CutPrefix(string(first), "# want: ")
			if !found {
				t.Fatalf("first line %q is not a '# want: ' comment", first)
			}
			_, err = ParseSchedule(data)
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("error %v, want one containing %q", err, want)
			}
		})
	}
}

func TestScheduleDefaults(t *testing.T) {
	f, err := LoadSchedule("testdata/valid-minimal.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if f.Seed() != 1 || *f.Spec.Faults[0].Jitter != DefaultJitter || f.Spec.Faults[0].First != nil {
		t.Errorf("defaults: seed %d, jitter %g, first %v", f.Seed(), *f.Spec.Faults[0].Jitter, f.Spec.Faults[0].First)
	}
	f, err = LoadSchedule("testdata/valid-full.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if f.Seed() != 42 || *f.Spec.Faults[1].Jitter != 0 {
		t.Errorf("explicit values lost: seed %d, jitter %g", f.Seed(), *f.Spec.Faults[1].Jitter)
	}
}

func TestScheduleExpansion(t *testing.T) {
	f, err := LoadSchedule("testdata/valid-full.yaml")
	if err != nil {
		t.Fatal(err)
	}
	const run = time.Hour
	a, b := f.Schedule(7, run), f.Schedule(7, run)
	if len(a) == 0 || !reflect.DeepEqual(a, b) {
		t.Fatalf("one seed, two schedules:\n%v\n%v", a, b)
	}
	if reflect.DeepEqual(a, f.Schedule(8, run)) {
		t.Error("seeds 7 and 8 gave the same schedule")
	}

	// fleet-scale has no jitter and a random first start: evenly spaced.
	// link-cut starts at first, its intervals within the jitter.
	var cuts, scales []ScheduledFault
	for i, x := range a {
		if i > 0 && x.Start < a[i-1].Start {
			t.Errorf("not ordered by start at %d: %v", i, a)
		}
		if x.End > run || x.End-x.Start <= 0 {
			t.Errorf("fault %+v outside the run or empty", x)
		}
		switch x.Kind {
		case FaultLinkCut:
			cuts = append(cuts, x)
			if x.Target != "a-b" && x.Target != "b-a" || x.End-x.Start != 15*time.Second {
				t.Errorf("link-cut %+v", x)
			}
		case FaultFleetScale:
			scales = append(scales, x)
		}
	}
	if cuts[0].Start != 30*time.Second {
		t.Errorf("first link-cut at %s, want 30s", cuts[0].Start)
	}
	targets := map[string]bool{}
	for i, c := range cuts {
		targets[c.Target] = true
		if i == 0 {
			continue
		}
		if gap := c.Start - cuts[i-1].Start; gap < time.Minute || gap > 3*time.Minute {
			t.Errorf("link-cut gap %s outside every 2m with jitter 0.5", gap)
		}
	}
	if len(targets) != 2 {
		t.Errorf("link-cut targets %v, want both picked over an hour", targets)
	}
	if scales[0].Start >= 3*time.Minute {
		t.Errorf("first fleet-scale at %s, want within the first interval", scales[0].Start)
	}
	for i := 1; i < len(scales); i++ {
		if gap := scales[i].Start - scales[i-1].Start; gap != 3*time.Minute {
			t.Errorf("fleet-scale gap %s, want 3m (no jitter)", gap)
		}
	}
	if want := int((run-scales[0].Start-30*time.Second)/(3*time.Minute)) + 1; len(scales) != want {
		t.Errorf("%d fleet-scales, want %d (every one that ends within the run)", len(scales), want)
	}

	// Each entry draws from its own stream: changing one leaves the
	// other's faults where they were.
	g, _ := LoadSchedule("testdata/valid-full.yaml")
	g.Spec.Faults[1].Every = Duration(5 * time.Minute)
	var cutsAgain []ScheduledFault
	for _, x := range g.Schedule(7, run) {
		if x.Kind == FaultLinkCut {
			cutsAgain = append(cutsAgain, x)
		}
	}
	if !reflect.DeepEqual(cuts, cutsAgain) {
		t.Error("editing fleet-scale moved the link-cuts")
	}

	if got := f.Schedule(7, 10*time.Second); len(got) != 0 {
		t.Errorf("a run shorter than any fault got %v", got)
	}
}

func TestDefaultSchedule(t *testing.T) {
	f := DefaultSchedule()
	got := map[string]int{}
	for _, x := range f.Schedule(f.Seed(), 5*time.Minute) {
		got[x.Kind]++
	}
	for _, k := range FaultKinds {
		if got[k] == 0 {
			t.Errorf("the default schedule has no %s in five minutes: %v", k, got)
		}
	}
}
