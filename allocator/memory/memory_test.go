package memory

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/quartermaster-dev/quartermaster/allocator"
	"github.com/quartermaster-dev/quartermaster/core"
)

const sessionFleets = `
apiVersion: quartermaster.dev/v1alpha1
kind: Fleets
nodes: 2
fleets:
- name: game
  replicas: 3
  sessionDuration: 1m
  startupDuration: 5s
`

func allocate(t *testing.T, b *Backend, now time.Time) *core.GameServer {
	t.Helper()
	req, err := core.Normalize(&core.Request{})
	if err != nil {
		t.Fatal(err)
	}
	a, err := b.Allocate(context.Background(), req, now, 1)
	if err != nil {
		t.Fatal(err)
	}
	return a.GameServer
}

func countStates(b *Backend) map[core.State]int {
	out := map[core.State]int{}
	for _, gs := range b.Index().List() {
		out[gs.State]++
	}
	return out
}

// The agent keeps fleets at size: a session's end (after sessionDuration)
// and a Release both shut a server down and start a replacement, which is
// Scheduled for startupDuration and then Ready. Time is a FakeClock.
func TestAgentReplacesServers(t *testing.T) {
	cfg, err := ParseConfig([]byte(sessionFleets))
	if err != nil {
		t.Fatal(err)
	}
	clock := NewFakeClock(time.Unix(1_800_000_000, 0))
	b := New(cfg, Options{Clock: clock, Seed: 3})
	if got := countStates(b); got[core.StateReady] != 3 {
		t.Fatalf("initial states %v, want 3 Ready", got)
	}
	// Servers are spread over the nodes.
	nodes := map[string]int{}
	for _, gs := range b.Index().List() {
		nodes[gs.NodeName]++
	}
	if len(nodes) != 2 {
		t.Errorf("servers on nodes %v, want both nodes used", nodes)
	}

	first := allocate(t, b, clock.Now())
	clock.Advance(30 * time.Second)
	second := allocate(t, b, clock.Now())
	b.Step()
	if got := countStates(b); got[core.StateAllocated] != 2 || got[core.StateReady] != 1 {
		t.Fatalf("after two allocations: %v", got)
	}

	// The first session ends at 1m: shut down, replacement Scheduled.
	clock.Advance(31 * time.Second)
	next := b.Step()
	if _, ok := b.Get(first.Key()); ok {
		t.Fatalf("%s still exists after its session ended", first.Name)
	}
	if got := countStates(b); got[core.StateScheduled] != 1 || got[core.StateAllocated] != 1 || got[core.StateReady] != 1 {
		t.Fatalf("after the first session ended: %v", got)
	}
	if want := clock.Now().Add(5 * time.Second); !next.Equal(want) {
		t.Errorf("next change due %v, want %v (the replacement becoming Ready)", next, want)
	}
	clock.Advance(5 * time.Second)
	b.Step()
	if got := countStates(b); got[core.StateReady] != 2 {
		t.Fatalf("after start-up: %v", got)
	}

	// Release ends the second at once.
	gone, err := b.Release(context.Background(), second.Key(), second.LastAllocated())
	if err != nil {
		t.Fatal(err)
	}
	if gone.State != core.StateShutdown {
		t.Errorf("released server state %s, want Shutdown", gone.State)
	}
	b.Step()
	if got := countStates(b); got[core.StateScheduled] != 1 || got[core.StateReady] != 2 {
		t.Fatalf("after release: %v", got)
	}
	// Its session's end later finds nothing to do.
	clock.Advance(time.Minute)
	b.Step()
	if got := countStates(b); got[core.StateReady] != 3 || len(b.Index().List()) != 3 {
		t.Fatalf("in the end: %v", got)
	}
	_, err = b.Release(context.Background(), second.Key(), "")
	if !errors.Is(err, allocator.ErrNotFound) {
		t.Errorf("second release: %v, want ErrNotFound", err)
	}
}

