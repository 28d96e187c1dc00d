package main

import (
	"context"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/quartermaster-dev/quartermaster/allocator/pb/allocation"
)

// strictAllocator answers as Agones' allocator does where it differs from
// Quartermaster's: an empty namespace is no namespace, and nothing is
// allocated there. It records the namespaces it was sent.
type strictAllocator struct {
	allocation.UnimplementedAllocationServiceServer
	mu         sync.Mutex
	namespaces map[string]int
}

func (s *strictAllocator) Allocate(_ context.Context, in *allocation.AllocationRequest) (*allocation.AllocationResponse, error) {
	s.mu.Lock()
	s.namespaces[in.GetNamespace()]++
	s.mu.Unlock()
	if in.GetNamespace() == "" {
		return nil, status.Error(codes.ResourceExhausted, "there is no available GameServer to allocate")
	}
	return &allocation.AllocationResponse{GameServerName: "gs-1", Address: "127.0.0.1"}, nil
}

func (s *strictAllocator) seen() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]int{}
	for k, v := range s.namespaces {
		out[k] = v
	}
	s.namespaces = map[string]int{}
	return out
}

func startStrictAllocator(t *testing.T) (*strictAllocator, string) {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &strictAllocator{namespaces: map[string]int{}}
	srv := grpc.NewServer()
	allocation.RegisterAllocationServiceServer(srv, s)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	return s, lis.Addr().String()
}

// qm allocate and qm load send the namespace "default" when --namespace
// is left out (a request file without one included), and the one given
// otherwise, so that Agones' allocator, which does not read an empty
// namespace as "default", allocates.
func TestNamespaceDefaultIsSent(t *testing.T) {
	s, addr := startStrictAllocator(t)
	noNamespace := filepath.Join(t.TempDir(), "request.json")
	if err := os.WriteFile(noNamespace, []byte(`{"gameServerSelectors": [{"matchLabels": {"mode": "lobby"}}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"allocate"}, "default"},
		{[]string{"allocate", "--rest=false", "--selector", "mode=lobby"}, "default"},
		{[]string{"allocate", "--request", noNamespace}, "default"},
		{[]string{"allocate", "--request", noNamespace, "--namespace", "ranked"}, "ranked"},
		{[]string{"allocate", "--namespace", "ranked"}, "ranked"},
		{[]string{"load", "--requests", "5", "--release=false", "--progress", "never"}, "default"},
		{[]string{"load", "--requests", "5", "--release=false", "--progress", "never", "--request", noNamespace}, "default"},
		{[]string{"load", "--requests", "5", "--release=false", "--progress", "never", "--namespace", "ranked"}, "ranked"},
	} {
		code, out, errOut := runQM(append(tc.args, "--insecure", "--addr", addr)...)
		got := s.seen()
		if code != 0 || len(got) != 1 || got[tc.want] == 0 {
			t.Errorf("qm %s: exit %d, namespaces sent %v, want only %q\nstdout %s\nstderr %s",
				strings.Join(tc.args, " "), code, got, tc.want, out, errOut)
		}
	}
}

// qm load --requests N ends when the N answers are in: its rates are per
// the time that took, and its result's active time is that time, not a
// day-long turn it never filled.
func TestLoadRequestsRates(t *testing.T) {
	_, addr := startStrictAllocator(t)
	out := filepath.Join(t.TempDir(), "result.json")
	code, summary, errOut := runQM("load", "--insecure", "--addr", addr, "--requests", "40", "--rate", "400",
		"--release=false", "--progress", "never", "--out", out)
	if code != 0 {
		t.Fatalf("exit %d\n%s\n%s", code, summary, errOut)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var res struct {
		DurationSeconds float64 `json:"durationSeconds"`
		Targets         []struct {
			ActiveSeconds float64 `json:"activeSeconds"`
			Intended      int64   `json:"intended"`
			OK            int64   `json:"ok"`
			IntendedRate  float64 `json:"intendedRate"`
			AchievedRate  float64 `json:"achievedRate"`
			Throughput    float64 `json:"throughput"`
		} `json:"targets"`
	}
	if err := json.Unmarshal(b, &res); err != nil {
		t.Fatal(err)
	}
	if len(res.Targets) != 1 {
		t.Fatalf("%d targets in the result", len(res.Targets))
	}
	r := res.Targets[0]
	if r.Intended != 40 || r.OK != 40 {
		t.Errorf("intended %d ok %d, want 40 each", r.Intended, r.OK)
	}
	// The active time reaches at least the last arrival's due time,
	// (n-1)/rate into the run.
	if r.ActiveSeconds < 39.0/400 || r.ActiveSeconds > res.DurationSeconds+1e-6 {
		t.Errorf("activeSeconds %.3f over a run of %.3fs", r.ActiveSeconds, res.DurationSeconds)
	}
	if r.IntendedRate <= 0 || r.AchievedRate <= 0 || r.Throughput <= 0 {
		t.Errorf("rates intended %.1f sent %.1f ok %.1f: want them per the active time", r.IntendedRate, r.AchievedRate, r.Throughput)
	}
	// The summary's row: target, call, sent, ok, errors, not sent,
	// intended/s, sent/s, ok/s, percentiles.
	for _, line := range strings.Split(summary, "\n") {
		f := strings.Fields(line)
		if len(f) < 9 || f[1] != "allocate/grpc" {
			continue
		}
		for i, name := range []string{"intended/s", "sent/s", "ok/s"} {
			if v, err := strconv.ParseFloat(f[6+i], 64); err != nil || v <= 0 {
				t.Errorf("%s is %q in the summary:\n%s", name, f[6+i], summary)
			}
		}
		return
	}
	t.Errorf("no row for the target in the summary:\n%s", summary)
}

// Where an Agones user looks first: qm allocate -h and qm load -h say in
// a paragraph of their own which flags matter against Agones' allocator.
func TestHelpSaysWhatMattersAgainstAgones(t *testing.T) {
	for cmd, wants := range map[string][]string{
		"allocate": {"--namespace", "Agones has no Release", "--source"},
		"load":     {"--release=false", "--namespace", "--source"},
	} {
		code, out, _ := runQM(cmd, "-h")
		if code != 0 {
			t.Fatalf("qm %s -h: exit %d", cmd, code)
		}
		var para string
		for _, p := range strings.Split(out, "\n\n") {
			if strings.HasPrefix(p, "Against Agones' own allocator:") {
				para = p
			}
		}
		if para == "" {
			t.Errorf("qm %s -h has no paragraph on Agones' own allocator:\n%s", cmd, out)
			continue
		}
		for _, w := range wants {
			if !strings.Contains(para, w) {
				t.Errorf("qm %s -h: the Agones paragraph does not name %s:\n%s", cmd, w, para)
			}
		}
	}
}
