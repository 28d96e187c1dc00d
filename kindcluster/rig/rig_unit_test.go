package rig

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/pem"
	"io"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/quartermaster-dev/quartermaster/allocator/forward"
	"github.com/quartermaster-dev/quartermaster/certs"
	"github.com/quartermaster-dev/quartermaster/kindcluster"
)

func TestTopologyFixtures(t *testing.T) {
	files, err := filepath.Glob("testdata/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatal("no fixtures", err)
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			_, err := Load(f)
			if strings.HasPrefix(filepath.Base(f), "valid-") {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			b, _ := os.ReadFile(f)
			line, _, _ := strings.Cut(string(b), "\n")
			want := strings.TrimPrefix(line, "# want: ")
			if err == nil || !strings.Contains(err.Error(), want) {
				t.Fatalf("got %v, want an error containing %q", err, want)
			}
		})
	}
}

func TestLinkBetween(t *testing.T) {
	top, err := Load("testdata/valid-burst-to-cloud.yaml")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		from, to string
		want     time.Duration
	}{
		{CallersName, "on-prem", time.Millisecond},
		{CallersName, "cloud", 10 * time.Millisecond},
		{"on-prem", "cloud", 10 * time.Millisecond},
		{"cloud", "on-prem", 5 * time.Millisecond},
	} {
		if got := top.LinkBetween(c.from, c.to).Latency.D(); got != c.want {
			t.Errorf("%s -> %s: %v, want %v", c.from, c.to, got, c.want)
		}
	}
}

// echoServer answers each line with the same line.
func echoServer(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() { defer c.Close(); _, _ = io.Copy(c, c) }()
		}
	}()
	return ln.Addr().String()
}

func roundTrip(addr string) (time.Duration, error) {
	c, err := net.DialTimeout("tcp", addr, 2*time.Second)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	start := time.Now()
	if _, err := c.Write([]byte("ping\n")); err != nil {
		return 0, err
	}
	if _, err := bufio.NewReader(c).ReadString('\n'); err != nil {
		return 0, err
	}
	return time.Since(start), nil
}

func TestProxyLatencyAndFaults(t *testing.T) {
	ps := NewProxies()
	t.Cleanup(ps.Close)
	lat := Link{Latency: Duration(30 * time.Millisecond)}
	p, err := ps.Add(CallersName, "a", 0, echoServer(t), lat)
	if err != nil {
		t.Fatal(err)
	}
	// A round trip crosses the link twice: at least twice the latency
	// (a lower bound, which a slow machine cannot break).
	if rt, err := roundTrip(p.Addr()); err != nil || rt < 60*time.Millisecond {
		t.Fatalf("round trip %v, %v; want at least 60ms", rt, err)
	}
	if err := p.Set(FaultDown, true); err != nil {
		t.Fatal(err)
	}
	if _, err := roundTrip(p.Addr()); err == nil {
		t.Fatal("a link that is down still carried a round trip")
	}
	if err := p.Set(FaultDown, false); err != nil {
		t.Fatal(err)
	}
	if _, err := roundTrip(p.Addr()); err != nil {
		t.Fatalf("the link is up again at the same address, but: %v", err)
	}
	if err := p.Set(FaultReset, true); err != nil {
		t.Fatal(err)
	}
	if _, err := roundTrip(p.Addr()); err == nil {
		t.Fatal("a link resetting connections carried a round trip")
	}
	if err := p.Set(FaultReset, false); err != nil {
		t.Fatal(err)
	}
	if err := p.Set("flood", true); err == nil || !strings.Contains(err.Error(), "unknown fault") {
		t.Fatalf("unknown fault: %v", err)
	}
	if got := p.Faults(); len(got) != 0 {
		t.Fatalf("faults left on: %v", got)
	}
}

