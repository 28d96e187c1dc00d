package allocator_test

// Speed: the service against its own ceiling, measured in one run.
//
// The ceiling is an "echo" gRPC server: the same AllocationService API, the
// same mTLS, the same grpc-go options, answering every call with a canned
// AllocationResponse of the size a real one has, so it costs exactly the
// transport and no allocation. Client and server share the machine's cores,
// as with the third-party load tool the targets were first measured with.
//
//	go test -run '^$' -bench 'ClosedLoop' -benchtime 1x ./allocator/
//	go test -run '^$' -bench 'OpenLoop' -benchtime 1x ./allocator/
//	go test -run '^$' -bench 'Lone' ./allocator/
//
// Other builds may load the machine while a benchmark runs, so the targets
// are measured interleaved: short slices of each target in turn, rotated,
// over several rounds, so slow drifts in background load hit all of them
// alike and the ratios stay meaningful.
//
// BenchmarkClosedLoop: 64 concurrent callers on one connection, for echo,
// allocate on the shared gRPC+REST port and allocate on a gRPC port of its
// own; req/s and p50/p99 of each, and the ratios alloc/echo (target >= 0.7)
// and shared/own (target >= 0.9). BenchmarkOpenLoop: a fixed rate, half the
// allocate closed-loop throughput (measured first), latency from each
// call's intended send time; target alloc p99 <= 1.5x echo p99.
// BenchmarkLone: one caller, one call at a time, on an idle server.

import (
	"context"
	"flag"
	"net"
	"net/http"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/quartermaster-dev/quartermaster/allocator"
	"github.com/quartermaster-dev/quartermaster/allocator/memory"
	"github.com/quartermaster-dev/quartermaster/allocator/mtls"
	"github.com/quartermaster-dev/quartermaster/allocator/pb/allocation"
)

var (
	benchCallers  = flag.Int("bench.callers", 64, "concurrent callers in the closed-loop benchmarks")
	benchConns    = flag.Int("bench.conns", 1, "client connections the callers share")
	benchSlice    = flag.Duration("bench.slice", 300*time.Millisecond, "length of one closed-loop measurement slice")
	benchRounds   = flag.Int("bench.rounds", 8, "rounds of slices per target")
	benchOpenFor  = flag.Duration("bench.open", time.Second, "length of one open-loop slice")
	benchOpenRate = flag.Float64("bench.rate", 0, "open-loop rate in req/s (0: half the closed-loop allocate throughput)")
)

// benchFleet is large enough for a measurement slice; between slices (off
// the clock) the allocated servers are released and replaced, so the
// fleet-controller work of a steady state does not count against the
// allocator.
const benchFleet = `
apiVersion: quartermaster.dev/v1alpha1
kind: Fleets
nodes: 64
fleets:
- name: bench
  replicas: 30000
  labels: {mode: bench}
`

var benchRequest = &allocation.AllocationRequest{
	Namespace: "default",
	GameServerSelectors: []*allocation.GameServerSelector{
		{MatchLabels: map[string]string{"agones.dev/fleet": "bench"}},
	},
}

type benchEnv struct {
	pki                *pki
	echoAddr           string
	sharedAddr, ownAdd string
	serveHTTPAddr      string // the alternative not taken: grpc-go's ServeHTTP
	backends           []*memory.Backend
	taken              atomic.Int64 // allocations since the last refill, at most
	stop               []func()
}

// refill gives every allocated server back and refills the fleets, when
// enough have been taken since the last time that a slice might run out.
func (e *benchEnv) refill() {
	if e.taken.Load() < 20000 {
		return
	}
	e.taken.Store(0)
	for _, b := range e.backends {
		for _, gs := range b.Allocated() {
			_, _ = b.Release(context.Background(), gs.Key(), "")
		}
		b.Step()
	}
}

var (
	benchOnce sync.Once
	theBench  *benchEnv
	results   sync.Map // name → float64 req/s, for ratios across sub-benchmarks
)

// echoServer is the ceiling: the allocation API answering from a canned
// response.
type echoServer struct {
	allocation.UnimplementedAllocationServiceServer
	resp *allocation.AllocationResponse
}

func (e *echoServer) Allocate(context.Context, *allocation.AllocationRequest) (*allocation.AllocationResponse, error) {
	return e.resp, nil
}

