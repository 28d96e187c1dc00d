package forward_test

// Speed of forwarding, each figure against a reference measured in the same
// run, interleaved (short slices of each target in turn, rotated, over
// several rounds) so that background load on a shared machine hits both
// alike; medians of the per-round ratios are the headline figures.
//
//	go test -run '^$' -bench 'Forward' -benchtime 1x ./allocator/forward/
//	# -args -fwdbench.rounds 8 -fwdbench.slice 300ms -fwdbench.callers 64
//
// BenchmarkForwardThroughput: 64 callers on one connection, either to the
// remote allocator directly or to an entry allocator whose only policy
// forwards there. Target: forwarded/direct >= 0.8.
//
// BenchmarkForwardLone: one caller, one call at a time: direct p50,
// forwarded p50, and one mTLS round trip (an echo server answering the
// forwarded request with a canned copy of a real response, over the same
// mTLS: the transport an extra hop costs, with no work behind it). Target:
// forwarded p50 <= direct p50 + round-trip p50.
//
// BenchmarkForwardBreakerOpen: an entry allocator whose first policy points
// at a remote that accepts connections and never answers, its breaker
// open, and whose second is its own fleet: multi-cluster requests fall
// through to the local fleet; the reference is the same allocator serving
// the same request without multi-cluster. Target: fall-through p99 <= 2x
// direct p99 (Agones waits for its remote timeout on every such request).

import (
	"context"
	"flag"
	"net"
	"runtime"
	"sort"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/quartermaster-dev/quartermaster/allocator/forward"
	"github.com/quartermaster-dev/quartermaster/allocator/mtls"
	"github.com/quartermaster-dev/quartermaster/allocator/pb/allocation"
	"github.com/quartermaster-dev/quartermaster/core"
)

var (
	fwdRounds  = flag.Int("fwdbench.rounds", 8, "rounds of interleaved slices")
	fwdSlice   = flag.Duration("fwdbench.slice", 300*time.Millisecond, "length of one slice")
	fwdCallers = flag.Int("fwdbench.callers", 64, "concurrent callers in BenchmarkForwardThroughput")
)

const benchFleets = `
apiVersion: quartermaster.dev/v1alpha1
kind: Fleets
nodes: 64
fleets:
- name: bench
  replicas: 30000
  labels: {mode: bench}
`

var (
	directReq = &allocation.AllocationRequest{
		Namespace:           "default",
		GameServerSelectors: []*allocation.GameServerSelector{{MatchLabels: map[string]string{"mode": "bench"}}},
	}
	multiReq = &allocation.AllocationRequest{
		Namespace:           "default",
		GameServerSelectors: []*allocation.GameServerSelector{{MatchLabels: map[string]string{"mode": "bench"}}},
		MultiClusterSetting: &allocation.MultiClusterSetting{Enabled: true},
	}
	// ForwardRequestSample is what the entry sends the remote.
	ForwardRequestSample = forward.ForwardRequest(multiReq, "default")
)

// benchRig is an entry allocator forwarding to a remote one.
type benchRig struct {
	pki           *rigPKI
	entry, remote *rigAllocator
	taken         atomic.Int64
}

// smallFleets is an entry allocator's own fleet when it serves nothing
// itself: a fleet of its own would only add to the heap every garbage
// collection of the shared process scans.
const smallFleets = `
apiVersion: quartermaster.dev/v1alpha1
kind: Fleets
nodes: 1
fleets:
- name: other
  replicas: 1
  labels: {mode: other}
`

// newBenchRig starts the remote (a large fleet) and the entry (entryFleets,
// and tryTimeout per forwarded call; the default when zero).
func newBenchRig(b *testing.B, entryFleets string, tryTimeout time.Duration, entryPolicies func(remote string) []core.Policy) *benchRig {
	b.Helper()
	r := &benchRig{pki: newRigPKI(b)}
	r.remote = startAllocator(b, r.pki, "remote", rigOptions{fleets: benchFleets})
	r.entry = startAllocator(b, r.pki, "entry", rigOptions{fleets: entryFleets, tryTimeout: tryTimeout})
	r.entry.store.Replace(forward.NewSet(map[string][]core.Policy{"default": entryPolicies(r.remote.addr)},
		[]forward.Secret{r.pki.secret(b, "to-remote", "entry")}))
	return r
}

// echoServer answers every Allocate with one canned response: the cost of
// an mTLS gRPC round trip with the messages a forward carries, and nothing
// else.
type echoServer struct {
	allocation.UnimplementedAllocationServiceServer
	resp *allocation.AllocationResponse
}

