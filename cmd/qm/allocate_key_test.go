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

// qm allocate --allocation-key sends the key: the same key again, over
// gRPC or REST, is the same server; qm release --allocation-key gives it
// back, after which the key is refused. qm serve refuses a window or a
// bound that is not positive.
func TestAllocationKeyCommands(t *testing.T) {
	for _, bad := range [][]string{{"--allocation-key-window", "0s"}, {"--allocation-key-max", "-1"}} {
		var o, e syncBuf
		if err := commands["serve"].run(context.Background(), append([]string{"--addr", "127.0.0.1:0"}, bad...), &o, &e); err == nil || !strings.Contains(e.String(), "allocation-key") {
			t.Fatalf("serve %v: %v, stderr %q", bad, err, e.String())
		}
	}

	state := t.TempDir()
	ready := filepath.Join(state, "ready.json")
	ctx, cancel := context.WithCancel(context.Background())
	var out, errOut syncBuf
	done := make(chan error, 1)
	go func() {
		done <- commands["serve"].run(ctx, []string{"--addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0",
			"--state-dir", state, "--ready-file", ready, "--seed", "1", "--allocation-key-window", "1m"}, &out, &errOut)
	}()
	defer func() {
		cancel()
		<-done
	}()
	var addrs map[string]string
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if b, err := os.ReadFile(ready); err == nil && json.Unmarshal(b, &addrs) == nil {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("serve exited: %v\n%s", err, errOut.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve did not start:\n%s", errOut.String())
		}
	}
	run := func(name string, args ...string) (string, error) {
		return runClient(context.Background(), name, addrs["grpc"], filepath.Join(state, "certs"), args...)
	}
	allocate := func(args ...string) string {
		t.Helper()
		o, err := run("allocate", append([]string{"--selector", "mode=lobby", "--allocation-key", "match-7"}, args...)...)
		if err != nil {
			t.Fatalf("allocate %v: %v\n%s", args, err, o)
		}
		var resp allocateOutput
		if err := json.Unmarshal([]byte(o), &resp); err != nil || resp.GameServerName == "" {
			t.Fatalf("allocate: %v\n%s", err, o)
		}
		return resp.GameServerName
	}
	first := allocate()
	if again := allocate("--rest"); again != first {
		t.Fatalf("the same key over REST got %s, want %s", again, first)
	}
	if o, err := run("release", "--allocation-key", "match-7", "--name", first); err == nil {
		t.Fatalf("release with both --name and --allocation-key: accepted\n%s", o)
	}
	o, err := run("release", "--allocation-key", "match-7")
	if err != nil || !strings.Contains(o, first) {
		t.Fatalf("release --allocation-key: %v\n%s", err, o)
	}
	o, err = run("allocate", "--selector", "mode=lobby", "--allocation-key", "match-7")
	if err == nil || !strings.Contains(o, "FailedPrecondition") {
		t.Fatalf("the released key again: %v\n%s", err, o)
	}
}
