package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/quartermaster-dev/quartermaster/scenarios"
	"github.com/quartermaster-dev/quartermaster/sim"
)

// qm sim's table names the leaks of a run with the loss model, and says
// nothing of losses in a run without it.
func TestSummaryShowsLosses(t *testing.T) {
	for _, l := range []*sim.LossResult{nil, {Leaked: 330, LeakedPerHour: 110, LeakedAtEnd: 330, Retries: 118, CallerRetries: 118}} {
		rep := &scenarios.Report{Scenario: "s", Passed: true, Results: &sim.Results{
			Clusters: map[string]sim.ClusterResult{}, Providers: map[string]sim.ProviderResult{}, Losses: l}}
		var b bytes.Buffer
		printSummary(&b, rep)
		got := b.String()
		if l == nil && strings.Contains(got, "losses:") {
			t.Errorf("losses printed for a run without the model:\n%s", got)
		}
		if l != nil && !strings.Contains(got, "losses: 330 servers leaked (110.0 an hour, 330 still Allocated at the end)") {
			t.Errorf("leaks not printed:\n%s", got)
		}
	}
}
