package kind

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/kind/pkg/apis/config/v1alpha4"

	kindcluster "github.com/quartermaster-dev/quartermaster/kindcluster"
)

// dryOptions are Up's options for a dry run in a fresh directory, from a
// repository of the Dockerfile and testdata's fixed copy of
// deploy/allocator.yaml (edits to the real one must not churn the record).
func dryOptions(t *testing.T, runner Runner) Options {
	t.Helper()
	// The host address as a dry run finds it by default, whatever this
	// shell says.
	t.Setenv(HostAddressEnv, "")
	t.Setenv(LinkListenEnv, "")
	repo := filepath.Join(t.TempDir(), "repo")
	if err := os.MkdirAll(filepath.Join(repo, "deploy"), 0o755); err != nil {
		t.Fatal(err)
	}
	for from, to := range map[string]string{"../../Dockerfile": "Dockerfile", "testdata/allocator-in.yaml": "deploy/allocator.yaml"} {
		b, err := os.ReadFile(from)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(repo, to), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return Options{Dir: filepath.Join(t.TempDir(), "rig"), RepoDir: repo, Kubectl: "kubectl", Build: true,
		Wait: 3 * time.Minute, Runner: runner}
}

// normalize replaces the run's directories so the record is the same on
// every machine.
func normalize(steps []string, opts Options) []byte {
	r := strings.NewReplacer(opts.Dir, "$DIR", opts.RepoDir, "$REPO")
	var b strings.Builder
	for _, s := range steps {
		b.WriteString(r.Replace(s))
		b.WriteByte('\n')
	}
	return []byte(b.String())
}

// TestDryRunUpDown records every step of bringing the example rig up on
// kind and taking it down from another process (Down, as `qm cluster down
// --provider kind` does), and checks the files Up writes before any
// cluster exists.
func TestDryRunUpDown(t *testing.T) {
	top := loadExample(t)
	dry := &DryRun{}
	opts := dryOptions(t, dry)
	r, err := Up(context.Background(), top, opts)
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "dry-run-up.txt", normalize(dry.Steps(), opts))

	for _, c := range r.Clusters {
		for _, f := range append([]string{"kind.yaml", "kubeconfig"}, prefixed("manifests/", manifestOrder)...) {
			if st, err := os.Stat(filepath.Join(opts.Dir, c.Name, f)); err != nil || st.Size() == 0 {
				t.Errorf("cluster %s: %s missing or empty after Up (%v)", c.Name, f, err)
			}
		}
	}
	if got, want := r.Clusters[1].CallerAddr, "127.0.0.1:28444"; got != want {
		t.Errorf("cloud's caller address %s, want %s", got, want)
	}
	// The allocators are dialled at the links on the gateway: their
	// certificate, reissued once the gateway was known, must say so.
	pemCert, err := os.ReadFile(r.Certs.ServerCert())
	if err != nil {
		t.Fatal(err)
	}
	block, _ := pem.Decode(pemCert)
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	for _, host := range []string{"172.18.0.1", "127.0.0.1", NodeHost("cloud")} {
		if err := cert.VerifyHostname(host); err != nil {
			t.Errorf("server certificate: %v", err)
		}
	}

	down := &DryRun{}
	if err := Down(opts.Dir, down, time.Second, nil); err != nil {
		t.Fatal(err)
	}
	golden(t, "dry-run-down.txt", normalize(down.Steps(), opts))
	if _, err := os.Stat(opts.Dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Down left %s behind (%v)", opts.Dir, err)
	}
	if err := Down(opts.Dir, down, time.Second, nil); err == nil || !strings.Contains(err.Error(), "no kind rig") {
		t.Errorf("Down of a rig that is gone: %v, want an error saying there is none", err)
	}
	// The owner's own Stop after Down has nothing left to delete but must
	// not fail.
	_ = r.Stop()
}

func prefixed(p string, names []string) []string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = p + n
	}
	return out
}

// failingRunner fails the kind create of one cluster.
type failingRunner struct {
	DryRun
	failCreate string
}

func (f *failingRunner) Create(name string, cfg *v1alpha4.Cluster, file, kubeconfig string, wait time.Duration) error {
	_ = f.DryRun.Create(name, cfg, file, kubeconfig, wait)
	if name == f.failCreate {
		return errors.New("node did not become ready")
	}
	return nil
}

