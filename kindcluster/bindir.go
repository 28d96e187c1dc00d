package kindcluster

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// modulePath is the main module: the bin dir is <its root>/bin.
const modulePath = "github.com/quartermaster-dev/quartermaster"

// BinDirEnv overrides where the etcd, kube-apiserver and kubectl binaries
// are looked up.
const BinDirEnv = "QM_BIN_DIR"

// Binary names inside the bin dir (symlinks to version-keyed builds made by
// mk/kube.mk).
const (
	EtcdBinary      = "etcd"
	APIServerBinary = "kube-apiserver"
	KubectlBinary   = "kubectl"
)

// DefaultBinDir finds the directory holding the control-plane binaries:
// $QM_BIN_DIR if set; else ./bin of the repository that contains the
// working directory (tests run in their package's directory); else the
// directory of the running executable if the binaries sit beside it (`make
// build` puts qm in the same bin/).
func DefaultBinDir() (string, error) {
	if d := os.Getenv(BinDirEnv); d != "" {
		return d, nil
	}
	if wd, err := os.Getwd(); err == nil {
		if root, ok := findModuleRoot(wd); ok {
			return filepath.Join(root, "bin"), nil
		}
	}
	if exe, err := os.Executable(); err == nil {
		d := filepath.Dir(exe)
		if _, err := os.Stat(filepath.Join(d, APIServerBinary)); err == nil {
			return d, nil
		}
	}
	return "", fmt.Errorf("cannot find the bin dir: run inside the repository, or set %s", BinDirEnv)
}

// findModuleRoot walks up from dir to the directory whose go.mod declares
// the main module (skipping nested modules such as tools/kube).
func findModuleRoot(dir string) (string, bool) {
	for {
		if isMainModule(filepath.Join(dir, "go.mod")) {
			return dir, true
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", false
		}
		dir = parent
	}
}

func isMainModule(gomod string) bool {
	f, err := os.Open(gomod)
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if rest, ok := strings.CutPrefix(line, "module "); ok {
			return strings.Trim(strings.TrimSpace(rest), `"`) == modulePath
		}
	}
	return false
}

// ErrMissingBinaries is wrapped by CheckBinaries' error.
var ErrMissingBinaries = errors.New("control-plane binaries missing")

// CheckBinaries reports, with the command that fixes it, any of the named
// binaries that binDir lacks.
func CheckBinaries(binDir string, names ...string) error {
	var missing []string
	for _, n := range names {
		if st, err := os.Stat(filepath.Join(binDir, n)); err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
			missing = append(missing, n)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	targets := make([]string, len(missing))
	for i, n := range missing {
		targets[i] = "bin/" + n
	}
	return fmt.Errorf("%w: %s not in %s: run `make %s` at the repository root (a cold kube-apiserver build takes about 8 minutes), or set %s",
		ErrMissingBinaries, strings.Join(missing, ", "), binDir, strings.Join(targets, " "), BinDirEnv)
}
