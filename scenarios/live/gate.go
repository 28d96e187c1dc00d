package live

import (
	"errors"
	"io"
	"net"
	"sync"
)

// gate is a plain TCP forwarder that can be switched down (its listener
// closed and its connections cut, so new ones are refused, as by a cluster
// that is gone) and up again on the same address. Outages go through a
// gate in front of a latency link rather than through the link's own
// down fault: switching toxiproxy's faults while a busy link carries its
// latency toxics can deadlock inside toxiproxy (ResetToxics against a
// closing connection's RemoveLink), which hung a run at 600 requests/s.
type gate struct {
	addr     string
	upstream string

	mu    sync.Mutex
	ln    net.Listener
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

// newGate listens on a free loopback port and forwards to upstream.
func newGate(upstream string) (*gate, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	g := &gate{addr: ln.Addr().String(), upstream: upstream, conns: map[net.Conn]struct{}{}}
	g.serve(ln)
	return g, nil
}

func (g *gate) serve(ln net.Listener) {
	g.ln = ln
	g.wg.Add(1)
	go func() {
		defer g.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go g.pipe(c)
		}
	}()
}

func (g *gate) pipe(c net.Conn) {
	up, err := net.Dial("tcp", g.upstream)
	if err != nil {
		c.Close()
		return
	}
	g.mu.Lock()
	if g.ln == nil { // went down meanwhile
		g.mu.Unlock()
		c.Close()
		up.Close()
		return
	}
	g.conns[c], g.conns[up] = struct{}{}, struct{}{}
	g.mu.Unlock()
	done := make(chan struct{}, 2)
	cp := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		// Half-close is not needed for gRPC; either side ending ends both.
		dst.Close()
		src.Close()
		done <- struct{}{}
	}
	go cp(up, c)
	go cp(c, up)
	<-done
	<-done
	g.mu.Lock()
	delete(g.conns, c)
	delete(g.conns, up)
	g.mu.Unlock()
}

// setDown closes the listener and every connection (down) or listens
// again on the same address (up).
func (g *gate) setDown(down bool) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if down {
		if g.ln == nil {
			return nil
		}
		err := g.ln.Close()
		g.ln = nil
		for c := range g.conns {
			c.Close()
		}
		return err
	}
	if g.ln != nil {
		return nil
	}
	ln, err := net.Listen("tcp", g.addr)
	if err != nil {
		return errors.New("gate " + g.addr + ": up again: " + err.Error())
	}
	g.serve(ln)
	return nil
}

func (g *gate) close() {
	_ = g.setDown(true)
	g.wg.Wait()
}
