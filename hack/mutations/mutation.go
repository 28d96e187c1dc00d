package main

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// A Mutation is one named way of breaking the product on purpose, and the
// tests that must notice: each of its edits must apply exactly once to
// the tree, and each of its tests must fail on the mutated tree.
//
// A mutation file (NAME.mut in this directory) holds, one per line:
//
//	# why the tests must notice (comment lines are kept as the reason)
//	test: e2e LABEL            the e2e/multicluster spec with that Ginkgo label
//	test: go PACKAGE REGEXP    go test -run REGEXP PACKAGE
//	file: PATH                 the file the next edits change
//	find: TEXT                 what to change (see Edit)
//	replace: TEXT              what it becomes
//
// Every find is followed by its replace; a file line holds for the edits
// after it.
type Mutation struct {
	Name   string
	Reason string
	Tests  []Test
	Edits  []Edit
}

// A Test is one test a mutation must make fail.
type Test struct {
	// Kind is "e2e" or "go".
	Kind string
	// Label is the e2e spec's Ginkgo label.
	Label string
	// Package and Run are the go test's package and -run pattern.
	Package, Run string
}

func (t Test) String() string {
	if t.Kind == "e2e" {
		return "e2e " + t.Label
	}
	return "go " + t.Package + " " + t.Run
}

// An Edit replaces the one occurrence of Find in File with Replace. Find
// is literal text, except that a run of white space in it matches any run
// of white space (line breaks included): an edit anchored on a line of
// logic survives reindentation and rewrapping, and fails loudly when the
// line itself changes or goes.
type Edit struct {
	File, Find, Replace string
}

// pattern is Find as a regular expression.
func (e Edit) pattern() *regexp.Regexp {
	var b strings.Builder
	for i, f := range strings.Fields(e.Find) {
		if i > 0 {
			b.WriteString(`\s+`)
		}
		b.WriteString(regexp.QuoteMeta(f))
	}
	return regexp.MustCompile(b.String())
}

// Apply makes the edit to the tree at root. It fails, naming the mutation,
// file and text, unless the text occurs exactly once.
func (e Edit) Apply(root string) error {
	path := filepath.Join(root, filepath.FromSlash(e.File))
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	re := e.pattern()
	found := re.FindAllIndex(b, -1)
	switch len(found) {
	case 1:
	case 0:
		return fmt.Errorf("%s: %q is not there any more (the code moved: update the mutation)", e.File, e.Find)
	default:
		return fmt.Errorf("%s: %q occurs %d times; the edit must name one place", e.File, e.Find, len(found))
	}
	at := found[0]
	out := append(append(append([]byte{}, b[:at[0]]...), e.Replace...), b[at[1]:]...)
	info, err := os.Stat(path)
	if err != nil {
		return err
	}
	return os.WriteFile(path, out, info.Mode().Perm())
}

// Apply makes every edit of the mutation to the tree at root.
func (m *Mutation) Apply(root string) error {
	for _, e := range m.Edits {
		if err := e.Apply(root); err != nil {
			return fmt.Errorf("mutation %s: %w", m.Name, err)
		}
	}
	return nil
}

// Load reads every NAME.mut in dir, sorted by name.
func Load(dir string) ([]*Mutation, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.mut"))
	if err != nil {
		return nil, err
	}
	sort.Strings(files)
	var out []*Mutation
	for _, f := range files {
		m, err := parseFile(f)
		if err != nil {
			return nil, err
		}
		out = append(out, m)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no *.mut files in %s", dir)
	}
	return out, nil
}

func parseFile(path string) (*Mutation, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	m := &Mutation{Name: strings.TrimSuffix(filepath.Base(path), ".mut")}
	var reason []string
	file := ""
	var pending *Edit
	n := 0
	fail := func(format string, args ...any) error {
		return fmt.Errorf("%s:%d: %s", path, n, fmt.Sprintf(format, args...))
	}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		n++
		line := strings.TrimSpace(sc.Text())
		if line == "" {
			continue
		}
		if c, ok := strings.CutPrefix(line, "#"); ok {
			reason = append(reason, strings.TrimSpace(c))
			continue
		}
		key, val, ok := strings.Cut(line, ":")
		if !ok {
			return nil, fail("want KEY: VALUE, got %q", line)
		}
		val = strings.TrimSpace(val)
		if pending != nil && key != "replace" {
			return nil, fail("find without its replace")
		}
		switch key {
		case "test":
			t, err := parseTest(val)
			if err != nil {
				return nil, fail("%v", err)
			}
			m.Tests = append(m.Tests, t)
		case "file":
			file = val
		case "find":
			if file == "" {
				return nil, fail("find before any file")
			}
			if val == "" {
				return nil, fail("empty find")
			}
			pending = &Edit{File: file, Find: val}
		case "replace":
			if pending == nil {
				return nil, fail("replace without a find")
			}
			pending.Replace = val
			m.Edits = append(m.Edits, *pending)
			pending = nil
		default:
			return nil, fail("unknown key %q (want test, file, find or replace)", key)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	switch {
	case pending != nil:
		return nil, fail("find without its replace")
	case len(m.Edits) == 0:
		return nil, fmt.Errorf("%s: no edits", path)
	case len(m.Tests) == 0:
		return nil, fmt.Errorf("%s: no tests", path)
	}
	m.Reason = strings.Join(reason, " ")
	return m, nil
}

func parseTest(s string) (Test, error) {
	f := strings.Fields(s)
	switch {
	case len(f) == 2 && f[0] == "e2e":
		return Test{Kind: "e2e", Label: f[1]}, nil
	case len(f) == 3 && f[0] == "go":
		if _, err := regexp.Compile(f[2]); err != nil {
			return Test{}, fmt.Errorf("test %q: %v", s, err)
		}
		return Test{Kind: "go", Package: f[1], Run: f[2]}, nil
	}
	return Test{}, fmt.Errorf("test %q: want \"e2e LABEL\" or \"go PACKAGE REGEXP\"", s)
}
