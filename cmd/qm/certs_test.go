package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/quartermaster-dev/quartermaster/certs"
)

func runCertsCmd(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	err := commands["certs"].run(context.Background(), args, &out, &errOut)
	return out.String(), errOut.String(), err
}

func TestCertsCommand(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "qm-certs")
	out, _, err := runCertsCmd(t, "--dir", dir, "--hosts", "localhost,127.0.0.1,allocator.example.com",
		"--clients", "matchmaker, admin", "--validity", "720h")
	if err != nil {
		t.Fatal(err)
	}
	l := certs.Layout{Dir: dir}
	for _, p := range []string{l.CACert(), l.CAKey(), l.ServerCert(), l.ServerKey(), l.ClientCACert(),
		l.ClientCert("matchmaker"), l.ClientKey("admin"), l.ClientServerCA("admin")} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("not written: %v", err)
		}
		if !strings.Contains(out, p) {
			t.Errorf("output does not mention %s", p)
		}
	}
	for _, want := range []string{
		"qm serve --tls-dir " + l.ServerDir() + " --client-ca-dir " + l.ClientCADir(),
		"--cert " + l.ClientCert("admin") + " --key " + l.ClientKey("admin") + " --cacert " + l.ClientServerCA("admin"),
	} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}

	caBefore, _ := os.ReadFile(l.CACert())
	out, _, err = runCertsCmd(t, "--dir", dir, "--clients", "director")
	if err != nil {
		t.Fatal(err)
	}
	if caAfter, _ := os.ReadFile(l.CACert()); !bytes.Equal(caBefore, caAfter) || !strings.Contains(out, "Reused the CA") {
		t.Errorf("second run replaced the CA:\n%s", out)
	}
	if _, err := os.Stat(l.ClientCert("director")); err != nil {
		t.Error(err)
	}

	if _, _, err := runCertsCmd(t, "--dir", dir, "--force"); err != nil {
		t.Fatal(err)
	}
	if caAfter, _ := os.ReadFile(l.CACert()); bytes.Equal(caBefore, caAfter) {
		t.Error("--force kept the CA")
	}
}

func TestCertsCommandUsage(t *testing.T) {
	out, _, err := runCertsCmd(t, "-h")
	if err != nil || !strings.Contains(out, "usage: qm certs") || !strings.Contains(out, "-clients") {
		t.Errorf("-h: %v\n%s", err, out)
	}
	for name, args := range map[string][]string{
		"unknown flag":   {"--dir", "x", "--nope"},
		"missing dir":    {"--clients", "a"},
		"bad duration":   {"--dir", "x", "--validity", "forever"},
		"negative":       {"--dir", "x", "--validity", "-1h"},
		"stray argument": {"--dir", "x", "extra"},
	} {
		_, errOut, err := runCertsCmd(t, args...)
		var ee exitError
		if !errors.As(err, &ee) || ee.code != 2 || !strings.Contains(errOut, "qm certs:") || !strings.Contains(errOut, "Run 'qm certs -h'") {
			t.Errorf("%s: err %v, stderr:\n%s", name, err, errOut)
		}
	}
	// A bad identity is a plain error naming the problem.
	_, _, err = runCertsCmd(t, "--dir", t.TempDir(), "--clients", "../evil")
	if err == nil || !strings.Contains(err.Error(), "../evil") {
		t.Errorf("bad identity: %v", err)
	}
}
