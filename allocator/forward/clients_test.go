package forward

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/protobuf/proto"

	"github.com/quartermaster-dev/quartermaster/allocator/pb/allocation"
	"github.com/quartermaster-dev/quartermaster/certs"
)

// testPKI is a CA and a loopback server certificate it issued, for the
// remotes of these tests.
type testPKI struct {
	ca     *certs.Authority
	server tls.Certificate
}

func newTestPKI(t *testing.T) *testPKI {
	t.Helper()
	ca, err := certs.NewCA("test", certs.ValidFor(time.Now(), time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	kp, err := ca.IssueServer([]string{"localhost", "127.0.0.1"}, certs.ValidFor(time.Now(), time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	cert, err := kp.TLSCertificate()
	if err != nil {
		t.Fatal(err)
	}
	return &testPKI{ca: ca, server: cert}
}

// secret is a connection Secret (default/s) presenting identity and
// trusting the CA.
func (p *testPKI) secret(t *testing.T, identity string) Secret {
	t.Helper()
	kp, err := p.ca.IssueClient(identity, certs.ValidFor(time.Now(), time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	data := map[string][]byte{SecretCertKey: kp.CertPEM, SecretKeyKey: kp.KeyPEM, SecretCAKey: p.ca.CertPEM}
	return Secret{Namespace: "default", Name: "s", Data: data, Version: SecretVersion(data)}
}

// h2Listener listens on loopback for TLS connections speaking HTTP/2,
// with the server certificate; clientAuth as the test needs.
func (p *testPKI) h2Listener(t *testing.T, clientAuth tls.ClientAuthType) net.Listener {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{p.server}, NextProtos: []string{"h2"}, ClientAuth: clientAuth})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	return ln
}

func testSecret(t *testing.T, identity string) Secret {
	t.Helper()
	return newTestPKI(t).secret(t, identity)
}

// A rotated Secret gets a new client; the old one carries the calls it has
// to their end and is closed after the last.
func TestClientRotation(t *testing.T) {
	cs := newClients(time.Second, nil)
	defer cs.close()
	v1 := testSecret(t, "one")
	c1, err := cs.get("127.0.0.1:1", v1, nil, false)
	if err != nil {
		t.Fatal(err)
	}
	again, _ := cs.get("127.0.0.1:1", v1, nil, false)
	if again != c1 {
		t.Fatal("the same endpoint and Secret version got a second client")
	}
	cs.put(again)
	other, _ := cs.get("127.0.0.1:2", v1, nil, false)
	if other == c1 {
		t.Fatal("two endpoints share a client")
	}
	cs.put(other)

	v2 := testSecret(t, "two")
	c2, err := cs.get("127.0.0.1:1", v2, nil, false)
	if err != nil {
		t.Fatal(err)
	}
	if c2 == c1 {
		t.Fatal("a rotated Secret reused the old client")
	}
	if c1.cc.GetState() == connectivity.Shutdown {
		t.Fatal("the old client was closed under a call in flight")
	}
	cs.put(c1)
	if c1.cc.GetState() != connectivity.Shutdown {
		t.Error("the old client was not closed once idle")
	}
	cs.put(c2)
	if c2.cc.GetState() == connectivity.Shutdown {
		t.Error("the current client was closed")
	}
	if n := cs.count(); n != 2 {
		t.Errorf("%d clients cached, want 2", n)
	}
}

func TestClientTLSErrors(t *testing.T) {
	good := testSecret(t, "x")
	cases := map[string]struct {
		data     map[string][]byte
		serverCA []byte
		want     string
	}{
		"no key":        {map[string][]byte{SecretCertKey: good.Data[SecretCertKey]}, nil, "has no tls.crt and tls.key"},
		"bad pair":      {map[string][]byte{SecretCertKey: []byte("x"), SecretKeyKey: []byte("y")}, nil, "tls.crt/tls.key"},
		"bad ca.crt":    {map[string][]byte{SecretCertKey: good.Data[SecretCertKey], SecretKeyKey: good.Data[SecretKeyKey], SecretCAKey: []byte("nope")}, nil, "ca.crt holds no PEM"},
		"bad serverCa":  {good.Data, []byte("nope"), "serverCa holds no PEM"},
		"good, with CA": {good.Data, good.Data[SecretCAKey], ""},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := clientTLS(Secret{Namespace: "default", Name: "s", Data: c.data}, c.serverCA)
			switch {
			case c.want == "" && err != nil:
				t.Fatal(err)
			case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "default/s")):
				t.Fatalf("error %v, want one naming the Secret and saying %q", err, c.want)
			}
		})
	}
}

// TestCADigest checks the serverCa digest: none for none, equal for equal
// bytes whether or not they are the very slice last seen, different for
// different bytes of the same length.
func TestCADigest(t *testing.T) {
	cs := newClients(time.Second, nil)
	if d := cs.caDigest(nil); d != "" {
		t.Fatalf("no serverCa: digest %q, want empty", d)
	}
	a := []byte("-----BEGIN CERTIFICATE-----A")
	b := []byte("-----BEGIN CERTIFICATE-----B")
	da := cs.caDigest(a)
	if da == "" || cs.caDigest(a) != da {
		t.Fatalf("digest of a: %q, then %q", da, cs.caDigest(a))
	}
	if db := cs.caDigest(b); db == da {
		t.Fatal("different serverCa bytes, same digest")
	}
	if d := cs.caDigest(append([]byte(nil), a...)); d != da {
		t.Fatalf("a copy of a: digest %q, want %q", d, da)
	}
	if cs.caDigest(a) != da {
		t.Fatal("digest changed for unchanged bytes")
	}
}