func (e *echoServer) Allocate(context.Context, *allocation.AllocationRequest) (*allocation.AllocationResponse, error) {
	return e.resp, nil
}

// startEcho serves an echo with the rig's server certificate and client CA.
func (r *benchRig) startEcho(b *testing.B, resp *allocation.AllocationResponse) string {
	b.Helper()
	tlsSrv, err := mtls.NewServer(mtls.ServerOptions{CertDir: r.pki.certDir, ClientCADir: r.pki.clientCA, PollInterval: time.Hour})
	if err != nil {
		b.Fatal(err)
	}
	srv := grpc.NewServer(grpc.Creds(tlsSrv.GRPCCredentials()))
	allocation.RegisterAllocationServiceServer(srv, &echoServer{resp: resp})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	go func() { _ = srv.Serve(ln) }()
	b.Cleanup(srv.Stop)
	return ln.Addr().String()
}

// warm makes one call of each target, off the clock: connections,
// handshakes and the forwarder's cached client are set up before rounds.
func warm(b *testing.B, calls map[string]func() error) {
	b.Helper()
	for name, call := range calls {
		if err := call(); err != nil {
			b.Fatalf("warm-up %s: %v", name, err)
		}
	}
}

func remotePolicy(name, addr string, priority int32) core.Policy {
	return core.Policy{Name: name, Priority: priority, Weight: 1, Connection: core.ConnectionInfo{
		ClusterName: name, Endpoints: []string{addr}, SecretName: "to-remote", Namespace: "default",
	}}
}

// refill gives back what the slices took, off the clock, before a fleet
// could run dry.
func (r *benchRig) refill(force bool) {
	if !force && r.taken.Load() < 15000 {
		return
	}
	r.taken.Store(0)
	for _, a := range []*rigAllocator{r.entry, r.remote} {
		for _, gs := range a.backend.Allocated() {
			_, _ = a.backend.Release(context.Background(), gs.Key(), "")
		}
		a.backend.Step()
	}
}

func (r *benchRig) client(b *testing.B, addr string) *grpc.ClientConn {
	b.Helper()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(r.pki.clientTLS(b, "caller"))))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { conn.Close() })
	return conn
}

// durations is a record of call latencies.
type durations struct {
	mu sync.Mutex
	d  []time.Duration
}

func (l *durations) add(d time.Duration) {
	l.mu.Lock()
	l.d = append(l.d, d)
	l.mu.Unlock()
}

func (l *durations) quantile(q float64) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.d) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), l.d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[min(int(q*float64(len(s))), len(s)-1)]
}

func medianOf(xs []float64) float64 {
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	if len(s) == 0 {
		return 0
	}
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// run calls call from callers goroutines in a closed loop for d; it
// returns the calls completed and fails the benchmark on any error.
func run(b *testing.B, callers int, d time.Duration, lat *durations, call func() error) int64 {
	var done, failed atomic.Int64
	var firstErr atomic.Value
	var stop atomic.Bool
	var wg sync.WaitGroup
	for range callers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for !stop.Load() {
				t0 := time.Now()
				if err := call(); err != nil {
					failed.Add(1)
					firstErr.CompareAndSwap(nil, err)
				}
				if lat != nil {
					lat.add(time.Since(t0))
				}
				done.Add(1)
			}
		}()
	}
	time.Sleep(d)
	stop.Store(true)
	wg.Wait()
	if f := failed.Load(); f > 0 {
		b.Fatalf("%d of %d calls failed, first: %v", f, done.Load(), firstErr.Load())
	}
	return done.Load()
}

// cpuTime is the CPU this process has used (user and system).
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// interleave runs each target for a slice per round, rotating who goes
// first, and returns each target's per-round rate (calls/s) and CPU per
// call (µs; client, entry and remote all count, as they share the
// process).
func interleave(b *testing.B, r *benchRig, callers int, names []string, calls map[string]func() error, lats map[string]*durations) (rates, cpu map[string][]float64) {
	rates, cpu = map[string][]float64{}, map[string][]float64{}
	for round := range *fwdRounds {
		for i := range names {
			name := names[(i+round)%len(names)]
			b.StopTimer()
			r.refill(false)
			runtime.GC()
			b.StartTimer()
			t0, c0 := time.Now(), cpuTime()
			n := run(b, callers, *fwdSlice, lats[name], calls[name])
			rates[name] = append(rates[name], float64(n)/time.Since(t0).Seconds())
			cpu[name] = append(cpu[name], float64((cpuTime()-c0).Microseconds())/float64(max(n, 1)))
			r.taken.Add(n)
		}
	}
	return rates, cpu
}

