package main

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// readmes are the pages whose shell blocks a newcomer copies from.
var readmes = []string{"README.md", "allocator/README.md", "scenarios/README.md", "reports/README.md", "loadgen/README.md", "trace/README.md", "plan/README.md",
	"docs/performance.md", "docs/local-clusters.md", "docs/policy-windows.md", "docs/rigs.md", "e2e/multicluster/README.md"}

// bareWord is what a subcommand looks like.
var bareWord = regexp.MustCompile(`^[a-z]+$`)

// helpFlag matches a flag line of a command's -h output ("  -addr string").
var helpFlag = regexp.MustCompile(`(?m)^  -([a-zA-Z0-9][a-zA-Z0-9.-]*)\b`)

// TestReadmeCommandsUseRealFlags reads every `bin/qm ...` line in the
// READMEs' shell blocks and checks the subcommand exists and every flag it
// uses is one the command defines, so that renaming or removing a flag
// cannot leave the documented flows broken. The commands are never run:
// only their -h output is read.
func TestReadmeCommandsUseRealFlags(t *testing.T) {
	root := filepath.Join("..", "..")
	checked := 0
	for _, page := range readmes {
		f, err := os.Open(filepath.Join(root, page))
		if os.IsNotExist(err) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		inShell, n, cont := false, 0, ""
		for sc.Scan() {
			n++
			line := sc.Text()
			if strings.HasPrefix(line, "```") {
				inShell = strings.HasPrefix(line, "```sh") || strings.HasPrefix(line, "```bash")
				continue
			}
			if !inShell {
				continue
			}
			// Join continued lines before looking at them.
			if strings.HasSuffix(strings.TrimSpace(line), "\\") {
				cont += strings.TrimSuffix(strings.TrimSpace(line), "\\") + " "
				continue
			}
			line, cont = cont+line, ""
			words := shellWords(line)
			if len(words) < 2 || (words[0] != "bin/qm" && words[0] != "./bin/qm") {
				continue
			}
			checked++
			for _, problem := range readmeCommandProblems(words[1:]) {
				t.Errorf("%s:%d: %s", page, n, problem)
			}
		}
		f.Close()
	}
	if checked < 10 {
		t.Errorf("found only %d qm command lines in the READMEs; is the parser still right?", checked)
	}
}

// readmeCommandProblems says what is wrong with one documented command
// line (the words after bin/qm), if anything.
func readmeCommandProblems(args []string) (problems []string) {
	name := args[0]
	if _, ok := commands[name]; !ok {
		return []string{"qm " + name + ": no such command"}
	}
	path := []string{name}
	rest := args[1:]
	// A subcommand (qm cluster up) is a bare word whose own -h works; a
	// file or placeholder (qm sim scenarios/x.yaml) is not a bare word.
	if len(rest) > 0 && bareWord.MatchString(rest[0]) {
		if code, _, _ := runQM(name, rest[0], "-h"); code == 0 {
			path, rest = []string{name, rest[0]}, rest[1:]
		}
	}
	code, help, _ := runQM(append(append([]string{}, path...), "-h")...)
	if code != 0 {
		return []string{fmt.Sprintf("qm %s -h exited %d", strings.Join(path, " "), code)}
	}
	defined := map[string]bool{"h": true, "help": true}
	for _, m := range helpFlag.FindAllStringSubmatch(help, -1) {
		defined[m[1]] = true
	}
	for _, w := range rest {
		if !strings.HasPrefix(w, "-") || w == "-" {
			continue
		}
		flagName, _, _ := strings.Cut(strings.TrimLeft(w, "-"), "=")
		if !defined[flagName] {
			problems = append(problems, fmt.Sprintf("qm %s has no flag --%s", strings.Join(path, " "), flagName))
		}
	}
	return problems
}

// TestReadmeCheckerCatches: the checker above must notice a wrong
// command, a wrong flag and a wrong subcommand's flag.
func TestReadmeCheckerCatches(t *testing.T) {
	for _, line := range []string{
		"bin/qm allocat --rest",
		"bin/qm allocate --rest --grcp=false",
		"bin/qm cluster up --grace 1s", // a flag of down, not of up
		"bin/qm sim scenarios/x.yaml --outfile r.json",
	} {
		if len(readmeCommandProblems(shellWords(line)[1:])) == 0 {
			t.Errorf("%q passed the check", line)
		}
	}
	if p := readmeCommandProblems(shellWords(`bin/qm allocate --rest --selector mode=lobby --counter rooms=Increment:1 # a comment --nope`)[1:]); len(p) != 0 {
		t.Errorf("a good line failed: %v", p)
	}
}

