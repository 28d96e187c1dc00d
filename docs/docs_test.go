package docs

import (
	"bytes"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
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
