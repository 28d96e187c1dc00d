package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// syncBuf is a bytes.Buffer safe to write from the server goroutine while
// the test reads it.
type syncBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuf) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuf) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// `qm serve` with development defaults, then `qm allocate`, `qm list` and
// `qm release` against it over gRPC and REST, as the README tells a new
// user to; then SIGTERM (context cancel) and a clean exit.
func TestServeAllocateListRelease(t *testing.T) {
	state := t.TempDir()
	ready := filepath.Join(state, "ready.json")
	ctx, cancel := context.WithCancel(context.Background())
	var out, errOut syncBuf
	done := make(chan error, 1)
	go func() {
		done <- commands["serve"].run(ctx, []string{"--addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0",
			"--state-dir", state, "--ready-file", ready, "--seed", "1"}, &out, &errOut)
	}()
	var addrs map[string]string
	for deadline := time.Now().Add(10 * time.Second); ; {
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
		time.Sleep(20 * time.Millisecond)
	}
	if !strings.Contains(out.String(), "allocate --addr localhost:") {
		t.Errorf("the banner does not say how to allocate:\n%s", out.String())
	}
	certsDir := filepath.Join(state, "certs")
	run := func(name string, args ...string) (string, error) {
		return runClient(context.Background(), name, addrs["grpc"], certsDir, args...)
	}

	var resp allocateOutput
	o, err := run("allocate", "--identity", "alice", "--selector", "mode=lobby", "--counter", "rooms=Increment:2", "--list-add", "players=alice")
	if err != nil {
		t.Fatalf("allocate over gRPC: %v %s", err, o)
	}
	if err := json.Unmarshal([]byte(o), &resp); err != nil || resp.GameServerName == "" || resp.Counters["rooms"].Count != "2" {
		t.Fatalf("allocate output: %v\n%s", err, o)
	}
	first := resp.GameServerName
	o, err = run("allocate", "--rest", "--identity", "bob", "--namespace", "ranked", "--scheduling", "Distributed", "--label", "match=1")
	if err != nil || !strings.Contains(o, `"match": "1"`) {
		t.Fatalf("allocate over REST: %v\n%s", err, o)
	}

	// A failure exits with the gRPC code: 8 for ResourceExhausted, 3 for
	// InvalidArgument.
	for code, args := range map[int][]string{
		8: {"--namespace", "empty"},
		3: {"--counter", "rooms=Multiply:2"},
	} {
		for _, proto := range []string{"--grpc", "--rest"} {
			msg, err := run("allocate", append([]string{proto}, args...)...)
			var e exitError
			if !errors.As(err, &e) || e.code != code {
				t.Errorf("allocate %s %v: %v (%s), want exit code %d", proto, args, err, msg, code)
			}
		}
	}

	// List and release, over both protocols.
	o, err = run("list", "--identity", "alice", "--rest")
	if err != nil || !strings.Contains(o, first) || strings.Contains(o, `"owner": "bob"`) {
		t.Fatalf("alice's list: %v\n%s", err, o)
	}
	if _, err := run("release", "--identity", "bob", "--name", first); err == nil {
		t.Fatalf("bob released alice's server")
	}
	if o, err := run("release", "--identity", "alice", "--name", first); err != nil {
		t.Fatalf("release: %v %s", err, o)
	}
	if o, err := run("list", "--identity", "alice"); err != nil || strings.Contains(o, first) {
		t.Fatalf("after release: %v\n%s", err, o)
	}

	// A request file, as for REST.
	req := filepath.Join(state, "req.json")
	if err := os.WriteFile(req, []byte(`{"gameServerSelectors":[{"matchLabels":{"mode":"deathmatch"}}]}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if o, err := run("allocate", "--request", req); err != nil || !strings.Contains(o, "simple-game") {
		t.Fatalf("--request: %v\n%s", err, o)
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("serve: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("serve did not stop")
	}
	if !strings.Contains(errOut.String(), "msg=stopped") {
		t.Errorf("no shutdown log:\n%s", errOut.String())
	}
}

func TestServeRefusesBadFlags(t *testing.T) {
	for _, args := range [][]string{
		{"--backend", "nope", "--state-dir", t.TempDir(), "--addr", "127.0.0.1:0", "--http-addr", ""},
		{"--unallocated-code", "Sometimes"},
		{"--tls-dir", t.TempDir()},
		{"--fleets", "/does/not/exist", "--state-dir", t.TempDir(), "--addr", "127.0.0.1:0", "--http-addr", ""},
		{"extra"},
		{"--grpc-workers", "70000"},
		{"--grpc-workers", "-1"},
		{"--gc-heap-floor", "12M"},
		{"--gc-heap-floor", "-1Mi"},
		{"--backend", "kubernetes", "--kubeconfig", "/does/not/exist", "--state-dir", t.TempDir(), "--addr", "127.0.0.1:0", "--http-addr", ""},
		{"--backend", "kubernetes", "--fleets", "x.yaml", "--state-dir", t.TempDir(), "--addr", "127.0.0.1:0", "--http-addr", ""},
	} {
		var o, e bytes.Buffer
		if err := commands["serve"].run(context.Background(), args, &o, &e); err == nil {
			t.Errorf("serve %v: no error", args)
		}
	}
}

func TestAllocateFlags(t *testing.T) {
	var sels selectorFlags
	for _, s := range []struct{ flag, v string }{{"selector", "mode=lobby,region=eu"}, {"state", "Allocated"}, {"selector", "mode=lobby"}} {
		var err error
		if s.flag == "selector" {
			err = selectorFlag{&sels}.Set(s.v)
		} else {
			err = stateFlag{&sels}.Set(s.v)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	req, err := buildRequest("ns", sels.list, "Distributed", multiFlag{"a=b"}, nil, multiFlag{"rooms=Increment:1", "rooms=capacity:5"}, multiFlag{"p=x"}, multiFlag{"p=y"})
	if err != nil {
		t.Fatal(err)
	}
	got := req.String()
	for _, want := range []string{`namespace:"ns"`, `gameServerState:ALLOCATED`, `scheduling:Distributed`, `addValues:"x"`, `deleteValues:"y"`, `value:5`, `value:"Increment"`} {
		if !strings.Contains(strings.ReplaceAll(got, "  ", " "), want) {
			t.Errorf("request %s lacks %s", got, want)
		}
	}
	for _, bad := range []func() error{
		func() error { _, err := buildRequest("", nil, "Sideways", nil, nil, nil, nil, nil); return err },
		func() error {
			_, err := buildRequest("", nil, "Packed", multiFlag{"novalue"}, nil, nil, nil, nil)
			return err
		},
		func() error {
			_, err := buildRequest("", nil, "Packed", nil, nil, multiFlag{"rooms=Increment"}, nil, nil)
			return err
		},
		func() error { return stateFlag{&sels}.Set("Sleeping") },
		func() error { return selectorFlag{&sels}.Set("=x") },
	} {
		if bad() == nil {
			t.Error("bad flag accepted")
		}
	}
}

func TestParseReplicaShard(t *testing.T) {
	host := func(h string) func() (string, error) { return func() (string, error) { return h, nil } }
	cases := []struct {
		v        string
		replicas int
		host     string
		want     int
		wantErr  string
	}{
		{"", 0, "x", 0, ""},
		{"2", 3, "x", 2, ""},
		{"hostname", 3, "allocator-1", 1, ""},
		{"3", 3, "x", 0, "from 0 to 2"},
		{"-1", 3, "x", 0, "from 0 to 2"},
		{"hostname", 3, "allocator-7", 0, "from 0 to 2"},
		{"hostname", 3, "allocator", 0, "no -N ordinal"},
		{"1", 1, "x", 0, "needs --replicas of 2 or more"},
		{"one", 3, "x", 0, "want a number"},
	}
	for _, c := range cases {
		got, err := parseReplicaShard(c.v, c.replicas, host(c.host))
		if c.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Errorf("%q/%d/%q: err = %v, want %q", c.v, c.replicas, c.host, err, c.wantErr)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("%q/%d/%q = %d, %v; want %d", c.v, c.replicas, c.host, got, err, c.want)
		}
	}
}

// runClient runs a client command (allocate, list, release) against the
// server at addr with the certificates in certsDir; it returns standard
// output, or standard error with the command's error.
func runClient(ctx context.Context, name, addr, certsDir string, args ...string) (string, error) {
	var o, e bytes.Buffer
	args = append([]string{"--addr", addr, "--certs-dir", certsDir}, args...)
	if err := commands[name].run(ctx, args, &o, &e); err != nil {
		return e.String(), err
	}
	return o.String(), nil
}

// allocateOutput is the part of `qm allocate`'s JSON the tests read.
type allocateOutput struct {
	GameServerName string `json:"gameServerName"`
	Counters       map[string]struct {
		Count string `json:"count"`
	} `json:"counters"`
}