func setupBench(b *testing.B) *benchEnv {
	benchOnce.Do(func() {
		env := &benchEnv{pki: newPKI(b)}
		start := func(restAddr string) (string, *allocation.AllocationResponse) {
			tlsSrv, err := mtls.NewServer(mtls.ServerOptions{CertDir: env.pki.certDir, ClientCADir: env.pki.clientCA, PollInterval: time.Hour})
			if err != nil {
				b.Fatal(err)
			}
			cfg, err := memory.ParseConfig([]byte(benchFleet))
			if err != nil {
				b.Fatal(err)
			}
			backend := memory.New(cfg, memory.Options{Seed: 1})
			env.backends = append(env.backends, backend)
			svc, err := allocator.NewService(allocator.Options{Backend: backend})
			if err != nil {
				b.Fatal(err)
			}
			srv, err := allocator.NewServer(allocator.ServerOptions{Service: svc, TLS: tlsSrv, Addr: "127.0.0.1:0", RESTAddr: restAddr})
			if err != nil {
				b.Fatal(err)
			}
			if err := srv.Listen(); err != nil {
				b.Fatal(err)
			}
			srv.Start()
			env.stop = append(env.stop, func() { _ = srv.Shutdown(context.Background()) })
			addr, _, _ := srv.Addrs()
			// A real answer, to give the echo the same response size.
			resp, err := svc.Allocate(context.Background(), "dev", benchRequest)
			if err != nil {
				b.Fatal(err)
			}
			return addr, resp
		}
		var resp *allocation.AllocationResponse
		env.sharedAddr, resp = start("")
		env.ownAdd, _ = start("127.0.0.1:0")
		env.serveHTTPAddr = startServeHTTP(b, env)

		tlsSrv, err := mtls.NewServer(mtls.ServerOptions{CertDir: env.pki.certDir, ClientCADir: env.pki.clientCA, PollInterval: time.Hour})
		if err != nil {
			b.Fatal(err)
		}
		echo := grpc.NewServer(grpc.Creds(tlsSrv.GRPCCredentials()), grpc.MaxConcurrentStreams(allocator.DefaultMaxConcurrentStreams))
		allocation.RegisterAllocationServiceServer(echo, &echoServer{resp: resp})
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			b.Fatal(err)
		}
		go echo.Serve(ln)
		env.echoAddr = ln.Addr().String()
		env.stop = append(env.stop, echo.Stop)
		theBench = env
	})
	if theBench == nil {
		b.Fatal("benchmark setup failed earlier")
	}
	return theBench
}

// clients opens n connections to addr, each with the "dev" identity.
func (e *benchEnv) clients(b *testing.B, addr string, n int) []allocation.AllocationServiceClient {
	cfg := e.pki.client(b, "dev", nil, nil)
	out := make([]allocation.AllocationServiceClient, n)
	for i := range out {
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { conn.Close() })
		c := allocation.NewAllocationServiceClient(conn)
		// Connect and warm up before the clock starts.
		for range 50 {
			if _, err := c.Allocate(context.Background(), benchRequest); err != nil {
				b.Fatal(err)
			}
		}
		out[i] = c
	}
	return out
}

// latencies is a fixed-size, allocation-free record of call durations.
type latencies struct {
	d []time.Duration
	n atomic.Int64
}

func newLatencies(n int) *latencies { return &latencies{d: make([]time.Duration, n)} }

func (l *latencies) add(d time.Duration) {
	if i := l.n.Add(1) - 1; int(i) < len(l.d) {
		l.d[i] = d
	}
}

func (l *latencies) quantile(q float64) time.Duration {
	n := min(int(l.n.Load()), len(l.d))
	if n == 0 {
		return 0
	}
	s := append([]time.Duration(nil), l.d[:n]...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[min(int(q*float64(n)), n-1)]
}

// slice runs callers goroutines in a closed loop for d and records each
// call's latency; it returns the calls completed.
func slice(b *testing.B, cs []allocation.AllocationServiceClient, callers int, d time.Duration, lat *latencies) int64 {
	var done, failed atomic.Int64
	var stop atomic.Bool
	var wg sync.WaitGroup
	for i := range callers {
		c := cs[i%len(cs)]
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := context.Background()
			for !stop.Load() {
				t0 := time.Now()
				if _, err := c.Allocate(ctx, benchRequest); err != nil {
					failed.Add(1)
				}
				lat.add(time.Since(t0))
				done.Add(1)
			}
		}()
	}
	time.Sleep(d)
	stop.Store(true)
	wg.Wait()
	if f := failed.Load(); f > 0 {
		b.Fatalf("%d of %d calls failed", f, done.Load())
	}
	return done.Load()
}

