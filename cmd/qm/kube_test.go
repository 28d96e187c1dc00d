package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/quartermaster-dev/quartermaster/kindcluster/kubetest"
)

// exampleFleet is the fleet manifest the README applies.
var exampleFleet = filepath.Join("..", "..", "examples", "fleet.yaml")

// TestKubernetesFlow is the README's "Against a Kubernetes cluster" flow on
// a real API server: the example Fleet applied with kubectl, `qm agent`
// making its GameServers Ready, `qm serve --backend kubernetes`, and
// `qm allocate` over gRPC and REST, checked on the API server's objects.
func TestKubernetesFlow(t *testing.T) {
	api := kubetest.Start(t, "qm-flow")
	c := api.Cluster
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	kubeconfig := c.KubeconfigPath()
	api.Apply(t, ctx, exampleFleet)

	runCtx, stop := context.WithCancel(ctx)
	var agentErr, serveErr, serveOut syncBuf
	exited := make(chan error, 2)
	go func() {
		exited <- commands["agent"].run(runCtx, []string{"--kubeconfig", kubeconfig, "--startup", "100ms",
			"--interval", "100ms", "--session", "0"}, &bytes.Buffer{}, &agentErr)
	}()
	state := t.TempDir()
	ready := filepath.Join(state, "ready.json")
	go func() {
		exited <- commands["serve"].run(runCtx, []string{"--backend", "kubernetes", "--kubeconfig", kubeconfig,
			"--addr", "127.0.0.1:0", "--http-addr", "", "--state-dir", state, "--ready-file", ready}, &serveOut, &serveErr)
	}()
	defer func() {
		stop()
		for range 2 {
			if err := <-exited; err != nil {
				t.Errorf("a command ended with %v\nagent:\n%s\nserve:\n%s", err, agentErr.String(), serveErr.String())
			}
		}
	}()
	var addrs map[string]string
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if b, err := os.ReadFile(ready); err == nil && json.Unmarshal(b, &addrs) == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("serve did not start:\n%s", serveErr.String())
		}
	}

	allocate := func(args ...string) (string, error) {
		return runClient(ctx, "allocate", addrs["grpc"], filepath.Join(state, "certs"), args...)
	}
	var resp allocateOutput
	// The agent needs a moment to create the Fleet's servers and mark them
	// Ready; until then the answer is "nothing matches".
	var names []string
	for _, proto := range []string{"--grpc", "--rest"} {
		for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			o, err := allocate(proto, "--selector", "agones.dev/fleet=simple-game", "--counter", "rooms=Increment:1")
			if err == nil {
				if err := json.Unmarshal([]byte(o), &resp); err != nil || resp.Counters["rooms"].Count != "1" {
					t.Fatalf("allocate %s output: %v\n%s", proto, err, o)
				}
				names = append(names, resp.GameServerName)
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("allocate %s: %v\n%s\nagent:\n%s", proto, err, o, agentErr.String())
			}
		}
	}
	if names[0] == names[1] {
		t.Fatalf("both allocations got %s", names[0])
	}
	for _, name := range names {
		out, err := c.Kubectl(ctx, "get", "gameserver", name, "-n", "default", "-o",
			`jsonpath={.status.state} {.status.counters.rooms.count} {.metadata.annotations.quartermaster\.dev/owner}`)
		if err != nil || !strings.HasPrefix(string(out), "Allocated 1 ") {
			t.Fatalf("gameserver %s on the API server: %v %q", name, err, out)
		}
	}
}
