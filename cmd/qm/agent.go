package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"time"

	"k8s.io/client-go/dynamic"

	"github.com/quartermaster-dev/quartermaster/fleetagent"
)

func init() {
	register(command{
		name:    "agent",
		summary: "keep Fleets' GameServers on a cluster without Agones (local rigs)",
		run:     runAgent,
	})
}

const agentUsage = `usage: qm agent [--kubeconfig F] [--namespace N] [--nodes 50] [--startup 2s] [--session 60s]

Makes a cluster without Agones (such as 'qm cluster up') behave like one
running it: for every agones.dev/v1 Fleet it keeps spec.replicas
GameServers, marks them Ready after --startup on a node of a simulated pool
of --nodes, ends Allocated servers' sessions after --session, deletes
Shutdown servers (the allocator's Release) and replaces them, and writes the
Fleets' status. Every write carries the resourceVersion it read, so it never
overwrites an allocator. Runs until Ctrl-C.

Never run it against a cluster that runs Agones: both would manage the same
objects.

flags:
`

func runAgent(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("qm agent", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig file (default: $KUBECONFIG, else in-cluster)")
	namespace := fs.String("namespace", "", "namespace to manage (default: every namespace)")
	nodes := fs.Int("nodes", 50, "size of the simulated node pool")
	perNode := fs.Int("max-per-node", 20, "servers a Packed fleet puts on one node before the next")
	startup := fs.Duration("startup", 2*time.Second, "how long a new server stays Scheduled before Ready")
	session := fs.Duration("session", 60*time.Second, "how long an Allocated server plays before it is replaced (0: forever)")
	interval := fs.Duration("interval", 500*time.Millisecond, "time between passes")
	workers := fs.Int("workers", 8, "API writes in flight at once")
	qps := fs.Float64("qps", 500, "client-side rate limit towards the API server")
	logLevel := fs.String("log-level", "info", "debug, info, warn or error")
	usage, ok, err := parseFlags("agent", agentUsage, fs, args, stdout, stderr)
	if !ok {
		return err
	}
	if *nodes <= 0 || *perNode <= 0 || *workers <= 0 || *qps <= 0 || *interval <= 0 || *startup < 0 || *session < 0 {
		return usageFail(stderr, "agent", usage, "--nodes, --max-per-node, --workers, --qps and --interval must be positive; --startup and --session not negative")
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(*logLevel)); err != nil {
		return usageFail(stderr, "agent", usage, "--log-level %q: %v", *logLevel, err)
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: level}))

	// The same lookup as qm serve's, so one exported KUBECONFIG serves both.
	rc, err := kubeRESTConfig(*kubeconfig)
	if err != nil {
		return err
	}
	rc.QPS, rc.Burst = float32(*qps), int(2**qps)
	dc, err := dynamic.NewForConfig(rc)
	if err != nil {
		return fmt.Errorf("client: %w", err)
	}
	a, err := fleetagent.New(fleetagent.Config{
		Client: dc, Namespace: *namespace, Nodes: *nodes, MaxPerNode: *perNode,
		Startup: *startup, Session: *session, Interval: *interval, Workers: *workers, Logger: log,
	})
	if err != nil {
		return err
	}
	log.Info("fleet agent running", "server", rc.Host, "namespace", *namespace, "nodes", *nodes, "startup", *startup, "session", *session)
	err = a.Run(ctx)
	s := a.Stats()
	log.Info("fleet agent stopped", "created", s.Created, "readied", s.Readied, "sessionsEnded", s.SessionsEnded, "deleted", s.Deleted, "conflicts", s.Conflicts)
	return err
}
