package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
)

// qm scenario run without --live is qm sim; a usage mistake says what was
// wrong (exit 2), and a live run the machine cannot drive is refused with
// the flag to change before anything starts (exit 1).
func TestScenarioRunUsage(t *testing.T) {
	valid := filepath.Join("..", "..", "scenarios", "testdata", "valid-minimal.yaml")
	spreading := filepath.Join("..", "..", "scenarios", "load-spreading.yaml")
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"scenario", "run"}, 2, "want one scenario file, got 0"},
		{[]string{"scenario", "run", valid, valid}, 2, "want one scenario file, got 2"},
		{[]string{"scenario", "walk", valid}, 2, `unknown subcommand "walk" (want run)`},
		{[]string{"scenario"}, 2, "want a subcommand: run"},
		{[]string{"scenario", "run", valid, "--time-scale", "10"}, 2, "--time-scale applies to --live runs only"},
		{[]string{"scenario", "run", valid, "--dir", t.TempDir()}, 2, "--dir applies to --live runs only"},
		{[]string{"scenario", "run", valid, "--live", "--time-scale", "0"}, 2, "--time-scale 0: must be 1 to 3600"},
		{[]string{"scenario", "run", valid, "--backend", "kubernetes"}, 2, "--backend applies to --live runs only"},
		{[]string{"scenario", "run", valid, "--live", "--backend", "docker"}, 2, `--backend "docker": want memory or kubernetes`},
		{[]string{"scenario", "run", spreading, "--live", "--time-scale", "1000"}, 1, "choose a smaller --time-scale"},
		{[]string{"scenario", "run", "no-such-file.yaml", "--live"}, 1, "no-such-file.yaml"},
	} {
		code, out, errOut := runQM(c.args...)
		if code != c.code || !strings.Contains(errOut, c.want) {
			t.Errorf("qm %s: exit %d, stdout %q, stderr %q; want exit %d and %q",
				strings.Join(c.args, " "), code, firstLine(out), errOut, c.code, c.want)
		}
	}
	code, out, errOut := runQM("scenario", "run", valid, "--out", "-", "--quiet")
	var rep struct{ Kind, Scenario string }
	if code != 0 || json.Unmarshal([]byte(out), &rep) != nil || rep.Kind != "SimulationReport" {
		t.Errorf("qm scenario run FILE --out -: exit %d, kind %q, stderr %q; want the simulator's report", code, rep.Kind, errOut)
	}
}
