package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"google.golang.org/grpc/codes"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/quartermaster-dev/quartermaster/allocator"
	"github.com/quartermaster-dev/quartermaster/allocator/kube"
	"github.com/quartermaster-dev/quartermaster/allocator/memory"
	"github.com/quartermaster-dev/quartermaster/allocator/mtls"
	"github.com/quartermaster-dev/quartermaster/certs"
)

func init() {
	register(command{
		name:    "serve",
		summary: "run the allocator service (Agones-compatible gRPC and REST)",
		run:     runServe,
	})
}

const serveUsage = `usage: qm serve [flags]

Runs the allocator: Agones' allocation.AllocationService over gRPC and
POST /gameserverallocation over REST, with mutual TLS, plus Quartermaster's
List/Release API; /live, /ready and /metrics in plain HTTP on --http-addr.

With no flags it runs a demo: the in-memory backend with a few fleets, and
development certificates made in the state directory (see --state-dir). It
prints the command that calls it.

For real use give --tls-dir (tls.crt, tls.key) and --client-ca-dir (every
*.crt/*.pem in it is a trusted client CA); both are re-read when they change.
'qm certs' makes such directories.

flags:
`

// devIdentities get client certificates in the state directory.
var devIdentities = []string{"dev", "alice", "bob"}

type serveFlags struct {
	addr, restAddr, httpAddr string
	keyWindow                time.Duration
	maxKeys                  int
	tlsDir, clientCADir      string
	stateDir                 string
	hosts                    string
	disableMTLS, disableTLS  bool
	backend                  string
	kubeconfig               string
	kubeNamespace            string
	kubeQPS                  float64
	kubeBurst                int
	packedSpread             int
	replicaShard             string
	replicas                 int
	replica                  replicaFlags
	fleets, limits           string
	templates                string
	multi                    multiClusterFlags
	trace                    traceFlags
	unallocated              string
	logFormat, logLevel      string
	seed                     uint64
	readyFile                string
	drainDelay, shutdownWait time.Duration
	timeout                  time.Duration
	maxRequestBytes          int
	maxStreams               uint
	grpcWorkers              uint
	gcHeapFloor              string
	syncTimeout              time.Duration
	pprof                    bool
}