// TestPolicyObjectsReadByTheForwarder checks the rig's policies and Secrets
// against the forwarder's own reader: local entry without endpoints,
// remote ones through the links with a Secret holding a client certificate.
func TestPolicyObjectsReadByTheForwarder(t *testing.T) {
	top, err := Load("testdata/valid-burst-to-cloud.yaml")
	if err != nil {
		t.Fatal(err)
	}
	res, err := certs.Generate(certs.GenerateOptions{Dir: t.TempDir(), Hosts: []string{"127.0.0.1"},
		Clients: []string{"forwarder-on-prem", "forwarder-cloud"}, Now: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	objs, err := PolicyObjects(top, "on-prem", map[string][]string{"cloud": {"127.0.0.1:4001", "127.0.0.1:4002"}}, res.Layout)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "policies.yaml")
	if err := WriteManifests(file, objs); err != nil {
		t.Fatal(err)
	}
	set, err := forward.LoadPolicies(file)
	if err != nil {
		t.Fatalf("the forwarder refuses the rig's policies: %v", err)
	}
	ps := set.Policies("default")
	if len(ps) != 2 {
		t.Fatalf("%d policies, want 2", len(ps))
	}
	for _, p := range ps {
		switch p.Connection.ClusterName {
		case "on-prem":
			if len(p.Connection.Endpoints) != 0 {
				t.Errorf("the local entry has endpoints %v", p.Connection.Endpoints)
			}
		case "cloud":
			if strings.Join(p.Connection.Endpoints, ",") != "127.0.0.1:4001,127.0.0.1:4002" || p.Connection.SecretName != SecretName("cloud") {
				t.Errorf("remote entry: endpoints %v secret %q", p.Connection.Endpoints, p.Connection.SecretName)
			}
		}
	}
	sec, ok := set.Secret("default", SecretName("cloud"))
	if !ok {
		t.Fatal("no connection Secret for cloud")
	}
	if blk, _ := pem.Decode(sec.Data["tls.crt"]); blk == nil || blk.Type != "CERTIFICATE" {
		t.Fatalf("tls.crt is not a certificate: %q", sec.Data["tls.crt"])
	}
	// The Secret's raw object holds base64, as the API server wants it.
	for _, o := range objs {
		if o.GetKind() == "Secret" {
			data := o.Object["data"].(map[string]any)
			if _, err := base64.StdEncoding.DecodeString(data["ca.crt"].(string)); err != nil {
				t.Fatal(err)
			}
		}
	}
}

func TestFleetObjects(t *testing.T) {
	top, err := Load("testdata/valid-burst-to-cloud.yaml")
	if err != nil {
		t.Fatal(err)
	}
	objs := FleetObjects(top, 0)
	if len(objs) != 1 {
		t.Fatalf("%d fleets", len(objs))
	}
	spec := objs[0].Object["spec"].(map[string]any)
	tmpl := spec["template"].(map[string]any)
	if spec["replicas"] != int64(20) || tmpl["metadata"].(map[string]any)["labels"].(map[string]any)["game"] != "shooter" {
		t.Fatalf("fleet spec: %v", spec)
	}
	rooms := tmpl["spec"].(map[string]any)["counters"].(map[string]any)["rooms"].(map[string]any)
	if rooms["capacity"] != int64(4) {
		t.Fatalf("counter: %v", rooms)
	}
}

// TestDryRun prints every command a rig would run and starts nothing.
func TestDryRun(t *testing.T) {
	top, err := Load("testdata/valid-burst-to-cloud.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	dir := filepath.Join(t.TempDir(), "rig")
	r, err := Up(context.Background(), top, Options{Dir: dir, QM: "/opt/qm", BinDir: "/opt/bin", Runner: &kindcluster.DryRunner{Out: &out}})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Stop(); err != nil {
		t.Fatal(err)
	}
	text := out.String()
	for _, want := range []string{
		"/opt/bin/etcd", "/opt/bin/kube-apiserver",
		"/opt/qm agent --kubeconfig", "--nodes 4 --max-per-node 10",
		"/opt/qm serve --backend kubernetes", "--replicas 2 --replica-shard 1",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("dry run does not show %q:\n%s", want, text)
		}
	}
	// Kube-backed allocators read the policies from their API server.
	if strings.Contains(text, "--policies") {
		t.Errorf("an allocator is given --policies; it should watch its API server:\n%s", text)
	}
	if n := strings.Count(text, "/opt/qm serve"); n != 3 {
		t.Errorf("%d allocators, want 3 (1 on-prem, 2 cloud)", n)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("Stop left %s behind", dir)
	}
}
