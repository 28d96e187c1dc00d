package kindcluster

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/tools/clientcmd"
)

var update = flag.Bool("update", false, "rewrite testdata golden files")

// TestDryRunGolden pins the exact commands a cluster start runs, with the
// run-specific directory replaced by $DIR. Re-record with -update only
// after reading the diff.
func TestDryRunGolden(t *testing.T) {
	var out bytes.Buffer
	dry := &DryRunner{Out: &out}
	dir := filepath.Join(t.TempDir(), "cluster")
	c, err := Start(context.Background(), Options{
		Name:              "golden",
		Dir:               dir,
		BinDir:            "BIN",
		Runner:            dry,
		EtcdPort:          2379,
		EtcdPeerPort:      2380,
		APIServerPort:     6443,
		EtcdUnsafeNoFsync: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Kubectl(context.Background(), "get", "gameservers"); err != nil {
		t.Fatal(err)
	}
	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("cluster dir still there after Stop: %v", err)
	}
	if n := len(dry.Commands()); n != 3 {
		t.Errorf("recorded %d commands, want 3 (etcd, kube-apiserver, kubectl)", n)
	}
	got := strings.ReplaceAll(out.String(), dir, "$DIR")
	golden := filepath.Join("testdata", "dryrun.golden")
	if *update {
		if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if got != string(want) {
		t.Errorf("dry-run output differs from %s (rerun with -update if intended):\n--- got\n%s\n--- want\n%s", golden, got, want)
	}
}

func TestShellQuote(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"", "''"},
		{"--data-dir=/tmp/x", "--data-dir=/tmp/x"},
		{"a b", "'a b'"},
		{"it's", `'it'\''s'`},
		{"$HOME", "'$HOME'"},
	} {
		if got := shellQuote(tc.in); got != tc.want {
			t.Errorf("shellQuote(%q) = %s, want %s", tc.in, got, tc.want)
		}
	}
	c := Command{Path: "bin/etcd", Args: []string{"--name=x y"}, Env: []string{"A=1"}, LogFile: "/l og"}
	if got, want := c.String(), `A=1 bin/etcd '--name=x y' >'/l og' 2>&1`; got != want {
		t.Errorf("Command.String() = %s, want %s", got, want)
	}
}

func TestPortPicker(t *testing.T) {
	p := &portPicker{used: map[int]bool{}}
	got, err := p.pick(20)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[int]bool{}
	for _, port := range got {
		if seen[port] {
			t.Fatalf("port %d handed out twice: %v", port, got)
		}
		seen[port] = true
		// Every port must be free to bind on loopback right now.
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err != nil {
			t.Fatalf("picked port %d is not free: %v", port, err)
		}
		l.Close()
	}
	// A second pick never repeats a port still held.
	more, err := p.pick(20)
	if err != nil {
		t.Fatal(err)
	}
	for _, port := range more {
		if seen[port] {
			t.Fatalf("port %d handed out again before release", port)
		}
	}
	p.release(got...)
	p.release(more...)
	if len(p.used) != 0 {
		t.Errorf("%d ports still marked used after release", len(p.used))
	}
}

