package allocator_test

// The shared port's splitter (mux.go: soheilhy/cmux with what the
// allocator needs around it: the TLS state for grpc-go, REST over HTTP/2
// with the matcher's SETTINGS acknowledgement filtered out, connection
// tracking for client CA removal, a routing deadline limited to the
// preface) against bare cmux as etcd shares its client port (REST over
// HTTP/1.1 only here): what the wrapping costs.
//
//	go test -run '^$' -bench 'SharedPortVsCmux' -benchtime 1x ./allocator/
//
// Two measures, interleaved over rounds: closed-loop allocations on one
// long-lived connection, and connection set-up (dial, TLS, routing, one
// allocation, close), where the routing runs.

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"runtime"
	"testing"
	"time"

	"github.com/soheilhy/cmux"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/quartermaster-dev/quartermaster/allocator"
	"github.com/quartermaster-dev/quartermaster/allocator/memory"
	"github.com/quartermaster-dev/quartermaster/allocator/mtls"
	"github.com/quartermaster-dev/quartermaster/allocator/pb/allocation"
)

// cmuxConn gives grpc-go's handshaken credentials the TLS state cmux's
// connection hides.
type cmuxConn struct {
	net.Conn
	tc *tls.Conn
}

func (c cmuxConn) ConnectionState() tls.ConnectionState { return c.tc.ConnectionState() }

type cmuxListener struct{ net.Listener }

func (l cmuxListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	mc, ok := c.(*cmux.MuxConn)
	if !ok {
		return c, nil
	}
	tc, ok := mc.Conn.(*tls.Conn)
	if !ok {
		c.Close()
		return l.Accept()
	}
	return cmuxConn{Conn: c, tc: tc}, nil
}

// startCmux serves the allocator on one TLS port split by cmux.
func startCmux(b *testing.B, env *benchEnv) string {
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
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	m := cmux.New(tls.NewListener(ln, tlsSrv.TLSConfig()))
	grpcL := m.MatchWithWriters(cmux.HTTP2MatchHeaderFieldPrefixSendSettings("content-type", "application/grpc"))
	restL := m.Match(cmux.Any())
	gs := grpc.NewServer(grpc.Creds(mtls.HandshakenCredentials()), grpc.MaxRecvMsgSize(allocator.DefaultMaxRequestBytes),
		grpc.MaxConcurrentStreams(allocator.DefaultMaxConcurrentStreams))
	allocator.RegisterGRPC(gs, svc, tlsSrv)
	hs := &http.Server{Handler: allocator.NewRESTHandler(svc, tlsSrv, 0, nil), ReadHeaderTimeout: 10 * time.Second}
	go gs.Serve(cmuxListener{grpcL})
	go hs.Serve(restL)
	go m.Serve()
	env.stop = append(env.stop, func() { m.Close(); gs.Stop(); hs.Close() })
	return ln.Addr().String()
}

// connect dials addr, allocates once and closes, n times; it returns the
// time taken.
func connect(b *testing.B, cfg *tls.Config, addr string, n int) time.Duration {
	t0 := time.Now()
	for range n {
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(cfg)))
		if err != nil {
			b.Fatal(err)
		}
		if _, err := allocation.NewAllocationServiceClient(conn).Allocate(context.Background(), benchRequest); err != nil {
			b.Fatal(err)
		}
		conn.Close()
	}
	return time.Since(t0)
}

func BenchmarkSharedPortVsCmux(b *testing.B) {
	env := setupBench(b)
	cmuxAddr := startCmux(b, env)
	ts := []*target{
		{name: "shared", clients: env.clients(b, env.sharedAddr, *benchConns)},
		{name: "cmux", clients: env.clients(b, cmuxAddr, *benchConns)},
	}
	addrs := map[string]string{"shared": env.sharedAddr, "cmux": cmuxAddr}
	for _, t := range ts {
		t.lat = newLatencies(4 << 20)
	}
	cfg := env.pki.client(b, "dev", nil, nil)
	const perSlice = 100
	var callRatio, connRatio []float64
	connTime := map[string]time.Duration{}
	b.ResetTimer()
	for range b.N {
		for r := range *benchRounds {
			calls, conns := map[string]float64{}, map[string]float64{}
			for i := range ts {
				t := ts[(i+r)%len(ts)]
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
				calls[t.name] = float64(n) / d.Seconds()
				cd := connect(b, cfg, addrs[t.name], perSlice)
				env.taken.Add(perSlice)
				connTime[t.name] += cd
				conns[t.name] = perSlice / cd.Seconds()
			}
			callRatio = append(callRatio, calls["shared"]/calls["cmux"])
			connRatio = append(connRatio, conns["shared"]/conns["cmux"])
		}
	}
	for _, t := range ts {
		b.ReportMetric(float64(t.calls)/t.elapsed.Seconds(), t.name+"-req/s")
		b.ReportMetric(float64(t.lat.quantile(0.99).Microseconds()), t.name+"-p99-µs")
		b.ReportMetric(float64(perSlice**benchRounds*b.N)/connTime[t.name].Seconds(), t.name+"-conns/s")
	}
	b.ReportMetric(median(callRatio), "shared/cmux-req-median")
	b.ReportMetric(median(connRatio), "shared/cmux-conns-median")
}