// TestUpFailureDeletesWhatItMade: a cluster that fails to come up leaves
// nothing behind, the failed one included (kind may have left its node).
func TestUpFailureDeletesWhatItMade(t *testing.T) {
	top := loadExample(t)
	f := &failingRunner{failCreate: "qm-cloud"}
	opts := dryOptions(t, f)
	_, err := Up(context.Background(), top, opts)
	if err == nil || !strings.Contains(err.Error(), `cluster "cloud"`) || !strings.Contains(err.Error(), "node did not become ready") {
		t.Fatalf("Up: %v, want the cloud cluster's create failure", err)
	}
	steps := f.Steps()
	var deletes []string
	for _, s := range steps {
		if strings.HasPrefix(s, "kind delete cluster") {
			deletes = append(deletes, strings.Fields(s)[4])
		}
	}
	if got := strings.Join(deletes, " "); got != "qm-on-prem qm-cloud" {
		t.Errorf("deleted %q after the failure, want both clusters (qm-on-prem qm-cloud)\n%s", got, strings.Join(steps, "\n"))
	}
	if _, err := os.Stat(opts.Dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the rig's directory is still there after a failed Up (%v)", err)
	}
}

func TestUpRefusesABusyDir(t *testing.T) {
	top := loadExample(t)
	opts := dryOptions(t, &DryRun{})
	if err := os.MkdirAll(opts.Dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(opts.Dir, stateFile), []byte("{}"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Up(context.Background(), top, opts); err == nil || !strings.Contains(err.Error(), "not empty") {
		t.Fatalf("Up into a rig's directory: %v, want a refusal", err)
	}
	if _, err := os.Stat(filepath.Join(opts.Dir, stateFile)); err != nil {
		t.Errorf("a refused Up removed the other rig's state: %v", err)
	}
}

// TestUpStopsOnAFailedCommand: a kubectl failure stops Up with the
// command's output in the error.
func TestUpStopsOnAFailedCommand(t *testing.T) {
	top := loadExample(t)
	opts := dryOptions(t, nil)
	opts.Runner = &Exec{Programs: scriptedPrograms{fail: "rollout", out: "Waiting for 1 pods to be ready..."}}
	// Exec's kind half is never reached: replace it with the dry one.
	opts.Runner = mixed{dry: &DryRun{}, programs: opts.Runner.(*Exec)}
	// scriptedPrograms prints nothing for docker network inspect.
	opts.HostAddress = "172.18.0.1"
	_, err := Up(context.Background(), top, opts)
	if err == nil || !strings.Contains(err.Error(), "rollout status statefulset/qm-allocator") || !strings.Contains(err.Error(), "Waiting for 1 pods") {
		t.Fatalf("Up: %v, want the failed rollout with its output", err)
	}
}

// scriptedPrograms fails the first command whose arguments contain fail.
type scriptedPrograms struct{ fail, out string }

func (s scriptedPrograms) Start(kindcluster.Command) (kindcluster.Process, error) {
	return nil, errors.New("not used")
}

func (s scriptedPrograms) Run(_ context.Context, c kindcluster.Command) ([]byte, error) {
	if strings.Contains(strings.Join(c.Args, " "), s.fail) {
		return []byte(s.out), errors.New("exit status 1")
	}
	return nil, nil
}

// mixed does kind's steps dry and runs programs through Exec.
type mixed struct {
	dry      *DryRun
	programs *Exec
}

func (m mixed) Create(n string, c *v1alpha4.Cluster, f, k string, w time.Duration) error {
	return m.dry.Create(n, c, f, k, w)
}
func (m mixed) KubeConfig(n string) (string, error) { return m.dry.KubeConfig(n) }
func (m mixed) LoadImage(n, a string) error         { return m.dry.LoadImage(n, a) }
func (m mixed) Delete(n, k string) error            { return m.dry.Delete(n, k) }
func (m mixed) Run(ctx context.Context, c kindcluster.Command) ([]byte, error) {
	return m.programs.Run(ctx, c)
}

// Notef makes mixed a dry run where it counts: links are noted, not
// started.
func (m mixed) Notef(format string, args ...any) { m.dry.Notef(format, args...) }
