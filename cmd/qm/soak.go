package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/quartermaster-dev/quartermaster/soak"
)

func init() {
	register(command{
		name:    "soak",
		summary: "run load with faults on a schedule against a rig (or an allocator elsewhere) and check what was lost",
		run:     runSoak,
	})
}

const soakUsage = `usage: qm soak check [--examples N] [--window D] [--strict] [--json FILE] HISTORY SNAPSHOT

check holds a soak run's history (JSON lines: requests, releases, faults)
against the snapshot of every GameServer object read after the run, and
prints each promise with its violations and examples, then the cost of
each kind of fault. Exits 2 on any violation (or a usage mistake), 1 when
a file cannot be read, 0 when every promise held. The file formats are
described in soak/README.md.

flags:
`

// runSoak is `qm soak [flags]` (a run) or `qm soak check FILES`.
func runSoak(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "check" {
		return soakCheck(args[1:], stdout, stderr)
	}
	if len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		return usageFail(stderr, "soak", nil, "unknown subcommand %q (want check, or flags for a run)", args[0])
	}
	return soakRun(ctx, args, stdout, stderr)
}

func newSoakCheckFlags() (*flag.FlagSet, *soakCheckOptions) {
	fs := flag.NewFlagSet("qm soak check", flag.ContinueOnError)
	o := &soakCheckOptions{}
	fs.IntVar(&o.cfg.Examples, "examples", soak.DefaultExamples, "examples kept per promise")
	durationFlag(fs, &o.cfg.Window, "window", soak.DefaultWindow, "the span after a fault whose failures count as after it, and the step of recovery, a `duration`")
	fs.BoolVar(&o.cfg.Strict, "strict", false, "count an Allocated server whose release failed, or that a lost answer may explain, as dangling (always so for a history whose requests carried keys)")
	fs.StringVar(&o.json, "json", "", "also write the result as JSON to this file (for qm report)")
	return fs, o
}

type soakCheckOptions struct {
	cfg  soak.Config
	json string
}

func soakCheck(args []string, stdout, stderr io.Writer) error {
	fs, o := newSoakCheckFlags()
	usage, files, ok, err := parseFlagsAndFiles("soak check", soakUsage, fs, args, stdout, stderr)
	if !ok {
		return err
	}
	if len(files) != 2 {
		return usageFail(stderr, "soak check", usage, "want two files, HISTORY and SNAPSHOT; got %d", len(files))
	}
	if o.cfg.Examples < 1 {
		return usageFail(stderr, "soak check", usage, "--examples must be at least 1, got %d", o.cfg.Examples)
	}
	if o.cfg.Window <= 0 {
		return usageFail(stderr, "soak check", usage, "--window must be positive, got %s", o.cfg.Window)
	}
	h, err := readSoakFile(files[0], soak.ReadHistory)
	if err != nil {
		return fmt.Errorf("%w%s", err, soakFileHint(files[0], "history"))
	}
	s, err := readSoakFile(files[1], soak.ReadSnapshot)
	if err != nil {
		return fmt.Errorf("%w%s", err, soakFileHint(files[1], "snapshot"))
	}
	res := soak.Check(h, s, o.cfg)
	if err := res.WriteTable(stdout); err != nil {
		return err
	}
	if o.json != "" {
		if err := writeSoakJSON(o.json, res); err != nil {
			return err
		}
	}
	if n := res.Violations(); n > 0 {
		fmt.Fprintf(stderr, "qm soak check: %d violations\n", n)
		return exitError{code: 2}
	}
	return nil
}

func readSoakFile[T any](path string, read func(io.Reader) (*T, error)) (*T, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	v, err := read(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return v, nil
}

func writeSoakJSON(path string, res *soak.Result) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := res.WriteJSON(f); err != nil {
		f.Close()
		return fmt.Errorf("%s: %w", path, err)
	}
	return f.Close()
}