// A lone forwarded request must not cost a flow-control round trip:
// grpc-go's dynamic window answers each DATA frame received while no PING
// is out with a WINDOW_UPDATE and a PING, so with one request at a time
// every answer from the remote cost the entry two more writes and the
// remote a read and a write. The remote here is HTTP/2 by hand over TLS;
// it counts what the forwarder's client sends before the third request
// (the PING for an answer is queued before the caller sees the answer,
// so it would come before the next request).
func TestClientSendsNoFlowControlPings(t *testing.T) {
	pki := newTestPKI(t)
	ln := pki.h2Listener(t, tls.RequireAnyClientCert)
	type seen struct {
		pings, windowUpdates int
		err                  error
	}
	result := make(chan seen, 1)
	go func() {
		var s seen
		defer func() { result <- s }()
		conn, err := ln.Accept()
		if err != nil {
			s.err = err
			return
		}
		defer conn.Close()
		_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
		if _, err := io.ReadFull(conn, make([]byte, len(http2.ClientPreface))); err != nil {
			s.err = err
			return
		}
		fr := http2.NewFramer(conn, conn)
		_ = fr.WriteSettings()
		answer, _ := proto.Marshal(&allocation.AllocationResponse{GameServerName: "gs-1"})
		body := binary.BigEndian.AppendUint32([]byte{0}, uint32(len(answer)))
		body = append(body, answer...)
		var hb bytes.Buffer
		enc := hpack.NewEncoder(&hb)
		block := func(fields ...string) []byte {
			hb.Reset()
			for i := 0; i < len(fields); i += 2 {
				_ = enc.WriteField(hpack.HeaderField{Name: fields[i], Value: fields[i+1]})
			}
			return append([]byte(nil), hb.Bytes()...)
		}
		for requests := 0; requests < 3; {
			f, err := fr.ReadFrame()
			if err != nil {
				s.err = err
				return
			}
			switch f := f.(type) {
			case *http2.SettingsFrame:
				if !f.IsAck() {
					_ = fr.WriteSettingsAck()
				}
			case *http2.PingFrame:
				if !f.IsAck() {
					s.pings++
					_ = fr.WritePing(true, f.Data)
				}
			case *http2.WindowUpdateFrame:
				if f.StreamID != 0 || requests > 0 {
					s.windowUpdates++ // (the first, for the connection, raises its initial window)
				}
			case *http2.DataFrame:
				if !f.StreamEnded() {
					continue
				}
				requests++
				if requests == 3 {
					return // what came before the third request is counted
				}
				id := f.StreamID
				_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, EndHeaders: true, BlockFragment: block(":status", "200", "content-type", "application/grpc")})
				_ = fr.WriteData(id, false, body)
				_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: id, EndHeaders: true, EndStream: true, BlockFragment: block("grpc-status", "0")})
			}
		}
	}()

	cs := newClients(5*time.Second, nil)
	defer cs.close()
	c, err := cs.get(ln.Addr().String(), pki.secret(t, "entry"), nil, false)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.put(c)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	api := allocation.NewAllocationServiceClient(c.cc)
	for i := range 2 {
		resp, err := api.Allocate(ctx, &allocation.AllocationRequest{Namespace: "default"})
		if err != nil || resp.GetGameServerName() != "gs-1" {
			t.Fatalf("call %d: %v, %v", i+1, resp, err)
		}
	}
	go func() { _, _ = api.Allocate(ctx, &allocation.AllocationRequest{Namespace: "default"}) }() // the barrier; never answered
	s := <-result
	if s.err != nil {
		t.Fatal(s.err)
	}
	if s.pings != 0 || s.windowUpdates != 0 {
		t.Errorf("the client sent %d PINGs and %d WINDOW_UPDATEs after two small answers, want none", s.pings, s.windowUpdates)
	}
}

// A Memo keeps at most maxMemoEntries encodings, dropping the oldest.
func TestMemoBound(t *testing.T) {
	var m Memo
	req := &allocation.AllocationRequest{Namespace: "x"}
	for i := range maxMemoEntries + 2 {
		if m.encode(strconv.Itoa(i), "ns", req) == nil {
			t.Fatal("a request did not encode")
		}
	}
	if n := len(*m.entries.Load()); n != maxMemoEntries {
		t.Fatalf("%d entries, want %d", n, maxMemoEntries)
	}
	if m.get("0", "ns") != nil || m.get("1", "ns") != nil || m.get(strconv.Itoa(maxMemoEntries+1), "ns") == nil || m.get("2", "other") != nil {
		t.Error("kept the wrong entries")
	}
	var none *Memo
	if none.get("a", "ns") != nil {
		t.Error("a nil Memo had an entry")
	}
}
