package rig

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// TestAddAtDialledElsewhere: a link added with a dial address reports
// that address (what policies name and responses give as their source),
// carries traffic where it listens, and listens there again after down.
func TestAddAtDialledElsewhere(t *testing.T) {
	ps := NewProxies()
	t.Cleanup(ps.Close)
	p, err := ps.AddAt("127.0.0.1:0", "192.0.2.1:39444", "on-prem", "cloud", 0, echoServer(t), Link{})
	if err != nil {
		t.Fatal(err)
	}
	if p.Addr() != "192.0.2.1:39444" {
		t.Errorf("Addr %q, want the dial address 192.0.2.1:39444", p.Addr())
	}
	listen := p.ListenAddr()
	if !strings.HasPrefix(listen, "127.0.0.1:") || listen == "127.0.0.1:0" {
		t.Fatalf("ListenAddr %q, want the loopback port it took", listen)
	}
	if _, err := roundTrip(listen); err != nil {
		t.Fatalf("no round trip where it listens: %v", err)
	}
	for _, on := range []bool{true, false} {
		if err := p.Set(FaultDown, on); err != nil {
			t.Fatal(err)
		}
	}
	if p.ListenAddr() != listen {
		t.Errorf("after down and up it listens on %s, want %s again", p.ListenAddr(), listen)
	}
	if _, err := roundTrip(listen); err != nil {
		t.Fatalf("no round trip after down and up: %v", err)
	}
	if got := ps.Find("on-prem", "cloud"); len(got) != 1 || got[0] != p {
		t.Errorf("Find: %v", got)
	}
	if _, err := ps.AddAt("192.0.2.1:0", "", "a", "b", 0, echoServer(t), Link{}); err == nil || !strings.Contains(err.Error(), "listen on 192.0.2.1:0") {
		t.Errorf("a listen address this host lacks: %v, want an error naming it", err)
	}
}

// TestLocalHandle: the local rig's Handle answers from its clusters and
// links: metrics of every replica, one after another; the self endpoint
// is the callers' first link; an unknown cluster is named in the error.
func TestLocalHandle(t *testing.T) {
	var replicas []Replica
	for n := range 2 {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/metrics" {
				http.NotFound(w, r)
				return
			}
			fmt.Fprintf(w, "qm_forward_tries_total{cluster=\"cloud\",outcome=\"breaker_open\"} %d", n+1)
		}))
		t.Cleanup(srv.Close)
		replicas = append(replicas, Replica{HTTP: strings.TrimPrefix(srv.URL, "http://")})
	}
	ps := NewProxies()
	t.Cleanup(ps.Close)
	link, err := ps.Add(CallersName, "on-prem", 0, echoServer(t), Link{})
	if err != nil {
		t.Fatal(err)
	}
	r := &Rig{Topology: &Topology{}, Proxies: ps, Clusters: []*Cluster{{Name: "on-prem", Replicas: replicas}, {Name: "cloud"}}}
	var h Handle = r
	if got := strings.Join(h.ClusterNames(), ","); got != "on-prem,cloud" {
		t.Errorf("ClusterNames %q", got)
	}
	text, err := h.Metrics(context.Background(), "on-prem")
	if err != nil {
		t.Fatal(err)
	}
	if want := "qm_forward_tries_total{cluster=\"cloud\",outcome=\"breaker_open\"} 1\nqm_forward_tries_total{cluster=\"cloud\",outcome=\"breaker_open\"} 2\n"; text != want {
		t.Errorf("Metrics:\n%s\nwant both replicas':\n%s", text, want)
	}
	if h.SelfEndpoint("on-prem") != link.Addr() || h.SelfEndpoint("cloud") != "" {
		t.Errorf("SelfEndpoint: %q, %q", h.SelfEndpoint("on-prem"), h.SelfEndpoint("cloud"))
	}
	if h.Links() != ps {
		t.Error("Links is not the rig's proxies")
	}
	if _, err := h.Metrics(context.Background(), "edge"); err == nil || !strings.Contains(err.Error(), `no cluster "edge"`) {
		t.Errorf("Metrics of an unknown cluster: %v", err)
	}
	if _, err := h.RESTConfig("edge"); err == nil || !strings.Contains(err.Error(), `no cluster "edge"`) {
		t.Errorf("RESTConfig of an unknown cluster: %v", err)
	}
	if err := h.RestartAPIServer(context.Background(), "cloud"); err == nil {
		t.Error("RestartAPIServer of a cluster without an API server succeeded")
	}
	if _, err := h.Metrics(context.Background(), "cloud"); err != nil {
		t.Errorf("Metrics of a cluster without replicas: %v, want empty text", err)
	}
}
