package loadgen

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"maps"
	"net"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/quartermaster-dev/quartermaster/allocator/mtls"
	"github.com/quartermaster-dev/quartermaster/certs"
)

// Relay is a hop that does nothing but carry bytes. It ends the caller's
// mutual TLS, opens one of its own to the remote for each caller
// connection, and copies what arrives on either side to the other. It reads
// no HTTP/2 and no gRPC.
//
// It is a measuring stick, not a proxy to deploy. An allocator that
// forwards a request has to decrypt it to read it and encrypt it again for
// the next cluster, so a request through the relay costs what any
// forwarding hop pays before doing work of its own: in a measurement that
// sends the same request direct, through a forwarding allocator and
// through the relay, the relay's latency is the floor for the allocator's,
// and the difference between the two is the allocator's own work.
//
// The relay carries everything on the connection, the caller's
// flow-control PINGs and the remote's answers to them included, where an
// allocator answers those itself: it pays two more reads and writes per
// PING than a forwarding hop must.
type Relay struct {
	ln     net.Listener
	remote string
	dial   *tls.Config

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
	wg     sync.WaitGroup
}

// RelayConfig names the relay's ends.
type RelayConfig struct {
	// Addr is where callers connect (host:port; port 0 picks one).
	Addr string
	// Remote is the allocator the relay carries each connection to.
	Remote string
	// CertsDir is a `qm certs` directory: the relay serves its server
	// certificate and trusts its client CA, and dials the remote as
	// Identity with that client's certificate and server CA.
	CertsDir string
	Identity string
}

// NewRelay listens on c.Addr. Serve carries connections until its context
// ends.
func NewRelay(c RelayConfig) (*Relay, error) {
	if c.Remote == "" {
		return nil, errors.New("relay: no remote address to carry connections to")
	}
	if _, _, err := net.SplitHostPort(c.Remote); err != nil {
		return nil, fmt.Errorf("relay: remote %q is not host:port: %w", c.Remote, err)
	}
	serve, dial, err := relayTLS(c.CertsDir, c.Identity)
	if err != nil {
		return nil, err
	}
	ln, err := tls.Listen("tcp", c.Addr, serve)
	if err != nil {
		return nil, fmt.Errorf("relay: listen on %s: %w", c.Addr, err)
	}
	return &Relay{ln: ln, remote: c.Remote, dial: dial, conns: map[net.Conn]struct{}{}}, nil
}

// relayTLS reads the two TLS configurations from a `qm certs` directory.
// Both ends offer only h2, as gRPC requires; the relay itself never looks
// at what is said over it.
func relayTLS(dir, identity string) (serve, dial *tls.Config, err error) {
	if dir == "" {
		return nil, nil, errors.New("relay: no certificate directory")
	}
	l := certs.Layout{Dir: dir}
	cert, err := tls.LoadX509KeyPair(l.ServerCert(), l.ServerKey())
	if err != nil {
		return nil, nil, fmt.Errorf("relay: server certificate: %w", err)
	}
	clientCAs, err := readPool(l.ClientCACert())
	if err != nil {
		return nil, nil, fmt.Errorf("relay: client CA: %w", err)
	}
	serve = &tls.Config{
		MinVersion:   tls.VersionTLS12,
		Certificates: []tls.Certificate{cert},
		ClientAuth:   tls.RequireAndVerifyClientCert,
		ClientCAs:    clientCAs,
		NextProtos:   []string{"h2"},
	}
	dial, err = mtls.ClientConfigFromDir(dir, identity)
	if err != nil {
		return nil, nil, fmt.Errorf("relay: client certificate of %q: %w", identity, err)
	}
	dial.NextProtos = []string{"h2"}
	return serve, dial, nil
}

func readPool(file string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("no certificate in %s", file)
	}
	return pool, nil
}

// Addr is where the relay listens.
func (r *Relay) Addr() net.Addr { return r.ln.Addr() }

// Serve accepts callers until ctx ends, then closes every connection and
// returns once their copies have stopped. A caller whose handshake fails,
// or whose remote cannot be reached, loses its connection; the relay goes
// on.
func (r *Relay) Serve(ctx context.Context) error {
	stop := context.AfterFunc(ctx, r.close)
	defer stop()
	var err error
	for {
		c, aerr := r.ln.Accept()
		if aerr != nil {
			if ctx.Err() == nil && !r.isClosed() {
				err = fmt.Errorf("relay: accept: %w", aerr)
			}
			break
		}
		if !r.track(c) {
			c.Close()
			break
		}
		r.wg.Add(1)
		go func() {
			defer r.wg.Done()
			r.carry(ctx, c.(*tls.Conn))
		}()
	}
	r.close()
	r.wg.Wait()
	return err
}

// relaySetupTimeout bounds the caller's handshake and the dial to the
// remote: a caller that never finishes its handshake, or a remote that
// does not answer, must not hold a goroutine and a socket until the relay
// stops.
const relaySetupTimeout = 10 * time.Second

// carry completes the caller's handshake, dials the remote and copies
// both ways until either side closes.
func (r *Relay) carry(ctx context.Context, c *tls.Conn) {
	defer r.forget(c)
	setup, cancel := context.WithTimeout(ctx, relaySetupTimeout)
	defer cancel()
	if err := c.HandshakeContext(setup); err != nil {
		return
	}
	d := tls.Dialer{Config: r.dial}
	rc, err := d.DialContext(setup, "tcp", r.remote)
	if err != nil {
		return
	}
	if !r.track(rc) {
		rc.Close()
		return
	}
	defer r.forget(rc)
	done := make(chan struct{})
	go func() {
		io.Copy(rc, c)
		rc.Close()
		close(done)
	}()
	io.Copy(c, rc)
	c.Close()
	rc.Close()
	<-done
}

func (r *Relay) track(c net.Conn) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.closed {
		return false
	}
	r.conns[c] = struct{}{}
	return true
}

func (r *Relay) forget(c net.Conn) {
	c.Close()
	r.mu.Lock()
	delete(r.conns, c)
	r.mu.Unlock()
}

func (r *Relay) isClosed() bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.closed
}

// close stops accepting and closes every open connection.
func (r *Relay) close() {
	r.mu.Lock()
	r.closed = true
	conns := slices.Collect(maps.Keys(r.conns))
	r.mu.Unlock()
	r.ln.Close()
	for _, c := range conns {
		c.Close()
	}
}
