package rig

import (
	"net"
	"strconv"
	"testing"
)

// FreeAddr gives a loopback port that can be listened on, from below the
// kernel's ephemeral range (which other processes' outgoing connections
// draw from) when that range leaves room.
func TestFreeAddr(t *testing.T) {
	addr, err := FreeAddr()
	if err != nil {
		t.Fatal(err)
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil || host != "127.0.0.1" {
		t.Fatalf("%q: %v", addr, err)
	}
	n, _ := strconv.Atoi(port)
	if low := ephemeralLow(); low > minFixedPort+1000 && (n < minFixedPort || n >= low) {
		t.Errorf("port %d, want one in [%d, %d)", n, minFixedPort, low)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listening on the address given: %v", err)
	}
	ln.Close()
}
