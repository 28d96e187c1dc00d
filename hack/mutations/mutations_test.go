package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestEveryMutationApplies: each mutation's edits apply exactly once to
// the tree as it is, so `make e2e-mutations` breaks what it says it
// breaks; a failure here means the code a mutation edits moved.
func TestEveryMutationApplies(t *testing.T) {
	ms, err := Load(".")
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Join("..", "..")
	for _, m := range ms {
		t.Run(m.Name, func(t *testing.T) {
			tree := t.TempDir()
			for _, e := range m.Edits {
				b, err := os.ReadFile(filepath.Join(root, e.File))
				if err != nil {
					t.Fatal(err)
				}
				dst := filepath.Join(tree, e.File)
				if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(dst, b, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if err := m.Apply(tree); err != nil {
				t.Fatal(err)
			}
			if m.Reason == "" {
				t.Error("no comment saying what the mutation breaks")
			}
		})
	}
}

func TestEditApply(t *testing.T) {
	write := func(t *testing.T, text string) string {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "f.go"), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	read := func(t *testing.T, dir string) string {
		b, err := os.ReadFile(filepath.Join(dir, "f.go"))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	t.Run("white space in find matches any white space", func(t *testing.T) {
		dir := write(t, "func f() bool {\n\tmu.Lock()\n\treturn x == y\n}\n")
		e := Edit{File: "f.go", Find: "mu.Lock() return x == y", Replace: "return true"}
		if err := e.Apply(dir); err != nil {
			t.Fatal(err)
		}
		if got, want := read(t, dir), "func f() bool {\n\treturn true\n}\n"; got != want {
			t.Errorf("got %q, want %q", got, want)
		}
	})
	t.Run("text gone", func(t *testing.T) {
		dir := write(t, "return x != y\n")
		err := Edit{File: "f.go", Find: "x == y", Replace: "true"}.Apply(dir)
		if err == nil || !strings.Contains(err.Error(), "is not there any more") {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("text twice", func(t *testing.T) {
		dir := write(t, "a == b\na == b\n")
		err := Edit{File: "f.go", Find: "a == b", Replace: "true"}.Apply(dir)
		if err == nil || !strings.Contains(err.Error(), "occurs 2 times") {
			t.Fatalf("err = %v", err)
		}
	})
	t.Run("regexp characters are literal", func(t *testing.T) {
		dir := write(t, "x := a.b(c)\nx := aXb(c)\n")
		if err := (Edit{File: "f.go", Find: "a.b(c)", Replace: "d"}).Apply(dir); err != nil {
			t.Fatal(err)
		}
		if got := read(t, dir); got != "x := d\nx := aXb(c)\n" {
			t.Errorf("got %q", got)
		}
	})
}

func TestParseErrors(t *testing.T) {
	for name, text := range map[string]string{
		"find without replace": "# r\ntest: e2e x\nfile: a.go\nfind: x\n",
		"replace without find": "# r\ntest: e2e x\nfile: a.go\nreplace: y\n",
		"find before file":     "# r\ntest: e2e x\nfind: x\nreplace: y\n",
		"no tests":             "# r\nfile: a.go\nfind: x\nreplace: y\n",
		"bad test":             "# r\ntest: unit x\nfile: a.go\nfind: x\nreplace: y\n",
		"unknown key":          "# r\ntest: e2e x\nfile: a.go\nfnd: x\nreplace: y\n",
	} {
		t.Run(name, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "m.mut")
			if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
				t.Fatal(err)
			}
			if _, err := parseFile(p); err == nil {
				t.Fatal("parsed")
			}
		})
	}
}
