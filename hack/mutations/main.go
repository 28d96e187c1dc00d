// Command mutations proves the tests by breaking the product on purpose
// (`make e2e-mutations`): for each named mutation in this directory
// (NAME.mut, see Mutation) it copies the tree, applies the mutation, runs
// the tests the mutation names, and reports whether each one failed, as
// it must. It fails when any test still passes on a mutated tree, when a
// mutation no longer applies (the code it edits moved), or when a test
// fails on the tree as it is (then a failure would prove nothing).
//
//	go run ./hack/mutations [-only NAME,...] [-tests all|e2e|go] [-ref REF] [-logs DIR] [-keep]
//
// The tree is the working tree's files that git tracks or would track, or
// the commit REF. The copies are made in one place, one after another,
// and built with -trimpath, so the build cache serves what a mutation
// does not touch. The e2e specs run on the local rig (PROVIDER=local),
// one spec per run, selected by its Ginkgo label.
package main

import (
	"archive/tar"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

func main() {
	only := flag.String("only", "", "comma-separated mutation names to run (default: all)")
	ref := flag.String("ref", "", "copy this commit instead of the working tree")
	logs := flag.String("logs", "bin/mutations", "where each run's output goes")
	keep := flag.Bool("keep", false, "keep the copy of the tree")
	list := flag.Bool("list", false, "list the mutations and their tests, apply each to a copy, and run nothing")
	kinds := flag.String("tests", "all", "which tests to run: all, e2e (the specs) or go (the go tests)")
	flag.Parse()
	switch *kinds {
	case "all", "e2e", "go":
	default:
		fmt.Fprintf(os.Stderr, "mutations: -tests %q: want all, e2e or go\n", *kinds)
		os.Exit(2)
	}
	if err := run(*only, *ref, *logs, *kinds, *keep, *list); err != nil {
		fmt.Fprintln(os.Stderr, "mutations:", err)
		os.Exit(1)
	}
}

// row is one line of the table: a mutation, a test, and what happened.
type row struct {
	mutation, test, result string
	took                   time.Duration
	ok                     bool
}

func run(only, ref, logs, kinds string, keep, list bool) error {
	root, err := repoRoot()
	if err != nil {
		return err
	}
	ms, err := Load(filepath.Join(root, "hack", "mutations"))
	if err != nil {
		return err
	}
	if ms, err = pick(ms, only, kinds); err != nil {
		return err
	}
	if !filepath.IsAbs(logs) {
		logs = filepath.Join(root, logs)
	}
	if err := os.MkdirAll(logs, 0o755); err != nil {
		return err
	}
	work, err := os.MkdirTemp("", "qm-mutations-")
	if err != nil {
		return err
	}
	if !keep {
		defer os.RemoveAll(work)
	}
	files, err := treeFiles(root, ref)
	if err != nil {
		return err
	}
	c := &treeCopy{dir: filepath.Join(work, "tree"), files: files}
	env := append(os.Environ(),
		"GOFLAGS=-trimpath",
		// The copy has no bin/: the control-plane binaries are the tree's.
		"QM_BIN_DIR="+filepath.Join(root, "bin"),
		"QM_E2E_PROVIDER=local")
	start := time.Now()

	// Every mutation applies before anything runs: one that does not
	// fails the whole run at once.
	for _, m := range ms {
		if err := c.mutate(m); err != nil {
			return err
		}
	}
	if list {
		printList(ms)
		return nil
	}
	rows, err := runUnmutated(c, env, ms, logs)
	if err != nil {
		if len(rows) > 0 {
			printTable(rows, time.Since(start))
		}
		return err
	}
	rows, failed, err := runMutated(c, env, ms, logs, rows)
	if err != nil {
		return err
	}
	printTable(rows, time.Since(start))
	if failed > 0 {
		return fmt.Errorf("%d of %d runs did not catch their mutation (logs in %s)", failed, len(rows)-len(baseline(ms)), logs)
	}
	return nil
}

// pick keeps the mutations named in only (comma-separated; all when
// empty), each with just its tests of kind kinds (all, e2e or go), and
// drops those left with no test.
func pick(ms []*Mutation, only, kinds string) ([]*Mutation, error) {
	if only != "" {
		var picked []*Mutation
		for _, name := range strings.Split(only, ",") {
			i := slices.IndexFunc(ms, func(m *Mutation) bool { return m.Name == name })
			if i < 0 {
				return nil, fmt.Errorf("no mutation %q", name)
			}
			picked = append(picked, ms[i])
		}
		ms = picked
	}
	if kinds == "all" {
		return ms, nil
	}
	var kept []*Mutation
	for _, m := range ms {
		var ts []Test
		for _, t := range m.Tests {
			if t.Kind == kinds {
				ts = append(ts, t)
			}
		}
		if len(ts) > 0 {
			mm := *m
			mm.Tests = ts
			kept = append(kept, &mm)
		}
	}
	return kept, nil
}

// treeCopy is the one copy of the tree the tests run in, written afresh
// for each run.
type treeCopy struct {
	dir   string
	files files
}

// fresh writes the tree as it is.
func (c *treeCopy) fresh() error {
	if err := os.RemoveAll(c.dir); err != nil {
		return err
	}
	return c.files.writeTo(c.dir)
}

// mutate writes the tree with m applied.
func (c *treeCopy) mutate(m *Mutation) error {
	if err := c.fresh(); err != nil {
		return err
	}
	return m.Apply(c.dir)
}

func printList(ms []*Mutation) {
	for _, m := range ms {
		fmt.Printf("%s: %s\n", m.Name, m.Reason)
		for _, t := range m.Tests {
			fmt.Printf("  %s\n", t)
		}
	}
	fmt.Printf("%d mutations, every one applies\n", len(ms))
}

// runUnmutated runs the mutations' tests on the tree as it is, where each
// must pass; the rows so far come back with the error of one that does not.
func runUnmutated(c *treeCopy, env []string, ms []*Mutation, logs string) ([]row, error) {
	if err := c.fresh(); err != nil {
		return nil, err
	}
	var rows []row
	for _, t := range baseline(ms) {
		r := runTest(c.dir, env, t, filepath.Join(logs, "unmutated-"+logName(t)))
		r.mutation = "(none)"
		r.ok = r.result == "passed"
		if r.result == "caught" {
			r.result = "FAILED"
		}
		rows = append(rows, r)
		report(r)
		if !r.ok {
			return rows, fmt.Errorf("%s does not pass on the unmutated tree (%s): a failure under a mutation would prove nothing", t, r.result)
		}
	}
	return rows, nil
}

// runMutated runs each mutation's tests on the tree with it applied, where
// each must fail, adding a row a run to rows; failed counts the runs that
// did not catch their mutation.
func runMutated(c *treeCopy, env []string, ms []*Mutation, logs string, rows []row) (_ []row, failed int, _ error) {
	for _, m := range ms {
		for _, t := range m.Tests {
			if err := c.mutate(m); err != nil {
				return rows, failed, err
			}
			r := runTest(c.dir, env, t, filepath.Join(logs, m.Name+"-"+logName(t)))
			r.mutation = m.Name
			r.ok = r.result == "caught"
			if r.result == "passed" {
				r.result = "NOT CAUGHT"
			}
			if !r.ok {
				failed++
			}
			rows = append(rows, r)
			report(r)
		}
	}
	return rows, failed, nil
}

// baseline are the distinct tests of the mutations: the e2e specs in one
// run (one rig), each go test on its own (a -run pattern with subtests
// does not combine with others).
func baseline(ms []*Mutation) []Test {
	var labels []string
	var out []Test
	for _, m := range ms {
		for _, t := range m.Tests {
			switch {
			case t.Kind == "e2e":
				if !slices.Contains(labels, t.Label) {
					labels = append(labels, t.Label)
				}
			case !slices.Contains(out, t):
				out = append(out, t)
			}
		}
	}
	if len(labels) > 0 {
		out = append([]Test{{Kind: "e2e", Label: strings.Join(labels, " || ")}}, out...)
	}
	return out
}

func logName(t Test) string {
	s := t.Label
	if t.Kind == "go" {
		s = t.Package + "-" + t.Run
	}
	s = regexp.MustCompile(`[^A-Za-z0-9_.-]+`).ReplaceAllString(s, "_")
	if len(s) > 80 {
		s = s[:80]
	}
	return t.Kind + "-" + strings.Trim(s, "_") + ".log"
}

// Failures a run must show to count as a test failing: a spec's or a
// test function's, not a build or a rig that did not come up.
var (
	ginkgoSpecFailed = regexp.MustCompile(`(?m)^\s*\[(FAIL|TIMEDOUT|PANICKED)\] .*\[It\] `)
	goTestFailed     = regexp.MustCompile(`(?m)^\s*--- FAIL: Test`)
)

// runTest runs one test on the tree and classifies the run: passed,
// caught (a spec or test failed), or an error (it failed some other way:
// see the log).
func runTest(tree string, env []string, t Test, logFile string) row {
	var cmd *exec.Cmd
	switch t.Kind {
	case "e2e":
		cmd = exec.Command("go", "test", "-count=1", "-timeout", "30m", "-run", "^TestMultiCluster$", "./e2e/multicluster/",
			"-args", "-ginkgo.no-color", "-ginkgo.label-filter="+t.Label)
	default:
		cmd = exec.Command("go", "test", "-count=1", "-timeout", "20m", "-run", t.Run, t.Package)
	}
	cmd.Dir = tree
	cmd.Env = env
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	start := time.Now()
	err := cmd.Run()
	r := row{test: t.String(), took: time.Since(start)}
	_ = os.WriteFile(logFile, out.Bytes(), 0o644)
	failed := goTestFailed
	if t.Kind == "e2e" {
		failed = ginkgoSpecFailed
	}
	var exit *exec.ExitError
	switch {
	case err == nil:
		r.result = "passed"
	case errors.As(err, &exit) && failed.Match(out.Bytes()):
		r.result = "caught"
	case err != nil && strings.Contains(out.String(), "no tests to run"):
		r.result = "error: no test matched (see " + logFile + ")"
	default:
		r.result = "error: " + firstLine(err.Error()) + " (see " + logFile + ")"
	}
	if err == nil && (strings.Contains(out.String(), "no tests to run") || strings.Contains(out.String(), "Ran 0 of")) {
		r.result = "error: no test matched (see " + logFile + ")"
	}
	return r
}

func firstLine(s string) string {
	s, _, _ = strings.Cut(s, "\n")
	return s
}

func report(r row) {
	fmt.Printf("%-28s %-60s %-12s %v\n", r.mutation, r.test, r.result, r.took.Round(time.Second))
}

func printTable(rows []row, total time.Duration) {
	fmt.Println()
	w := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', 0)
	fmt.Fprintln(w, "mutation\ttest\tresult\ttook")
	for _, r := range rows {
		fmt.Fprintf(w, "%s\t%s\t%s\t%v\n", r.mutation, r.test, r.result, r.took.Round(time.Second))
	}
	_ = w.Flush()
	fmt.Printf("total %v\n", total.Round(time.Second))
}

func repoRoot() (string, error) {
	out, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		return "", fmt.Errorf("not in a git repository: %w", err)
	}
	return strings.TrimSpace(string(out)), nil
}

