package allocator_test

import (
	"context"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	"github.com/quartermaster-dev/quartermaster/allocator/pb/allocation"
)

// bigFleet never runs out during a test.
const bigFleet = `
apiVersion: quartermaster.dev/v1alpha1
kind: Fleets
nodes: 8
fleets:
- name: big
  replicas: 60000
`

// Under load from gRPC and REST callers, a SIGTERM-style Shutdown fails no
// request: readiness goes false first (callers, like a load balancer, stop
// sending when they see it), requests in flight finish, then the server
// stops.
func TestGracefulShutdownUnderLoad(t *testing.T) {
	h := startHarness(t, harnessOpts{fleets: bigFleet, drain: 300 * time.Millisecond})
	conn := h.dial(nil)
	rest := h.httpClient(nil, true)
	health := healthpb.NewHealthClient(conn)
	// Warm up: connections made and the index's groups built.
	if _, err := h.grpcAllocate(conn, &allocation.AllocationRequest{}); err != nil {
		t.Fatal(err)
	}
	if code, _, err := h.post(rest, "/gameserverallocation", []byte(`{}`)); err != nil || code != http.StatusOK {
		t.Fatal(code, err)
	}

	var stopping atomic.Bool
	var ok, failed atomic.Int64
	var mu sync.Mutex
	var failures []string
	var wg sync.WaitGroup
	for i := range 16 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stopping.Load() {
				var err error
				if i%2 == 0 {
					_, err = h.grpcAllocate(conn, &allocation.AllocationRequest{})
				} else {
					var code int
					code, _, err = h.post(rest, "/gameserverallocation", []byte(`{}`))
					if err == nil && code != http.StatusOK {
						err = errHTTP(code)
					}
				}
				if err != nil {
					failed.Add(1)
					mu.Lock()
					failures = append(failures, err.Error())
					mu.Unlock()
				} else {
					ok.Add(1)
				}
			}
		}()
	}
	time.Sleep(400 * time.Millisecond)

	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		t0 := time.Now()
		err := h.srv.Shutdown(ctx)
		t.Logf("Shutdown took %v", time.Since(t0))
		done <- err
	}()
	// What a load balancer does: poll readiness and stop sending.
	for h.srv.Ready() {
		time.Sleep(time.Millisecond)
	}
	resp, err := http.Get("http://" + h.httpAddr + "/ready")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("/ready during shutdown: %d, want 503", resp.StatusCode)
	}
	hc, err := health.Check(context.Background(), &healthpb.HealthCheckRequest{})
	if err != nil || hc.Status != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("gRPC health during shutdown: %v %v, want NOT_SERVING", hc, err)
	}
	stopping.Store(true)
	wg.Wait()
	if err := <-done; err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if failed.Load() > 0 {
		t.Fatalf("%d of %d requests failed during shutdown; first: %s", failed.Load(), ok.Load()+failed.Load(), strings.Join(failures[:min(3, len(failures))], " | "))
	}
	t.Logf("%d requests, none failed", ok.Load())
	if ok.Load() < 50 {
		t.Fatalf("only %d requests ran: the test did not load the server", ok.Load())
	}
	// Stopped: new calls are refused.
	_, err = h.grpcAllocate(h.dial(nil), &allocation.AllocationRequest{})
	wantCode(t, err, codes.Unavailable)
}

type errHTTP int

func (e errHTTP) Error() string { return http.StatusText(int(e)) }
