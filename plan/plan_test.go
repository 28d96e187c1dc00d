package plan

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/quartermaster-dev/quartermaster/scenarios"
)

func TestParseVaryErrors(t *testing.T) {
	good, err := ParseVary("fleets.game.buffer.size=0..500")
	if err != nil || good != (Vary{Path: "fleets.game.buffer.size", From: 0, To: 500}) {
		t.Fatalf("got %+v, %v", good, err)
	}
	for _, tc := range []struct{ in, want string }{
		{"fleets.game.replicas", "want PATH=FROM..TO"},
		{"=1..2", "want PATH=FROM..TO"},
		{"x=5", `range "5": want FROM..TO`},
		{"x=a..b", "FROM and TO must be whole numbers"},
		{"x=1.5..3", "FROM and TO must be whole numbers"},
		{"x=5..5", "want 0 <= FROM < TO"},
		{"x=-1..5", "want 0 <= FROM < TO"},
	} {
		if _, err := ParseVary(tc.in); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want %q", tc.in, err, tc.want)
		}
	}
}

func TestParseTarget(t *testing.T) {
	tg, err := ParseTarget("successRate>=0.999, p99<200ms,clusters.on-prem.share>0.5")
	if err != nil {
		t.Fatal(err)
	}
	want := Target{
		{Name: "successRate", Metric: "totals.successRate", Op: ">=", Value: 0.999},
		{Name: "p99", Metric: "totals.latency.p99Ms", Op: "<", Value: 200, Latency: true},
		{Name: "clusters.on-prem.share", Metric: "clusters.on-prem.share", Op: ">", Value: 0.5},
	}
	if fmt.Sprint(tg) != fmt.Sprint(want) {
		t.Fatalf("got %+v\nwant %+v", tg, want)
	}
	if s := fmt.Sprint(tg[0], " ", tg[1]); s != "successRate>=0.999 p99<200ms" {
		t.Errorf("written back as %q", s)
	}
	if !tg[0].Holds(0.999) || tg[0].Holds(0.998) || tg[1].Holds(200) || !tg[1].Holds(199.9) {
		t.Fatal("Holds compares wrongly")
	}
	for _, tc := range []struct{ in, want string }{
		{"", "empty"},
		{"successRate>=0.9,,p99<1s", "an empty clause"},
		{"successRate", "want NAME OP VALUE"},
		{">=0.9", "want NAME OP VALUE"},
		{"successRate=0.9", `operator "="`},
		{"successRate>=high", `"high" is not a number`},
		{"p99<200", `p99 is a latency: give "200" a unit, like 200ms`},
		{"p99<soon", `"soon" is not a duration`},
		{"totals.latency.p99Ms<200", `give "200" a unit`},
	} {
		if _, err := ParseTarget(tc.in); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: error %v, want %q", tc.in, err, tc.want)
		}
	}
}

// TestNewRefusesBadQuestions: a path or metric that names nothing, or a
// range whose end makes the scenario invalid, is refused before any run,
// with what there is instead.
func TestNewRefusesBadQuestions(t *testing.T) {
	burst, err := os.ReadFile("../scenarios/burst-to-cloud.yaml")
	if err != nil {
		t.Fatal(err)
	}
	erl := []byte(fmt.Sprintf(erlangScenario, "10s", 1.0, "1s"))
	ok, _ := ParseTarget("successRate>=0.99")
	for _, tc := range []struct {
		name string
		file []byte
		vary string
		tg   string
		want string
	}{
		{"no such fleet", erl, "fleets.nope.replicas=1..5", "", `no cluster has a fleet "nope" (fleets: only/game)`},
		{"no such field", erl, "fleets.game.size=1..5", "", `spec.clusters.only.fleets.game has no "size" (it has `},
		{"no such cluster", erl, "clusters.other.nodes.count=1..5", "", `spec.clusters has no entry named "other" (there is only)`},
		{"unset buffer", erl, "fleets.game.buffer.size=0..5", "", "spec.clusters.only.fleets.game.buffer is not set in the scenario"},
		{"not a number", erl, "fleets.game.scheduling=0..5", "", "spec.clusters.only.fleets.game.scheduling is not a number"},
		{"a duration", erl, "spec.duration=1..5", "", `spec has no "spec"`},
		{"duration field", erl, "duration=1..5", "", "is a duration"},
		{"struct", erl, "clusters.only.nodes=1..5", "", "has fields (count, slots), not a value"},
		{"below a number", erl, "clusters.only.nodes.count.x=1..5", "", "is a number; nothing is below it"},
		{"invalid at an end", erl, "clusters.only.nodes.slots=1..5000", "", "with clusters.only.nodes.slots=5000 the scenario is not valid"},
		{"bad metric", erl, "fleets.game.replicas=1..5", "sucessRate>=0.9", `target: sucessRate: "totals.sucessRate": no "sucessRate" in the results here; there is`},
		{"bad cluster metric", erl, "fleets.game.replicas=1..5", "clusters.nope.share>0.1", `no "nope"`},
		{"ambiguous fleet", burst, "fleets.game.replicas=1..5", "", "each have a fleet"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, err := ParseVary(tc.vary)
			if err != nil {
				t.Fatal(err)
			}
			tg := ok
			if tc.tg != "" {
				if tg, err = ParseTarget(tc.tg); err != nil {
					t.Fatal(err)
				}
			}
			_, err = New(tc.file, v, tg)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
		})
	}
}

