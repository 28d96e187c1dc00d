package allocator

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/keepalive"

	"github.com/quartermaster-dev/quartermaster/allocator/forward"
	"github.com/quartermaster-dev/quartermaster/allocator/mtls"
	"github.com/quartermaster-dev/quartermaster/allocator/pb/allocation"
)

// Defaults for ServerOptions.
const (
	DefaultMaxConcurrentStreams = 1024
	DefaultShutdownTimeout      = 25 * time.Second
)

// ServerOptions configure a Server.
type ServerOptions struct {
	Service *Service
	TLS     *mtls.Server
	// Addr serves gRPC, and REST too unless RESTAddr is set.
	Addr string
	// RESTAddr, when set, serves REST on a port of its own.
	RESTAddr string
	// HTTPAddr serves /live, /ready and /metrics in plain HTTP; none when
	// empty.
	HTTPAddr string
	// Gatherer for /metrics; nothing is served there when nil.
	Gatherer prometheus.Gatherer
	Logger   *slog.Logger
	// MaxRequestBytes bounds a request message or body.
	MaxRequestBytes int
	// MaxConcurrentStreams bounds the requests in flight on one connection.
	MaxConcurrentStreams uint32
	// StreamWorkers is how many request goroutines the gRPC server keeps
	// between requests; 0 for the default (streamWorkers).
	StreamWorkers uint32
	// DrainDelay is how long Shutdown keeps serving after readiness turns
	// false, so load balancers stop sending before connections close.
	DrainDelay time.Duration
	// Pprof serves net/http/pprof under /debug/pprof/ on HTTPAddr, and
	// records mutex and blocking events (a fraction, see EnableProfiling)
	// so those profiles have something in them. Off by default: the
	// health port is plain HTTP, and profiles tell a reader much about
	// the process.
	Pprof bool
}

// Server runs the service's listeners: gRPC and REST (one shared port or
// two) with TLS, and the plain-HTTP health and metrics port.
type Server struct {
	opts  ServerOptions
	log   *slog.Logger
	grpc  *grpc.Server
	rest  *http.Server
	ops   *http.Server
	hs    *health.Server
	split *splitter

	ln, restLn, opsLn net.Listener
	ready             atomic.Bool
	errs              chan error
	shutdownOnce      sync.Once
	healthOnce        sync.Once
}

// NewServer builds a Server; Listen binds it, Serve runs it.
func NewServer(o ServerOptions) (*Server, error) {
	if o.Service == nil || o.TLS == nil {
		return nil, errors.New("allocator: a server needs a service and a TLS configuration")
	}
	if o.MaxRequestBytes <= 0 {
		o.MaxRequestBytes = DefaultMaxRequestBytes
	}
	if o.MaxConcurrentStreams == 0 {
		o.MaxConcurrentStreams = DefaultMaxConcurrentStreams
	}
	s := &Server{opts: o, log: o.Logger, errs: make(chan error, 4)}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	creds := o.TLS.GRPCCredentials()
	if o.RESTAddr == "" && o.TLS.Mode() != mtls.ModeInsecureDisableTLS {
		// The splitter does the handshake on the shared port.
		creds = mtls.HandshakenCredentials()
	}
	s.grpc = newGRPCServer(creds, o, s.log)
	registerGRPCServer(s.grpc, o.Service, o.TLS)
	s.hs = health.NewServer()
	healthpb.RegisterHealthServer(s.grpc, s.hs)
	s.hs.SetServingStatus("", healthpb.HealthCheckResponse_NOT_SERVING)
	s.hs.SetServingStatus(allocation.AllocationService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_NOT_SERVING)

	rh := &restHandler{svc: o.Service, tls: o.TLS, maxBytes: int64(o.MaxRequestBytes), log: s.log}
	s.rest = &http.Server{
		Handler:           rh,
		ReadHeaderTimeout: 10 * time.Second,
		// A request body trickled in slowly must not hold a connection
		// for ever; real ones are a few hundred bytes.
		ReadTimeout:    30 * time.Second,
		IdleTimeout:    5 * time.Minute,
		MaxHeaderBytes: 64 << 10,
		ErrorLog:       slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
		HTTP2:          &http.HTTP2Config{MaxConcurrentStreams: int(o.MaxConcurrentStreams)},
	}
	if o.RESTAddr == "" {
		// Connections reach it from the splitter with TLS already done;
		// HTTP/2 on them is "unencrypted" as far as net/http knows.
		var p http.Protocols
		p.SetHTTP1(true)
		p.SetUnencryptedHTTP2(true)
		s.rest.Protocols = &p
		s.rest.ConnContext = func(ctx context.Context, c net.Conn) context.Context {
			if rc, ok := c.(*restConn); ok && rc.state != nil {
				return withConnTLS(ctx, *rc.state)
			}
			return ctx
		}
	} else {
		s.rest.TLSConfig = o.TLS.TLSConfig()
	}

	mux := http.NewServeMux()
	mux.HandleFunc("/live", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		fmt.Fprintln(w, "ok")
	})
	mux.HandleFunc("/ready", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		if !s.Ready() {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintln(w, "not ready")
			return
		}
		fmt.Fprintln(w, "ok")
	})
	if o.Gatherer != nil {
		mux.Handle("/metrics", promhttp.HandlerFor(o.Gatherer, promhttp.HandlerOpts{ErrorLog: slog.NewLogLogger(s.log.Handler(), slog.LevelWarn)}))
	}
	if o.Pprof {
		EnableProfiling()
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	s.ops = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	return s, nil
}