// serveFlagSet defines `qm serve`'s flags on f.
func serveFlagSet(f *serveFlags) *flag.FlagSet {
	fs := flag.NewFlagSet("qm serve", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	fs.StringVar(&f.addr, "addr", ":8443", "gRPC address; REST is served here too unless --rest-addr is set")
	fs.StringVar(&f.restAddr, "rest-addr", "", "serve REST on this address instead of sharing --addr")
	fs.StringVar(&f.httpAddr, "http-addr", ":8080", "plain-HTTP address for /live, /ready and /metrics; empty for none")
	fs.StringVar(&f.tlsDir, "tls-dir", "", "directory with the server's tls.crt and tls.key (default: development certificates in the state directory)")
	fs.StringVar(&f.clientCADir, "client-ca-dir", "", "directory of trusted client CA files (*.crt, *.pem) (default: the state directory's)")
	fs.StringVar(&f.stateDir, "state-dir", defaultStateDir(), "where development certificates are kept (also $QM_STATE_DIR)")
	fs.StringVar(&f.hosts, "hosts", "", "extra comma-separated names/IPs for the development server certificate (localhost and loopback are always in it)")
	fs.BoolVar(&f.disableMTLS, "insecure-disable-mtls", false, "INSECURE, development only: do not ask for client certificates")
	fs.BoolVar(&f.disableTLS, "insecure-disable-tls", false, "INSECURE, development only: plaintext, no TLS at all")
	fs.StringVar(&f.backend, "backend", "memory", "where game servers live: memory (embedded, with fleets) or kubernetes (Agones GameServers through the API server)")
	fs.StringVar(&f.kubeconfig, "kubeconfig", "", "kubeconfig for --backend kubernetes (default: $KUBECONFIG, else in-cluster)")
	fs.StringVar(&f.kubeNamespace, "watch-namespace", "", "--backend kubernetes: the one namespace to watch (default: all)")
	fs.Float64Var(&f.kubeQPS, "kube-qps", kube.DefaultQPS, "--backend kubernetes: client-side request rate towards the API server (client-go's default of 5 once capped Agones at a few allocations/s)")
	fs.IntVar(&f.kubeBurst, "kube-burst", kube.DefaultBurst, "--backend kubernetes: client-side burst towards the API server")
	fs.IntVar(&f.packedSpread, "packed-spread", 0, "Packed allocations choose among at least this many of the best matches; write conflicts widen it for a while (default: 1, exact Packed, for a lone replica; 64 with other replicas, enough for each replica's writes in flight to find servers of its own shard)")
	fs.StringVar(&f.replicaShard, "replica-shard", "", "with --replicas: this replica's number (0..replicas-1), or \"hostname\" to take it from a StatefulSet pod name's ordinal suffix; replicas then prefer different servers within --packed-spread")
	fs.IntVar(&f.replicas, "replicas", 0, "how many allocator replicas share the cluster (for --replica-shard; default: counted from the replicas' Leases, see --membership)")
	f.replica.register(fs)
	fs.StringVar(&f.fleets, "fleets", "", "fleets file (YAML, kind: Fleets) for the memory backend (default: built-in demo fleets)")
	f.multi.register(fs)
	f.trace.register(fs)
	fs.StringVar(&f.limits, "limits", "", "identity limits file (YAML, kind: AllocatorLimits), re-read every 2s so edits apply without a restart; without it every identity may allocate anywhere")
	fs.StringVar(&f.templates, "templates", "", "game server templates file (YAML, kind: GameServerTemplates) for the AllocationAdmin API's Create (qm create), re-read every 2s; without it Create has no templates")
	fs.StringVar(&f.unallocated, "unallocated-code", "ResourceExhausted", "gRPC code for \"nothing matches\" (Agones' UnAllocated)")
	fs.StringVar(&f.logFormat, "log-format", "text", "log format: text or json")
	fs.StringVar(&f.logLevel, "log-level", "info", "log level: debug, info, warn or error")
	fs.Uint64Var(&f.seed, "seed", 0, "start value for per-request seeds (0: from the clock); the same seed and request order replay the same decisions")
	fs.StringVar(&f.readyFile, "ready-file", "", "once listening, write the bound addresses to this file as JSON (for scripts)")
	fs.DurationVar(&f.drainDelay, "drain-delay", 0, "on SIGTERM, keep serving this long after /ready turns false")
	fs.DurationVar(&f.shutdownWait, "shutdown-timeout", allocator.DefaultShutdownTimeout, "on SIGTERM, longest wait for requests in flight")
	fs.DurationVar(&f.timeout, "timeout", allocator.DefaultTimeout, "bound on a request whose caller set no deadline")
	fs.DurationVar(&f.keyWindow, "allocation-key-window", allocator.DefaultKeyWindow, "how long an idempotency key is remembered after its allocation or release")
	fs.IntVar(&f.maxKeys, "allocation-key-max", allocator.DefaultMaxKeys, "most idempotency keys remembered; past it the oldest are forgotten")
	fs.BoolVar(&f.pprof, "pprof", false, "serve Go profiles (CPU, heap, mutex, block) under /debug/pprof/ on --http-addr, for go tool pprof")
	fs.IntVar(&f.maxRequestBytes, "max-request-bytes", allocator.DefaultMaxRequestBytes, "largest request message or body")
	fs.UintVar(&f.maxStreams, "max-concurrent-streams", allocator.DefaultMaxConcurrentStreams, "most requests in flight on one connection")
	fs.UintVar(&f.grpcWorkers, "grpc-workers", 0, "gRPC request goroutines kept between requests (0: 32 per CPU, at least 256, for many callers; a few suit an allocator that mostly sees one request at a time, such as a forwarding entry)")
	fs.StringVar(&f.gcHeapFloor, "gc-heap-floor", defaultHeapFloor, "let the Go heap grow to this size (such as 64Mi) between collections while little of it is live; 0 for Go's own pacing; ignored when GOGC is set. A small heap is otherwise collected tens of times a second under load")
	fs.DurationVar(&f.syncTimeout, "sync-timeout", defaultSyncTimeout, "--backend kubernetes: give up (exit 1, naming the reason) when the GameServer cache has not synced after this long; 0 waits until stopped")
	return fs
}

func runServe(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var f serveFlags
	fs := serveFlagSet(&f)
	usage, ok, err := parseFlags("serve", serveUsage, fs, args, stdout, stderr)
	if !ok {
		return err
	}
	var code codes.Code
	if err := code.UnmarshalJSON([]byte(`"` + strings.ToUpper(camelToSnake(f.unallocated)) + `"`)); err != nil {
		return usageFail(stderr, "serve", usage, "--unallocated-code %q is not a gRPC code name (e.g. ResourceExhausted)", f.unallocated)
	}
	if f.grpcWorkers > 1<<16 {
		return usageFail(stderr, "serve", usage, "--grpc-workers %d: at most 65536", f.grpcWorkers)
	}
	floor, err := parseByteSize(f.gcHeapFloor)
	if err != nil {
		return usageFail(stderr, "serve", usage, "--gc-heap-floor: %v", err)
	}
	if f.keyWindow <= 0 || f.maxKeys <= 0 {
		return usageFail(stderr, "serve", usage, "--allocation-key-window and --allocation-key-max must be positive")
	}
	if f.maxStreams > 1<<31 || f.maxRequestBytes <= 0 {
		return usageFail(stderr, "serve", usage, "--max-concurrent-streams and --max-request-bytes must be positive and sensible")
	}
	// Checked here, before serve writes development certificates into the
	// state directory: a typo must cost nothing.
	if f.backend != "memory" && f.backend != "kubernetes" {
		return usageFail(stderr, "serve", usage, "--backend %q: want memory or kubernetes", f.backend)
	}
	log, err := newLogger(stderr, f.logFormat, f.logLevel)
	if err != nil {
		return usageFail(stderr, "serve", usage, "%v", err)
	}
	defer startHeapFloor(floor, log)()
	return serve(ctx, f, code, log, stdout, stderr)
}

// serve runs the allocator until ctx ends or a listener fails, in named
// steps: certificates, the limits and templates files, the request seed,
// the backend, the metrics registry, forwarding, the service and its
// server, listening (and, on Kubernetes, the cache's first sync), the
// replicas' membership, the file watchers, serving, the announcement,
// and the shutdown.
func serve(ctx context.Context, f serveFlags, unallocated codes.Code, log *slog.Logger, stdout, stderr io.Writer) error {
	applyContainerMemoryLimit(log)
	mode := mtls.ModeFromFlags(f.disableMTLS, f.disableTLS)
	if mode.Insecure() {
		_ = mtls.WriteInsecureWarning(stderr, mode)
		log.Warn("INSECURE mode: for local development only", "mode", mode.String())
	}
	tlsSetup, err := serveTLS(&f, mode, log)
	if err != nil {
		return err
	}
	files, err := openServeFiles(f, tlsSetup.srv)
	if err != nil {
		return err
	}
	seed := requestSeed(f.seed, log)

	runCtx, stopRun := context.WithCancel(context.Background())
	defer stopRun()
	be, err := startBackend(runCtx, &f, seed, log)
	if err != nil {
		return err
	}
	reg, metrics, err := serveRegistry(tlsSetup.srv, be.kube)
	if err != nil {
		return err
	}
	f.multi.keyWindow, f.multi.maxKeys = f.keyWindow, f.maxKeys
	fwd, err := f.multi.start(runCtx, log, reg, unallocated)
	if err != nil {
		return err
	}
	if fwd != nil {
		defer fwd.Close()
	}
	svc, err := allocator.NewService(allocator.Options{
		Backend: be.backend, Limits: files.limits, Logger: log, Metrics: metrics,
		Seed: seed, UnallocatedCode: unallocated, Timeout: f.timeout,
		MultiCluster: multiClusterOf(fwd), Templates: files.templates,
		KeyWindow: f.keyWindow, MaxKeys: f.maxKeys,
	})
	if err != nil {
		return err
	}
	stopTrace, err := f.trace.start(svc, reg, f.multi.clusterName, log)
	if err != nil {
		return err
	}
	defer stopTrace()
	srv, err := newServeServer(f, svc, tlsSetup.srv, reg, log)
	if err != nil {
		return err
	}
	if err := srv.Listen(); err != nil {
		return err
	}
	if be.kube != nil {
		if err := awaitKubeSync(ctx, be.kube, srv, f.syncTimeout, log); err != nil || ctx.Err() != nil {
			return err
		}
	}
	// Only a replica that can serve takes a shard.
	stopMembership, err := startMembership(ctx, f, be.kube, log)
	if err != nil {
		return err
	}
	watchServeFiles(runCtx, f, files, svc, tlsSetup.srv, log)
	srv.Start()
	if err := announceServing(stdout, f, mode, tlsSetup, be, srv, log); err != nil {
		return err
	}
	return awaitShutdown(ctx, f, srv, stopMembership, log)
}

// serveTLSSetup is the server's TLS and where its certificates came from.
type serveTLSSetup struct {
	srv *mtls.Server
	// dev: development certificates made in certDir (no --tls-dir and
	// --client-ca-dir given).
	dev     bool
	certDir string
}

// serveTLS makes the server's TLS: from --tls-dir and --client-ca-dir,
// or from development certificates in the state directory when neither is
// given (f then names them).
func serveTLS(f *serveFlags, mode mtls.Mode, log *slog.Logger) (serveTLSSetup, error) {
	s := serveTLSSetup{
		dev:     f.tlsDir == "" && f.clientCADir == "" && mode != mtls.ModeInsecureDisableTLS,
		certDir: filepath.Join(f.stateDir, "certs"),
	}
	if s.dev {
		hosts := append([]string{"localhost", "127.0.0.1", "::1"}, splitList(f.hosts)...)
		if h, _, err := net.SplitHostPort(f.addr); err == nil && h != "" && h != "0.0.0.0" && h != "::" {
			hosts = append(hosts, h)
		}
		res, err := certs.Generate(certs.GenerateOptions{Dir: s.certDir, Hosts: hosts, Clients: devIdentities, Now: time.Now()})
		if err != nil {
			return s, fmt.Errorf("making development certificates in %s: %w", s.certDir, err)
		}
		f.tlsDir, f.clientCADir = res.Layout.ServerDir(), res.Layout.ClientCADir()
		log.Info("using development certificates", "dir", s.certDir, "identities", devIdentities)
	} else if mode != mtls.ModeInsecureDisableTLS && (f.tlsDir == "" || (mode == mtls.ModeMTLS && f.clientCADir == "")) {
		return s, errors.New("give both --tls-dir and --client-ca-dir (or neither, for development certificates)")
	}
	var err error
	s.srv, err = mtls.NewServer(mtls.ServerOptions{Mode: mode, CertDir: f.tlsDir, ClientCADir: f.clientCADir, Logger: log})
	return s, err
}

// serveFiles are the identity limits (--limits) and game server templates
// (--templates) as first read; both are re-read while serving.
type serveFiles struct {
	limitsFile *allocator.LimitsFile
	limits     *allocator.LimitsConfig
	templates  *allocator.TemplatesConfig
}

// openServeFiles reads --limits and --templates; the limits' client CA
// bindings go to the TLS server.
func openServeFiles(f serveFlags, tlsSrv *mtls.Server) (serveFiles, error) {
	var files serveFiles
	var err error
	if f.limits != "" {
		if files.limitsFile, err = allocator.OpenLimitsFile(f.limits); err != nil {
			return files, err
		}
		files.limits = files.limitsFile.Config
		tlsSrv.SetClientCABindings(files.limits.ClientCABindings())
	}
	if f.templates != "" {
		if files.templates, err = allocator.LoadTemplates(f.templates); err != nil {
			return files, err
		}
	}
	return files, nil
}

// requestSeed is --seed, or one from the clock; it is logged either way,
// so a run's decisions can be replayed.
func requestSeed(seed uint64, log *slog.Logger) uint64 {
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	log.Info("request seeds", "seed", seed)
	return seed
}

// serveBackend is the backend serve allocates from: the memory backend
// with its fleets, or the kubernetes backend (kube set).
type serveBackend struct {
	backend     allocator.Backend
	kube        *kube.Backend
	fleets      *memory.Config // memory only
	fleetSource string         // memory only: the fleets file, or builtinFleetSource
}

// startBackend makes --backend's backend and starts it under ctx. With
// kubernetes, f's multi-cluster flags get its API server and namespace.
func startBackend(ctx context.Context, f *serveFlags, seed uint64, log *slog.Logger) (serveBackend, error) {
	var be serveBackend
	switch f.backend {
	case "memory":
		be.fleets, be.fleetSource = memory.DemoConfig(), builtinFleetSource
		if f.fleets != "" {
			fleets, err := memory.LoadConfig(f.fleets)
			if err != nil {
				return be, err
			}
			be.fleets, be.fleetSource = fleets, f.fleets
		}
		mb := memory.New(be.fleets, memory.Options{Seed: seed})
		go mb.Run(ctx)
		be.backend = mb
	case "kubernetes":
		if f.fleets != "" {
			return be, errors.New("--fleets is for the memory backend; with --backend kubernetes the fleets are Agones' own")
		}
		restCfg, err := kubeRESTConfig(f.kubeconfig)
		if err != nil {
			return be, err
		}
		shard, err := parseReplicaShard(f.replicaShard, f.replicas, os.Hostname)
		if err != nil {
			return be, err
		}
		if f.kubeQPS <= 0 || f.kubeBurst <= 0 {
			return be, fmt.Errorf("--kube-qps and --kube-burst must be positive, got %v and %d", f.kubeQPS, f.kubeBurst)
		}
		kb, err := kube.New(kube.Config{
			REST: restCfg, Namespace: f.kubeNamespace, Logger: log,
			QPS: float32(f.kubeQPS), Burst: f.kubeBurst,
			PackedSpread: f.packedSpread, ReplicaShard: shard, Replicas: f.replicas,
			// Idempotency keys' records beside the replicas' Leases, for
			// as long as the service remembers a key.
			KeyNamespace: f.replica.leaseNamespace, KeyWindow: f.keyWindow,
		})
		if err != nil {
			return be, err
		}
		// The informer lives as long as the process; the wait for its
		// first list comes once /live is served (awaitKubeSync).
		kb.Run(ctx)
		be.backend, be.kube = kb, kb
		f.multi.kubeREST, f.multi.kubeNamespace = restCfg, f.kubeNamespace
		// Every replica reads and moves the same records of where keyed
		// multi-cluster requests went.
		f.multi.placements = kb.Placements()
	default:
		return be, fmt.Errorf("--backend %q is not available (have: memory, kubernetes)", f.backend)
	}
	return be, nil
}

// serveRegistry is the registry /metrics serves: Go's and the process's
// collectors, the allocator's metrics, the TLS server's and the
// kubernetes backend's (kb may be nil).
func serveRegistry(tlsSrv *mtls.Server, kb *kube.Backend) (*prometheus.Registry, *allocator.Metrics, error) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	metrics := allocator.NewMetrics()
	if err := metrics.Register(reg); err != nil {
		return nil, nil, err
	}
	if err := tlsSrv.Register(reg); err != nil {
		return nil, nil, err
	}
	if kb != nil {
		if err := kb.Register(reg); err != nil {
			return nil, nil, err
		}
	}
	return reg, metrics, nil
}

