// Package kind holds the tests of the shell scripts beside them, which
// prepare a host for kind and build the offline node image: each script
// runs for real, with stand-ins on PATH for the programs that would
// change the machine (runc, docker, debootstrap).
package kind

import (
	"bufio"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"runtime"
	"strings"
	"testing"
)

func needLinux(t *testing.T, programs ...string) {
	t.Helper()
	if runtime.GOOS != "linux" {
		t.Skip("the scripts run on Linux hosts")
	}
	for _, p := range programs {
		if _, err := exec.LookPath(p); err != nil {
			t.Skipf("%s is not installed (hack/kind/setup-host.sh installs it)", p)
		}
	}
}

// stub writes an executable shell script named name into dir.
func stub(t *testing.T, dir, name, body string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+body), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func writeFile(t *testing.T, p, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// script runs a script of this directory (or a copy's) with env added to
// the environment, and returns its combined output and exit code.
func script(t *testing.T, path string, env []string, args ...string) (string, int) {
	t.Helper()
	abs, err := filepath.Abs(path)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(abs, args...) // by its own #! line, as its users run it
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); ok {
		return string(out), ee.ExitCode()
	}
	if err != nil {
		t.Fatal(err)
	}
	return string(out), 0
}

// allCaps is a full capability set as an OCI spec lists it (a selection:
// the wrapper must keep whatever the bounding set has).
var allCaps = []string{"CAP_CHOWN", "CAP_NET_ADMIN", "CAP_SYS_ADMIN", "CAP_SYS_RESOURCE", "CAP_SYS_TIME"}

// Bounding sets in /proc/self/status's hex: every capability of a
// current kernel, and the same without CAP_SYS_RESOURCE (bit 24).
const (
	fullBounding        = "000001ffffffffff"
	noSysResourceBounds = "000001fffeffffff"
)

func capSets(caps []string) map[string][]string {
	return map[string][]string{"bounding": caps, "effective": caps, "inheritable": caps, "permitted": caps, "ambient": caps}
}

