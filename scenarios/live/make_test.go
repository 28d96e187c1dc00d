package live

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// `make live-fidelity` on a fresh clone builds the control-plane binaries
// the kubernetes rig runs (as `make test` does), hands the test the bin dir
// it built them in, and writes its reports where LIVE_OUT says, whether
// that is relative to the repository or absolute. Checked on make's dry
// run with an empty bin dir, so nothing is built.
func TestMakeLiveFidelity(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("no make on PATH")
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	bin := t.TempDir()
	abs := filepath.Join(t.TempDir(), "out")
	dryRun := func(liveOut string) string {
		t.Helper()
		cmd := exec.Command("make", "--no-print-directory", "-n", "live-fidelity", "BIN="+bin, "LIVE_OUT="+liveOut)
		cmd.Dir = root
		cmd.Env = append(os.Environ(), "MAKEFLAGS=")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("make -n live-fidelity: %v\n%s", err, out)
		}
		return string(out)
	}

	out := dryRun(abs)
	for _, want := range []string{
		"cd tools/etcd && ",                            // builds etcd
		"./kube-apiserver && mv ",                      // builds kube-apiserver
		"ln -sfn etcd-",                                // as bin/etcd
		"ln -sfn kube-apiserver-",                      // as bin/kube-apiserver
		`QM_BIN_DIR="` + bin + `"`,                     // and the test looks there
		`QM_LIVE_OUT="` + abs + `"`,                    // an absolute LIVE_OUT as given
		`--out "` + abs + `" "` + abs + `"/*-sim.json`, // the report too
	} {
		if !strings.Contains(out, want) {
			t.Errorf("make -n live-fidelity LIVE_OUT=%s does not run %q:\n%s", abs, want, out)
		}
	}
	// make -n lists the commands in the order make runs them.
	test := strings.Index(out, "QM_LIVE_FIDELITY=all")
	for _, built := range []string{"ln -sfn etcd-", "ln -sfn kube-apiserver-"} {
		if i := strings.Index(out, built); i < 0 || test < 0 || i > test {
			t.Errorf("%q does not come before the test:\n%s", built, out)
		}
	}

	out = dryRun("rel/out")
	if want := `QM_LIVE_OUT="` + filepath.Join(root, "rel/out") + `"`; !strings.Contains(out, want) {
		t.Errorf("make -n live-fidelity LIVE_OUT=rel/out does not run %q:\n%s", want, out)
	}
}
