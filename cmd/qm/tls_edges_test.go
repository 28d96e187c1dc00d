package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// `qm serve --limits` binds identities to client CA files: "alice", bound
// to a CA file the directory does not have, is refused; "dev" is not. An
// edit of the limits file rebinds without a restart.
func TestServeLimitsBindIdentityToClientCA(t *testing.T) {
	state := t.TempDir()
	ready := filepath.Join(state, "ready.json")
	limits := filepath.Join(state, "limits.yaml")
	write := func(aliceCA string) {
		body := "apiVersion: quartermaster.dev/v1alpha1\nkind: AllocatorLimits\ndefault: {}\nidentities:\n  alice: {admin: true, clientCA: " + aliceCA + "}\n"
		if err := os.WriteFile(limits, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("ops-ca.crt")
	old := limitsPollInterval
	limitsPollInterval = 50 * time.Millisecond
	defer func() { limitsPollInterval = old }()
	ctx, cancel := context.WithCancel(context.Background())
	var out, errOut syncBuf
	done := make(chan error, 1)
	go func() {
		done <- commands["serve"].run(ctx, []string{"--addr", "127.0.0.1:0", "--http-addr", "", "--state-dir", state,
			"--ready-file", ready, "--limits", limits}, &out, &errOut)
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	}()
	var addrs map[string]string
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if b, err := os.ReadFile(ready); err == nil && json.Unmarshal(b, &addrs) == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve did not start:\n%s", errOut.String())
		}
	}
	certsDir := filepath.Join(state, "certs")
	o, err := runClient(ctx, "allocate", addrs["grpc"], certsDir, "--identity", "alice")
	if err == nil || !strings.Contains(o, `"alice" must be issued by the CA in ops-ca.crt, and this certificate chains to ca.crt`) {
		t.Fatalf("alice from the wrong CA: %v\n%s", err, o)
	}
	if !strings.Contains(errOut.String(), "bound to client CA files that are not in the directory") {
		t.Errorf("the missing CA file was not logged:\n%s", errOut.String())
	}
	if o, err := runClient(ctx, "allocate", addrs["grpc"], certsDir, "--identity", "dev"); err != nil {
		t.Fatalf("dev: %v\n%s", err, o)
	}
	write("ca.crt")
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if o, err = runClient(ctx, "allocate", addrs["grpc"], certsDir, "--identity", "alice"); err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("alice after binding her to ca.crt: %v\n%s", err, o)
		}
	}
}
