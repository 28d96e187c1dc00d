package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/quartermaster-dev/quartermaster/certs"
)

func init() {
	register(command{
		name:    "certs",
		summary: "generate a CA, a server certificate and client certificates",
		run:     runCerts,
	})
}

const certsUsage = `usage: qm certs --dir DIR [--hosts H1,H2,...] [--clients ID1,ID2,...] [--validity D] [--force]

Generates the certificates for the allocator's mutual TLS into DIR:

  DIR/ca.crt, DIR/ca.key                   the CA (keep ca.key secret: it mints identities)
  DIR/server/tls.crt, tls.key              server certificate  (qm serve --tls-dir DIR/server)
  DIR/client-ca/ca.crt                     trusted client CAs  (qm serve --client-ca-dir DIR/client-ca)
  DIR/clients/ID/tls.crt, tls.key, ca.crt  a client's certificate, key and the server's CA
                                           (qm allocate --cert, --key, --cacert)

A client's identity is its certificate's URI SAN spiffe://quartermaster/ID
(and its CN). Running again reuses the CA and keeps certificates that are
still valid, so adding a client later is another run naming it. --force
makes a new CA and reissues everything named; clients of the old CA are
refused once the server reloads.

flags:
`

func runCerts(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("qm certs", flag.ContinueOnError)
	fs.SetOutput(io.Discard) // errors and usage are printed below, once
	dir := fs.String("dir", "", "directory to write into (created if missing; required)")
	hosts := fs.String("hosts", "localhost,127.0.0.1", "comma-separated DNS names and IP addresses for the server certificate; empty for none")
	clients := fs.String("clients", "", "comma-separated client identities (letters, digits, '.', '_', '-')")
	validity := fs.Duration("validity", certs.DefaultValidity, "validity of server and client certificates")
	caValidity := fs.Duration("ca-validity", certs.DefaultCAValidity, "validity of a new CA")
	force := fs.Bool("force", false, "replace an existing CA and reissue every certificate named")
	usage, ok, err := parseFlags("certs", certsUsage, fs, args, stdout, stderr)
	if !ok {
		return err
	}
	switch {
	case *dir == "":
		return usageFail(stderr, "certs", usage, "--dir is required")
	case *validity <= 0 || *caValidity <= 0:
		return usageFail(stderr, "certs", usage, "--validity and --ca-validity must be positive")
	}

	res, err := certs.Generate(certs.GenerateOptions{
		Dir:        *dir,
		Hosts:      splitList(*hosts),
		Clients:    splitList(*clients),
		Validity:   *validity,
		CAValidity: *caValidity,
		Force:      *force,
		Now:        time.Now(),
	})
	if err != nil {
		return err
	}
	printCertsResult(stdout, res, splitList(*clients))
	return nil
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

func printCertsResult(w io.Writer, res *certs.Result, clients []string) {
	l := res.Layout
	if res.CACreated {
		fmt.Fprintf(w, "Created a new CA in %s.\n", l.Dir)
	} else {
		fmt.Fprintf(w, "Reused the CA in %s.\n", l.Dir)
	}
	if len(res.Written) > 0 {
		fmt.Fprintln(w, "Wrote:")
		for _, p := range res.Written {
			fmt.Fprintln(w, "  "+p)
		}
	}
	if len(res.Kept) > 0 {
		fmt.Fprintln(w, "Kept (still valid, same CA and names; --force to reissue):")
		for _, p := range res.Kept {
			fmt.Fprintln(w, "  "+p)
		}
	}
	if len(res.Stale) > 0 {
		fmt.Fprintf(w, "Warning: these clients' certificates are not from the current CA and will be refused: %s\n", strings.Join(res.Stale, ", "))
		fmt.Fprintf(w, "  (name them in --clients to reissue)\n")
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Serve with:")
	fmt.Fprintf(w, "  qm serve --tls-dir %s --client-ca-dir %s\n", l.ServerDir(), l.ClientCADir())
	for _, id := range clients {
		fmt.Fprintf(w, "Call as %s with:\n", id)
		fmt.Fprintf(w, "  qm allocate --cert %s --key %s --cacert %s\n", l.ClientCert(id), l.ClientKey(id), l.ClientServerCA(id))
	}
	if len(clients) == 0 {
		fmt.Fprintln(w, "No clients named: add some with --clients (the CA is reused).")
	}
	fmt.Fprintf(w, "Keep %s secret: anyone holding it can make certificates for any identity.\n", l.CAKey())
}
