package scenarios

import (
	"bytes"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/quartermaster-dev/quartermaster/sim"
)

func runResults(t *testing.T, s *Scenario) *sim.Results {
	t.Helper()
	rep, err := s.Run(Options{})
	if err != nil {
		t.Fatal(err)
	}
	return rep.Results
}

// The shipped pair shows the difference keys make: the same load and the
// same lost answers leak servers without keys and none with them. The
// keyed file is the other with keys: true, nothing else.
func TestLostAnswersScenarios(t *testing.T) {
	plain, err := Load("lost-answers.yaml")
	if err != nil {
		t.Fatal(err)
	}
	keyed, err := Load("lost-answers-keys.yaml")
	if err != nil {
		t.Fatal(err)
	}
	without, with := runResults(t, plain), runResults(t, keyed)
	if without.Losses == nil || with.Losses == nil {
		t.Fatal("no losses section")
	}
	if without.Losses.Leaked == 0 || without.Losses.LeakedPerHour <= 0 {
		t.Errorf("without keys: nothing leaked: %+v", without.Losses)
	}
	if with.Losses.Leaked != 0 || with.Losses.LeakedAtEnd != 0 {
		t.Errorf("with keys: %d servers leaked", with.Losses.Leaked)
	}
	if with.Losses.DuplicatesAvoided == 0 || with.Losses.LostOnLinks == 0 || with.Losses.LostToCallers == 0 {
		t.Errorf("with keys: %+v", with.Losses)
	}
	// A keyed request never moves on from the cloud after a lost answer:
	// each loss is followed by the forwarder's try of the cloud again
	// (routing.keyRetries 1) or, after two, by Unavailable to the
	// matchmaker, who retries it; nothing is left to reconcile.
	l := with.Losses
	if l.Reconciled != 0 || l.Clusters["cloud"].Reconciled != 0 {
		t.Errorf("with keys: %d allocations reconciled after the forwarder moved on", l.Reconciled)
	}
	if u := with.Totals.Unavailable; u == 0 || l.LostOnLinks != l.ForwardRetries+u || l.CallerRetries != l.LostToCallers+l.GaveUp+u {
		t.Errorf("with keys: %d answered Unavailable, losses %+v", u, l)
	}
	for i := range plain.Spec.Workload {
		plain.Spec.Workload[i].Caller.Keys = true
	}
	plain.Metadata = keyed.Metadata
	plain.Spec.Expectations = keyed.Spec.Expectations
	if a, b := mustJSON(t, runResults(t, plain)), mustJSON(t, with); !bytes.Equal(a, b) {
		t.Error("lost-answers.yaml with keys: true does not give lost-answers-keys.yaml's results")
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The loss model at zero rates, with callers that wait as long as it
// takes, changes no figure of any shipped scenario: the results are the
// same bytes but for the losses section, which is all zeros. Each runs for
// its first half hour at most, so that the test stays quick under -race
// (the whole files were compared with qm sim when the model came in).
func TestZeroLossChangesNoShippedScenario(t *testing.T) {
	files, _ := filepath.Glob("*.yaml")
	n := 0
	for i, f := range files {
		s, err := Load(f)
		if err != nil {
			t.Fatal(err)
		}
		if s.Spec.lossModel() {
			continue
		}
		n++
		keys := i%2 == 0
		t.Run(strings.TrimSuffix(f, ".yaml"), func(t *testing.T) {
			t.Parallel()
			s.Spec.Duration = min(s.Spec.Duration, Duration(30*time.Minute))
			s.Spec.SampleInterval = 0
			before := simulate(t, s)
			if before.Losses != nil {
				t.Fatal("a losses section without the loss model")
			}
			zero := 0.0
			for i := range s.Spec.Clusters {
				s.Spec.Clusters[i].AnswerLoss = &zero
			}
			for i := range s.Spec.Workload {
				s.Spec.Workload[i].Caller = &Caller{Keys: keys}
			}
			after := simulate(t, s)
			l := after.Losses
			if l == nil {
				t.Fatal("no losses section with the loss model on")
			}
			if l.LostOnLinks+l.LostToCallers+l.GaveUp+l.Retries+l.Leaked+l.DuplicatesAvoided+l.Reconciled+l.KeyReleases != 0 {
				t.Fatalf("keys %v: losses at zero rates: %+v", keys, l)
			}
			after.Losses = nil
			if !bytes.Equal(mustJSON(t, after), mustJSON(t, before)) {
				t.Fatalf("keys %v: the results differ from the run without the loss model", keys)
			}
		})
	}
	if n < 8 {
		t.Fatalf("compared %d shipped scenarios; want every one without losses (8)", n)
	}
}

// simulate runs a scenario's configuration, expectations aside.
func simulate(t *testing.T, s *Scenario) *sim.Results {
	t.Helper()
	cfg, err := s.Config()
	if err != nil {
		t.Fatal(err)
	}
	res, err := sim.Run(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return res
}
