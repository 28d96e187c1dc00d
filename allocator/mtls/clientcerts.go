package mtls

import (
	"crypto/tls"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// clientCerts counts the open connections of every client certificate,
// by identity and serial number: what shows an operator (and the e2e
// suite) which certificate each caller connects with, so that a rotation
// can be seen to reach the callers, and an old certificate to fall out of
// use before it is revoked. A connection is counted from its handshake to
// its close; a series goes when its last connection closes, so the series
// are bounded by the open connections.
type clientCerts struct {
	gauge *prometheus.GaugeVec

	mu   sync.Mutex
	open map[certKey]int
}

type certKey struct{ identity, serial string }

func newClientCerts() *clientCerts {
	return &clientCerts{
		gauge: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "qm", Subsystem: "mtls", Name: "client_connections",
			Help: "Open connections by the identity and serial number (hexadecimal) of the client certificate they were accepted with.",
		}, []string{"identity", "serial"}),
		open: map[certKey]int{},
	}
}

// keyOf is the identity and serial of a handshake's verified client
// certificate; ok is false when it verified none.
func keyOf(state *tls.ConnectionState) (certKey, bool) {
	if len(state.VerifiedChains) == 0 || len(state.VerifiedChains[0]) == 0 {
		return certKey{}, false
	}
	leaf := state.VerifiedChains[0][0]
	id, err := IdentityFromCertificate(leaf)
	if err != nil {
		return certKey{}, false
	}
	return certKey{identity: id, serial: leaf.SerialNumber.Text(16)}, true
}

// opened counts a connection accepted with state and returns what uncounts
// it.
func (c *clientCerts) opened(state *tls.ConnectionState) (closed func()) {
	k, ok := keyOf(state)
	if !ok {
		return func() {}
	}
	c.mu.Lock()
	c.open[k]++
	c.gauge.WithLabelValues(k.identity, k.serial).Set(float64(c.open[k]))
	c.mu.Unlock()
	return func() {
		c.mu.Lock()
		defer c.mu.Unlock()
		if c.open[k]--; c.open[k] > 0 {
			c.gauge.WithLabelValues(k.identity, k.serial).Set(float64(c.open[k]))
			return
		}
		delete(c.open, k)
		c.gauge.DeleteLabelValues(k.identity, k.serial)
	}
}

// Register adds the server's metric, qm_mtls_client_connections (open
// connections by client identity and certificate serial), to reg.
func (s *Server) Register(reg prometheus.Registerer) error {
	return reg.Register(s.certs.gauge)
}
