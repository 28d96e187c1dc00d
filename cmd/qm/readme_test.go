package main

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// readmes are the pages whose shell blocks a newcomer copies from.
var readmes = []string{"README.md", "allocator/README.md", "scenarios/README.md", "reports/README.md", "loadgen/README.md", "trace/README.md", "plan/README.md"}

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
