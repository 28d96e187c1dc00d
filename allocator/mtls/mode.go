// Package mtls is the allocator's transport security: TLS with client
// certificates required and verified, certificates and client CAs that are
// re-read from disk without a restart, and the caller identity derived from
// the verified client certificate.
//
// The server side is a Server: it serves the certificate in a directory
// (tls.crt, tls.key) and trusts every *.crt / *.pem in another directory as a
// client CA. Each new handshake gets the material current at that moment
// through tls.Config.GetCertificate and GetConfigForClient, so open
// connections are never disturbed by a reload. Reload checks the files; Run
// calls it on an interval. A file that does not parse (half written, garbage)
// never replaces good material: the previous certificate and pool stay in
// use and the error is logged and reported by Status.
//
// Identity is the client certificate's URI SAN (spiffe://quartermaster/<id>
// gives <id>; any other URI is the identity as a whole), else its CN. It is
// read only from a certificate the handshake verified. The two insecure
// modes, for development only, never take an identity from the caller: every
// caller is the configured default identity.
package mtls

import (
	"fmt"
	"io"
	"strings"
)

// Mode is how much transport security the server enforces.
type Mode int

const (
	// ModeMTLS is TLS with a client certificate required and verified. It
	// is the default and the only mode for production.
	ModeMTLS Mode = iota
	// ModeInsecureDisableMTLS is TLS without client certificates: the
	// connection is private but anyone can call, and every caller gets the
	// default identity.
	ModeInsecureDisableMTLS
	// ModeInsecureDisableTLS is plaintext: no privacy, no authentication.
	ModeInsecureDisableTLS
)

// String returns the mode's name as the flags spell it.
func (m Mode) String() string {
	switch m {
	case ModeMTLS:
		return "mtls"
	case ModeInsecureDisableMTLS:
		return "insecure-disable-mtls"
	case ModeInsecureDisableTLS:
		return "insecure-disable-tls"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// ParseMode is the inverse of Mode.String.
func ParseMode(s string) (Mode, error) {
	for _, m := range []Mode{ModeMTLS, ModeInsecureDisableMTLS, ModeInsecureDisableTLS} {
		if s == m.String() {
			return m, nil
		}
	}
	return 0, fmt.Errorf("mtls: unknown mode %q (want mtls, insecure-disable-mtls or insecure-disable-tls)", s)
}

// ModeFromFlags maps the --insecure-disable-mtls and --insecure-disable-tls
// switches to a Mode. Disabling TLS also disables mTLS, so it wins.
func ModeFromFlags(disableMTLS, disableTLS bool) Mode {
	switch {
	case disableTLS:
		return ModeInsecureDisableTLS
	case disableMTLS:
		return ModeInsecureDisableMTLS
	}
	return ModeMTLS
}

// Insecure reports whether m is one of the development-only modes.
func (m Mode) Insecure() bool { return m != ModeMTLS }

// WriteInsecureWarning writes a loud, multi-line warning about m to w, for
// the start of a server's output; it writes nothing for ModeMTLS. The
// warning is deliberately hard to miss in a log: running one of these modes
// by accident exposes the allocator to anyone who can reach its port.
func WriteInsecureWarning(w io.Writer, m Mode) error {
	var what []string
	switch m {
	case ModeMTLS:
		return nil
	case ModeInsecureDisableMTLS:
		what = []string{
			"INSECURE: --insecure-disable-mtls is set.",
			"Client certificates are NOT requested or checked: ANYONE who can",
			"reach this port can allocate game servers. Every caller is treated",
			"as the default identity; no identity is taken from the caller.",
		}
	case ModeInsecureDisableTLS:
		what = []string{
			"INSECURE: --insecure-disable-tls is set.",
			"Traffic is PLAINTEXT: no encryption, no server certificate, no",
			"client certificates. ANYONE who can reach this port can allocate",
			"game servers, and anyone on the path can read and alter requests.",
			"Every caller is treated as the default identity.",
		}
	default:
		return fmt.Errorf("mtls: unknown mode %d", int(m))
	}
	what = append(what, "For local development only. Never use this in production.")
	bar := strings.Repeat("!", 72)
	var b strings.Builder
	b.WriteString(bar + "\n")
	for _, line := range what {
		fmt.Fprintf(&b, "!!  %-66s  !!\n", line)
	}
	b.WriteString(bar + "\n")
	_, err := io.WriteString(w, b.String())
	return err
}
