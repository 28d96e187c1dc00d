package allocator_test

import (
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/quartermaster-dev/quartermaster/allocator/pb/allocation"
)

// TestPprof: profiles are on the health port only when asked for, and the
// mutex and block profiles record events then (the runtime's rates are off
// by default, which leaves them empty).
func TestPprof(t *testing.T) {
	get := func(h *harness, path string) (int, string) {
		t.Helper()
		resp, err := http.Get("http://" + h.httpAddr + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}

	off := startHarness(t, harnessOpts{})
	if code, _ := get(off, "/debug/pprof/"); code != http.StatusNotFound {
		t.Fatalf("without Pprof, /debug/pprof/ answered %d, want 404", code)
	}

	on := startHarness(t, harnessOpts{pprof: true})
	code, body := get(on, "/debug/pprof/")
	if code != http.StatusOK || !strings.Contains(body, "mutex") || !strings.Contains(body, "block") {
		t.Fatalf("with Pprof, /debug/pprof/ answered %d:\n%s", code, body)
	}
	// Some requests, so that goroutines block and wake.
	conn := on.dial(nil)
	for range 5 {
		if _, err := on.grpcAllocate(conn, &allocation.AllocationRequest{}); err != nil {
			t.Fatal(err)
		}
	}
	if code, body := get(on, "/debug/pprof/mutex?debug=1"); code != http.StatusOK || !strings.Contains(body, "sampling period=100\n") {
		t.Fatalf("/debug/pprof/mutex answered %d, not sampling one event in 100:\n%.300s", code, body)
	}
	if code, body := get(on, "/debug/pprof/block?debug=1"); code != http.StatusOK || !strings.Contains(body, " @ ") {
		t.Fatalf("/debug/pprof/block answered %d with no blocking events recorded:\n%.300s", code, body)
	}
	if code, body := get(on, "/debug/pprof/cmdline"); code != http.StatusOK || body == "" {
		t.Fatalf("/debug/pprof/cmdline answered %d %q", code, body)
	}
}