// newServeServer is the gRPC, REST and health server for svc, as the
// flags configure it.
func newServeServer(f serveFlags, svc *allocator.Service, tlsSrv *mtls.Server, reg prometheus.Gatherer, log *slog.Logger) (*allocator.Server, error) {
	return allocator.NewServer(allocator.ServerOptions{
		Service: svc, TLS: tlsSrv, Addr: f.addr, RESTAddr: f.restAddr, HTTPAddr: f.httpAddr,
		Gatherer: reg, Logger: log, MaxRequestBytes: f.maxRequestBytes,
		MaxConcurrentStreams: uint32(f.maxStreams), StreamWorkers: uint32(f.grpcWorkers), DrainDelay: f.drainDelay, Pprof: f.pprof,
	})
}

// watchServeFiles keeps the certificates, the limits and the templates
// current until ctx ends: each change applies without a restart.
func watchServeFiles(ctx context.Context, f serveFlags, files serveFiles, svc *allocator.Service, tlsSrv *mtls.Server, log *slog.Logger) {
	go tlsSrv.Run(ctx)
	if files.limitsFile != nil {
		go files.limitsFile.Watch(ctx, limitsPollInterval, log, func(c *allocator.LimitsConfig) {
			svc.SetLimits(c)
			tlsSrv.SetClientCABindings(c.ClientCABindings())
		})
	}
	if f.templates != "" {
		go allocator.WatchTemplates(ctx, f.templates, limitsPollInterval, log, svc.SetTemplates)
	}
}

