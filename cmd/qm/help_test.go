package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"runtime/debug"
	"sort"
	"strings"
	"testing"
)

// subcommandArgs are the commands whose flags live one word deeper: each
// must answer -h and a bad flag the same way as a plain command.
var subcommandArgs = [][]string{{"cluster", "up"}, {"cluster", "down"}, {"cluster", "check"}, {"load", "merge"}, {"plan", "merge"}, {"scenario", "run"}, {"sim", "merge"}}

// everyCommand lists every registered command, so that a command added
// later is held to the same manners without editing this test.
func everyCommand() [][]string {
	var all [][]string
	for name := range commands {
		all = append(all, []string{name})
	}
	sort.Slice(all, func(i, j int) bool { return all[i][0] < all[j][0] })
	return append(all, subcommandArgs...)
}

func runQM(args ...string) (code int, stdout, stderr string) {
	var o, e bytes.Buffer
	code = run(args, &o, &e)
	return code, o.String(), e.String()
}

// TestEveryCommandHelp: -h is a request, not a mistake. It exits 0 and
// prints the usage on stdout, where a pager or grep can read it.
func TestEveryCommandHelp(t *testing.T) {
	for _, args := range everyCommand() {
		name := strings.Join(args, " ")
		code, out, errOut := runQM(append(args, "-h")...)
		if code != 0 || !strings.Contains(out, "usage:") || errOut != "" {
			t.Errorf("qm %s -h: exit %d, stdout %q, stderr %q", name, code, firstLine(out), errOut)
		}
	}
	if code, out, _ := runQM("-h"); code != 0 || !strings.Contains(out, "commands:") {
		t.Errorf("qm -h: exit %d\n%s", code, out)
	}
}

// TestEveryCommandBadFlag: a usage mistake prints the one line that was
// wrong and where the help is, not the whole help above the shell prompt.
func TestEveryCommandBadFlag(t *testing.T) {
	for _, args := range everyCommand() {
		name := strings.Join(args, " ")
		code, out, errOut := runQM(append(args, "--no-such-flag")...)
		// Commands that take a subcommand first (qm cluster) word the
		// first line their own way; it must still name the culprit.
		lines := strings.Split(strings.TrimSuffix(errOut, "\n"), "\n")
		if code != 2 || out != "" || len(lines) != 2 ||
			!strings.HasPrefix(lines[0], "qm "+name+": ") || !strings.Contains(lines[0], "-no-such-flag") ||
			lines[1] != "Run 'qm "+name+" -h' for usage." {
			t.Errorf("qm %s --no-such-flag: exit %d, stdout %q, stderr:\n%s\nwant exit 2, the mistake on one line and the hint on the next", name, code, out, errOut)
		}
	}
	code, _, errOut := runQM("no-such-command")
	if code != 2 || strings.Count(errOut, "\n") != 2 || !strings.Contains(errOut, `unknown command "no-such-command"`) {
		t.Errorf("qm no-such-command: exit %d, stderr:\n%s", code, errOut)
	}
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(s, "\n")
	return l
}

// TestSimRefusesSeveralFiles: qm sim runs one file; given two it says so
// rather than printing the usage with no reason.
func TestSimRefusesSeveralFiles(t *testing.T) {
	code, _, errOut := runQM("sim", "a.yaml", "--quiet", "b.yaml")
	if code != 2 || !strings.Contains(errOut, "one scenario file per run, got 2 (a.yaml b.yaml)") {
		t.Errorf("qm sim a.yaml b.yaml: exit %d, stderr:\n%s", code, errOut)
	}
	code, _, errOut = runQM("sim")
	if code != 2 || !strings.Contains(errOut, "no scenario file given") {
		t.Errorf("qm sim: exit %d, stderr:\n%s", code, errOut)
	}
}

