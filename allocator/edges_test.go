package allocator_test

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc/connectivity"

	"github.com/quartermaster-dev/quartermaster/allocator"
	"github.com/quartermaster-dev/quartermaster/allocator/pb/allocation"
	"github.com/quartermaster-dev/quartermaster/certs"
)

// shortRouteTimeout sets the shared port's routing deadline for one test.
func shortRouteTimeout(t *testing.T, d time.Duration) {
	old := *allocator.RouteTimeout
	*allocator.RouteTimeout = d
	t.Cleanup(func() { *allocator.RouteTimeout = old })
}

// waitReady connects conn and waits until it is READY.
func waitReady(t *testing.T, conn interface {
	Connect()
	GetState() connectivity.State
	WaitForStateChange(context.Context, connectivity.State) bool
}) {
	t.Helper()
	conn.Connect()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for s := conn.GetState(); s != connectivity.Ready; s = conn.GetState() {
		if !conn.WaitForStateChange(ctx, s) {
			t.Fatalf("connection stuck in %v", s)
		}
	}
}

// A gRPC channel that connects before its first call and then idles past
// the routing deadline keeps its connection on the shared port; a client
// that never sends the preface is still dropped at the deadline.
func TestSharedPortIdleChannelKeptSilentClientDropped(t *testing.T) {
	shortRouteTimeout(t, 300*time.Millisecond)
	h := startHarness(t, harnessOpts{})
	conn := h.dial(nil)
	waitReady(t, conn)
	ctx, cancel := context.WithTimeout(context.Background(), 1200*time.Millisecond)
	defer cancel()
	if conn.WaitForStateChange(ctx, connectivity.Ready) {
		t.Fatalf("the idle channel went from READY to %v within 4x the routing deadline", conn.GetState())
	}
	if _, err := h.grpcAllocate(conn, &allocation.AllocationRequest{}); err != nil {
		t.Fatal(err)
	}

	// TLS done, then silence: dropped once the deadline passes.
	c, err := tls.Dial("tcp", h.grpcAddr, h.pki.client(t, "dev", nil, nil))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(5 * time.Second))
	start := time.Now()
	_, err = c.Read(make([]byte, 1))
	var ne net.Error
	if err == nil || (errors.As(err, &ne) && ne.Timeout()) {
		t.Fatalf("a silent client was not dropped: %v", err)
	}
	if !errors.Is(err, io.EOF) && time.Since(start) > 3*time.Second {
		t.Fatalf("dropped late: %v after %s", err, time.Since(start))
	}
}

// On the shared port, removing a client CA closes the connections it
// vouched for.
func TestSharedPortRemovedCAClosesConnections(t *testing.T) {
	h := startHarness(t, harnessOpts{})
	other, err := certs.NewCA("other CA", certs.ValidFor(time.Now(), time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	otherFile := filepath.Join(h.pki.clientCA, "other.crt")
	if err := certs.WriteFileAtomic(otherFile, other.CertPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := h.tls.Reload(); err != nil {
		t.Fatal(err)
	}
	gone := h.dial(h.pki.client(t, "mallory", other, nil))
	stay := h.dial(nil)
	for _, c := range []interface {
		Connect()
		GetState() connectivity.State
		WaitForStateChange(context.Context, connectivity.State) bool
	}{gone, stay} {
		waitReady(t, c)
	}
	if _, err := h.grpcAllocate(gone, &allocation.AllocationRequest{}); err != nil {
		t.Fatal(err)
	}

	if err := os.Remove(otherFile); err != nil {
		t.Fatal(err)
	}
	if err := h.tls.Reload(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if !gone.WaitForStateChange(ctx, connectivity.Ready) {
		t.Fatal("the removed CA's connection is still open")
	}
	if _, err := h.grpcAllocate(gone, &allocation.AllocationRequest{}); err == nil {
		t.Fatal("the removed CA's client still allocates")
	}
	if s := stay.GetState(); s != connectivity.Ready {
		t.Errorf("the remaining CA's connection is %v", s)
	}
}
