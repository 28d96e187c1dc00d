package forward

import (
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials"
)

// clientTLS builds the client TLS configuration of a connection Secret, as
// Agones builds it: tls.crt and tls.key are the client certificate; the
// server is verified against serverCa and the Secret's ca.crt when either
// is given, else against the system roots.
func clientTLS(sec Secret, serverCA []byte) (*tls.Config, error) {
	ref := sec.Namespace + "/" + sec.Name
	crt, key := sec.Data[SecretCertKey], sec.Data[SecretKeyKey]
	if len(crt) == 0 || len(key) == 0 {
		return nil, fmt.Errorf("Secret %s has no %s and %s (the client certificate and key)", ref, SecretCertKey, SecretKeyKey)
	}
	pair, err := tls.X509KeyPair(crt, key)
	if err != nil {
		return nil, fmt.Errorf("Secret %s: %s/%s: %v", ref, SecretCertKey, SecretKeyKey, err)
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, Certificates: []tls.Certificate{pair}}
	ca := sec.Data[SecretCAKey]
	if len(serverCA) > 0 || len(ca) > 0 {
		pool, err := certPool(serverCA, ca)
		if err != nil {
			return nil, fmt.Errorf("Secret %s or its policy: %v", ref, err)
		}
		cfg.RootCAs = pool
	}
	return cfg, nil
}

// certPool reads the policy's serverCa and the Secret's ca.crt (either may
// be empty) into one pool; each given must hold a PEM certificate.
func certPool(serverCA, caCrt []byte) (*x509.CertPool, error) {
	pool := x509.NewCertPool()
	if len(serverCA) > 0 && !pool.AppendCertsFromPEM(serverCA) {
		return nil, fmt.Errorf("serverCa holds no PEM certificate")
	}
	if len(caCrt) > 0 && !pool.AppendCertsFromPEM(caCrt) {
		return nil, fmt.Errorf("%s holds no PEM certificate", SecretCAKey)
	}
	return pool, nil
}

// clientRef names a connection apart from its credentials' version: the
// endpoint, the Secret and the policy's serverCa.
type clientRef struct {
	endpoint, secret, serverCA string
}

// client is one remote allocator's cached grpc-go connection, for one
// version of its credentials.
type client struct {
	ref     clientRef
	version string
	cc      *grpc.ClientConn

	inflight int  // under clients.mu
	retired  bool // replaced by a newer version; closed once idle
}

// clients caches one connection per (endpoint, Secret version). A newer
// version of the Secret (a rotation) replaces the client for later
// requests; the old one finishes the calls it carries and is closed when
// the last of them ends, so a rotation never cuts a call short.
type clients struct {
	dialOpts []grpc.DialOption
	connect  time.Duration

	mu     sync.Mutex
	byRef  map[clientRef]*client
	closed bool

	lastCA atomic.Pointer[caSum] // see caDigest
}

func newClients(connectTimeout time.Duration, opts []grpc.DialOption) *clients {
	return &clients{byRef: map[clientRef]*client{}, connect: connectTimeout, dialOpts: opts}
}

// The gRPC flow-control windows of the connections to remote allocators,
// and of allocator.Server's: fixed, which turns off grpc-go's per-message
// bandwidth probing, and large enough that they never hold back messages
// of a few hundred bytes (4 MiB in flight per connection is over 10,000
// requests; on a 100 ms link, 40 MiB/s).
const (
	StreamWindowBytes = 1 << 20
	ConnWindowBytes   = 4 << 20
)

// get returns the client for endpoint with sec's credentials, dialling
// (lazily: grpc connects on the first call) when there is none for this
// version, or when fresh is set (the one cached is then retired). The
// caller must put it back with put.
func (cs *clients) get(endpoint string, sec Secret, serverCA []byte, fresh bool) (*client, error) {
	ref := clientRef{endpoint: endpoint, secret: sec.Namespace + "/" + sec.Name, serverCA: cs.caDigest(serverCA)}
	cs.mu.Lock()
	if cs.closed {
		cs.mu.Unlock()
		return nil, fmt.Errorf("the forwarder is shut down")
	}
	if c := cs.byRef[ref]; c != nil && c.version == sec.Version && !fresh {
		c.inflight++
		cs.mu.Unlock()
		return c, nil
	}
	cs.mu.Unlock()

	// Build outside the lock: parsing keys is slow enough to matter under
	// load, and two builders racing only waste one client.
	cfg, err := clientTLS(sec, serverCA)
	if err != nil {
		return nil, err
	}
	opts := append([]grpc.DialOption{
		grpc.WithTransportCredentials(credentials.NewTLS(cfg)),
		// Reconnect soon after a remote comes back: grpc's default
		// backoff grows to two minutes, longer than the breaker waits.
		grpc.WithConnectParams(grpc.ConnectParams{
			Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 2 * time.Second},
			MinConnectTimeout: cs.connect,
		}),
		// A request a Memo encoded is sent as it is (codec.go).
		grpc.WithDefaultCallOptions(grpc.ForceCodecV2(newClientCodec())),
		// Fixed windows, as allocator.Server's: grpc-go's dynamic ones
		// cost every lone answer a WINDOW_UPDATE, a PING and its ACK.
		grpc.WithInitialWindowSize(StreamWindowBytes),
		grpc.WithInitialConnWindowSize(ConnWindowBytes),
	}, cs.dialOpts...)
	cc, err := grpc.NewClient(endpoint, opts...)
	if err != nil {
		return nil, fmt.Errorf("endpoint %s: %v", endpoint, err)
	}
	nc := &client{ref: ref, version: sec.Version, cc: cc}

	cs.mu.Lock()
	defer cs.mu.Unlock()
	if cs.closed {
		_ = cc.Close()
		return nil, fmt.Errorf("the forwarder is shut down")
	}
	if c := cs.byRef[ref]; c != nil {
		if c.version == sec.Version && !fresh {
			// Another request built the same client meanwhile.
			nc.shut()
			c.inflight++
			return c, nil
		}
		c.retired = true
		if c.inflight == 0 {
			c.shut()
		}
	}
	nc.inflight = 1
	cs.byRef[ref] = nc
	return nc, nil
}

// shut closes the client's connection (no call is in flight).
func (c *client) shut() { _ = c.cc.Close() }

// put ends one call on c.
func (cs *clients) put(c *client) {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	c.inflight--
	if c.retired && c.inflight == 0 {
		c.shut()
	}
}

// caDigest names a policy's serverCa in a clientRef: a short digest of
// it, empty for none. Each request of a policy passes the same bytes (its
// snapshot's), so the last digest is kept with the slice it was made of
// (kept alive, so its address cannot come back with other bytes) and a
// request with those very bytes skips the hash.
func (cs *clients) caDigest(serverCA []byte) string {
	if len(serverCA) == 0 {
		return ""
	}
	if d := cs.lastCA.Load(); d != nil && len(d.ca) == len(serverCA) && unsafe.SliceData(d.ca) == unsafe.SliceData(serverCA) {
		return d.sum
	}
	sum := sha256.Sum256(serverCA)
	d := &caSum{ca: serverCA, sum: hex.EncodeToString(sum[:8])}
	cs.lastCA.Store(d)
	return d.sum
}

// caSum is a serverCa and its digest.
type caSum struct {
	ca  []byte
	sum string
}

// count reports the cached clients (current versions only), for tests.
func (cs *clients) count() int {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	return len(cs.byRef)
}

func (cs *clients) close() {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	cs.closed = true
	for ref, c := range cs.byRef {
		c.retired = true
		if c.inflight == 0 {
			c.shut()
		}
		delete(cs.byRef, ref)
	}
}
