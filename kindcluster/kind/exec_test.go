package kind

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	kindcluster "github.com/quartermaster-dev/quartermaster/kindcluster"
)

// fakeDocker is a docker program for Exec's tests: kind's Go API runs
// `docker` from PATH, so a script there stands in for Docker. It records
// every invocation (one line each, arguments separated by "|") in
// $FAKE_DIR/log and answers as a daemon with the clusters named by the
// files in $FAKE_DIR/clusters, each one control-plane node
// NAME-control-plane; an image import's standard input goes to
// $FAKE_DIR/import-NODE. With $FAKE_RUN_FAIL set, `docker run` prints it
// and exits 125, as Docker does when it cannot start a container.
const fakeDocker = `#!/bin/sh
set -eu
log="$FAKE_DIR/log"
line=""
for a in "$@"; do line="$line|$a"; done
echo "${line#|}" >>"$log"
case "$1" in
ps)
	for f in "$@"; do
		case "$f" in
		label=io.x-k8s.kind.cluster=*)
			name=${f#label=io.x-k8s.kind.cluster=}
			[ -f "$FAKE_DIR/clusters/$name" ] && echo "$name-control-plane"
			exit 0 ;;
		esac
	done
	ls "$FAKE_DIR/clusters" ;;
inspect)
	case "$3" in
	*io.x-k8s.kind.role*) echo control-plane ;;
	*desktop.docker.io*) echo ;;
	*NetworkSettings.Ports*) printf '127.0.0.1\t36443\n' ;;
	*NetworkSettings.Networks*) echo 172.18.0.3, ;;
	esac ;;
exec)
	shift
	node=""
	while [ $# -gt 0 ]; do
		case "$1" in
		--privileged | -i | -t) shift ;;
		-e | -w) shift 2 ;;
		*) node=$1; shift; break ;;
		esac
	done
	case "$*" in
	"cat /kind/version") echo v1.36.3 ;;
	"cat /kind/manifests/default-cni.yaml") printf 'apiVersion: v1\nkind: ConfigMap\nmetadata: {name: cni, namespace: kube-system}\n' ;;
	kubectl*get*nodes*) echo True ;;
	"containerd config dump")
		printf 'version = 2\n[plugins."io.containerd.grpc.v1.cri".containerd]\n  snapshotter = "overlayfs"\n' ;;
	ctr*import*) cat >"$FAKE_DIR/import-$node" ;;
	"cat /etc/kubernetes/admin.conf")
		cat <<CONF
apiVersion: v1
kind: Config
clusters:
- cluster:
    certificate-authority-data: Y2E=
    server: https://$node:6443
  name: kind-x
contexts:
- context: {cluster: kind-x, user: kind-x}
  name: kind-x
current-context: kind-x
users:
- name: kind-x
  user: {token: secret}
CONF
		;;
	esac ;;
info) echo '{"CgroupDriver":"cgroupfs","CgroupVersion":"1","MemoryLimit":true,"PidsLimit":true,"CPUShares":true,"SecurityOptions":[]}' ;;
run)
	if [ -n "${FAKE_RUN_FAIL:-}" ]; then
		echo "$FAKE_RUN_FAIL" >&2
		exit 125
	fi
	for a in "$@"; do
		case "$a" in label=io.x-k8s.kind.cluster=* | io.x-k8s.kind.cluster=*) : >"$FAKE_DIR/clusters/${a#*io.x-k8s.kind.cluster=}" ;; esac
	done ;;
logs) echo "qm-kind-node: detected cgroup v1" ;;
rm)
	for a in "$@"; do
		case "$a" in *-control-plane) rm -f "$FAKE_DIR/clusters/${a%-control-plane}" ;; esac
	done ;;
fail)
	echo "what went wrong" >&2
	exit 3 ;;
esac
`

// withFakeDocker puts fakeDocker first on PATH and returns its directory
// (the log, the clusters, the imports).
func withFakeDocker(t *testing.T, clusters ...string) string {
	t.Helper()
	if runtime.GOOS == "windows" {
		t.Skip("the fake docker is a shell script")
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "bin")
	for _, d := range []string{bin, filepath.Join(dir, "clusters")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(bin, "docker"), []byte(fakeDocker), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, c := range clusters {
		if err := os.WriteFile(filepath.Join(dir, "clusters", c), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	t.Setenv("FAKE_DIR", dir)
	// Whatever goes wrong, never the user's own kubeconfig.
	t.Setenv("KUBECONFIG", filepath.Join(dir, "user-kubeconfig"))
	t.Setenv(ProviderEnv, "")
	return dir
}

func fakeLog(t *testing.T, dir string) []string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(dir, "log"))
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSpace(string(b)), "\n")
}

func hasCall(calls []string, want string) bool {
	for _, c := range calls {
		if c == want {
			return true
		}
	}
	return false
}