// TestCapWrap: on create and run the wrapper removes from the bundle's
// config.json, and on exec from the --process file, every capability
// outside the bounding set, in each of the five sets, keeps everything
// else of the spec, and hands runc the same arguments; with nothing
// missing, or for any other runc command, the spec is left as it was.
func TestCapWrap(t *testing.T) {
	needLinux(t, "jq", "capsh")
	without := []string{"CAP_CHOWN", "CAP_NET_ADMIN", "CAP_SYS_ADMIN", "CAP_SYS_TIME"}
	for _, tc := range []struct {
		name     string
		bounding string
		args     func(bundle, process string) []string
		file     string // which spec the command reads: "config" or "process"
		want     []string
	}{
		{"create -b", noSysResourceBounds, func(b, _ string) []string { return []string{"--root", "/run/x", "create", "-b", b, "id1"} }, "config", without},
		{"create --bundle=", noSysResourceBounds, func(b, _ string) []string { return []string{"create", "--bundle=" + b, "id1"} }, "config", without},
		{"run --bundle", noSysResourceBounds, func(b, _ string) []string { return []string{"run", "--bundle", b, "id1"} }, "config", without},
		{"exec --process", noSysResourceBounds, func(_, p string) []string { return []string{"exec", "--process", p, "id1"} }, "process", without},
		{"exec -p", noSysResourceBounds, func(_, p string) []string { return []string{"exec", "-p", p, "id1"} }, "process", without},
		{"nothing missing", fullBounding, func(b, _ string) []string { return []string{"create", "-b", b, "id1"} }, "config", allCaps},
		{"other command", noSysResourceBounds, func(b, _ string) []string { return []string{"state", "id1", "-b", b} }, "config", allCaps},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			bundle := filepath.Join(dir, "bundle")
			config := map[string]any{"ociVersion": "1.0.2", "hostname": "node",
				"process": map[string]any{"args": []string{"/sbin/init"}, "capabilities": capSets(allCaps)}}
			process := map[string]any{"args": []string{"sh"}, "cwd": "/", "capabilities": capSets(allCaps)}
			configFile, processFile := filepath.Join(bundle, "config.json"), filepath.Join(dir, "process.json")
			for p, v := range map[string]any{configFile: config, processFile: process} {
				b, err := json.Marshal(v)
				if err != nil {
					t.Fatal(err)
				}
				writeFile(t, p, string(b))
			}
			calls := filepath.Join(dir, "runc-args")
			runc := stub(t, dir, "runc", `for a in "$@"; do echo "$a"; done >"`+calls+"\"\n")
			args := tc.args(bundle, processFile)
			out, code := script(t, "runc-capwrap.sh", []string{"QM_REAL_RUNC=" + runc, "QM_CAPWRAP_BOUNDING=" + tc.bounding}, args...)
			if code != 0 {
				t.Fatalf("exit %d: %s", code, out)
			}
			got, err := os.ReadFile(calls)
			if err != nil {
				t.Fatalf("runc was not run: %v", err)
			}
			if lines := strings.Split(strings.TrimSuffix(string(got), "\n"), "\n"); !reflect.DeepEqual(lines, args) {
				t.Errorf("runc got %q, want %q", lines, args)
			}

			read := func(p string) map[string]any {
				b, err := os.ReadFile(p)
				if err != nil {
					t.Fatal(err)
				}
				var v map[string]any
				if err := json.Unmarshal(b, &v); err != nil {
					t.Fatalf("%s: %v", p, err)
				}
				return v
			}
			gotConfig, gotProcess := read(configFile), read(processFile)
			wantConfigCaps, wantProcessCaps := allCaps, allCaps
			if tc.file == "config" {
				wantConfigCaps = tc.want
			} else {
				wantProcessCaps = tc.want
			}
			check := func(what string, caps any, want []string) {
				t.Helper()
				b, _ := json.Marshal(caps)
				wb, _ := json.Marshal(capSets(want))
				var g, w map[string]any
				_ = json.Unmarshal(b, &g)
				_ = json.Unmarshal(wb, &w)
				if !reflect.DeepEqual(g, w) {
					t.Errorf("%s capabilities:\n got %s\nwant %s", what, b, wb)
				}
			}
			check("config.json", gotConfig["process"].(map[string]any)["capabilities"], wantConfigCaps)
			check("process.json", gotProcess["capabilities"], wantProcessCaps)
			if gotConfig["hostname"] != "node" || gotConfig["ociVersion"] != "1.0.2" || gotProcess["cwd"] != "/" {
				t.Errorf("the rest of the spec changed: %v %v", gotConfig, gotProcess)
			}
			if leftovers, _ := filepath.Glob(filepath.Join(bundle, "*.capwrap.*")); len(leftovers) > 0 {
				t.Errorf("temporary files left: %v", leftovers)
			}
		})
	}
}

// nodeInputs is a complete set of inputs for node-image.sh, all stand-in
// files in a temporary directory, and a copy of this directory's files
// the key covers (the script keys on the copy beside it).
type nodeInputs struct {
	dir    string // everything is under here
	script string // the copy of node-image.sh
	env    map[string]string
}

func newNodeInputs(t *testing.T) *nodeInputs {
	t.Helper()
	dir := t.TempDir()
	hack := filepath.Join(dir, "hack")
	if out, err := exec.Command("cp", "-a", "node", "node-packages.txt", "node-image.sh", "runc-capwrap.sh", mkdir(t, hack)).CombinedOutput(); err != nil {
		t.Fatalf("copy the scripts: %v %s", err, out)
	}
	in := &nodeInputs{dir: dir, script: filepath.Join(hack, "node-image.sh"), env: map[string]string{
		"NODE_IMAGE": "example.test/kind-node:v1.36.3", "KUBE_VERSION": "v1.36.3",
		"ETCD_TAG": "3.6.8-0", "COREDNS_TAG": "v1.14.2", "PAUSE_TAG": "3.10.2",
		"ROOTFS": filepath.Join(dir, "rootfs"), "KUBE_BINS": filepath.Join(dir, "kube"), "CNI_BINS": filepath.Join(dir, "cni"),
		"WORK": filepath.Join(dir, "work"),
	}}
	writeFile(t, filepath.Join(dir, "rootfs", ".qm-packages"), "systemd\ncontainerd\n")
	for _, b := range []string{"kubelet", "kubeadm", "kube-proxy", "kube-scheduler", "kube-controller-manager"} {
		writeFile(t, filepath.Join(dir, "kube", b), b+" binary")
	}
	for _, b := range []string{"ptp", "bridge", "loopback", "host-local", "portmap"} {
		writeFile(t, filepath.Join(dir, "cni", b), b+" plugin")
	}
	for v, f := range map[string]string{"KUBE_APISERVER": "kube-apiserver", "KUBECTL": "kubectl", "ETCD": "etcd",
		"COREDNS": "coredns", "LAYERIMAGE": "layerimage", "PAUSE_C": "pause.c"} {
		p := filepath.Join(dir, "bin", f)
		writeFile(t, p, f+" contents")
		in.env[v] = p
	}
	return in
}