// announceServing writes --ready-file, prints the banner and logs the
// addresses being served.
func announceServing(stdout io.Writer, f serveFlags, mode mtls.Mode, tlsSetup serveTLSSetup, be serveBackend, srv *allocator.Server, log *slog.Logger) error {
	grpcAddr, restAddr, httpAddr := srv.Addrs()
	if f.readyFile != "" {
		b, _ := json.Marshal(map[string]string{"grpc": grpcAddr, "rest": restAddr, "http": httpAddr, "certsDir": tlsSetup.certDir})
		if err := certs.WriteFileAtomic(f.readyFile, append(b, '\n'), 0o644); err != nil {
			return fmt.Errorf("--ready-file: %w", err)
		}
	}
	printBanner(stdout, mode, tlsSetup.dev, tlsSetup.certDir, grpcAddr, restAddr, httpAddr, be.fleetSource, be.fleets)
	log.Info("serving", "grpc", grpcAddr, "rest", restAddr, "http", httpAddr, "mode", mode.String(), "backend", f.backend)
	return nil
}

// awaitShutdown serves until ctx ends (a signal) or a listener fails,
// then leaves the membership and shuts the server down: not ready first,
// requests in flight finished within --drain-delay plus
// --shutdown-timeout.
func awaitShutdown(ctx context.Context, f serveFlags, srv *allocator.Server, stopMembership func(), log *slog.Logger) error {
	select {
	case <-ctx.Done():
		log.Info("shutting down: not ready any more; finishing requests in flight", "timeout", f.shutdownWait)
	case err := <-srv.Errors():
		log.Error("shutting down after a listener failed", "err", err)
	}
	stopMembership()
	sctx, cancel := context.WithTimeout(context.Background(), f.shutdownWait+f.drainDelay)
	defer cancel()
	err := srv.Shutdown(sctx)
	log.Info("stopped")
	return err
}

