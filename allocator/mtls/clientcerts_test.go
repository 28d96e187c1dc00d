package mtls_test

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc/credentials"

	"github.com/quartermaster-dev/quartermaster/allocator/mtls"
	"github.com/quartermaster-dev/quartermaster/certs"
)

// TestClientConnectionsBySerial: qm_mtls_client_connections counts a
// connection under the serial of the certificate it was accepted with,
// from its handshake to its close, so a caller's old and new certificate
// (one identity) show apart.
func TestClientConnectionsBySerial(t *testing.T) {
	f := newFixture(t, mtls.ModeMTLS)
	reg := prometheus.NewPedanticRegistry()
	if err := f.srv.Register(reg); err != nil {
		t.Fatal(err)
	}
	addr := startGRPC(t, f.srv, f.srv.GRPCCredentials(), nil)
	valid := certs.ValidFor(f.now.Add(-time.Minute), time.Hour)
	old, renewed := f.issueClient(f.ca, "forwarder", valid), f.issueClient(f.ca, "forwarder", valid)
	serial := func(kp *certs.KeyPair) string {
		c, err := kp.TLSCertificate()
		if err != nil {
			t.Fatal(err)
		}
		return c.Leaf.SerialNumber.Text(16)
	}
	gauge := func(kp *certs.KeyPair) float64 {
		t.Helper()
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			for _, m := range mf.GetMetric() {
				labels := map[string]string{}
				for _, l := range m.GetLabel() {
					labels[l.GetName()] = l.GetValue()
				}
				if labels["identity"] == "forwarder" && labels["serial"] == serial(kp) {
					return m.GetGauge().GetValue()
				}
			}
		}
		return 0
	}
	connect := func(kp *certs.KeyPair) func() {
		cc := grpcClient(t, addr, credentials.NewTLS(clientConfig(f.ca, kp)))
		if got, err := who(cc); err != nil || got != "forwarder" {
			t.Fatalf("who = %q, %v", got, err)
		}
		return func() { cc.Close() }
	}
	waitGauge := func(kp *certs.KeyPair, want float64) {
		t.Helper()
		deadline := time.Now().Add(waitFor)
		for gauge(kp) != want {
			if time.Now().After(deadline) {
				t.Fatalf("connections of serial %s = %v, want %v", serial(kp), gauge(kp), want)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}

	closeOld := connect(old)
	waitGauge(old, 1)
	waitGauge(renewed, 0)
	closeNew1, closeNew2 := connect(renewed), connect(renewed)
	waitGauge(renewed, 2)
	waitGauge(old, 1)
	closeOld()
	waitGauge(old, 0)
	closeNew1()
	waitGauge(renewed, 1)
	closeNew2()
	waitGauge(renewed, 0)
	// The last connection gone, its series goes too.
	if n, err := testutil.GatherAndCount(reg, "qm_mtls_client_connections"); err != nil || n != 0 {
		t.Fatalf("series left after every connection closed: %d, %v", n, err)
	}
}