// TestPlanEnds: a target met at FROM needs one more run, one missed at TO
// has no answer; both say so.
func TestPlanEnds(t *testing.T) {
	src := []byte(fmt.Sprintf(erlangScenario, "200s", 2.0, "500ms"))
	v, _ := ParseVary("fleets.game.replicas=30..40")
	tg, _ := ParseTarget("successRate>=0.99")
	p, err := New(src, v, tg)
	if err != nil {
		t.Fatal(err)
	}
	res, err := p.Run(Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !res.Found || res.Answer != 30 || len(res.Points) != 2 {
		t.Fatalf("met everywhere: %+v", res)
	}
	v, _ = ParseVary("fleets.game.replicas=1..3")
	tg, _ = ParseTarget("successRate>=0.999999")
	p, _ = New(src, v, tg)
	var seen []int
	res, err = p.Run(Options{Progress: func(v int, done *Point) {
		if done != nil {
			seen = append(seen, v)
		}
	}})
	if err != nil {
		t.Fatal(err)
	}
	if res.Found || len(res.Points) != 1 || res.Points[0].Pass || len(res.Points[0].Failed) != 1 || fmt.Sprint(seen) != "[3]" {
		t.Fatalf("met nowhere: %+v, progress %v", res, seen)
	}
}

// TestVarySet: the kinds of field a plan can vary, set where the path
// says.
func TestVarySet(t *testing.T) {
	burst, err := os.ReadFile("../scenarios/burst-to-cloud.yaml")
	if err != nil {
		t.Fatal(err)
	}
	set := func(path string, v int) *scenarios.Scenario {
		t.Helper()
		sc, err := scenarios.Parse(burst)
		if err != nil {
			t.Fatal(err)
		}
		if err := (Vary{Path: path}).Set(sc, v); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		return sc
	}
	if sc := set("clusters.cloud.fleets.game.buffer.size", 42); sc.Spec.Clusters[1].Fleets[0].Buffer.Size != 42 || sc.Spec.Clusters[0].Fleets[0].Replicas != 200 {
		t.Error("buffer.size not set where the path says")
	}
	if sc := set("clusters.on-prem.nodes.count", 7); sc.Spec.Clusters[0].Nodes.Count != 7 {
		t.Error("nodes.count (int) not set")
	}
	if sc := set("clusters.on-prem.allocator.replicas", 3); *sc.Spec.Clusters[0].Allocator.Replicas != 3 {
		t.Error("allocator.replicas (*int) not set")
	}
	if sc := set("seed", 9); *sc.Spec.Seed != 9 {
		t.Error("seed (*uint64) not set")
	}
	sc, err := scenarios.Parse([]byte(fmt.Sprintf(erlangScenario, "10s", 1.0, "1s")))
	if err != nil {
		t.Fatal(err)
	}
	if err := (Vary{Path: "workload.mm.rate.constant"}).Set(sc, 12); err != nil || *sc.Spec.Workload[0].Rate.Constant != 12 {
		t.Errorf("rate.constant (*float64): %v", err)
	}
	if err := (Vary{Path: "workload.mm.rate.spikes"}).Set(sc, 1); err == nil || !strings.Contains(err.Error(), "is not a number") {
		t.Errorf("a list: %v", err)
	}
}