// defaultSyncTimeout bounds the first list of GameServers. A list of 100k
// takes seconds; minutes mean something is wrong, and exiting with the
// reason says more than a probe restarting a silent process.
const defaultSyncTimeout = 5 * time.Minute

// awaitKubeSync serves the health port while the kubernetes backend's first
// list runs (/live answers, /ready does not), and waits for that list under
// the signal context, at most timeout. A signal meanwhile is a clean stop
// (nil, with ctx done); a timeout is an error naming the reason.
func awaitKubeSync(ctx context.Context, kb *kube.Backend, srv *allocator.Server, timeout time.Duration, log *slog.Logger) error {
	srv.StartHealth()
	if _, _, httpAddr := srv.Addrs(); httpAddr != "" {
		log.Info("health port serving while the GameServer cache syncs", "http", httpAddr)
	}
	err := kb.WaitForSync(ctx, timeout)
	if err == nil {
		return nil
	}
	// Nothing but the health port has served: no requests to drain.
	done, cancel := context.WithCancel(context.Background())
	cancel()
	_ = srv.Shutdown(done)
	if ctx.Err() != nil {
		log.Info("stopped before the GameServer cache synced")
		return nil
	}
	return fmt.Errorf("starting the kubernetes backend: %w", err)
}

// limitsPollInterval is how often --limits is re-read for changes.
var limitsPollInterval = 2 * time.Second

