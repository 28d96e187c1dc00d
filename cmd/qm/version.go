package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"runtime/debug"
	"strings"
)

func init() {
	register(command{
		name:    "version",
		summary: "print the build's version (module version, VCS revision and date)",
		run:     runVersion,
	})
}

const versionUsage = `usage: qm version

Prints the version the Go toolchain stamped into this binary: the module
version (a tag, or a pseudo-version from the commit), the VCS revision and
its date, whether the tree had uncommitted changes, and the Go version;
'go version -m bin/qm' shows the same facts.

flags:
`

func runVersion(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("qm version", flag.ContinueOnError)
	if _, ok, err := parseFlags("version", versionUsage, fs, args, stdout, stderr); !ok {
		return err
	}
	bi, ok := debug.ReadBuildInfo()
	if !ok {
		// Only a binary built without module support lands here.
		fmt.Fprintln(stdout, "qm (no build information)")
		return nil
	}
	fmt.Fprintln(stdout, versionLine(bi))
	return nil
}

// versionLine renders build information as one line, for example
// "qm v0.0.0-20261122195512-5d7d7bc1a2b3 (revision 5d7d7bc1a2b3..., 2026-11-22T19:55:12Z) go1.26.0".
// A binary built outside a VCS checkout (go build from a tarball) has no
// revision, and says so rather than printing nothing.
func versionLine(bi *debug.BuildInfo) string {
	settings := map[string]string{}
	for _, s := range bi.Settings {
		settings[s.Key] = s.Value
	}
	v := bi.Main.Version
	if v == "" {
		v = "(devel)"
	}
	var vcs []string
	if r := settings["vcs.revision"]; r != "" {
		vcs = append(vcs, "revision "+r)
	}
	if t := settings["vcs.time"]; t != "" {
		vcs = append(vcs, t)
	}
	if settings["vcs.modified"] == "true" {
		vcs = append(vcs, "with uncommitted changes")
	}
	if len(vcs) == 0 {
		vcs = append(vcs, "no VCS information")
	}
	return fmt.Sprintf("qm %s (%s) %s", v, strings.Join(vcs, ", "), bi.GoVersion)
}