type target struct {
	name    string
	clients []allocation.AllocationServiceClient
	calls   int64
	elapsed time.Duration
	lat     *latencies
}

func BenchmarkClosedLoop(b *testing.B) {
	env := setupBench(b)
	ts := []*target{
		{name: "echo", clients: env.clients(b, env.echoAddr, *benchConns)},
		{name: "shared", clients: env.clients(b, env.sharedAddr, *benchConns)},
		{name: "own", clients: env.clients(b, env.ownAdd, *benchConns)},
		{name: "servehttp", clients: env.clients(b, env.serveHTTPAddr, *benchConns)},
	}
	for _, t := range ts {
		t.lat = newLatencies(4 << 20)
	}
	// Per-round ratios: each compares slices run next to each other, so
	// their median shrugs off a burst of background load in one round.
	var allocEcho, sharedOwn []float64
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		for r := range *benchRounds {
			round := map[string]float64{}
			for i := range ts {
				t := ts[(i+r)%len(ts)] // rotate who goes first
				b.StopTimer()
				env.refill()
				runtime.GC()
				b.StartTimer()
				t0 := time.Now()
				n := slice(b, t.clients, *benchCallers, *benchSlice, t.lat)
				d := time.Since(t0)
				t.calls += n
				t.elapsed += d
				env.taken.Add(n)
				round[t.name] = float64(n) / d.Seconds()
			}
			allocEcho = append(allocEcho, round["shared"]/round["echo"])
			sharedOwn = append(sharedOwn, round["shared"]/round["own"])
		}
	}
	b.ReportMetric(median(allocEcho), "alloc/echo-median")
	b.ReportMetric(median(sharedOwn), "shared/own-median")
	rate := map[string]float64{}
	for _, t := range ts {
		rate[t.name] = float64(t.calls) / t.elapsed.Seconds()
		b.ReportMetric(rate[t.name], t.name+"-req/s")
		b.ReportMetric(float64(t.lat.quantile(0.5).Microseconds()), t.name+"-p50-µs")
		b.ReportMetric(float64(t.lat.quantile(0.99).Microseconds()), t.name+"-p99-µs")
	}
	b.ReportMetric(rate["shared"]/rate["echo"], "alloc/echo")
	b.ReportMetric(rate["shared"]/rate["own"], "shared/own")
	b.ReportMetric(rate["servehttp"]/rate["own"], "servehttp/own")
	results.Store("alloc", rate["shared"])
}

// openLoop sends at rate for d, each call in its own goroutine, and
// returns latencies measured from each call's intended send time, so a
// slow server cannot hide its queueing (no coordinated omission).
func openLoop(b *testing.B, c allocation.AllocationServiceClient, rate float64, d time.Duration) (*latencies, int64) {
	n := int(rate * d.Seconds())
	lat := newLatencies(n)
	var failed atomic.Int64
	var wg sync.WaitGroup
	interval := time.Duration(float64(time.Second) / rate)
	start := time.Now()
	for i := range n {
		intended := start.Add(time.Duration(i) * interval)
		if w := time.Until(intended); w > 0 {
			time.Sleep(w)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := c.Allocate(context.Background(), benchRequest); err != nil {
				failed.Add(1)
			}
			lat.add(time.Since(intended))
		}()
	}
	wg.Wait()
	return lat, failed.Load()
}

