package main

import (
	"context"
	"fmt"
	"io"
	"runtime/debug"
)

func init() {
	register(command{
		name:    "version",
		summary: "print the build's version",
		run: func(_ context.Context, _ []string, stdout, _ io.Writer) error {
			v := "(devel)"
			if bi, ok := debug.ReadBuildInfo(); ok {
				for _, s := range bi.Settings {
					if s.Key == "vcs.revision" {
						v = s.Value
					}
				}
			}
			fmt.Fprintln(stdout, "qm", v)
			return nil
		},
	})
}
