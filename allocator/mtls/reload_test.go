package mtls_test

import (
	"context"
	"crypto/tls"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc/credentials"

	"github.com/quartermaster-dev/quartermaster/allocator/mtls"
	"github.com/quartermaster-dev/quartermaster/certs"
)

func servedSerial(t *testing.T, c *tls.Conn) string {
	t.Helper()
	pc := c.ConnectionState().PeerCertificates
	if len(pc) == 0 {
		t.Fatal("server presented no certificate")
	}
	return pc[0].SerialNumber.String()
}

// TestServerCertRotation: a new server certificate on disk is what new
// handshakes get after Reload, while connections made before keep working,
// both a raw TLS connection and a gRPC channel.
func TestServerCertRotation(t *testing.T) {
	f := newFixture(t, mtls.ModeMTLS)
	rs := startRaw(t, f.srv)
	addr := startGRPC(t, f.srv, f.srv.GRPCCredentials(), nil)
	cfg := clientConfig(f.ca, f.issueClient(f.ca, "matchmaker", certs.ValidFor(f.now, time.Hour)))

	before, _ := connectAndAsk(t, rs, cfg)
	oldSerial := servedSerial(t, before)
	cc := grpcClient(t, addr, credentials.NewTLS(cfg))
	if _, err := who(cc); err != nil {
		t.Fatalf("gRPC before rotation: %v", err)
	}

	next := f.issueServer(f.ca)
	f.writeServerCert(next)
	f.reload()
	if st := f.srv.Status(); st.Reloads != 1 || st.Leaf.SerialNumber.Cmp(next.Cert.SerialNumber) != 0 {
		t.Errorf("status after rotation: %+v", st)
	}

	after, _ := connectAndAsk(t, rs, cfg)
	if got, want := servedSerial(t, after), next.Cert.SerialNumber.String(); got != want {
		t.Errorf("new connection got certificate %s, want the rotated %s (old was %s)", got, want, oldSerial)
	}
	if id, err := ask(before); err != nil || id != "matchmaker" {
		t.Errorf("connection opened before rotation: %q, %v", id, err)
	}
	if servedSerial(t, before) != oldSerial {
		t.Error("open connection's certificate changed")
	}
	if id, err := who(cc); err != nil || id != "matchmaker" {
		t.Errorf("gRPC channel opened before rotation: %q, %v", id, err)
	}
}

// TestClientCARotation: replacing the trusted client CA refuses the old
// CA's clients on new connections and accepts the new CA's, with no
// restart; a connection already open stays open.
func TestClientCARotation(t *testing.T) {
	f := newFixture(t, mtls.ModeMTLS)
	rs := startRaw(t, f.srv)
	addr := startGRPC(t, f.srv, f.srv.GRPCCredentials(), nil)
	valid := certs.ValidFor(f.now, time.Hour)
	oldClient := clientConfig(f.ca, f.issueClient(f.ca, "old-client", valid))
	newCA := f.newCA("rotated client CA")
	newClient := clientConfig(f.ca, f.issueClient(newCA, "new-client", valid))

	open, _ := connectAndAsk(t, rs, oldClient)
	refused(t, rs, newClient)

	f.writeClientCA("ca.crt", newCA)
	f.reload()

	if id, err := ask(open); err != nil || id != "old-client" {
		t.Errorf("connection opened before rotation: %q, %v", id, err)
	}
	refused(t, rs, oldClient)
	refused(t, rs, pushyClientConfig(f.ca, f.issueClient(f.ca, "old-client", valid)))
	if _, id := connectAndAsk(t, rs, newClient); id != "new-client" {
		t.Errorf("identity %q, want new-client", id)
	}

	// The same over gRPC, each with a fresh channel.
	if err := healthy(grpcClient(t, addr, credentials.NewTLS(oldClient))); err == nil {
		t.Error("gRPC: old CA's client accepted after rotation")
	}
	if id, err := who(grpcClient(t, addr, credentials.NewTLS(newClient))); err != nil || id != "new-client" {
		t.Errorf("gRPC: new CA's client: %q, %v", id, err)
	}

	// A second file in the directory adds to the pool.
	f.writeClientCA("extra.pem", f.ca)
	f.reload()
	if st := f.srv.Status(); st.ClientCAs != 2 {
		t.Errorf("ClientCAs = %d, want 2", st.ClientCAs)
	}
	connectAndAsk(t, rs, oldClient)
	connectAndAsk(t, rs, newClient)
}

// TestResumptionAfterCARotation: a client holding a session ticket from
// before its CA was withdrawn must not get back in by resuming.
func TestResumptionAfterCARotation(t *testing.T) {
	f := newFixture(t, mtls.ModeMTLS)
	rs := startRaw(t, f.srv)
	cfg := clientConfig(f.ca, f.issueClient(f.ca, "resumer", certs.ValidFor(f.now, time.Hour)))
	cfg.ClientSessionCache = tls.NewLRUClientSessionCache(4)

	connectAndAsk(t, rs, cfg) // ask reads, which takes in the ticket
	c, _ := connectAndAsk(t, rs, cfg)
	if !c.ConnectionState().DidResume {
		t.Fatal("second connection did not resume; the test would prove nothing")
	}

	f.writeClientCA("ca.crt", f.newCA("replacement"))
	f.reload()
	refused(t, rs, cfg)
}