func TestKubeconfigRender(t *testing.T) {
	s, err := newSecrets(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	b, err := renderKubeconfig("east", "https://127.0.0.1:6443", s.caCert, s.adminToken)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := clientcmd.Load(b)
	if err != nil {
		t.Fatalf("kubeconfig does not load: %v\n%s", err, b)
	}
	if cfg.CurrentContext != "east" {
		t.Errorf("current context %q, want east", cfg.CurrentContext)
	}
	rc, err := clientcmd.NewDefaultClientConfig(*cfg, nil).ClientConfig()
	if err != nil {
		t.Fatal(err)
	}
	if rc.Host != "https://127.0.0.1:6443" || rc.BearerToken != s.adminToken || !bytes.Equal(rc.CAData, s.caCert) {
		t.Errorf("rest config from kubeconfig: host %q token ok %v CA ok %v", rc.Host, rc.BearerToken == s.adminToken, bytes.Equal(rc.CAData, s.caCert))
	}
}

func TestServingCertChainsToCA(t *testing.T) {
	s, err := newSecrets(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(s.caCert) {
		t.Fatal("CA PEM does not parse")
	}
	blk, _ := pem.Decode(s.servingCert)
	cert, err := x509.ParseCertificate(blk.Bytes)
	if err != nil {
		t.Fatal(err)
	}
	for _, host := range []string{"127.0.0.1", "localhost", "kubernetes.default.svc"} {
		if _, err := cert.Verify(x509.VerifyOptions{DNSName: host, Roots: pool}); err != nil {
			t.Errorf("serving cert for %s: %v", host, err)
		}
	}
	if got := string(tokenFile("abc")); got != "abc,admin,admin,\"system:masters\"\n" {
		t.Errorf("token file %q", got)
	}
}

func TestCheckBinaries(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "etcd"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	err := CheckBinaries(dir, EtcdBinary, APIServerBinary)
	if !errors.Is(err, ErrMissingBinaries) {
		t.Fatalf("got %v, want ErrMissingBinaries", err)
	}
	if !strings.Contains(err.Error(), "make bin/kube-apiserver") || strings.Contains(err.Error(), "bin/etcd ") {
		t.Errorf("message should name only the missing binary's make target: %v", err)
	}
	if err := CheckBinaries(dir, EtcdBinary); err != nil {
		t.Errorf("etcd present: %v", err)
	}
}

func TestDefaultBinDir(t *testing.T) {
	t.Setenv(BinDirEnv, "")
	d, err := DefaultBinDir()
	if err != nil {
		t.Fatal(err)
	}
	// Tests run in kindcluster/, one below the module root.
	wd, _ := os.Getwd()
	if want := filepath.Join(filepath.Dir(wd), "bin"); d != want {
		t.Errorf("DefaultBinDir() = %s, want %s", d, want)
	}
	t.Setenv(BinDirEnv, "/elsewhere")
	if d, _ := DefaultBinDir(); d != "/elsewhere" {
		t.Errorf("with %s set: %s", BinDirEnv, d)
	}
}

func TestOptionsRefuseKindAndBusyDir(t *testing.T) {
	_, err := Start(context.Background(), Options{Provider: ProviderKind, BinDir: "BIN"})
	if err == nil || !strings.Contains(err.Error(), "Docker") {
		t.Errorf("kind provider: got %v, want an error saying it needs Docker", err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "precious"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	_, err = Start(context.Background(), Options{Dir: dir, BinDir: "BIN", Runner: &DryRunner{}})
	if err == nil || !strings.Contains(err.Error(), "not empty") {
		t.Errorf("non-empty dir: got %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "precious")); err != nil {
		t.Errorf("a refused start touched the directory: %v", err)
	}
}

// TestStopDirKillsOrphans stands in `sleep` for a kube-apiserver whose
// owner died, and checks `qm cluster down`'s path finds and kills it.
func TestStopDirKillsOrphans(t *testing.T) {
	if _, err := os.Stat("/bin/sleep"); err != nil {
		t.Skip("no /bin/sleep")
	}
	dir := filepath.Join(t.TempDir(), "c")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	p, err := ExecRunner{}.Start(Command{Path: "/bin/sleep", Args: []string{"60"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = p.Stop(time.Second) })
	// A real cluster's state file is written once its processes answer,
	// long after their exec. Start returns as the child's exec releases
	// the parent, before the kernel has set up the new argv: for a moment
	// /proc/PID/cmdline is not /bin/sleep yet, and StopDir, seeing a
	// stranger under the recorded pid, rightly leaves it alone (CI hit
	// that window once). Wait until the child is what the state says.
	for deadline := time.Now().Add(10 * time.Second); !cmdlineHas(p.Pid(), "sleep"); {
		if time.Now().After(deadline) {
			t.Fatalf("child %d did not become /bin/sleep", p.Pid())
		}
		time.Sleep(10 * time.Millisecond)
	}
	b, _ := json.Marshal(state{Name: "orphan", OwnerPID: os.Getpid(), APIServerPID: p.Pid(), APIServerPath: "/bin/sleep"})
	if err := os.WriteFile(filepath.Join(dir, stateFile), b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := StopDir(dir, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.Done():
	case <-time.After(15 * time.Second):
		cmdline, _ := os.ReadFile("/proc/" + strconv.Itoa(p.Pid()) + "/cmdline")
		t.Fatalf("orphan %d still running after StopDir (alive %v, cmdline %q)", p.Pid(), processAlive(p.Pid()), cmdline)
	}
	if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("dir still there: %v", err)
	}
	if err := StopDir(dir, time.Second); err == nil {
		t.Error("StopDir on an empty place should say there is no cluster")
	}
}

// TestStopDirHalfMade: a start-up killed before it wrote its state file
// leaves a directory that `qm cluster down` must clear, but only when
// nothing runs from it and nothing in it is foreign.
func TestStopDirHalfMade(t *testing.T) {
	if !dirExists("/proc/self") {
		t.Skip("no /proc: half-made directories are left to the user")
	}
	halfMade := func(t *testing.T) string {
		dir := filepath.Join(t.TempDir(), "c")
		for _, f := range []string{"pki/ca.crt", kubeconfigFile, etcdLog} {
			if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, f)), 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, f), []byte("x"), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		return dir
	}

	t.Run("removed", func(t *testing.T) {
		dir := halfMade(t)
		if err := StopDir(dir, time.Second); err != nil {
			t.Fatal(err)
		}
		if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("half-made dir still there: %v", err)
		}
	})

	t.Run("foreign file kept", func(t *testing.T) {
		dir := halfMade(t)
		if err := os.WriteFile(filepath.Join(dir, "precious"), nil, 0o600); err != nil {
			t.Fatal(err)
		}
		if err := StopDir(dir, time.Second); err == nil || !strings.Contains(err.Error(), "precious") {
			t.Errorf("got %v, want a refusal naming the foreign file", err)
		}
		if _, err := os.Stat(filepath.Join(dir, "precious")); err != nil {
			t.Errorf("foreign file removed: %v", err)
		}
	})

	t.Run("process still running", func(t *testing.T) {
		if _, err := os.Stat("/bin/sh"); err != nil {
			t.Skip("no /bin/sh")
		}
		dir := halfMade(t)
		// Stands in for an etcd of a start-up in progress: its command line
		// names the data directory inside the cluster's.
		p, err := ExecRunner{}.Start(Command{Path: "/bin/sh", Args: []string{"-c", "sleep 60", "--data-dir=" + filepath.Join(dir, "etcd")}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = p.Stop(time.Second) })
		// The process must show its command line before StopDir can see
		// it: this failed once in CI under load, StopDir finding nobody
		// just after the start.
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
			if pids, _ := processesUsing(dir); slices.Contains(pids, p.Pid()) {
				break
			}
			if time.Now().After(deadline) {
				b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", p.Pid()))
				t.Fatalf("process %d never showed %s in its command line: %q, %v", p.Pid(), dir, b, err)
			}
		}
		err = StopDir(dir, time.Second)
		if err == nil || !strings.Contains(err.Error(), strconv.Itoa(p.Pid())) {
			t.Errorf("got %v, want a refusal naming process %d", err, p.Pid())
		}
		if _, err := os.Stat(filepath.Join(dir, kubeconfigFile)); err != nil {
			t.Errorf("dir of a running start-up removed: %v", err)
		}
	})
}

// TestBusyDirSaysNothingStopped: `qm cluster up` refused because the
// cluster of that name is up must not log that a cluster "stopped".
func TestBusyDirSaysNothingStopped(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, stateFile), []byte("{}"), 0o600); err != nil {
		t.Fatal(err)
	}
	var log bytes.Buffer
	_, err := Start(context.Background(), Options{Name: "dev", Dir: dir, BinDir: "BIN", Runner: &DryRunner{Out: new(bytes.Buffer)}, Log: &log})
	if err == nil {
		t.Fatal("a busy directory was accepted")
	}
	if strings.Contains(log.String(), "stopped") {
		t.Errorf("log says something stopped:\n%s", log.String())
	}
}