// kubeRESTConfig loads the API server connection: the kubeconfig given,
// else $KUBECONFIG, else the in-cluster service account.
func kubeRESTConfig(path string) (*rest.Config, error) {
	if path == "" {
		path = os.Getenv("KUBECONFIG")
	}
	if path == "" {
		cfg, err := rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("no --kubeconfig or $KUBECONFIG, and not in a cluster: %w", err)
		}
		return cfg, nil
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		return nil, fmt.Errorf("kubeconfig %s: %w", path, err)
	}
	return cfg, nil
}

// clientHost is how a client on this machine reaches addr.
func clientHost(addr string) string {
	h, p, err := net.SplitHostPort(addr)
	if err != nil {
		return addr
	}
	if ip := net.ParseIP(h); h == "" || (ip != nil && ip.IsUnspecified()) || h == "127.0.0.1" || h == "::1" {
		h = "localhost"
	}
	return net.JoinHostPort(h, p)
}

func printBanner(w io.Writer, mode mtls.Mode, dev bool, certDir, grpcAddr, restAddr, httpAddr, fleetSource string, fleets *memory.Config) {
	fmt.Fprintf(w, "quartermaster allocator (%s)\n", mode)
	if grpcAddr == restAddr {
		fmt.Fprintf(w, "  gRPC + REST  %s\n", grpcAddr)
	} else {
		fmt.Fprintf(w, "  gRPC         %s\n  REST         %s\n", grpcAddr, restAddr)
	}
	if httpAddr != "" {
		fmt.Fprintf(w, "  health       http://%s/live  /ready  /metrics\n", clientHost(httpAddr))
	}
	if fleets != nil {
		fmt.Fprintf(w, "  backend      memory, %s:", fleetSource)
		for _, fl := range fleets.Fleets {
			fmt.Fprintf(w, " %s/%s×%d", fl.Namespace, fl.Name, fl.Replicas)
		}
		fmt.Fprintln(w)
	} else {
		fmt.Fprintln(w, "  backend      kubernetes (Agones GameServers)")
	}
	self, _ := os.Executable()
	qm := "qm"
	if self != "" && filepath.Base(self) == "qm" {
		if rel, err := filepath.Rel(mustGetwd(), self); err == nil && !strings.HasPrefix(rel, "..") {
			qm = "./" + rel
		}
	}
	certFlags := ""
	switch {
	case mode == mtls.ModeInsecureDisableTLS:
		certFlags = " --insecure"
	case dev && mode == mtls.ModeMTLS:
		certFlags = fmt.Sprintf(" --certs-dir %s --identity dev", certDir)
	case dev:
		certFlags = fmt.Sprintf(" --cacert %s", certs.Layout{Dir: certDir}.CACert())
	default:
		certFlags = " --cert CLIENT.crt --key CLIENT.key --cacert CA.crt"
	}
	fmt.Fprintf(w, "\nallocate with:\n  %s allocate --addr %s%s\n", qm, clientHost(grpcAddr), certFlags)
	// The selector example only fits the built-in demo fleets; elsewhere
	// show the plainest request (any Ready server in "default").
	example := ""
	if fleets != nil && fleetSource == builtinFleetSource {
		example = " --selector mode=lobby --counter rooms=Increment:1"
	}
	fmt.Fprintf(w, "  %s allocate --rest --addr %s%s%s\n", qm, clientHost(restAddr), certFlags, example)
	if dev && mode == mtls.ModeMTLS {
		l := certs.Layout{Dir: certDir}
		fmt.Fprintf(w, "  curl --cert %s --key %s --cacert %s \\\n    -d '{\"namespace\":\"default\"}' https://%s%s\n",
			l.ClientCert("dev"), l.ClientKey("dev"), l.CACert(), clientHost(restAddr), allocator.AllocatePath)
	}
	fmt.Fprintln(w)
}