// files is a tree's files by path, with their modes.
type files map[string]file

type file struct {
	mode os.FileMode
	data []byte
}

// treeFiles reads the tree to copy: the commit ref, or the working tree's
// files that git tracks or would track (untracked ones not ignored).
func treeFiles(root, ref string) (files, error) {
	out := files{}
	if ref != "" {
		cmd := exec.Command("git", "archive", "--format=tar", ref)
		cmd.Dir = root
		b, err := cmd.Output()
		if err != nil {
			return nil, fmt.Errorf("git archive %s: %w", ref, err)
		}
		tr := tar.NewReader(bytes.NewReader(b))
		for {
			h, err := tr.Next()
			if err == io.EOF {
				break
			}
			if err != nil {
				return nil, err
			}
			if h.Typeflag != tar.TypeReg {
				continue
			}
			data, err := io.ReadAll(tr)
			if err != nil {
				return nil, err
			}
			out[h.Name] = file{mode: os.FileMode(h.Mode).Perm(), data: data}
		}
		return out, nil
	}
	cmd := exec.Command("git", "ls-files", "-z", "--cached", "--others", "--exclude-standard")
	cmd.Dir = root
	b, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("git ls-files: %w", err)
	}
	for _, p := range strings.Split(string(b), "\x00") {
		if p == "" {
			continue
		}
		full := filepath.Join(root, filepath.FromSlash(p))
		info, err := os.Lstat(full)
		if err != nil || !info.Mode().IsRegular() {
			continue // deleted in the working tree, or a link
		}
		data, err := os.ReadFile(full)
		if err != nil {
			return nil, err
		}
		out[p] = file{mode: info.Mode().Perm(), data: data}
	}
	return out, nil
}

func (fs files) writeTo(dir string) error {
	for p, f := range fs {
		path := filepath.Join(dir, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(path, f.data, f.mode); err != nil {
			return err
		}
	}
	return nil
}
