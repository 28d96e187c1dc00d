// Command qm is Quartermaster's one binary: the allocator service, its
// client, certificates, the simulator, local clusters and load tools.
//
// Each subcommand lives in its own file and registers itself from init, so
// areas of the project can grow their command without touching this file.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"sort"
	"strings"
	"syscall"
)

// command is one `qm <name>` subcommand.
type command struct {
	name    string
	summary string
	// run receives the arguments after the subcommand name. It returns an
	// exitError to choose the exit code; any other error exits 1.
	run func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

var commands = map[string]command{}

func register(c command) {
	if _, dup := commands[c.name]; dup {
		panic("qm: command registered twice: " + c.name)
	}
	commands[c.name] = c
}

// exitError carries a specific exit code (for example 2 for a failed
// expectation) without printing anything more.
type exitError struct{ code int }

func (e exitError) Error() string { return fmt.Sprintf("exit status %d", e.code) }

// parseFlags parses a subcommand's flags the same way for every command.
// With -h it prints the usage text and the flags to stdout; on a bad flag or
// a stray argument it prints the one mistake and a hint to -h on stderr and
// returns exit status 2 (the whole help would scroll the mistake away). ok
// is false in both cases (err is nil after -h). usage prints the help, for
// callers that want it shown; usageFail reports mistakes found later.
func parseFlags(name, usageText string, fs *flag.FlagSet, args []string, stdout, stderr io.Writer) (usage func(io.Writer), ok bool, err error) {
	usage = usageOf(usageText, fs)
	// The flag package would print its own error and the defaults; the
	// message is printed once, below.
	fs.SetOutput(io.Discard)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			usage(stdout)
			return nil, false, nil
		}
		return nil, false, usageFail(stderr, name, usage, "%v", err)
	}
	if fs.NArg() > 0 {
		return nil, false, usageFail(stderr, name, usage, "unexpected arguments: %s", strings.Join(fs.Args(), " "))
	}
	return usage, true, nil
}

// usageFail reports a usage mistake: one line naming what was wrong, one
// line saying where the help is, exit status 2. usage is accepted so that
// every caller reads alike; the help itself is for -h.
func usageFail(stderr io.Writer, name string, _ func(io.Writer), format string, a ...any) error {
	fmt.Fprintf(stderr, "qm %s: %s\n", name, fmt.Sprintf(format, a...))
	fmt.Fprintf(stderr, "Run 'qm %s -h' for usage.\n", name)
	return exitError{code: 2}
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: qm <command> [flags]")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "commands:")
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-10s %s\n", n, commands[n].summary)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Run 'qm <command> -h' for a command's flags.")
}

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		usage(stdout)
		if len(args) == 0 {
			return 2
		}
		return 0
	}
	c, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(stderr, "qm: unknown command %q\nRun 'qm -h' for the list of commands.\n", args[0])
		return 2
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := c.run(ctx, args[1:], stdout, stderr); err != nil {
		if e, ok := err.(exitError); ok {
			return e.code
		}
		fmt.Fprintf(stderr, "qm %s: %v\n", c.name, err)
		return 1
	}
	return 0
}