func BenchmarkForwardThroughput(b *testing.B) {
	r := newBenchRig(b, smallFleets, 0, func(remote string) []core.Policy { return []core.Policy{remotePolicy("remote", remote, 1)} })
	direct := allocation.NewAllocationServiceClient(r.client(b, r.remote.addr))
	entry := allocation.NewAllocationServiceClient(r.client(b, r.entry.addr))
	ctx := context.Background()
	calls := map[string]func() error{
		"direct": func() error { _, err := direct.Allocate(ctx, directReq); return err },
		"forwarded": func() error {
			resp, err := entry.Allocate(ctx, multiReq)
			if err == nil && resp.GetSource() != r.remote.addr {
				b.Errorf("answered by %q, want the remote", resp.GetSource())
			}
			return err
		},
	}
	warm(b, calls)
	lats := map[string]*durations{"direct": {}, "forwarded": {}}
	var ratios, cpuRatios []float64
	var rates, cpu map[string][]float64
	for range b.N {
		rates, cpu = interleave(b, r, *fwdCallers, []string{"direct", "forwarded"}, calls, lats)
		for i := range rates["direct"] {
			ratios = append(ratios, rates["forwarded"][i]/rates["direct"][i])
			cpuRatios = append(cpuRatios, cpu["forwarded"][i]/cpu["direct"][i])
			b.Logf("round %d: direct %.0f req/s %.0f µs CPU/req, forwarded %.0f req/s %.0f µs CPU/req: throughput %.2f, CPU %.2f",
				i, rates["direct"][i], cpu["direct"][i], rates["forwarded"][i], cpu["forwarded"][i], ratios[len(ratios)-1], cpuRatios[len(cpuRatios)-1])
		}
	}
	b.ReportMetric(medianOf(ratios), "fwd/direct-median")
	b.ReportMetric(medianOf(cpuRatios), "cpu-fwd/direct-median")
	b.ReportMetric(medianOf(cpu["direct"]), "direct-cpu-µs/req")
	b.ReportMetric(medianOf(cpu["forwarded"]), "forwarded-cpu-µs/req")
	b.ReportMetric(medianOf(rates["direct"]), "direct-req/s")
	b.ReportMetric(medianOf(rates["forwarded"]), "forwarded-req/s")
	for _, n := range []string{"direct", "forwarded"} {
		b.ReportMetric(float64(lats[n].quantile(0.5).Microseconds()), n+"-p50-µs")
		b.ReportMetric(float64(lats[n].quantile(0.99).Microseconds()), n+"-p99-µs")
	}
}

func BenchmarkForwardLone(b *testing.B) {
	r := newBenchRig(b, smallFleets, 0, func(remote string) []core.Policy { return []core.Policy{remotePolicy("remote", remote, 1)} })
	direct := allocation.NewAllocationServiceClient(r.client(b, r.remote.addr))
	entry := allocation.NewAllocationServiceClient(r.client(b, r.entry.addr))
	ctx := context.Background()
	sample, err := entry.Allocate(ctx, multiReq)
	if err != nil {
		b.Fatal(err)
	}
	echo := allocation.NewAllocationServiceClient(r.client(b, r.startEcho(b, sample)))
	calls := map[string]func() error{
		"direct":    func() error { _, err := direct.Allocate(ctx, directReq); return err },
		"forwarded": func() error { _, err := entry.Allocate(ctx, multiReq); return err },
		"roundtrip": func() error { _, err := echo.Allocate(ctx, ForwardRequestSample); return err },
	}
	warm(b, calls)
	names := []string{"direct", "forwarded", "roundtrip"}
	var excess []float64 // per round: forwarded p50 - (direct p50 + round trip p50), µs
	var p50 = map[string][]float64{}
	cpu := map[string][]float64{}     // µs of this process's CPU per call
	mallocs := map[string][]float64{} // heap allocations per call, whole process
	for range b.N {
		for round := range *fwdRounds {
			lats := map[string]*durations{"direct": {}, "forwarded": {}, "roundtrip": {}}
			for i := range names {
				n := names[(i+round)%len(names)]
				b.StopTimer()
				r.refill(false)
				b.StartTimer()
				var m0, m1 runtime.MemStats
				runtime.ReadMemStats(&m0)
				c0 := cpuTime()
				k := run(b, 1, *fwdSlice, lats[n], calls[n])
				cpu[n] = append(cpu[n], float64((cpuTime()-c0).Microseconds())/float64(max(k, 1)))
				runtime.ReadMemStats(&m1)
				mallocs[n] = append(mallocs[n], float64(m1.Mallocs-m0.Mallocs)/float64(max(k, 1)))
				r.taken.Add(k)
			}
			for _, n := range names {
				p50[n] = append(p50[n], float64(lats[n].quantile(0.5).Microseconds()))
			}
			last := func(n string) float64 { return p50[n][len(p50[n])-1] }
			excess = append(excess, last("forwarded")-last("direct")-last("roundtrip"))
			b.Logf("round %d: p50 direct %.0f µs, forwarded %.0f µs, round trip %.0f µs (calls %d, %d, %d)", round,
				last("direct"), last("forwarded"), last("roundtrip"), len(lats["direct"].d), len(lats["forwarded"].d), len(lats["roundtrip"].d))
		}
	}
	for _, n := range names {
		b.ReportMetric(medianOf(p50[n]), n+"-p50-µs")
		b.ReportMetric(medianOf(cpu[n]), n+"-cpu-µs/req")
		b.ReportMetric(medianOf(mallocs[n]), n+"-allocs/req")
	}
	b.ReportMetric(medianOf(excess), "fwd-minus-direct-minus-rtt-p50-µs")
}

