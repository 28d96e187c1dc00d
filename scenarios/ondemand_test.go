package scenarios

import (
	"bytes"
	"encoding/json"
	"testing"
)

// The comparison in warm-vs-on-demand.yaml depends on create: true: with
// the field ignored (the on-demand stream allocating from a fleet that
// keeps no server), its expectations fail.
func TestWarmVsOnDemandNeedsCreate(t *testing.T) {
	t.Parallel()
	s, err := Load("warm-vs-on-demand.yaml")
	if err != nil {
		t.Fatal(err)
	}
	rep, err := s.Run(Options{})
	if err != nil {
		t.Fatal(err)
	}
	if !rep.Passed {
		t.Fatalf("the shipped scenario fails: %+v", rep.Expectations)
	}
	for i := range s.Spec.Workload {
		s.Spec.Workload[i].Create, s.Spec.Workload[i].Template = false, ""
	}
	rep, err = s.Run(Options{})
	if err != nil {
		t.Fatal(err)
	}
	failed := map[string]bool{}
	for _, c := range rep.Expectations {
		if !c.Pass {
			failed[c.Metric] = true
		}
	}
	for _, m := range []string{"clusters.on-demand.latency.p50Ms", "clusters.on-demand.successRate", "clusters.on-demand.serversCreated", "totals.deadlineExceeded", "clusters.on-demand.cost"} {
		if !failed[m] {
			t.Errorf("%s passes without create: true", m)
		}
	}
}

// Same file, same seed: the same results, byte for byte.
func TestOnDemandScenarioIsDeterministic(t *testing.T) {
	t.Parallel()
	run := func() []byte {
		s, err := Load("warm-vs-on-demand.yaml")
		if err != nil {
			t.Fatal(err)
		}
		rep, err := s.Run(Options{})
		if err != nil {
			t.Fatal(err)
		}
		b, err := json.Marshal(rep)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	a, b := run(), run()
	if !bytes.Equal(a, b) {
		t.Fatal("two runs of warm-vs-on-demand.yaml differ")
	}
	if !bytes.Contains(a, []byte(`"onDemand":{"tries":`)) {
		t.Fatal("the results carry no onDemand figures")
	}
}