// A server allocated again before its session ends keeps running until the
// newer session ends; Release with the old stamp is refused.
func TestReallocationExtendsSession(t *testing.T) {
	cfg, err := ParseConfig([]byte(sessionFleets))
	if err != nil {
		t.Fatal(err)
	}
	clock := NewFakeClock(time.Unix(1_800_000_000, 0))
	b := New(cfg, Options{Clock: clock})
	gs := allocate(t, b, clock.Now())
	clock.Advance(40 * time.Second)
	req, _ := core.Normalize(&core.Request{Selectors: []core.Selector{{State: core.StateAllocated}}})
	a, err := b.Allocate(context.Background(), req, clock.Now(), 1)
	if err != nil || a.GameServer.Name != gs.Name {
		t.Fatalf("re-allocation: %v %v", a, err)
	}
	b.Step()
	clock.Advance(30 * time.Second) // 70s after the first, 30s after the second
	b.Step()
	if _, ok := b.Get(gs.Key()); !ok {
		t.Fatal("server shut down at the end of the superseded session")
	}
	if _, err := b.Release(context.Background(), gs.Key(), gs.LastAllocated()); !errors.Is(err, allocator.ErrNotAllocated) {
		t.Fatalf("release with the old stamp: %v, want ErrNotAllocated", err)
	}
	clock.Advance(31 * time.Second)
	b.Step()
	if _, ok := b.Get(gs.Key()); ok {
		t.Fatal("server still there after the newer session ended")
	}
}

// Run drives Step from the clock: advancing a FakeClock is enough.
func TestRunFollowsTheClock(t *testing.T) {
	cfg, err := ParseConfig([]byte(sessionFleets))
	if err != nil {
		t.Fatal(err)
	}
	clock := NewFakeClock(time.Unix(1_800_000_000, 0))
	b := New(cfg, Options{Clock: clock})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go b.Run(ctx)
	gs := allocate(t, b, clock.Now())
	deadline := time.Now().Add(5 * time.Second)
	for {
		clock.Advance(10 * time.Second)
		if _, ok := b.Get(gs.Key()); !ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the agent never ended the session")
		}
		time.Sleep(time.Millisecond)
	}
}

func TestParseConfig(t *testing.T) {
	valid := []string{
		sessionFleets,
		"apiVersion: quartermaster.dev/v1alpha1\nkind: Fleets\nfleets:\n- name: a\n  replicas: 1\n  sessionDuration: 90\n",
	}
	for _, in := range valid {
		if _, err := ParseConfig([]byte(in)); err != nil {
			t.Errorf("valid config refused: %v\n%s", err, in)
		}
	}
	invalid := map[string]string{
		"unknown field":    "apiVersion: quartermaster.dev/v1alpha1\nkind: Fleets\nfleets:\n- name: a\n  replica: 1\n",
		"wrong kind":       "apiVersion: quartermaster.dev/v1alpha1\nkind: Fleet\n",
		"bad name":         "apiVersion: quartermaster.dev/v1alpha1\nkind: Fleets\nfleets:\n- name: A_b\n",
		"duplicate":        "apiVersion: quartermaster.dev/v1alpha1\nkind: Fleets\nfleets:\n- name: a\n- name: a\n",
		"negative":         "apiVersion: quartermaster.dev/v1alpha1\nkind: Fleets\nfleets:\n- name: a\n  replicas: -1\n",
		"count > capacity": "apiVersion: quartermaster.dev/v1alpha1\nkind: Fleets\nfleets:\n- name: a\n  counters: {c: {count: 2, capacity: 1}}\n",
		"bad duration":     "apiVersion: quartermaster.dev/v1alpha1\nkind: Fleets\nfleets:\n- name: a\n  sessionDuration: soon\n",
		"too many":         "apiVersion: quartermaster.dev/v1alpha1\nkind: Fleets\nfleets:\n- name: a\n  replicas: 2000000\n",
		"fleet label":      "apiVersion: quartermaster.dev/v1alpha1\nkind: Fleets\nfleets:\n- name: a\n  labels: {agones.dev/fleet: b}\n",
		"not yaml":         ":\n\t-",
	}
	for name, in := range invalid {
		_, err := ParseConfig([]byte(in))
		if err == nil {
			t.Errorf("%s: accepted", name)
			continue
		}
		if !strings.Contains(err.Error(), "fleets") && !strings.Contains(err.Error(), "kind") && !strings.Contains(err.Error(), "YAML") {
			t.Errorf("%s: error does not say where: %v", name, err)
		}
	}
	if err := DemoConfig().defaultAndValidate(); err != nil {
		t.Errorf("demo config: %v", err)
	}
}

// The fixtures: every testdata/valid-*.yaml loads, every invalid-*.yaml is
// refused with an error naming the file.
func TestFixtures(t *testing.T) {
	files, _ := filepath.Glob("testdata/*.yaml")
	if len(files) == 0 {
		t.Fatal("no fixtures")
	}
	for _, f := range files {
		_, err := LoadConfig(f)
		valid := strings.HasPrefix(filepath.Base(f), "valid-")
		if valid && err != nil {
			t.Errorf("%s: %v", f, err)
		}
		if !valid && (err == nil || !strings.Contains(err.Error(), f)) {
			t.Errorf("%s: accepted or unnamed: %v", f, err)
		}
	}
}
