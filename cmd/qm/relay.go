package main

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/quartermaster-dev/quartermaster/loadgen"
)

func init() {
	register(command{
		name:    "relay",
		summary: "a TLS hop that only carries bytes: the floor a forwarding allocator is measured against",
		run:     runRelay,
	})
}

const relayUsage = `usage: qm relay --to REMOTE --certs-dir DIR [flags]

Listens with mutual TLS, dials REMOTE with mutual TLS for each caller
connection, and copies bytes both ways without reading them. A request sent
through it costs what any forwarding hop pays before it does work of its
own (decrypting, encrypting again, two more socket reads and writes), so
'make load-forward-lone' sends the same request through the relay as well as
through a forwarding allocator: the difference is the allocator's own work.
It is a measuring tool, not a proxy to deploy.

Certificates come from a 'qm certs' directory: callers must present a
client certificate its client CA signed, and the relay presents the server
certificate; towards REMOTE it is the client --identity.

flags:
`

func runRelay(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("qm relay", flag.ContinueOnError)
	var c loadgen.RelayConfig
	fs.StringVar(&c.Addr, "addr", "127.0.0.1:8450", "address to listen on (port 0 picks one)")
	fs.StringVar(&c.Remote, "to", "", "the allocator to carry connections to, host:port (required)")
	fs.StringVar(&c.CertsDir, "certs-dir", "", "certificate directory in the 'qm certs' layout (required)")
	fs.StringVar(&c.Identity, "identity", "forwarder", "client identity within --certs-dir the relay dials REMOTE as")
	usage, ok, err := parseFlags("relay", relayUsage, fs, args, stdout, stderr)
	if !ok {
		return err
	}
	if c.Remote == "" {
		return usageFail(stderr, "relay", usage, "--to is required")
	}
	if c.CertsDir == "" {
		return usageFail(stderr, "relay", usage, "--certs-dir is required")
	}
	r, err := loadgen.NewRelay(c)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "relay: %s -> %s (Ctrl-C stops)\n", r.Addr(), c.Remote)
	return r.Serve(ctx)
}