// Sampling rates EnableProfiling sets: one mutex contention event in
// MutexProfileFraction, and blocking events of about BlockProfileRate ns.
// Coarse enough that profiling under load costs little.
const (
	MutexProfileFraction = 100
	BlockProfileRate     = 10000
)

// EnableProfiling turns on the runtime's mutex and block profiles, process
// wide (the runtime has one setting each).
func EnableProfiling() {
	runtime.SetMutexProfileFraction(MutexProfileFraction)
	runtime.SetBlockProfileRate(BlockProfileRate)
}

func newGRPCServer(creds credentials.TransportCredentials, o ServerOptions, log *slog.Logger) *grpc.Server {
	return grpc.NewServer(
		grpc.Creds(creds),
		grpc.MaxRecvMsgSize(o.MaxRequestBytes),
		grpc.MaxConcurrentStreams(o.MaxConcurrentStreams),
		grpc.ChainUnaryInterceptor(recoverUnary(log)),
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{MinTime: 10 * time.Second, PermitWithoutStream: true}),
		// Fixed flow-control windows: grpc-go's dynamic ones estimate the
		// link with a PING after each DATA frame received while none is
		// out, so with one caller every request would cost a
		// WINDOW_UPDATE, a PING and its ACK besides the answer (two more
		// writes here, a read and a write at the caller). The forwarder's connections use
		// the same windows.
		grpc.InitialWindowSize(forward.StreamWindowBytes),
		grpc.InitialConnWindowSize(forward.ConnWindowBytes),
		// A goroutine per request starts with a small stack and grows it
		// (copying) on the way down through TLS, gRPC, the service and the
		// core, a large share of the server's CPU under load. Workers keep
		// their grown stacks; when all are busy grpc-go starts a goroutine
		// per request.
		grpc.NumStreamWorkers(cmp.Or(o.StreamWorkers, streamWorkers())),
		grpc.ForceServerCodecV2(newServerCodec(o.Service)),
	)
}

// streamWorkers is how many request goroutines the gRPC server keeps. A
// request holds one from its headers until its answer is written, and
// waits for its message in between, so as many are busy as requests are in
// flight, not as CPUs are: requests beyond the workers go to fresh
// goroutines, which grow their stacks again. A parked worker costs only its
// stack (the GC shrinks idle ones). That shrinking is what a worker count
// costs a lone request: grpc-go hands it to the longest-idle worker, whose
// stack has been shrunk meanwhile and grows again;
// ServerOptions.StreamWorkers lowers the count for an allocator that mostly
// sees one request at a time.
func streamWorkers() uint32 { return uint32(max(32*runtime.GOMAXPROCS(0), 256)) }

// Listen binds the addresses. Use ":0" ports to let the system choose, then
// read them from Addrs.
func (s *Server) Listen() error {
	var err error
	if s.ln, err = net.Listen("tcp", s.opts.Addr); err != nil {
		return fmt.Errorf("listen on %s: %w", s.opts.Addr, err)
	}
	if s.opts.RESTAddr != "" {
		if s.restLn, err = net.Listen("tcp", s.opts.RESTAddr); err != nil {
			s.ln.Close()
			return fmt.Errorf("listen on %s: %w", s.opts.RESTAddr, err)
		}
	}
	if s.opts.HTTPAddr != "" {
		if s.opsLn, err = net.Listen("tcp", s.opts.HTTPAddr); err != nil {
			s.ln.Close()
			if s.restLn != nil {
				s.restLn.Close()
			}
			return fmt.Errorf("listen on %s: %w", s.opts.HTTPAddr, err)
		}
	}
	return nil
}