// TestBadFilesKeepOldMaterial: garbage, a half-written file, a key that
// does not match, or a missing file never replace the material in use (an
// emptied CA directory does: TestEmptiedClientCADirRefusesEveryone), are
// reported, and are logged once rather than on every poll; fixing the
// files recovers.
func TestBadFilesKeepOldMaterial(t *testing.T) {
	f := newFixture(t, mtls.ModeMTLS)
	rs := startRaw(t, f.srv)
	client := clientConfig(f.ca, f.issueClient(f.ca, "steady", certs.ValidFor(f.now, time.Hour)))
	first, _ := connectAndAsk(t, rs, client)
	serial := servedSerial(t, first)

	certFile := filepath.Join(f.certDir, certs.CertFile)
	keyFile := filepath.Join(f.certDir, certs.KeyFile)
	caFile := filepath.Join(f.caDir, "ca.crt")
	goodCert, _ := os.ReadFile(certFile)
	goodCA, _ := os.ReadFile(caFile)
	goodKey, _ := os.ReadFile(keyFile)
	other := f.issueServer(f.ca)

	write := func(path string, data []byte) {
		t.Helper()
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	steps := []struct {
		name    string
		breakIt func()
		caErr   bool
	}{
		{"garbage certificate", func() { write(certFile, []byte("\x00\xffnot a certificate")) }, false},
		{"half-written certificate", func() { write(certFile, goodCert[:len(goodCert)/2]) }, false},
		{"certificate without its key", func() { write(certFile, other.CertPEM) }, false},
		{"missing key", func() { os.Remove(keyFile) }, false},
		{"garbage client CA", func() { write(caFile, []byte("garbage")) }, true},
		{"half-written client CA", func() { write(caFile, goodCA[:len(goodCA)-40]) }, true},
		{"client CA followed by garbage", func() { write(caFile, append(append([]byte{}, goodCA...), "junk"...)) }, true},
	}
	for _, step := range steps {
		t.Run(step.name, func(t *testing.T) {
			// Restore the good files, then break one thing.
			f.writeServerCert(&certs.KeyPair{CertPEM: goodCert, KeyPEM: goodKey})
			write(caFile, goodCA)
			f.reload()
			failuresBefore := f.srv.Status().Failures

			step.breakIt()
			if err := f.srv.Reload(); err == nil {
				t.Fatal("Reload accepted bad files")
			}
			if err := f.srv.Reload(); err == nil {
				t.Fatal("second Reload accepted bad files")
			}
			st := f.srv.Status()
			if (st.CAErr != nil) != step.caErr || (st.CertErr != nil) == step.caErr {
				t.Errorf("status errors: cert %v, CA %v", st.CertErr, st.CAErr)
			}
			if st.Failures != failuresBefore+1 {
				t.Errorf("failures went from %d to %d, want one more (reported once)", failuresBefore, st.Failures)
			}
			c, id := connectAndAsk(t, rs, client)
			if id != "steady" || servedSerial(t, c) != serial {
				t.Errorf("after bad files: identity %q, serial %s; want the old material", id, servedSerial(t, c))
			}
		})
	}
	// Good files again: errors clear.
	f.writeServerCert(&certs.KeyPair{CertPEM: goodCert, KeyPEM: goodKey})
	write(caFile, goodCA)
	f.reload()
	if st := f.srv.Status(); st.CertErr != nil || st.CAErr != nil {
		t.Errorf("errors remain after repair: %v, %v", st.CertErr, st.CAErr)
	}
}

// TestRunPicksUpChanges: the polling loop alone (no Reload call) applies a
// rotated certificate, and stops with its context.
func TestRunPicksUpChanges(t *testing.T) {
	f := newFixture(t, mtls.ModeMTLS)
	srv, err := mtls.NewServer(mtls.ServerOptions{
		CertDir:      f.certDir,
		ClientCADir:  f.caDir,
		PollInterval: 10 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		srv.Run(ctx)
	}()
	defer func() {
		cancel()
		<-done
	}()

	next := f.issueServer(f.ca)
	f.writeServerCert(next)
	deadline := time.Now().Add(waitFor)
	for srv.Status().Leaf.SerialNumber.Cmp(next.Cert.SerialNumber) != 0 {
		if time.Now().After(deadline) {
			t.Fatal("Run did not pick up the new certificate")
		}
		time.Sleep(5 * time.Millisecond)
	}
	rs := startRaw(t, srv)
	c, _ := connectAndAsk(t, rs, clientConfig(f.ca, f.issueClient(f.ca, "poller", certs.ValidFor(f.now, time.Hour))))
	if servedSerial(t, c) != next.Cert.SerialNumber.String() {
		t.Error("handshake did not present the polled certificate")
	}
}

// TestConcurrentReloadAndHandshakes runs handshakes while the material is
// swapped back and forth, for the race detector.
func TestConcurrentReloadAndHandshakes(t *testing.T) {
	f := newFixture(t, mtls.ModeMTLS)
	rs := startRaw(t, f.srv)
	client := clientConfig(f.ca, f.issueClient(f.ca, "busy", certs.ValidFor(f.now, time.Hour)))
	pairs := []*certs.KeyPair{f.issueServer(f.ca), f.issueServer(f.ca)}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			f.writeServerCert(pairs[i%2])
			_ = f.srv.Reload() // may see a new key with the old cert: rejected, retried next time
		}
	})
	for range 20 {
		c, err := dial(rs.addr, client)
		if err != nil {
			t.Fatal(err)
		}
		if err := rs.nextHandshake(t); err != nil {
			t.Fatal(err)
		}
		if id, err := ask(c); err != nil || id != "busy" {
			t.Fatalf("identity %q, %v", id, err)
		}
		c.Close()
	}
	close(stop)
	wg.Wait()
}
