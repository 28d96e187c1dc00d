package allocator_test

import (
	"context"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"

	"github.com/quartermaster-dev/quartermaster/allocator"
	"github.com/quartermaster-dev/quartermaster/allocator/pb/allocation"
	qmv1 "github.com/quartermaster-dev/quartermaster/allocator/pb/quartermaster/v1"
	"github.com/quartermaster-dev/quartermaster/core"
	"github.com/quartermaster-dev/quartermaster/trace"
)

// TestServiceTrace serves allocations over gRPC and REST with a tracer
// set, then reads the trace: a record per request, in the order answered,
// with the request as sent, the code, the server allocated and this
// cluster's name; refusals keep their code and name no server; a Release
// is a release record; the records metric counts them. After SetTracer(nil) nothing more is
// recorded.
func TestServiceTrace(t *testing.T) {
	h := startHarness(t, harnessOpts{})
	path := filepath.Join(t.TempDir(), "serve.jsonl")
	tr, err := allocator.NewTracer(allocator.TracerOptions{Path: path, Cluster: "on-prem"})
	if err != nil {
		t.Fatal(err)
	}
	if err := tr.Register(h.reg); err != nil {
		t.Fatal(err)
	}
	h.svc.SetTracer(tr)
	conn := h.dial(nil)
	lobby := &allocation.AllocationRequest{
		Namespace:           "default",
		GameServerSelectors: []*allocation.GameServerSelector{{MatchLabels: map[string]string{"mode": "lobby"}}},
		Scheduling:          allocation.AllocationRequest_Distributed,
	}
	start := time.Now()
	var names []string
	for range 2 {
		resp, err := h.grpcAllocate(conn, lobby)
		if err != nil {
			t.Fatal(err)
		}
		names = append(names, resp.GetGameServerName())
	}
	_, err = h.grpcAllocate(conn, lobby) // the lobby fleet has two servers
	wantCode(t, err, codes.ResourceExhausted)
	c := h.httpClient(h.pki.client(t, "dev", nil, nil), true)
	deathmatch := &allocation.AllocationRequest{GameServerSelectors: []*allocation.GameServerSelector{{MatchLabels: map[string]string{"mode": "deathmatch"}}}}
	code, body := h.restAllocate(c, deathmatch)
	if code != http.StatusOK {
		t.Fatalf("REST: %d %s", code, body)
	}
	if _, err := h.admin(conn).Release(context.Background(), &qmv1.ReleaseRequest{Namespace: "default", GameServerName: names[0]}); err != nil {
		t.Fatal(err)
	}
	h.svc.SetTracer(nil)
	if _, err := h.grpcAllocate(conn, deathmatch); err != nil {
		t.Fatal(err)
	}
	if err := tr.Close(); err != nil {
		t.Fatal(err)
	}
	recs, err := trace.ReadFiles(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) != 5 {
		t.Fatalf("%d records for 4 traced requests and a release: %+v", len(recs), recs)
	}
	if r := recs[4]; r.Event != trace.EventRelease || r.GameServer != "default/"+names[0] || r.Outcome != "OK" || r.At.Before(recs[3].At) {
		t.Errorf("release recorded as %+v", r)
	}
	recs = recs[:4]
	for i, r := range recs {
		if r.At.Before(start) || r.At.After(time.Now()) || r.LatencyMs <= 0 || r.Event != trace.EventAllocate {
			t.Errorf("record %d: %+v", i, r)
		}
		req, err := r.CoreRequest()
		if err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
		want := "lobby"
		if i == 3 {
			want = "deathmatch"
		}
		if len(req.Selectors) != 1 || req.Selectors[0].MatchLabels["mode"] != want || (i < 3) != (req.Scheduling == core.Distributed) {
			t.Errorf("record %d: request %s", i, r.Request)
		}
	}
	for i, name := range names {
		if r := recs[i]; r.Outcome != "OK" || r.GameServer != "default/"+name || r.Cluster != "on-prem" {
			t.Errorf("record %d: %+v, want default/%s from on-prem", i, r, name)
		}
	}
	if r := recs[2]; r.Outcome != "ResourceExhausted" || r.GameServer != "" || r.Cluster != "" {
		t.Errorf("refusal recorded as %+v", r)
	}
	if r := recs[3]; r.Outcome != "OK" || !strings.HasPrefix(r.GameServer, "default/simple-") || r.Cluster != "on-prem" {
		t.Errorf("REST allocation recorded as %+v", r)
	}
	if n, err := testutil.GatherAndCount(h.reg, "qm_trace_records_total", "qm_trace_dropped_total"); err != nil || n != 2 {
		t.Fatalf("trace metrics: %d series, %v", n, err)
	}
	mfs, err := h.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		switch mf.GetName() {
		case "qm_trace_records_total":
			if v := mf.GetMetric()[0].GetCounter().GetValue(); v != 5 {
				t.Errorf("qm_trace_records_total = %v, want 5", v)
			}
		case "qm_trace_dropped_total":
			if v := mf.GetMetric()[0].GetCounter().GetValue(); v != 0 {
				t.Errorf("qm_trace_dropped_total = %v, want 0", v)
			}
		}
	}
}

// TestTraceHookAllocations: the request path's share of tracing allocates
// nothing, with or without a tracer.
func TestTraceHookAllocations(t *testing.T) {
	h := startHarness(t, harnessOpts{})
	req := &allocation.AllocationRequest{}
	resp := &allocation.AllocationResponse{GameServerName: "x", Source: "local"}
	if n := testing.AllocsPerRun(1000, func() { allocator.TraceHook(h.svc, req, resp) }); n != 0 {
		t.Errorf("without a tracer: %v allocations per request", n)
	}
	tr, err := allocator.NewTracer(allocator.TracerOptions{Path: filepath.Join(t.TempDir(), "t.jsonl"), Queue: 1 << 16})
	if err != nil {
		t.Fatal(err)
	}
	defer tr.Close()
	h.svc.SetTracer(tr)
	if n := testing.AllocsPerRun(1000, func() { allocator.TraceHook(h.svc, req, resp) }); n != 0 {
		t.Errorf("with a tracer: %v allocations per request", n)
	}
}
