package reports

import (
	"encoding/json"
	"testing"

	"github.com/quartermaster-dev/quartermaster/scenarios"
	"github.com/quartermaster-dev/quartermaster/sim"
)

// A scenario run with the simulator's loss model shows its leaks, avoided
// duplicates and retries among the figures; one without shows none.
func TestSimLossFigures(t *testing.T) {
	for _, losses := range []*sim.LossResult{nil, {Leaked: 12, LeakedPerHour: 4, DuplicatesAvoided: 7, Retries: 9}} {
		rep := scenarios.Report{APIVersion: scenarios.APIVersion, Kind: simReportKind, Scenario: "lossy", Passed: true,
			Results: &sim.Results{Clusters: map[string]sim.ClusterResult{}, Providers: map[string]sim.ProviderResult{}, Losses: losses}}
		data, err := json.Marshal(rep)
		if err != nil {
			t.Fatal(err)
		}
		set := newSet()
		if err := readSim(set, "lossy.json", data, simReportKind); err != nil {
			t.Fatal(err)
		}
		want := map[string]float64{"losses.leaked": 12, "losses.leakedPerHour": 4, "losses.duplicatesAvoided": 7, "losses.retries": 9}
		for name, v := range want {
			f := set.Figure("sim/lossy " + name)
			switch {
			case losses == nil && f != nil:
				t.Errorf("%s read from a run without the loss model", name)
			case losses != nil && (f == nil || f.Samples[0].Value != v):
				t.Errorf("%s: got %+v, want %v", name, f, v)
			}
		}
	}
}
