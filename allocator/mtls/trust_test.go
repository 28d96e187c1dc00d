package mtls_test

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"github.com/quartermaster-dev/quartermaster/allocator/mtls"
	"github.com/quartermaster-dev/quartermaster/certs"
)

// readyConn is a gRPC connection that has connected, for tests that watch
// whether the server closes it.
func readyConn(t *testing.T, addr string, f *fixture, ca *certs.Authority, identity string) (*grpc.ClientConn, func() (string, error)) {
	t.Helper()
	c := grpcClient(t, addr, credentials.NewTLS(clientConfig(f.ca, f.issueClient(ca, identity, certs.ValidFor(f.now, time.Hour)))))
	if id, err := who(c); err != nil || id != identity {
		t.Fatalf("%s before the change: %q, %v", identity, id, err)
	}
	if s := c.GetState(); s != connectivity.Ready {
		t.Fatalf("%s: state %v, want READY", identity, s)
	}
	return c, func() (string, error) { return who(c) }
}

// A client-CA directory emptied of its CA files trusts nobody: new
// handshakes fail and open connections are closed, rather than the
// removed CAs kept as if the directory were caught mid-update.
func TestEmptiedClientCADirRefusesEveryone(t *testing.T) {
	f := newFixture(t, mtls.ModeMTLS)
	addr := startGRPC(t, f.srv, f.srv.GRPCCredentials(), nil)
	cc, _ := readyConn(t, addr, f, f.ca, "alice")

	if err := os.Remove(filepath.Join(f.caDir, "ca.crt")); err != nil {
		t.Fatal(err)
	}
	if err := f.srv.Reload(); err != nil {
		t.Fatalf("Reload of an emptied directory: %v, want it applied", err)
	}
	if n := f.srv.Status().ClientCAs; n != 0 {
		t.Errorf("ClientCAs = %d, want 0", n)
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	if !cc.WaitForStateChange(ctx, connectivity.Ready) {
		t.Error("the open connection was not closed")
	}
	fresh := grpcClient(t, addr, credentials.NewTLS(clientConfig(f.ca, f.issueClient(f.ca, "bob", certs.ValidFor(f.now, time.Hour)))))
	if id, err := who(fresh); err == nil {
		t.Fatalf("a new client got in as %q with no CA trusted", id)
	}

	// A CA file again: trusted again.
	f.writeClientCA("ca.crt", f.ca)
	f.reload()
	again := grpcClient(t, addr, credentials.NewTLS(clientConfig(f.ca, f.issueClient(f.ca, "bob", certs.ValidFor(f.now, time.Hour)))))
	if id, err := who(again); err != nil || id != "bob" {
		t.Fatalf("after a CA is back: %q, %v", id, err)
	}
}

// Removing one of two CAs closes the gRPC connections it vouched for and
// refuses the next request on a kept-alive REST connection; the other CA's
// connections are untouched.
func TestRemovedCAClosesItsConnections(t *testing.T) {
	f := newFixture(t, mtls.ModeMTLS)
	other := f.newCA("other CA")
	f.writeClientCA("other.crt", other)
	f.reload()
	addr := startGRPC(t, f.srv, f.srv.GRPCCredentials(), nil)
	stay, stayWho := readyConn(t, addr, f, f.ca, "alice")
	gone, goneWho := readyConn(t, addr, f, other, "mallory")

	url := startHTTP(t, f.srv)
	tr := &http.Transport{TLSClientConfig: clientConfig(f.ca, f.issueClient(other, "mallory", certs.ValidFor(f.now, time.Hour))), ForceAttemptHTTP2: true}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr, Timeout: waitFor}
	get := func() (int, string, error) {
		resp, err := hc.Get(url)
		if err != nil {
			return 0, "", err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b), nil
	}
	if code, body, err := get(); err != nil || code != http.StatusOK || body != "mallory" {
		t.Fatalf("REST before: %d %q %v", code, body, err)
	}

	if err := os.Remove(filepath.Join(f.caDir, "other.crt")); err != nil {
		t.Fatal(err)
	}
	f.reload()

	ctx, cancel := context.WithTimeout(context.Background(), waitFor)
	defer cancel()
	if !gone.WaitForStateChange(ctx, connectivity.Ready) {
		t.Error("the removed CA's gRPC connection was not closed")
	}
	if id, err := goneWho(); err == nil {
		t.Errorf("the removed CA's client still answered as %q", id)
	}
	// The REST connection is kept alive (not tracked on this plain
	// listener), but its next request is checked against the CAs of now.
	if code, body, err := get(); err == nil && code != http.StatusUnauthorized {
		t.Errorf("REST after the removal: %d %q, want 401", code, body)
	}
	short, cancel2 := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel2()
	if stay.WaitForStateChange(short, connectivity.Ready) {
		t.Error("the remaining CA's connection changed state")
	}
	if id, err := stayWho(); err != nil || id != "alice" {
		t.Errorf("the remaining CA's client: %q, %v", id, err)
	}
}

// An identity bound to a CA file is accepted only with a certificate from
// that CA: another trusted CA cannot mint it. Others may come from any
// trusted CA, unless a default binding says otherwise.
func TestIdentityBoundToCA(t *testing.T) {
	f := newFixture(t, mtls.ModeMTLS)
	mm := f.newCA("matchmaker CA")
	f.writeClientCA("matchmakers.crt", mm)
	f.reload()
	addr := startGRPC(t, f.srv, f.srv.GRPCCredentials(), nil)
	call := func(ca *certs.Authority, id string) (string, error) {
		c := grpcClient(t, addr, credentials.NewTLS(clientConfig(f.ca, f.issueClient(ca, id, certs.ValidFor(f.now, time.Hour)))))
		return who(c)
	}

	// Unbound: any trusted CA may issue "ops".
	if id, err := call(mm, "ops"); err != nil || id != "ops" {
		t.Fatalf("before binding: %q, %v", id, err)
	}
	f.srv.SetClientCABindings(map[string]string{"ops": "ca.crt"}, "")
	_, err := call(mm, "ops")
	if status.Code(err) != codes.Unauthenticated || !strings.Contains(err.Error(), `"ops" must be issued by the CA in ca.crt, and this certificate chains to matchmakers.crt`) {
		t.Fatalf("ops from the matchmaker CA: %v, want Unauthenticated naming both files", err)
	}
	if id, err := call(f.ca, "ops"); err != nil || id != "ops" {
		t.Fatalf("ops from its own CA: %q, %v", id, err)
	}
	if id, err := call(mm, "matchmaker"); err != nil || id != "matchmaker" {
		t.Fatalf("an unbound identity: %q, %v", id, err)
	}

	// A default binding: identities not listed must come from matchmakers.crt.
	f.srv.SetClientCABindings(map[string]string{"ops": "ca.crt"}, "matchmakers.crt")
	if _, err := call(f.ca, "someone"); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("an unlisted identity from ca.crt: %v, want Unauthenticated", err)
	}
	if id, err := call(mm, "someone"); err != nil || id != "someone" {
		t.Fatalf("an unlisted identity from matchmakers.crt: %q, %v", id, err)
	}
	// A binding to a file that is not there refuses, rather than allows.
	f.srv.SetClientCABindings(map[string]string{"ops": "typo.crt"}, "")
	if _, err := call(f.ca, "ops"); status.Code(err) != codes.Unauthenticated {
		t.Fatalf("ops bound to a missing file: %v, want Unauthenticated", err)
	}
}