func BenchmarkOpenLoop(b *testing.B) {
	env := setupBench(b)
	echo := env.clients(b, env.echoAddr, 1)[0]
	alloc := env.clients(b, env.sharedAddr, 1)[0]
	rate := *benchOpenRate
	if rate == 0 {
		if r, ok := results.Load("alloc"); ok {
			rate = r.(float64) / 2
		} else {
			// Half the allocate throughput, measured now, closed loop.
			lat := newLatencies(1 << 20)
			var calls int64
			t0 := time.Now()
			for range 4 {
				env.refill()
				n := slice(b, []allocation.AllocationServiceClient{alloc}, *benchCallers, *benchSlice, lat)
				calls += n
				env.taken.Add(n)
			}
			rate = float64(calls) / time.Since(t0).Seconds() / 2
		}
	}
	b.ResetTimer()
	for range b.N {
		all := [2]*latencies{newLatencies(1 << 22), newLatencies(1 << 22)}
		var ratios []float64
		for r := range *benchRounds / 2 {
			var p99 [2]time.Duration
			for i := range 2 {
				i := (i + r) % 2
				b.StopTimer()
				env.refill()
				runtime.GC()
				b.StartTimer()
				lat, failed := openLoop(b, []allocation.AllocationServiceClient{echo, alloc}[i], rate, *benchOpenFor)
				env.taken.Add(lat.n.Load())
				if failed > 0 {
					b.Fatalf("%d calls failed", failed)
				}
				for _, d := range lat.d[:min(int(lat.n.Load()), len(lat.d))] {
					all[i].add(d)
				}
				p99[i] = lat.quantile(0.99)
			}
			ratios = append(ratios, float64(p99[1])/float64(p99[0]))
		}
		b.ReportMetric(median(ratios), "p99-x-echo-median")
		for i, name := range []string{"echo", "alloc"} {
			b.ReportMetric(float64(all[i].quantile(0.5).Microseconds()), name+"-p50-µs")
			b.ReportMetric(float64(all[i].quantile(0.99).Microseconds()), name+"-p99-µs")
		}
		b.ReportMetric(rate, "req/s")
		b.ReportMetric(float64(all[1].quantile(0.99))/float64(all[0].quantile(0.99)), "p99-x-echo")
	}
}

func BenchmarkLone(b *testing.B) {
	env := setupBench(b)
	for _, c := range []struct{ name, addr string }{{"echo", env.echoAddr}, {"allocate", env.sharedAddr}} {
		b.Run(c.name, func(b *testing.B) {
			client := env.clients(b, c.addr, 1)[0]
			lat := newLatencies(b.N)
			b.ReportAllocs()
			b.ResetTimer()
			for i := range b.N {
				if i%10000 == 0 {
					b.StopTimer()
					env.taken.Add(10000)
					env.refill()
					b.StartTimer()
				}
				t0 := time.Now()
				if _, err := client.Allocate(context.Background(), benchRequest); err != nil {
					b.Fatal(err)
				}
				lat.add(time.Since(t0))
			}
			b.ReportMetric(float64(lat.quantile(0.5).Microseconds()), "p50-µs")
			b.ReportMetric(float64(lat.quantile(0.99).Microseconds()), "p99-µs")
		})
	}
}

// startServeHTTP serves the allocator the way Agones shares its port: one
// net/http server with TLS, gRPC requests handed to grpc.Server.ServeHTTP.
// It is here to measure the alternative the splitter avoids.
func startServeHTTP(b *testing.B, env *benchEnv) string {
	tlsSrv, err := mtls.NewServer(mtls.ServerOptions{CertDir: env.pki.certDir, ClientCADir: env.pki.clientCA, PollInterval: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	cfg, err := memory.ParseConfig([]byte(benchFleet))
	if err != nil {
		b.Fatal(err)
	}
	backend := memory.New(cfg, memory.Options{Seed: 1})
	env.backends = append(env.backends, backend)
	svc, err := allocator.NewService(allocator.Options{Backend: backend})
	if err != nil {
		b.Fatal(err)
	}
	gs := grpc.NewServer()
	allocator.RegisterGRPC(gs, svc, tlsSrv)
	rest := allocator.NewRESTHandler(svc, tlsSrv, 0, nil)
	hs := &http.Server{
		TLSConfig: tlsSrv.TLSConfig(),
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.ProtoMajor == 2 && strings.HasPrefix(r.Header.Get("Content-Type"), "application/grpc") {
				gs.ServeHTTP(w, r)
				return
			}
			rest.ServeHTTP(w, r)
		}),
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go hs.ServeTLS(ln, "", "")
	env.stop = append(env.stop, func() { hs.Close() })
	return ln.Addr().String()
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	return s[len(s)/2]
}
