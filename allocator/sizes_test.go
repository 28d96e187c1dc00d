package allocator_test

import (
	"strings"
	"testing"

	"google.golang.org/grpc/codes"

	"github.com/quartermaster-dev/quartermaster/allocator"
	"github.com/quartermaster-dev/quartermaster/allocator/pb/allocation"
)

// Requests over the size limit are refused before any work: gRPC with
// ResourceExhausted, REST with 413. Unknown paths and methods get clear
// errors too.
func TestRequestLimits(t *testing.T) {
	h := startHarness(t, harnessOpts{})
	big := strings.Repeat("x", allocator.DefaultMaxRequestBytes)
	_, err := h.grpcAllocate(h.dial(nil), &allocation.AllocationRequest{
		Metadata: &allocation.MetaPatch{Annotations: map[string]string{"big": big}},
	})
	wantCode(t, err, codes.ResourceExhausted)

	c := h.httpClient(nil, true)
	code, body, err := h.post(c, allocator.AllocatePath, []byte(`{"metadata":{"annotations":{"big":"`+big+`"}}}`))
	if err != nil || code != 413 || !strings.Contains(string(body), "larger than the limit") {
		t.Errorf("big REST body: %d %s %v", code, body, err)
	}
	code, body, _ = h.post(c, "/nope", []byte(`{}`))
	if code != 404 || !strings.Contains(string(body), "POST /gameserverallocation") {
		t.Errorf("unknown path: %d %s", code, body)
	}
	resp, err := c.Get("https://" + h.restAddr + allocator.AllocatePath)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 405 || resp.Header.Get("Allow") != "POST" {
		t.Errorf("GET: %d, Allow %q", resp.StatusCode, resp.Header.Get("Allow"))
	}
	// The server still works.
	if _, err := h.grpcAllocate(h.dial(nil), &allocation.AllocationRequest{}); err != nil {
		t.Fatal(err)
	}
}
