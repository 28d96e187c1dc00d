package allocator_test

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/quartermaster-dev/quartermaster/allocator/pb/allocation"
)

func TestMetricsValues(t *testing.T) {
	h := startHarness(t, harnessOpts{})
	conn := h.dial(nil)
	lobby := &allocation.AllocationRequest{GameServerSelectors: []*allocation.GameServerSelector{{MatchLabels: map[string]string{"mode": "lobby"}}}}
	for range 2 {
		if _, err := h.grpcAllocate(conn, lobby); err != nil {
			t.Fatal(err)
		}
	}
	// The rooms fleet has 2 servers: the third is UnAllocated.
	if _, err := h.grpcAllocate(conn, lobby); err == nil {
		t.Fatal("third lobby allocation succeeded")
	}
	// Failed requests in namespaces a caller invents take no series of
	// their own (_other), so they cannot use up the bound on label values
	// before a real namespace's first allocation.
	for i := range 250 {
		if _, err := h.grpcAllocate(conn, &allocation.AllocationRequest{Namespace: fmt.Sprintf("invented-%d", i)}); err == nil {
			t.Fatal("allocation in an invented namespace succeeded")
		}
	}
	if _, err := h.grpcAllocate(conn, &allocation.AllocationRequest{Namespace: "other"}); err != nil {
		t.Fatal(err)
	}
	if code, _, _ := h.post(h.httpClient(nil, false), "/gameserverallocation", []byte(`{"scheduling":"Sideways"}`)); code != 400 {
		t.Fatalf("bad enum over REST: HTTP %d", code)
	}

	m := h.svc.Metrics()
	for _, c := range []struct {
		ns, fleet, code string
		want            float64
	}{
		{"default", "rooms", "OK", 2},
		{"default", "", "ResourceExhausted", 1},
		{"other", "other", "OK", 1},
		{"default", "", "InvalidArgument", 1},
		{"_other", "", "ResourceExhausted", 250},
	} {
		if got := testutil.ToFloat64(m.Outcomes.WithLabelValues(c.ns, c.fleet, "local", c.code)); got != c.want {
			t.Errorf("allocations_total{namespace=%q,fleet=%q,code=%q} = %v, want %v", c.ns, c.fleet, c.code, got, c.want)
		}
	}
	if got := testutil.ToFloat64(m.InFlight); got != 0 {
		t.Errorf("in flight after all calls = %v, want 0", got)
	}
	// Series exist from their first request on, at 0 when nothing happened
	// (the memory backend never retries), so rate() works from the start.
	const want = `
# HELP qm_allocator_allocation_retries_total Allocation commits that lost a race and were retried, by namespace and fleet.
# TYPE qm_allocator_allocation_retries_total counter
qm_allocator_allocation_retries_total{fleet="",namespace="_other"} 0
qm_allocator_allocation_retries_total{fleet="",namespace="default"} 0
qm_allocator_allocation_retries_total{fleet="other",namespace="other"} 0
qm_allocator_allocation_retries_total{fleet="rooms",namespace="default"} 0
`
	if err := testutil.GatherAndCompare(h.reg, strings.NewReader(want), "qm_allocator_allocation_retries_total"); err != nil {
		t.Error(err)
	}
	// The histogram counted every request, in the namespace/fleet series.
	if n := histogramCount(t, h, "default", "rooms"); n != 2 {
		t.Errorf("latency count for default/rooms = %d, want 2", n)
	}
	if n := histogramCount(t, h, "default", ""); n != 2 {
		t.Errorf("latency count for default/\"\" = %d, want 2", n)
	}

	// /metrics serves the same registry.
	resp, err := http.Get("http://" + h.httpAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if !strings.Contains(string(body), `qm_allocator_allocations_total{code="OK",fleet="rooms",namespace="default",source="local"} 2`) {
		t.Errorf("/metrics lacks the rooms outcome:\n%s", body)
	}
	if !strings.Contains(string(body), `qm_allocator_allocation_duration_seconds_bucket{fleet="rooms",namespace="default",source="local",le="5e-05"}`) {
		t.Errorf("/metrics lacks the 50µs bucket")
	}
	// One log line per failed allocation, with the reason.
	logs := h.logs.String()
	if n := strings.Count(logs, `msg="allocation failed"`); n != 252 {
		t.Errorf("%d failure log lines, want 252:\n%s", n, logs)
	}
	if !strings.Contains(logs, `code=InvalidArgument reason="invalid request: scheduling: unknown value \"Sideways\"`) {
		t.Errorf("failure log lacks the reason:\n%s", logs)
	}
}

func histogramCount(t *testing.T, h *harness, ns, fleet string) uint64 {
	t.Helper()
	mfs, err := h.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "qm_allocator_allocation_duration_seconds" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["namespace"] == ns && labels["fleet"] == fleet {
				return m.GetHistogram().GetSampleCount()
			}
		}
	}
	return 0
}