func mustGetwd() string {
	wd, _ := os.Getwd()
	return wd
}

// defaultStateDir is where `qm serve` and `qm allocate` keep and find the
// development certificates, so that the two agree without flags.
func defaultStateDir() string {
	if d := os.Getenv("QM_STATE_DIR"); d != "" {
		return d
	}
	if d := os.Getenv("XDG_STATE_HOME"); d != "" {
		return filepath.Join(d, "quartermaster")
	}
	if h, err := os.UserHomeDir(); err == nil {
		return filepath.Join(h, ".local", "state", "quartermaster")
	}
	return ".state"
}

func newLogger(w io.Writer, format, level string) (*slog.Logger, error) {
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: lv}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	}
	return nil, fmt.Errorf("--log-format %q: want text or json", format)
}

// camelToSnake turns ResourceExhausted into RESOURCE_EXHAUSTED's lower form
// so both spellings of a code name are accepted.
func camelToSnake(s string) string {
	if strings.Contains(s, "_") {
		return s
	}
	var b strings.Builder
	for i, r := range s {
		if i > 0 && r >= 'A' && r <= 'Z' {
			b.WriteByte('_')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// parseReplicaShard reads --replica-shard: empty (no shard), a number below
// replicas, or "hostname" for a StatefulSet pod's ordinal (name-N).
func parseReplicaShard(v string, replicas int, hostname func() (string, error)) (int, error) {
	if v == "" {
		return 0, nil
	}
	if replicas < 2 {
		return 0, fmt.Errorf("--replica-shard needs --replicas of 2 or more, got %d", replicas)
	}
	src := v
	if v == "hostname" {
		h, err := hostname()
		if err != nil {
			return 0, fmt.Errorf("--replica-shard hostname: %w", err)
		}
		i := strings.LastIndexByte(h, '-')
		if i < 0 {
			return 0, fmt.Errorf("--replica-shard hostname: %q has no -N ordinal suffix (run as a StatefulSet, or give the number)", h)
		}
		src = h[i+1:]
	}
	n, err := strconv.Atoi(src)
	if err != nil || n < 0 || n >= replicas {
		return 0, fmt.Errorf("--replica-shard %q: want a number from 0 to %d", src, replicas-1)
	}
	return n, nil
}

// builtinFleetSource names the demo fleets in the banner.
const builtinFleetSource = "built-in demo fleets"