func BenchmarkForwardBreakerOpen(b *testing.B) {
	down := blackHole(b)
	// The entry serves the fall-through from a fleet of its own; a short
	// try timeout opens the breaker quickly.
	r := newBenchRig(b, benchFleets, 200*time.Millisecond, func(string) []core.Policy {
		return []core.Policy{
			remotePolicy("down", down, 1),
			{Name: "here", Priority: 2, Weight: 1, Connection: core.ConnectionInfo{ClusterName: "here", Namespace: "default"}},
		}
	})
	entry := allocation.NewAllocationServiceClient(r.client(b, r.entry.addr))
	ctx := context.Background()
	// Open the breaker: three tries that time out (200 ms each).
	for r.entry.fwd.BreakerState(down) != forward.Open {
		if resp, err := entry.Allocate(ctx, multiReq); err != nil || resp.GetSource() != "local" {
			b.Fatalf("fall-through while opening the breaker: %v %q", err, resp.GetSource())
		}
	}
	calls := map[string]func() error{
		"direct": func() error { _, err := entry.Allocate(ctx, directReq); return err },
		"fallthrough": func() error {
			resp, err := entry.Allocate(ctx, multiReq)
			if err == nil && resp.GetSource() != "local" {
				b.Errorf("answered by %q, want local", resp.GetSource())
			}
			return err
		},
	}
	warm(b, calls)
	names := []string{"direct", "fallthrough"}
	var allFallthrough []*durations
	var ratios []float64
	p99 := map[string][]float64{}
	for range b.N {
		for round := range *fwdRounds {
			lats := map[string]*durations{"direct": {}, "fallthrough": {}}
			allFallthrough = append(allFallthrough, lats["fallthrough"])
			for i := range names {
				n := names[(i+round)%len(names)]
				b.StopTimer()
				r.refill(false)
				b.StartTimer()
				r.taken.Add(run(b, 1, *fwdSlice, lats[n], calls[n]))
			}
			for _, n := range names {
				p99[n] = append(p99[n], float64(lats[n].quantile(0.99).Microseconds()))
			}
			ratios = append(ratios, p99["fallthrough"][len(p99["fallthrough"])-1]/p99["direct"][len(p99["direct"])-1])
		}
	}
	b.ReportMetric(medianOf(ratios), "fallthrough/direct-p99-median")
	for _, n := range names {
		b.ReportMetric(medianOf(p99[n]), n+"-p99-µs")
	}
	// Requests that took as long as the down cluster's try timeout once
	// its breaker was open. The probes that find out whether it is back
	// run in the background, so none of these is a probe: any counted
	// here were held up by something else (a loaded machine).
	waited, total := 0, 0
	for _, l := range allFallthrough {
		for _, d := range l.d {
			total++
			if d >= 150*time.Millisecond {
				waited++
			}
		}
	}
	b.ReportMetric(float64(waited), "waited-for-timeout")
	b.ReportMetric(float64(total), "fallthrough-calls")
}
