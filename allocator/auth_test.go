package allocator_test

import (
	"crypto/tls"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/codes"

	"github.com/quartermaster-dev/quartermaster/allocator/pb/allocation"
	"github.com/quartermaster-dev/quartermaster/certs"
)

// Refusals at the TLS handshake never reach a handler: grpc-go reports
// them as Unavailable (there is no gRPC status to send before TLS is up),
// and the service records no allocation. Refusals by identity are gRPC
// statuses: Unauthenticated without one, PermissionDenied for one the
// limits do not allow.
func TestAuthRefusals(t *testing.T) {
	h := startHarness(t, harnessOpts{limits: `
apiVersion: quartermaster.dev/v1alpha1
kind: AllocatorLimits
identities:
  dev: {}
`})
	otherCA, err := certs.NewCA("someone else's CA", certs.ValidFor(time.Now(), time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	expired := certs.Expired(time.Now())
	noClientCert := &tls.Config{RootCAs: h.pki.roots(), ServerName: "localhost"}

	cases := []struct {
		name    string
		cfg     *tls.Config
		want    codes.Code
		message string
	}{
		{"no client certificate", noClientCert, codes.Unavailable, ""},
		{"unknown CA", h.pki.client(t, "dev", otherCA, nil), codes.Unavailable, ""},
		{"expired certificate", h.pki.client(t, "dev", nil, &expired), codes.Unavailable, ""},
		{"identity not allowed", h.pki.client(t, "mallory", nil, nil), codes.PermissionDenied, `identity "mallory" may not allocate`},
		{"allowed", h.pki.client(t, "dev", nil, nil), codes.OK, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := h.grpcAllocate(h.dial(c.cfg), &allocation.AllocationRequest{})
			wantCode(t, err, c.want)
			if c.message != "" && !strings.Contains(err.Error(), c.message) {
				t.Errorf("error %q does not mention %q", err, c.message)
			}
			// The same over REST: the handshake fails, or the status
			// maps to HTTP.
			code, body, err := h.post(h.httpClient(c.cfg, false), "/gameserverallocation", []byte(`{}`))
			switch c.want {
			case codes.Unavailable:
				if err == nil {
					t.Fatalf("REST call succeeded with HTTP %d: %s", code, body)
				}
			case codes.PermissionDenied:
				if code != 403 || !strings.Contains(string(body), `"code":7`) {
					t.Fatalf("REST: HTTP %d %s, want 403 with code 7", code, body)
				}
			case codes.OK:
				if code != 200 {
					t.Fatalf("REST: HTTP %d %s", code, body)
				}
			}
		})
	}
	m := h.svc.Metrics()
	if got := testutil.ToFloat64(m.Outcomes.WithLabelValues("default", "", "local", "PermissionDenied")); got != 2 {
		t.Errorf("PermissionDenied outcomes = %v, want 2 (one gRPC, one REST)", got)
	}
	if got := testutil.ToFloat64(m.Rejections.WithLabelValues("unknown_identity")); got != 2 {
		t.Errorf("unknown_identity rejections = %v, want 2", got)
	}
}

// A certificate that names no identity (no URI SAN, no CN) is
// Unauthenticated; one with only a CN is identified by it.
func TestIdentityFromCN(t *testing.T) {
	h := startHarness(t, harnessOpts{})
	kp, err := h.pki.ca.IssueClientCNOnly("cn-only", certs.ValidFor(time.Now(), time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	c, err := kp.TLSCertificate()
	if err != nil {
		t.Fatal(err)
	}
	cfg := &tls.Config{Certificates: []tls.Certificate{c}, RootCAs: h.pki.roots(), ServerName: "localhost"}
	resp, err := h.grpcAllocate(h.dial(cfg), &allocation.AllocationRequest{})
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.GetMetadata().GetAnnotations()["quartermaster.dev/owner"]; got != "cn-only" {
		t.Errorf("owner = %q, want cn-only", got)
	}
}

// Rotating the client CA and the server certificate on disk takes effect
// without a restart: clients of the new CA get in, clients of the old one
// are refused, and so is a connection opened before the rotation: its CA
// was removed, so it is closed (mtls/trust.go).
func TestRotation(t *testing.T) {
	h := startHarness(t, harnessOpts{})
	before := h.dial(nil)
	if _, err := h.grpcAllocate(before, &allocation.AllocationRequest{}); err != nil {
		t.Fatal(err)
	}

	newCA, err := certs.NewCA("rotated CA", certs.ValidFor(time.Now(), time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	h.pki.writeClientCA(t, newCA)
	h.pki.writeServer(t, newCA)
	if err := h.tls.Reload(); err != nil {
		t.Fatal(err)
	}
	oldCA := h.pki.ca
	h.pki.ca = newCA // clients now trust, and are signed by, the new CA

	if _, err := h.grpcAllocate(h.dial(nil), &allocation.AllocationRequest{}); err != nil {
		t.Fatalf("client of the new CA: %v", err)
	}
	old := h.pki.client(t, "dev", oldCA, nil)
	old.RootCAs = newCA.CertPool()
	_, err = h.grpcAllocate(h.dial(old), &allocation.AllocationRequest{})
	wantCode(t, err, codes.Unavailable)
	// The connection from before the rotation was authenticated by a CA
	// that is gone.
	if _, err := h.grpcAllocate(before, &allocation.AllocationRequest{}); err == nil {
		t.Fatal("a connection whose client CA was removed still allocates")
	}
}