func mkdir(t *testing.T, p string) string {
	t.Helper()
	if err := os.MkdirAll(p, 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

func (in *nodeInputs) environ(extra ...string) []string {
	var env []string
	for k, v := range in.env {
		env = append(env, k+"="+v)
	}
	return append(env, extra...)
}

func (in *nodeInputs) key(t *testing.T) string {
	t.Helper()
	out, code := script(t, in.script, in.environ(), "--key")
	if code != 0 {
		t.Fatalf("node-image.sh --key: exit %d: %s", code, out)
	}
	key := strings.TrimSpace(out)
	if len(key) != 16 {
		t.Fatalf("key %q: want 16 hex digits", key)
	}
	return key
}

// TestNodeImageKey: the node image's key is the same for the same inputs
// and changes with each of them: a Kubernetes or CNI binary, the Debian
// package list, a file of the node's tree, the image name or a tag. A
// missing input fails instead of leaving it out of the key.
func TestNodeImageKey(t *testing.T) {
	needLinux(t, "sha256sum")
	in := newNodeInputs(t)
	base := in.key(t)
	if again := in.key(t); again != base {
		t.Fatalf("the same inputs give keys %s and %s", base, again)
	}
	for _, change := range []struct {
		name string
		do   func(in *nodeInputs)
	}{
		{"kubelet", func(in *nodeInputs) { writeFile(t, filepath.Join(in.env["KUBE_BINS"], "kubelet"), "another kubelet") }},
		{"a CNI plugin", func(in *nodeInputs) { writeFile(t, filepath.Join(in.env["CNI_BINS"], "ptp"), "another ptp") }},
		{"coredns", func(in *nodeInputs) { writeFile(t, in.env["COREDNS"], "another coredns") }},
		{"the package list", func(in *nodeInputs) {
			writeFile(t, filepath.Join(in.env["ROOTFS"], ".qm-packages"), "systemd\ncontainerd\nvim\n")
		}},
		{"a node file", func(in *nodeInputs) {
			writeFile(t, filepath.Join(filepath.Dir(in.script), "node", "etc", "containerd", "config.toml"), "# changed\n")
		}},
		{"the wrapper", func(in *nodeInputs) {
			writeFile(t, filepath.Join(filepath.Dir(in.script), "runc-capwrap.sh"), "#!/bin/sh\n")
		}},
		{"the image name", func(in *nodeInputs) { in.env["NODE_IMAGE"] = "example.test/kind-node:other" }},
		{"the etcd tag", func(in *nodeInputs) { in.env["ETCD_TAG"] = "3.6.9-0" }},
	} {
		t.Run(change.name, func(t *testing.T) {
			in := newNodeInputs(t)
			change.do(in)
			if got := in.key(t); got == base {
				t.Errorf("changing %s leaves the key %s", change.name, got)
			}
		})
	}
	t.Run("missing input", func(t *testing.T) {
		in := newNodeInputs(t)
		if err := os.Remove(filepath.Join(in.env["ROOTFS"], ".qm-packages")); err != nil {
			t.Fatal(err)
		}
		if out, code := script(t, in.script, in.environ(), "--key"); code == 0 {
			t.Errorf("no package list: exit 0 with key %s", out)
		}
	})
	t.Run("unset variable", func(t *testing.T) {
		in := newNodeInputs(t)
		delete(in.env, "CNI_BINS")
		out, code := script(t, in.script, append(in.environ(), "CNI_BINS="), "--key")
		if code != 2 || !strings.Contains(out, "CNI_BINS is not set") {
			t.Errorf("exit %d: %s", code, out)
		}
	})
}

// TestNodeImageUpToDate: where Docker has the image with the inputs' key
// as its label, node-image.sh only says so: nothing is compiled or
// imported. With another label it goes on to build.
func TestNodeImageUpToDate(t *testing.T) {
	needLinux(t, "sha256sum")
	in := newNodeInputs(t)
	key := in.key(t)
	bin := mkdir(t, filepath.Join(in.dir, "fakebin"))
	log := filepath.Join(in.dir, "calls")
	label := filepath.Join(in.dir, "label")
	stub(t, bin, "docker", `echo "docker $*" >>"`+log+`"
case "$1 $2" in "image inspect") cat "`+label+`" ;; esac
`)
	stub(t, bin, "gcc", `echo "gcc $*" >>"`+log+`"; exit 1`+"\n")
	path := "PATH=" + bin + string(os.PathListSeparator) + os.Getenv("PATH")

	writeFile(t, label, key+"\n")
	out, code := script(t, in.script, in.environ(path))
	if code != 0 || !strings.Contains(out, "is up to date (inputs "+key+")") {
		t.Errorf("up to date: exit %d: %s", code, out)
	}
	calls := readLines(t, log)
	if len(calls) != 1 || !strings.HasPrefix(calls[0], "docker image inspect --format {{index .Config.Labels \"dev.quartermaster.kind-node.inputs\"}} example.test/kind-node:v1.36.3") {
		t.Errorf("calls when up to date: %q, want the label's inspect only", calls)
	}
	if _, err := os.Stat(in.env["WORK"]); !os.IsNotExist(err) {
		t.Errorf("the work directory was made: %v", err)
	}

	writeFile(t, label, "0123456789abcdef\n")
	if err := os.Remove(log); err != nil {
		t.Fatal(err)
	}
	if out, code := script(t, in.script, in.environ(path)); code == 0 {
		t.Errorf("with a stale label and a failing compiler: exit 0: %s", out)
	}
	if calls := readLines(t, log); len(calls) < 2 || !strings.HasPrefix(calls[1], "gcc ") {
		t.Errorf("with a stale label, no build began: %q", calls)
	}
}

func readLines(t *testing.T, p string) []string {
	t.Helper()
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var lines []string
	s := bufio.NewScanner(f)
	for s.Scan() {
		lines = append(lines, s.Text())
	}
	return lines
}

// mountsUnder lists the mount points at or below dir.
func mountsUnder(t *testing.T, dir string) []string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mounts")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) > 1 && (f[1] == dir || strings.HasPrefix(f[1], dir+"/")) {
			out = append(out, f[1])
		}
	}
	return out
}

