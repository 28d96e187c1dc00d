package main

import (
	"bytes"
	"flag"
	"reflect"
	"strings"
	"testing"
)

// Files may come before, between and after the flags; -h is help on
// stdout; a bad flag is one line and where the help is, status 2.
func TestParseFlagsAndFiles(t *testing.T) {
	parse := func(args ...string) (files []string, out, errOut string, ok bool, quiet bool, err error) {
		fs := flag.NewFlagSet("qm x", flag.ContinueOnError)
		q := fs.Bool("quiet", false, "")
		var o, e bytes.Buffer
		_, files, ok, err = parseFlagsAndFiles("x", "usage: qm x FILE...\n", fs, args, &o, &e)
		return files, o.String(), e.String(), ok, *q, err
	}
	files, _, _, ok, quiet, err := parse("a.yaml", "--quiet", "b.yaml", "c.yaml")
	if !ok || err != nil || !quiet || !reflect.DeepEqual(files, []string{"a.yaml", "b.yaml", "c.yaml"}) {
		t.Errorf("files %v quiet %v ok %v err %v", files, quiet, ok, err)
	}
	if files, _, _, ok, _, _ := parse(); !ok || len(files) != 0 {
		t.Errorf("no arguments: files %v ok %v", files, ok)
	}
	_, out, errOut, ok, _, err := parse("a.yaml", "-h")
	if ok || err != nil || !strings.HasPrefix(out, "usage: qm x") || !strings.Contains(out, "-quiet") || errOut != "" {
		t.Errorf("-h: ok %v err %v stdout %q stderr %q", ok, err, out, errOut)
	}
	_, out, errOut, ok, _, err = parse("a.yaml", "--loud")
	var ee exitError
	if ok || out != "" || !strings.HasPrefix(errOut, "qm x: flag provided but not defined: -loud\n") || !asExit(err, &ee) || ee.code != 2 {
		t.Errorf("bad flag: ok %v err %v stdout %q stderr %q", ok, err, out, errOut)
	}
}

func asExit(err error, ee *exitError) bool {
	e, ok := err.(exitError)
	*ee = e
	return ok
}
