package kind

import (
	"bufio"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// The Dockerfile cannot be built here (no Docker daemon, no base images),
// so TestDockerfile checks what can be checked without building it: that
// it builds the qm binary from paths that exist and the build context
// keeps, with a Go at least go.mod's, and runs it as its entry point as a
// non-root user, the same user deploy/allocator.yaml runs as.

type instruction struct {
	cmd, args string
}

type stage struct {
	from, name string
	body       []instruction
}

// parseDockerfile reads the instructions (continuations joined, comments
// dropped) into stages, with ARGs before the first FROM substituted.
func parseDockerfile(t *testing.T, file string) []stage {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var lines []string
	var cont strings.Builder
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		l := strings.TrimSpace(sc.Text())
		if strings.HasPrefix(l, "#") || (l == "" && cont.Len() == 0) {
			continue
		}
		if s, ok := strings.CutSuffix(l, `\`); ok {
			cont.WriteString(s + " ")
			continue
		}
		cont.WriteString(l)
		lines = append(lines, cont.String())
		cont.Reset()
	}
	args := map[string]string{}
	var stages []stage
	for _, l := range lines {
		cmd, rest, _ := strings.Cut(l, " ")
		cmd = strings.ToUpper(cmd)
		switch {
		case cmd == "ARG" && len(stages) == 0:
			k, v, _ := strings.Cut(rest, "=")
			args[k] = v
		case cmd == "FROM":
			for k, v := range args {
				rest = strings.ReplaceAll(rest, "${"+k+"}", v)
			}
			from, name, _ := strings.Cut(rest, " AS ")
			stages = append(stages, stage{from: strings.TrimSpace(from), name: strings.TrimSpace(name)})
		case len(stages) == 0:
			t.Fatalf("%s: %s before the first FROM", file, cmd)
		default:
			s := &stages[len(stages)-1]
			s.body = append(s.body, instruction{cmd, strings.TrimSpace(rest)})
		}
	}
	return stages
}

func TestDockerfile(t *testing.T) {
	repo := "../.."
	stages := parseDockerfile(t, filepath.Join(repo, "Dockerfile"))
	if len(stages) != 2 {
		t.Fatalf("%d stages, want 2 (build, run)", len(stages))
	}
	build, run := stages[0], stages[1]

	// The build stage: a Go image no older than go.mod asks for.
	image, tag, _ := strings.Cut(build.from, ":")
	if image != "golang" || build.name == "" {
		t.Errorf("build stage FROM %q AS %q, want golang:VERSION AS a name", build.from, build.name)
	}
	if want := goDirective(t, filepath.Join(repo, "go.mod")); !versionAtLeast(tag, want) {
		t.Errorf("build image golang:%s is older than go.mod's go %s", tag, want)
	}
	var out string
	for _, in := range build.body {
		switch in.cmd {
		case "COPY":
			for _, src := range strings.Fields(in.args)[:len(strings.Fields(in.args))-1] {
				if _, err := os.Stat(filepath.Join(repo, src)); err != nil {
					t.Errorf("COPY %s: %v", src, err)
				}
			}
		case "RUN":
			if !strings.Contains(in.args, "go build") {
				continue
			}
			f := strings.Fields(in.args)
			for i, a := range f {
				if a == "-o" && i+1 < len(f) {
					out = f[i+1]
				}
			}
			pkg := f[len(f)-1]
			if _, err := os.Stat(filepath.Join(repo, pkg, "main.go")); err != nil {
				t.Errorf("go build %s: %v", pkg, err)
			}
			if !strings.Contains(in.args, "CGO_ENABLED=0") {
				t.Errorf("go build without CGO_ENABLED=0: the static runtime image has no C library")
			}
		}
	}
	if out == "" {
		t.Fatal("no RUN go build -o BINARY PACKAGE in the build stage")
	}

	// The run stage: the binary from the build stage is the entry point,
	// run as a non-root user, the one deploy/allocator.yaml runs as.
	var copied, user string
	var entry []string
	for _, in := range run.body {
		switch in.cmd {
		case "COPY":
			f := strings.Fields(in.args)
			if len(f) == 3 && f[0] == "--from="+build.name && f[1] == out {
				copied = f[2]
			}
		case "USER":
			user = in.args
		case "ENTRYPOINT":
			if err := json.Unmarshal([]byte(in.args), &entry); err != nil {
				t.Errorf("ENTRYPOINT %s: want the exec form (a JSON list): %v", in.args, err)
			}
		}
	}
	if copied == "" {
		t.Errorf("the run stage does not COPY --from=%s %s", build.name, out)
	}
	if len(entry) == 0 || entry[0] != copied {
		t.Errorf("ENTRYPOINT %q, want the copied binary %s first", entry, copied)
	}
	uid, _, _ := strings.Cut(user, ":")
	if n, err := strconv.Atoi(uid); err != nil || n == 0 {
		t.Errorf("USER %q, want a numeric non-root uid (Kubernetes' runAsNonRoot can only check numbers)", user)
	} else if want := allocatorRunAsUser(t, filepath.Join(repo, "deploy", "allocator.yaml")); want != n {
		t.Errorf("USER %d, but deploy/allocator.yaml runs as %d", n, want)
	}
	if !strings.Contains(run.from, "distroless/static") {
		t.Errorf("run stage FROM %s, want a distroless static image", run.from)
	}

	// The build context keeps every package qm is built from.
	ignore := readDockerignore(t, filepath.Join(repo, ".dockerignore"))
	for _, keep := range append(qmPackageDirs(t, repo), "go.mod", "go.sum", "Dockerfile") {
		if p := ignore.excludes(keep); p != "" {
			t.Errorf(".dockerignore pattern %q leaves %s out of the build context", p, keep)
		}
	}
	for _, gone := range []string{".git", "bin/kube-apiserver", "tools/kube/go.mod", "kindcluster/kind/kind.test"} {
		if ignore.excludes(gone) == "" {
			t.Errorf(".dockerignore sends %s to the Docker daemon", gone)
		}
	}
}

func goDirective(t *testing.T, gomod string) string {
	t.Helper()
	b, err := os.ReadFile(gomod)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "go "); ok {
			return strings.TrimSpace(v)
		}
	}
	t.Fatal("go.mod has no go line")
	return ""
}

// versionAtLeast compares dotted versions by their first two numbers
// (an image tag 1.26 covers go 1.26.0).
func versionAtLeast(have, want string) bool {
	num := func(v string) [2]int {
		var out [2]int
		for i, p := range strings.SplitN(v, ".", 3)[:min(2, len(strings.SplitN(v, ".", 3)))] {
			out[i], _ = strconv.Atoi(p)
		}
		return out
	}
	h, w := num(have), num(want)
	return h[0] > w[0] || h[0] == w[0] && h[1] >= w[1]
}

func allocatorRunAsUser(t *testing.T, file string) int {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	docs, err := decodeAll(b)
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range docs {
		if !isWorkload(fmt.Sprint(d["kind"])) {
			continue
		}
		spec, _ := d["spec"].(map[string]any)
		tmpl, _ := spec["template"].(map[string]any)
		pod, _ := tmpl["spec"].(map[string]any)
		sc, _ := pod["securityContext"].(map[string]any)
		if n, ok := sc["runAsUser"].(float64); ok {
			return int(n)
		}
	}
	t.Fatalf("%s: no StatefulSet or Deployment with a pod securityContext.runAsUser", file)
	return 0
}

// qmPackageDirs are the repository's directories qm is built from.
func qmPackageDirs(t *testing.T, repo string) []string {
	t.Helper()
	cmd := exec.Command("go", "list", "-e", "-deps", "-f", "{{if not .Standard}}{{.ImportPath}}{{end}}", "./cmd/qm")
	cmd.Dir = repo
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list ./cmd/qm: %v", err)
	}
	mod := "github.com/quartermaster-dev/quartermaster"
	var dirs []string
	for _, p := range strings.Fields(string(out)) {
		if rel, ok := strings.CutPrefix(p, mod+"/"); ok {
			dirs = append(dirs, rel+"/x.go")
		}
	}
	if len(dirs) < 3 {
		t.Fatalf("go list found only %v", dirs)
	}
	return dirs
}

type dockerignore []string

func readDockerignore(t *testing.T, file string) dockerignore {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var out dockerignore
	for _, l := range strings.Split(string(b), "\n") {
		l = strings.TrimSpace(l)
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		if strings.HasPrefix(l, "!") {
			t.Fatalf(".dockerignore: %q: exceptions are not understood by this test; extend it", l)
		}
		out = append(out, strings.TrimPrefix(l, "/"))
	}
	return out
}

// excludes returns the pattern that leaves p (slash-separated, relative to
// the context) out, or "". As Docker does, a pattern matching a directory
// excludes everything under it; "**/" matches any number of directories.
func (d dockerignore) excludes(p string) string {
	for _, pat := range d {
		for prefix := p; prefix != "." && prefix != "/"; prefix = path.Dir(prefix) {
			if rest, ok := strings.CutPrefix(pat, "**/"); ok {
				if m, _ := path.Match(rest, path.Base(prefix)); m {
					return pat
				}
			}
			if m, _ := path.Match(pat, prefix); m {
				return pat
			}
		}
	}
	return ""
}
