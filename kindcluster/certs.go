package kindcluster

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"time"
)

// secrets is everything a cluster needs that must not be shared between
// clusters: its own CA, the API server's serving certificate, the
// service-account signing key and an admin token.
type secrets struct {
	caCert      []byte // PEM
	servingCert []byte // PEM, signed by caCert
	servingKey  []byte // PEM
	saKey       []byte // PEM, PKCS#1 RSA private key
	saPub       []byte // PEM, PKIX public key
	adminToken  string
}

// newSecrets generates fresh secrets. We make our own CA rather than let
// kube-apiserver self-sign into --cert-dir: the kubeconfig can then be
// written before the server starts, with no race to read its certificate.
func newSecrets(now time.Time) (*secrets, error) {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	caTmpl := &x509.Certificate{
		SerialNumber:          randSerial(),
		Subject:               pkix.Name{CommonName: "quartermaster-local-ca"},
		NotBefore:             now.Add(-time.Hour), // tolerate clock skew
		NotAfter:              now.Add(10 * 365 * 24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("create CA: %w", err)
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return nil, err
	}

	srvKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	srvTmpl := &x509.Certificate{
		SerialNumber: randSerial(),
		Subject:      pkix.Name{CommonName: "kube-apiserver"},
		NotBefore:    now.Add(-time.Hour),
		NotAfter:     now.Add(10 * 365 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		// The names a client inside or outside the "cluster" may use.
		DNSNames: []string{"localhost", "kubernetes", "kubernetes.default",
			"kubernetes.default.svc", "kubernetes.default.svc.cluster.local"},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1), net.IPv6loopback, net.IPv4(10, 0, 0, 1)},
	}
	srvDER, err := x509.CreateCertificate(rand.Reader, srvTmpl, ca, &srvKey.PublicKey, caKey)
	if err != nil {
		return nil, fmt.Errorf("create serving certificate: %w", err)
	}
	srvKeyDER, err := x509.MarshalECPrivateKey(srvKey)
	if err != nil {
		return nil, err
	}

	// RSA because it is what every service-account token consumer accepts.
	saKey, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return nil, err
	}
	saPubDER, err := x509.MarshalPKIXPublicKey(&saKey.PublicKey)
	if err != nil {
		return nil, err
	}

	tok := make([]byte, 24)
	if _, err := rand.Read(tok); err != nil {
		return nil, err
	}

	return &secrets{
		caCert:      pemBlock("CERTIFICATE", caDER),
		servingCert: pemBlock("CERTIFICATE", srvDER),
		servingKey:  pemBlock("EC PRIVATE KEY", srvKeyDER),
		saKey:       pemBlock("RSA PRIVATE KEY", x509.MarshalPKCS1PrivateKey(saKey)),
		saPub:       pemBlock("PUBLIC KEY", saPubDER),
		adminToken:  hex.EncodeToString(tok),
	}, nil
}

func pemBlock(typ string, der []byte) []byte {
	return pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der})
}

func randSerial() *big.Int {
	n, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 127))
	if err != nil {
		panic(err) // crypto/rand does not fail on supported platforms
	}
	return n
}

// tokenFile renders kube-apiserver's --token-auth-file: one line of
// token,user,uid,"groups". system:masters bypasses RBAC, which is what an
// admin kubeconfig for a throwaway cluster should do.
func tokenFile(adminToken string) []byte {
	return []byte(adminToken + `,admin,admin,"system:masters"` + "\n")
}
