package allocator_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/quartermaster-dev/quartermaster/allocator/pb/allocation"
	"github.com/quartermaster-dev/quartermaster/certs"
)

// An existing Agones client works unchanged: this is the shape of Agones'
// examples/allocator-client (files for --key, --cert and --cacert, a
// tls.Config built by hand, a plain generated stub, multiClusterSetting
// disabled), pointed at this server.
func TestAgonesStyleClient(t *testing.T) {
	h := startHarness(t, harnessOpts{})
	dir := t.TempDir()
	kp, err := h.pki.ca.IssueClient("matchmaker", certs.ValidFor(time.Now(), time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	keyFile, certFile, caFile := filepath.Join(dir, "client.key"), filepath.Join(dir, "client.crt"), filepath.Join(dir, "ca.crt")
	for f, b := range map[string][]byte{keyFile: kp.KeyPEM, certFile: kp.CertPEM, caFile: h.pki.ca.CertPEM} {
		if err := os.WriteFile(f, b, 0o600); err != nil {
			t.Fatal(err)
		}
	}

	// From here on, what the example does.
	cert, err := os.ReadFile(certFile)
	if err != nil {
		t.Fatal(err)
	}
	key, err := os.ReadFile(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	cacert, err := os.ReadFile(caFile)
	if err != nil {
		t.Fatal(err)
	}
	request := &allocation.AllocationRequest{
		Namespace:           "default",
		MultiClusterSetting: &allocation.MultiClusterSetting{Enabled: false},
	}
	clientCert, err := tls.X509KeyPair(cert, key)
	if err != nil {
		t.Fatal(err)
	}
	tlsConfig := &tls.Config{Certificates: []tls.Certificate{clientCert}}
	rootCA := x509.NewCertPool()
	if !rootCA.AppendCertsFromPEM(cacert) {
		t.Fatal("could not append CA")
	}
	tlsConfig.RootCAs = rootCA
	dialOpts := grpc.WithTransportCredentials(credentials.NewTLS(tlsConfig))
	conn, err := grpc.NewClient(h.grpcAddr, dialOpts)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	grpcClient := allocation.NewAllocationServiceClient(conn)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	response, err := grpcClient.Allocate(ctx, request)
	if err != nil {
		t.Fatal(err)
	}
	if response.GameServerName == "" || len(response.Ports) == 0 || response.Address == "" || response.Source != "local" {
		t.Fatalf("incomplete response: %v", response)
	}
}
