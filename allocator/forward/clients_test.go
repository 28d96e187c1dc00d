package forward

import (
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/connectivity"

	"github.com/quartermaster-dev/quartermaster/certs"
)

func testSecret(t *testing.T, identity string) Secret {
	t.Helper()
	ca, err := certs.NewCA("test", certs.ValidFor(time.Now(), time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	kp, err := ca.IssueClient(identity, certs.ValidFor(time.Now(), time.Hour))
	if err != nil {
		t.Fatal(err)
	}
	data := map[string][]byte{SecretCertKey: kp.CertPEM, SecretKeyKey: kp.KeyPEM, SecretCAKey: ca.CertPEM}
	return Secret{Namespace: "default", Name: "s", Data: data, Version: SecretVersion(data)}
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