// TestTransportFlags: --grpc and --rest are one choice under two names.
func TestTransportFlags(t *testing.T) {
	for _, tc := range []struct {
		args     []string
		wantREST bool
		wantErr  bool
	}{
		{nil, false, false},
		{[]string{"--rest"}, true, false},
		{[]string{"--grpc"}, false, false},
		{[]string{"--grpc=false"}, true, false},
		{[]string{"--rest=false"}, false, false},
		{[]string{"--rest", "--grpc=false"}, true, false},
		{[]string{"--rest", "--grpc"}, false, true},
		{[]string{"--grpc=false", "--rest=false"}, false, true},
		{[]string{"--grpc=maybe"}, false, true},
	} {
		var c connFlags
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.SetOutput(new(bytes.Buffer))
		c.register(fs)
		err := fs.Parse(tc.args)
		if (err != nil) != tc.wantErr || (err == nil && c.rest != tc.wantREST) {
			t.Errorf("%v: rest=%v err=%v; want rest=%v error=%v", tc.args, c.rest, err, tc.wantREST, tc.wantErr)
		}
	}
}

// TestAgentReadsKUBECONFIG: qm agent finds the cluster the way qm serve
// does, so one exported KUBECONFIG serves both. A path that does not exist
// must be the error, not a silent fall-back to the in-cluster account.
func TestAgentReadsKUBECONFIG(t *testing.T) {
	path := filepath.Join(t.TempDir(), "missing-kubeconfig")
	t.Setenv("KUBECONFIG", path)
	code, _, errOut := runQM("agent")
	if code != 1 || !strings.Contains(errOut, path) {
		t.Errorf("qm agent with KUBECONFIG=%s: exit %d, stderr:\n%s", path, code, errOut)
	}
}

func TestVersionLine(t *testing.T) {
	bi := &debug.BuildInfo{
		GoVersion: "go1.26.0",
		Main:      debug.Module{Version: "v0.0.0-20261122195512-5d7d7bc1a2b3"},
		Settings: []debug.BuildSetting{
			{Key: "vcs.revision", Value: "5d7d7bc1a2b3c4d5"},
			{Key: "vcs.time", Value: "2026-11-22T19:55:12Z"},
			{Key: "vcs.modified", Value: "true"},
		},
	}
	want := "qm v0.0.0-20261122195512-5d7d7bc1a2b3 (revision 5d7d7bc1a2b3c4d5, 2026-11-22T19:55:12Z, with uncommitted changes) go1.26.0"
	if got := versionLine(bi); got != want {
		t.Errorf("versionLine:\n got %s\nwant %s", got, want)
	}
	if got := versionLine(&debug.BuildInfo{GoVersion: "go1.26.0"}); got != "qm (devel) (no VCS information) go1.26.0" {
		t.Errorf("no VCS: %s", got)
	}
	// The test binary has build information of its own; the command must
	// print one line from it.
	if code, out, _ := runQM("version"); code != 0 || !strings.HasPrefix(out, "qm ") || strings.Count(out, "\n") != 1 {
		t.Errorf("qm version: exit %d, %q", code, out)
	}
}

// TestServeBadBackendTouchesNothing: a mistyped --backend is a usage
// error found before serve makes development certificates.
func TestServeBadBackendTouchesNothing(t *testing.T) {
	state := filepath.Join(t.TempDir(), "state")
	code, _, errOut := runQM("serve", "--backend", "bogus", "--state-dir", state, "--addr", "127.0.0.1:0", "--http-addr", "")
	if code != 2 || !strings.Contains(errOut, `--backend "bogus"`) {
		t.Errorf("exit %d, stderr:\n%s", code, errOut)
	}
	if _, err := os.Stat(state); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the state directory was touched: %v", err)
	}
}

// TestSimOutStdout: --out - means stdout, as for qm load, with nothing
// else on stdout so the JSON can be piped.
func TestSimOutStdout(t *testing.T) {
	code, out, errOut := runQM("sim", filepath.Join("..", "..", "scenarios", "testdata", "valid-minimal.yaml"), "--out", "-")
	var rep map[string]any
	if code != 0 || json.Unmarshal([]byte(out), &rep) != nil || rep["scenario"] == nil {
		t.Errorf("exit %d, stdout is not the results JSON:\n%.300s", code, out)
	}
	if !strings.Contains(errOut, "cluster") {
		t.Errorf("the table should be on stderr:\n%s", errOut)
	}
	if _, err := os.Stat("-"); err == nil {
		t.Error(`a file named "-" was written`)
	}
}