// shellWords splits a README command line as a shell would for our
// purposes: quotes group, a # outside quotes starts a comment.
func shellWords(s string) []string {
	var words []string
	var cur strings.Builder
	inWord := false
	var quote rune
	for _, r := range s {
		switch {
		case quote != 0:
			if r == quote {
				quote = 0
			} else {
				cur.WriteRune(r)
			}
		case r == '\'' || r == '"':
			quote, inWord = r, true
		case r == '#' && !inWord:
			return append(words, flush(&cur, &inWord)...)
		case r == ' ' || r == '\t':
			words = append(words, flush(&cur, &inWord)...)
		default:
			cur.WriteRune(r)
			inWord = true
		}
	}
	return append(words, flush(&cur, &inWord)...)
}

func flush(b *strings.Builder, inWord *bool) []string {
	if !*inWord {
		return nil
	}
	w := b.String()
	b.Reset()
	*inWord = false
	return []string{w}
}

// shellLines calls fn with every command line (continuations joined) of
// the shell blocks of page, and the line number where it ends.
func shellLines(t *testing.T, page string, fn func(n int, line string)) {
	t.Helper()
	f, err := os.Open(filepath.Join("..", "..", page))
	if os.IsNotExist(err) {
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	inShell, n, cont := false, 0, ""
	for sc.Scan() {
		n++
		line := sc.Text()
		if strings.HasPrefix(line, "```") {
			inShell = strings.HasPrefix(line, "```sh") || strings.HasPrefix(line, "```bash")
			continue
		}
		if !inShell {
			continue
		}
		if strings.HasSuffix(strings.TrimSpace(line), "\\") {
			cont += strings.TrimSuffix(strings.TrimSpace(line), "\\") + " "
			continue
		}
		line, cont = cont+line, ""
		fn(n, line)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
}

// makeGoals returns the make goals a documented command line asks for:
// the words after "make" that are neither variables nor flags, in every
// command of the line (split at &&, ||, ; and |).
func makeGoals(line string) []string {
	var goals []string
	for _, cmd := range regexp.MustCompile(`&&|\|\||;|\|`).Split(line, -1) {
		words := shellWords(cmd)
		for len(words) > 0 && strings.Contains(words[0], "=") {
			words = words[1:] // FOO=bar make ...
		}
		if len(words) == 0 || words[0] != "make" {
			continue
		}
		for _, w := range words[1:] {
			if !strings.HasPrefix(w, "-") && !strings.Contains(w, "=") {
				goals = append(goals, w)
			}
		}
	}
	return goals
}

// makeRules reads the targets make knows in the repository (make -qpr
// prints its database without running a recipe): explicit targets, and
// pattern rules as path patterns (bin/% becomes bin/*).
func makeRules(t *testing.T) (targets map[string]bool, patterns []string) {
	t.Helper()
	cmd := exec.Command("make", "-qpr") // -r: without the built-in rules
	cmd.Dir = filepath.Join("..", "..")
	out, _ := cmd.Output() // -q exits 1 when the default goal is out of date
	targets = map[string]bool{}
	for _, line := range strings.Split(string(out), "\n") {
		if line == "" || line[0] == '#' || line[0] == '\t' || line[0] == ' ' {
			continue
		}
		head, _, ok := strings.Cut(line, ":")
		if !ok || strings.ContainsAny(head, "=$") || strings.HasPrefix(line[len(head):], ":=") {
			continue
		}
		for _, name := range strings.Fields(head) {
			if strings.Contains(name, "%") {
				patterns = append(patterns, strings.ReplaceAll(name, "%", "*"))
			} else {
				targets[name] = true
			}
		}
	}
	return targets, patterns
}

// TestReadmeMakeGoalsExist: every `make GOAL` in the pages' shell blocks
// names a target of the Makefile or mk/*.mk, so that a renamed target
// cannot leave a documented flow pointing at nothing.
func TestReadmeMakeGoalsExist(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Skip("no make")
	}
	targets, patterns := makeRules(t)
	if !targets["test"] || !targets["demo"] {
		t.Fatalf("make -qp listed no test or demo target (%d targets): is the parser still right?", len(targets))
	}
	known := func(goal string) bool {
		if targets[goal] {
			return true
		}
		for _, p := range patterns {
			if ok, _ := path.Match(p, goal); ok {
				return true
			}
		}
		return false
	}
	checked := 0
	for _, page := range readmes {
		shellLines(t, page, func(n int, line string) {
			for _, goal := range makeGoals(line) {
				checked++
				if !known(goal) {
					t.Errorf("%s:%d: make %s: no such target", page, n, goal)
				}
			}
		})
	}
	if checked < 10 {
		t.Errorf("found only %d make goals in the pages; is the parser still right?", checked)
	}
	if known("no-such-goal") {
		t.Error("an unknown goal passed the check")
	}
}

// TestMakeGoalsParsing: variables, flags and other commands on the line
// are not goals.
func TestMakeGoalsParsing(t *testing.T) {
	got := strings.Join(makeGoals(`FORWARD_IDLE=poll make load-forward-lone LOAD_DURATION=4s && make -j2 build bin/kubectl; docker pull x   # make nothing`), " ")
	if want := "load-forward-lone build bin/kubectl"; got != want {
		t.Errorf("makeGoals = %q, want %q", got, want)
	}
}