// TestExecLoadImage: LoadImage finds the cluster's nodes through docker,
// asks containerd for its snapshotter, and streams the archive, whole,
// into ctr's import in the k8s.io namespace of every node.
func TestExecLoadImage(t *testing.T) {
	dir := withFakeDocker(t, "qm-a")
	archive := filepath.Join(t.TempDir(), "qm.tar")
	content := strings.Repeat("image bytes ", 10000)
	if err := os.WriteFile(archive, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	e := NewExec(nil)
	if err := e.LoadImage("qm-a", archive); err != nil {
		t.Fatalf("LoadImage: %v", err)
	}
	calls := fakeLog(t, dir)
	for _, want := range []string{
		"ps|-a|--filter|label=io.x-k8s.kind.cluster=qm-a|--format|{{.Names}}",
		"exec|--privileged|qm-a-control-plane|containerd|config|dump",
		"exec|--privileged|-i|qm-a-control-plane|ctr|--namespace=k8s.io|images|import|--all-platforms|--digests|--snapshotter=overlayfs|-",
	} {
		if !hasCall(calls, want) {
			t.Errorf("no docker call %q in:\n%s", want, strings.Join(calls, "\n"))
		}
	}
	got, err := os.ReadFile(filepath.Join(dir, "import-qm-a-control-plane"))
	if err != nil || string(got) != content {
		t.Errorf("the node imported %d bytes (%v), want the archive's %d", len(got), err, len(content))
	}

	if err := e.LoadImage("qm-none", archive); err == nil || !strings.Contains(err.Error(), `kind cluster "qm-none" has no nodes`) {
		t.Errorf("LoadImage into no cluster: %v", err)
	}
	if err := e.LoadImage("qm-a", filepath.Join(t.TempDir(), "missing.tar")); err == nil {
		t.Error("LoadImage of a missing archive: no error")
	}
}

// TestExecKubeConfig: the kubeconfig for the host names the API server at
// the host port Docker maps, not the node's own address.
func TestExecKubeConfig(t *testing.T) {
	withFakeDocker(t, "qm-a")
	kc, err := NewExec(nil).KubeConfig("qm-a")
	if err != nil {
		t.Fatalf("KubeConfig: %v", err)
	}
	if !strings.Contains(kc, "server: https://127.0.0.1:36443") || strings.Contains(kc, "qm-a-control-plane:6443") {
		t.Errorf("kubeconfig does not point at the host port:\n%s", kc)
	}
	if _, err := NewExec(nil).KubeConfig("qm-none"); err == nil {
		t.Error("KubeConfig of no cluster: no error")
	}
}

// TestExecDelete: Delete removes the cluster's node containers with their
// volumes and its entry in the given kubeconfig only.
func TestExecDelete(t *testing.T) {
	dir := withFakeDocker(t, "qm-a", "qm-b")
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(kubeconfig, []byte("apiVersion: v1\nkind: Config\nclusters:\n- name: kind-qm-a\n  cluster: {server: https://127.0.0.1:36443}\ncontexts:\n- name: kind-qm-a\n  context: {cluster: kind-qm-a, user: kind-qm-a}\nusers:\n- name: kind-qm-a\n  user: {token: x}\ncurrent-context: kind-qm-a\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := NewExec(nil).Delete("qm-a", kubeconfig); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if !hasCall(fakeLog(t, dir), "rm|-f|-v|qm-a-control-plane") {
		t.Errorf("no docker rm of the node:\n%s", strings.Join(fakeLog(t, dir), "\n"))
	}
	if _, err := os.Stat(filepath.Join(dir, "clusters", "qm-b")); err != nil {
		t.Errorf("qm-b went too: %v", err)
	}
	kc, err := os.ReadFile(kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(kc), "kind-qm-a") {
		t.Errorf("the kubeconfig still names the cluster:\n%s", kc)
	}
}

// TestExecRun: Run runs the program and, on failure, says which command,
// how it ended and what it printed.
func TestExecRun(t *testing.T) {
	dir := withFakeDocker(t)
	e := NewExec(nil)
	out, err := e.Run(context.Background(), kindcluster.Command{Path: "docker", Args: []string{"ps", "-a"}})
	if err != nil {
		t.Fatalf("Run: %v (%s)", err, out)
	}
	if !hasCall(fakeLog(t, dir), "ps|-a") {
		t.Errorf("docker ps -a not run: %q", fakeLog(t, dir))
	}
	_, err = e.Run(context.Background(), kindcluster.Command{Path: "docker", Args: []string{"fail", "now"}})
	if err == nil || !strings.Contains(err.Error(), "docker fail now") || !strings.Contains(err.Error(), "exit status 3") || !strings.Contains(err.Error(), "what went wrong") {
		t.Errorf("Run of a failing command: %v", err)
	}
}

// TestExecCreate: Create hands kind the rig's config, which reaches
// `docker run` of the node: the node image, the host ports of the API
// server and of the allocators' Services on 127.0.0.1, the node labels;
// and the kubeconfig goes to the file given.
func TestExecCreate(t *testing.T) {
	dir := withFakeDocker(t)
	top := loadExample(t)
	// Ports of the test's own, free now: a rig running on this machine
	// holds the default ones.
	api, caller := freePort(t), freePort(t)
	opts := Options{NodeImage: "example.test/node:v1", APIServerPort: api, CallerPort: caller}
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := NewExec(nil).Create("qm-cloud", Config(top, 1, opts), "kind.yaml", kubeconfig, 0); err != nil {
		t.Fatalf("Create: %v\ndocker calls:\n%s", err, strings.Join(fakeLog(t, dir), "\n"))
	}
	var run string
	for _, c := range fakeLog(t, dir) {
		if strings.HasPrefix(c, "run|") {
			run = c
		}
	}
	for _, want := range []string{
		"|--hostname|qm-cloud-control-plane|",
		"|--privileged|",
		fmt.Sprintf("|--publish=127.0.0.1:%d:30443/TCP|", caller+1),
		fmt.Sprintf("|--publish=127.0.0.1:%d:30444/TCP|", caller+101),
		fmt.Sprintf("|--publish=127.0.0.1:%d:30445/TCP|", caller+201),
		fmt.Sprintf("|--publish=127.0.0.1:%d:6443/TCP|", api+1),
		"|example.test/node:v1",
	} {
		if !strings.Contains(run+"|", want) {
			t.Errorf("docker run lacks %q:\n%s", want, strings.ReplaceAll(run, "|", " "))
		}
	}
	if kc, err := os.ReadFile(kubeconfig); err != nil || !strings.Contains(string(kc), "server: https://127.0.0.1:36443") {
		t.Errorf("kubeconfig %s: %v\n%s", kubeconfig, err, kc)
	}
}

// TestExecCreateWaitsForPorts: a host port of the config held by another
// socket keeps Create from calling docker run at all, and after the wait
// it fails naming that port; once the port is free, Create runs.
func TestExecCreateWaitsForPorts(t *testing.T) {
	dir := withFakeDocker(t)
	held, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := held.Addr().(*net.TCPAddr).Port
	top := loadExample(t)
	cfg := Config(top, 0, Options{NodeImage: "example.test/node:v1", CallerPort: port})
	var log strings.Builder
	e := NewExec(&log)
	e.PortWait = 2 * time.Second
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	err = e.Create("qm-on-prem", cfg, "kind.yaml", kubeconfig, 0)
	addr := "127.0.0.1:" + strconv.Itoa(port)
	if err == nil || !strings.Contains(err.Error(), "host port "+addr+" is still in use") {
		t.Errorf("Create with %s taken: %v", addr, err)
	}
	if !strings.Contains(log.String(), "host port "+addr+" is in use") {
		t.Errorf("the log does not say what Create waits for: %q", log.String())
	}
	if b, _ := os.ReadFile(filepath.Join(dir, "log")); strings.Contains(string(b), "run|") {
		t.Errorf("docker run was called with the port taken:\n%s", b)
	}

	// Freed during the wait: Create goes on.
	e.PortWait = time.Minute
	go func() {
		time.Sleep(1500 * time.Millisecond)
		held.Close()
	}()
	if err := e.Create("qm-on-prem", cfg, "kind.yaml", kubeconfig, 0); err != nil {
		t.Fatalf("Create after the port was freed: %v", err)
	}
	if !hasCallPrefix(fakeLog(t, dir), "run|") {
		t.Error("no docker run after the port was freed")
	}
}

// TestExecCreateSaysWhy: when docker run fails, Create's error carries
// what Docker printed, and a port taken between the check and Docker's
// bind gets one more try, logged; any other failure gets none.
func TestExecCreateSaysWhy(t *testing.T) {
	for _, tc := range []struct {
		name, stderr string
		runs         int
	}{
		{"port", "docker: Error response from daemon: driver failed programming external connectivity: listen tcp4 127.0.0.1:28443: bind: address already in use", 2},
		{"other", "docker: Error response from daemon: no space left on device", 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := withFakeDocker(t)
			t.Setenv("FAKE_RUN_FAIL", tc.stderr)
			top := loadExample(t)
			var log strings.Builder
			e := NewExec(&log)
			opts := Options{NodeImage: "example.test/node:v1", APIServerPort: freePort(t), CallerPort: freePort(t)}
			err := e.Create("qm-on-prem", Config(top, 0, opts), "kind.yaml", filepath.Join(t.TempDir(), "kubeconfig"), 0)
			if err == nil || !strings.Contains(err.Error(), "exit status 125") || !strings.Contains(err.Error(), tc.stderr) {
				t.Errorf("Create's error lacks Docker's reason %q: %v", tc.stderr, err)
			}
			runs := 0
			for _, c := range fakeLog(t, dir) {
				if strings.HasPrefix(c, "run|") {
					runs++
				}
			}
			if runs != tc.runs {
				t.Errorf("docker run called %d times, want %d", runs, tc.runs)
			}
			if again := strings.Contains(log.String(), "creating kind cluster qm-on-prem again"); again != (tc.runs > 1) {
				t.Errorf("log of a retry: %v, want %v:\n%s", again, tc.runs > 1, log.String())
			}
		})
	}
}

// freePort is a TCP port on 127.0.0.1 that nothing held a moment ago.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func hasCallPrefix(calls []string, prefix string) bool {
	for _, c := range calls {
		if strings.HasPrefix(c, prefix) {
			return true
		}
	}
	return false
}
