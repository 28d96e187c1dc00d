package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
)

// parseFlagsAndFiles parses as parseFlags does (help on stdout; a mistake
// on stderr with where the help is, status 2) for a command whose
// positional arguments are the point: the files it reads, which may come
// before, between or after the flags. It returns them in order.
func parseFlagsAndFiles(name, usageText string, fs *flag.FlagSet, args []string, stdout, stderr io.Writer) (usage func(io.Writer), files []string, ok bool, err error) {
	usage = usageOf(usageText, fs)
	fs.SetOutput(io.Discard)
	for rest := args; ; rest = fs.Args()[1:] {
		if err := fs.Parse(rest); err != nil {
			if errors.Is(err, flag.ErrHelp) {
				usage(stdout)
				return nil, nil, false, nil
			}
			return nil, nil, false, usageFail(stderr, name, usage, "%v", err)
		}
		if fs.NArg() == 0 {
			return usage, files, true, nil
		}
		files = append(files, fs.Arg(0))
	}
}

// usageOf prints a command's help: its usage text, then its flags.
func usageOf(usageText string, fs *flag.FlagSet) func(io.Writer) {
	return func(w io.Writer) {
		fmt.Fprint(w, usageText)
		fs.SetOutput(w)
		fs.PrintDefaults()
		fs.SetOutput(io.Discard)
	}
}
