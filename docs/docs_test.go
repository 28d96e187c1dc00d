package docs

import (
	"bytes"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"unicode"
)

// cited matches a mention of a Markdown document under docs/, with or
// without the directory: "docs/architecture.md" or a bare "architecture.md".
// docPath is where the document called name lives in the repository.
func docPath(name string) string { return "docs/" + name + ".md" }

var cited = regexp.MustCompile(`(docs/)?\b([a-z][a-z0-9-]*)\.md\b`)

// skipDirs are not the project's text: build output, state, VCS, fixtures
// that are inputs rather than prose.
var skipDirs = map[string]bool{".git": true, "bin": true, ".state": true, "node_modules": true, "testdata": true}

// textExt are the files whose comments and prose may cite a document.
var textExt = map[string]bool{".go": true, ".proto": true, ".sh": true, ".mk": true, ".md": true, ".yaml": true, ".yml": true}

// TestCitedDocsExist: every comment, script or page that names one of the
// documents in docs/ must find it there, and must say docs/ so that a reader
// knows where to look. A document cited but not carried by the repository
// (one that lives only on someone's machine) fails here.
func TestCitedDocsExist(t *testing.T) {
	entries, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	ours := map[string]bool{}
	for _, e := range entries {
		if name, ok := strings.CutSuffix(e.Name(), ".md"); ok {
			ours[name] = true
		}
	}
	for _, must := range []string{"architecture", "agones-compat", "local-clusters", "allocation"} {
		if !ours[must] {
			t.Errorf("%s is missing", docPath(must))
		}
	}

	root := ".."
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if skipDirs[d.Name()] || (path != root && isModuleRoot(path)) {
				return filepath.SkipDir
			}
			return nil
		}
		if !textExt[filepath.Ext(path)] {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		inDocs := filepath.Dir(rel) == "docs"
		for i, line := range bytes.Split(b, []byte("\n")) {
			for _, m := range cited.FindAllSubmatch(line, -1) {
				name := string(m[2])
				withDir := len(m[1]) > 0
				switch {
				case withDir && !ours[name]:
					t.Errorf("%s:%d cites %s, which the repository does not carry", rel, i+1, docPath(name))
				case !withDir && ours[name] && !inDocs:
					t.Errorf("%s:%d cites %s without docs/: say %s", rel, i+1, name+".md", docPath(name))
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// isModuleRoot reports whether dir is another Go module (tools/*,
// deploy/helm): their own documents are their own business.
func isModuleRoot(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, "go.mod"))
	return err == nil
}

// TestDocumentedOutputsIgnored: files the README's commands write into the
// checkout (qm sim --out results.json) must not show up as changes to
// commit. Needs git and a checkout; skipped in a source tarball.
func TestDocumentedOutputsIgnored(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git")
	}
	if _, err := os.Stat(filepath.Join("..", ".git")); err != nil {
		t.Skip("not a git checkout")
	}
	for _, f := range []string{"results.json", "bin/qm"} {
		cmd := exec.Command("git", "check-ignore", "-q", f)
		cmd.Dir = ".."
		if err := cmd.Run(); err != nil {
			t.Errorf("%s is not ignored by git (git check-ignore: %v)", f, err)
		}
	}
}

// TestReadmeIsShort: the README is the newcomer's path (what it is, two
// commands, by hand, the main flows); details belong in package READMEs
// and docs/.
func TestReadmeIsShort(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if n := bytes.Count(b, []byte("\n")); n >= 300 {
		t.Errorf("README.md has %d lines; keep it under 300 and move details to a package README or docs/", n)
	}
}

// mdLink matches a Markdown link's target: [text](target).
var mdLink = regexp.MustCompile(`\]\(([^()\s]+)\)`)

// TestRelativeLinksResolve: every relative link in the repository's
// Markdown pages points at a file or directory that exists and, when it
// names a heading (#anchor) of a Markdown page, at a heading that exists,
// so that moving a section cannot leave a link pointing at nothing.
func TestRelativeLinksResolve(t *testing.T) {
	root := ".."
	checked := 0
	anchors := map[string]map[string]bool{}
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if skipDirs[d.Name()] || (path != root && isModuleRoot(path)) {
				return filepath.SkipDir
			}
			return nil
		}
		if filepath.Ext(path) != ".md" {
			return nil
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		for i, line := range strings.Split(string(b), "\n") {
			for _, m := range mdLink.FindAllStringSubmatch(line, -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				file, anchor, _ := strings.Cut(target, "#")
				dest := path
				if file != "" {
					dest = filepath.Join(filepath.Dir(path), file)
					if _, err := os.Stat(dest); err != nil {
						t.Errorf("%s:%d links to %s, which does not exist", rel, i+1, target)
						continue
					}
				}
				checked++
				if anchor == "" || filepath.Ext(dest) != ".md" {
					continue
				}
				if anchors[dest] == nil {
					anchors[dest] = headingAnchors(t, dest)
				}
				if !anchors[dest][anchor] {
					t.Errorf("%s:%d links to %s, which has no heading #%s", rel, i+1, target, anchor)
				}
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 20 {
		t.Errorf("checked only %d links; is the pattern still right?", checked)
	}
}

// headingAnchors returns the anchors GitHub gives the headings of a
// Markdown page: lower case, punctuation other than - and _ dropped,
// spaces as -, a repeated heading numbered -1, -2, ...
func headingAnchors(t *testing.T, path string) map[string]bool {
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]int{}
	out := map[string]bool{}
	fence := false
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "```") {
			fence = !fence
		}
		if fence || !strings.HasPrefix(line, "#") {
			continue
		}
		a := slug(strings.TrimLeft(line, "#"))
		if n := seen[a]; n > 0 {
			out[a+"-"+strconv.Itoa(n)] = true
		} else {
			out[a] = true
		}
		seen[a]++
	}
	return out
}

func slug(heading string) string {
	var s strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
		switch {
		case r == ' ':
			s.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			s.WriteRune(r)
		}
	}
	return s.String()
}

// TestSlug: the anchors the links above are checked against.
func TestSlug(t *testing.T) {
	for in, want := range map[string]string{
		" On-demand servers (Create)":                    "on-demand-servers-create",
		" A floor to measure a hop against: `qm relay`":  "a-floor-to-measure-a-hop-against-qm-relay",
		" Fourth pass, 2026-11-25, dev-2core: at target": "fourth-pass-2026-11-25-dev-2core-at-target",
	} {
		if got := slug(in); got != want {
			t.Errorf("slug(%q) = %q, want %q", in, got, want)
		}
	}
}
