package rig

import (
	"bufio"
	"net"
	"testing"
	"time"
)

// lineServer answers each line with the same line, and reports each line
// it received on got before answering.
func lineServer(t *testing.T) (addr string, got <-chan string) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	lines := make(chan string, 16)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					l, err := r.ReadString('\n')
					if err != nil {
						return
					}
					lines <- l
					if _, err := c.Write([]byte(l)); err != nil {
						return
					}
				}
			}()
		}
	}()
	return ln.Addr().String(), lines
}

// With FaultAnswerLost a request reaches the server through a connection
// opened before the fault, and its answer does not come back: the
// connection ends with no byte of it. Off again, answers flow.
func TestProxyAnswerLost(t *testing.T) {
	ps := NewProxies()
	t.Cleanup(ps.Close)
	upstream, got := lineServer(t)
	p, err := ps.Add(CallersName, "a", 0, upstream, Link{})
	if err != nil {
		t.Fatal(err)
	}
	c, err := net.DialTimeout("tcp", p.Addr(), 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(5 * time.Second))
	r := bufio.NewReader(c)
	if _, err := c.Write([]byte("before\n")); err != nil {
		t.Fatal(err)
	}
	if l, err := r.ReadString('\n'); err != nil || l != "before\n" {
		t.Fatalf("before the fault: %q, %v", l, err)
	}
	<-got

	if err := p.Set(FaultAnswerLost, true); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write([]byte("order\n")); err != nil {
		t.Fatal(err)
	}
	select {
	case l := <-got:
		if l != "order\n" {
			t.Fatalf("the server got %q", l)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the request did not reach the server through a link losing answers")
	}
	if l, err := r.ReadString('\n'); err == nil || l != "" {
		t.Fatalf("an answer came back through a link losing answers: %q, %v", l, err)
	}
	if fs := p.Faults(); len(fs) != 1 || fs[0] != FaultAnswerLost {
		t.Fatalf("faults on: %v", fs)
	}

	if err := p.Set(FaultAnswerLost, false); err != nil {
		t.Fatal(err)
	}
	if _, err := roundTrip(p.Addr()); err != nil {
		t.Fatalf("the fault is off, but: %v", err)
	}
}
