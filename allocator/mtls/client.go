package mtls

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"

	"github.com/quartermaster-dev/quartermaster/certs"
)

// ClientFiles name a client's TLS material, as the flags of Agones' client
// example do: --cert, --key and --cacert.
type ClientFiles struct {
	// CertFile and KeyFile are the client certificate and key. Both or
	// neither: neither suits a server running with mTLS disabled.
	CertFile string
	KeyFile  string
	// CAFile holds the CA(s) the server's certificate must chain to; the
	// system roots if empty.
	CAFile string
	// ServerName overrides the name checked against the server certificate
	// (by default the host dialled).
	ServerName string
}

// ClientFilesFor returns the files certs.Generate wrote for identity in dir.
func ClientFilesFor(dir, identity string) ClientFiles {
	l := certs.Layout{Dir: dir}
	return ClientFiles{
		CertFile: l.ClientCert(identity),
		KeyFile:  l.ClientKey(identity),
		CAFile:   l.ClientServerCA(identity),
	}
}

// ClientConfig builds a client TLS configuration from files. Use it with
// credentials.NewTLS for gRPC (which adds the h2 ALPN gRPC needs) or as an
// http.Transport's TLSClientConfig for REST.
func ClientConfig(f ClientFiles) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: f.ServerName}
	switch {
	case f.CertFile != "" && f.KeyFile != "":
		cert, err := tls.LoadX509KeyPair(f.CertFile, f.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("mtls: client certificate: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	case f.CertFile != "" || f.KeyFile != "":
		return nil, errors.New("mtls: a client certificate needs both a certificate file and a key file")
	}
	if f.CAFile != "" {
		pem, err := os.ReadFile(f.CAFile)
		if err != nil {
			return nil, fmt.Errorf("mtls: server CA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("mtls: server CA: no certificate in %s", f.CAFile)
		}
		cfg.RootCAs = pool
	}
	return cfg, nil
}

// ClientConfigFromDir builds the client TLS configuration for identity
// from a directory certs.Generate wrote.
func ClientConfigFromDir(dir, identity string) (*tls.Config, error) {
	if err := certs.ValidateIdentity(identity); err != nil {
		return nil, err
	}
	return ClientConfig(ClientFilesFor(dir, identity))
}