// canMount skips the test where this process cannot mount (debootstrap
// itself needs root), and unmounts whatever a failed test leaves under dir.
func canMount(t *testing.T, dir string) {
	t.Helper()
	probe := mkdir(t, filepath.Join(dir, "probe"))
	if out, err := exec.Command("mount", "-t", "tmpfs", "qm-probe", probe).CombinedOutput(); err != nil {
		t.Skipf("cannot mount here (%v: %s); rootfs.sh runs as root", err, strings.TrimSpace(string(out)))
	}
	if out, err := exec.Command("umount", probe).CombinedOutput(); err != nil {
		t.Fatalf("umount %s: %v %s", probe, err, out)
	}
	t.Cleanup(func() {
		for _, m := range mountsUnder(t, dir) {
			_ = exec.Command("umount", "-l", m).Run()
		}
	})
}

// TestRootfs: rootfs.sh hands debootstrap the suite, the mirror and the
// package list, and leaves nothing mounted under the tree, whether
// debootstrap succeeds (the tree is then in place with its package list)
// or fails (then there is no tree). --remove unmounts before removing.
func TestRootfs(t *testing.T) {
	needLinux(t, "mount", "umount", "realpath")
	dir, err := filepath.EvalSymlinks(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	canMount(t, dir)
	bin := mkdir(t, filepath.Join(dir, "fakebin"))
	// debootstrap --variant=minbase --include=PKGS SUITE TARGET MIRROR:
	// a tree with /proc mounted, as the real one has while it works.
	stub(t, bin, "debootstrap", `echo "$*" >"$FAKE_DIR/debootstrap-args"
mkdir -p "$4/proc" "$4/etc"
echo debian >"$4/etc/os-release"
mount -t tmpfs qm-test-proc "$4/proc"
exit "${FAKE_EXIT:-0}"
`)
	packages := filepath.Join(dir, "packages.txt")
	writeFile(t, packages, "systemd\ncontainerd\nrunc\n")
	path := "PATH=" + bin + string(os.PathListSeparator) + os.Getenv("PATH")

	dest := filepath.Join(dir, "_rootfs-bookworm-x")
	writeFile(t, filepath.Join(dest, "old"), "an older tree")
	out, code := script(t, "rootfs.sh", []string{path, "FAKE_DIR=" + dir}, "bookworm", "http://mirror.invalid/debian", packages, dest)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, out)
	}
	args, err := os.ReadFile(filepath.Join(dir, "debootstrap-args"))
	if err != nil {
		t.Fatal(err)
	}
	if want := "--variant=minbase --include=systemd,containerd,runc bookworm " + dest + ".tmp http://mirror.invalid/debian\n"; string(args) != want {
		t.Errorf("debootstrap got %q, want %q", args, want)
	}
	if m := mountsUnder(t, dir); len(m) > 0 {
		t.Errorf("still mounted after success: %q", m)
	}
	if b, err := os.ReadFile(filepath.Join(dest, ".qm-packages")); err != nil || string(b) != "systemd\ncontainerd\nrunc\n" {
		t.Errorf("the tree's package list: %q %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(dest, "etc", "os-release")); err != nil {
		t.Errorf("the tree is not in place: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dest, "old")); !os.IsNotExist(err) {
		t.Errorf("the older tree's file is still there: %v", err)
	}
	if _, err := os.Stat(dest + ".tmp"); !os.IsNotExist(err) {
		t.Errorf("the temporary tree is left: %v", err)
	}

	failed := filepath.Join(dir, "_rootfs-failed")
	if out, code := script(t, "rootfs.sh", []string{path, "FAKE_DIR=" + dir, "FAKE_EXIT=1"}, "bookworm", "http://mirror.invalid/debian", packages, failed); code == 0 {
		t.Errorf("debootstrap failed, rootfs.sh exit 0: %s", out)
	}
	if m := mountsUnder(t, dir); len(m) > 0 {
		t.Errorf("still mounted after a failure: %q", m)
	}
	if _, err := os.Stat(failed); !os.IsNotExist(err) {
		t.Errorf("a failed run left a tree: %v", err)
	}

	// What a failure leaves (the temporary tree, /proc mounted in it)
	// goes with --remove, the mount first.
	left := mkdir(t, filepath.Join(failed+".tmp", "proc"))
	if out, err := exec.Command("mount", "-t", "tmpfs", "qm-test-proc", left).CombinedOutput(); err != nil {
		t.Fatalf("mount: %v %s", err, out)
	}
	writeFile(t, filepath.Join(left, "keep"), "on the mounted file system")
	if out, code := script(t, "rootfs.sh", nil, "--remove", failed+".tmp"); code != 0 {
		t.Fatalf("--remove: exit %d: %s", code, out)
	}
	if m := mountsUnder(t, dir); len(m) > 0 {
		t.Errorf("still mounted after --remove: %q", m)
	}
	if _, err := os.Stat(failed + ".tmp"); !os.IsNotExist(err) {
		t.Errorf("--remove left the tree: %v", err)
	}
}