// Addrs are the bound addresses: gRPC, REST (the same as gRPC on a shared
// port) and the health port ("" when not served).
func (s *Server) Addrs() (grpcAddr, restAddr, httpAddr string) {
	grpcAddr, restAddr = s.ln.Addr().String(), s.ln.Addr().String()
	if s.restLn != nil {
		restAddr = s.restLn.Addr().String()
	}
	if s.opsLn != nil {
		httpAddr = s.opsLn.Addr().String()
	}
	return
}

// Ready reports whether the server takes requests: started, not shutting
// down, and its backend in sync.
func (s *Server) Ready() bool { return s.ready.Load() && s.opts.Service.Backend().Ready() }

// StartHealth serves /live, /ready (not ready until Start) and /metrics
// alone, so that a probe sees a live process while the backend is still
// syncing. Start calls it too; calling it first is optional.
func (s *Server) StartHealth() {
	s.healthOnce.Do(func() {
		if s.opsLn != nil {
			go s.run("health", func() error { return s.ops.Serve(s.opsLn) })
		}
	})
}

// Start serves on the bound listeners in the background and marks the
// server ready.
func (s *Server) Start() {
	s.StartHealth()
	switch {
	case s.restLn != nil:
		go s.run("grpc", func() error { return s.grpc.Serve(s.ln) })
		go s.run("rest", func() error {
			if s.rest.TLSConfig == nil {
				return s.rest.Serve(s.restLn)
			}
			return s.rest.ServeTLS(s.restLn, "", "")
		})
	case s.opts.TLS.Mode() == mtls.ModeInsecureDisableTLS:
		s.split = newSplitter(s.ln, nil, nil, s.log)
	default:
		s.split = newSplitter(s.ln, s.opts.TLS.TLSConfig(), s.opts.TLS.Track, s.log)
	}
	if s.split != nil {
		go s.split.serve()
		go s.run("grpc", func() error { return s.grpc.Serve(s.split.grpc) })
		go s.run("rest", func() error { return s.rest.Serve(s.split.rest) })
	}
	s.ready.Store(true)
	s.hs.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	s.hs.SetServingStatus(allocation.AllocationService_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
}

func (s *Server) run(name string, serve func() error) {
	err := serve()
	if err != nil && !errors.Is(err, http.ErrServerClosed) && !errors.Is(err, net.ErrClosed) && !errors.Is(err, grpc.ErrServerStopped) {
		s.log.Error("listener failed", "listener", name, "err", err)
		select {
		case s.errs <- fmt.Errorf("%s: %w", name, err):
		default:
		}
	}
}

// Errors delivers a listener's failure, for the caller to shut down on.
func (s *Server) Errors() <-chan error { return s.errs }

// Shutdown stops gracefully: readiness goes false, new connections are
// refused after DrainDelay, requests in flight finish, then it returns. When
// ctx ends first, what is left is cut off.
func (s *Server) Shutdown(ctx context.Context) error {
	var err error
	s.shutdownOnce.Do(func() { err = s.shutdown(ctx) })
	return err
}

func (s *Server) shutdown(ctx context.Context) error {
	s.ready.Store(false)
	s.hs.Shutdown() // every service NOT_SERVING
	if d := s.opts.DrainDelay; d > 0 {
		select {
		case <-time.After(d):
		case <-ctx.Done():
		}
	}
	if s.split != nil {
		// Routing ends before the servers stop, so no connection is
		// handed to a server that has stopped accepting.
		s.split.close()
	}
	var wg sync.WaitGroup
	var restErr error
	wg.Add(2)
	go func() {
		defer wg.Done()
		done := make(chan struct{})
		go func() { s.grpc.GracefulStop(); close(done) }()
		select {
		case <-done:
		case <-ctx.Done():
			s.grpc.Stop()
			<-done
		}
	}()
	go func() {
		defer wg.Done()
		if restErr = s.rest.Shutdown(ctx); restErr != nil {
			s.rest.Close()
		}
	}()
	wg.Wait()
	if s.ln != nil && s.split == nil {
		s.ln.Close()
	}
	if s.restLn != nil {
		s.restLn.Close() // never served when Start was not called
	}
	// The health port goes last: /ready answers "not ready" until the end.
	opsErr := s.ops.Shutdown(ctx)
	if opsErr != nil {
		s.ops.Close()
	}
	if s.opsLn != nil {
		s.opsLn.Close() // never served when neither Start nor StartHealth ran
	}
	return errors.Join(restErr, opsErr)
}
