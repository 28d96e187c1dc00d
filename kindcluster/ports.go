package kindcluster

import (
	"fmt"
	"net"
	"sync"
)

// portPicker hands out free loopback ports. The kernel may give the same
// ephemeral port to two quick bind-and-close probes, so ports handed out by
// this process are remembered until released: N clusters started at once in
// one test binary never collide with each other. Another program can still
// take a port between the probe and the server's bind; Start retries that
// case with fresh ports.
type portPicker struct {
	mu   sync.Mutex
	used map[int]bool
}

var ports = &portPicker{used: map[int]bool{}}

// pick returns n distinct free ports on 127.0.0.1.
func (p *portPicker) pick(n int) ([]int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]int, 0, n)
	for tries := 0; len(out) < n; tries++ {
		if tries > 100*n {
			p.releaseLocked(out)
			return nil, fmt.Errorf("no free loopback port after %d tries", tries)
		}
		port, err := probePort()
		if err != nil {
			p.releaseLocked(out)
			return nil, err
		}
		if p.used[port] {
			continue
		}
		p.used[port] = true
		out = append(out, port)
	}
	return out, nil
}

// release returns ports to the pool once their servers have exited.
func (p *portPicker) release(ps ...int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.releaseLocked(ps)
}

func (p *portPicker) releaseLocked(ps []int) {
	for _, port := range ps {
		delete(p.used, port)
	}
}

// probePort asks the kernel for a free port by binding port 0.
func probePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("probe for a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
