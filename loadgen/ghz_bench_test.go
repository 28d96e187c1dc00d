package loadgen

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/reflection"

	"github.com/quartermaster-dev/quartermaster/certs"
)

// These benchmarks measure qm load itself, as a process, against ghz (the
// gRPC load tool people would otherwise use) on the same in-process mTLS
// echo (the gRPC health check), in the same run, phases interleaved round
// by round so both see the same machine. They need the two binaries and
// are skipped without them; `make load-bench` builds both and runs them:
//
//	QM_BIN=bin/qm QM_GHZ=bin/ghz go test -run '^$' -bench 'Generator' -benchtime 1x ./loadgen/
//
// LOAD_BENCH_ROUNDS (default 3) and LOAD_BENCH_DURATION (default 5s) size
// the comparison; LOAD_BENCH_PACE (default 30s) is the timing run's length.

// echoServer is an mTLS gRPC server with only the health service (and
// reflection, which ghz reads the method's types from), in this process,
// and the certificate directory (qm certs layout) a client uses with it.
type echoServer struct {
	addr string
	dir  string
}

func startEcho(b *testing.B) echoServer {
	b.Helper()
	dir := b.TempDir()
	res, err := certs.Generate(certs.GenerateOptions{Dir: dir, Hosts: []string{"localhost", "127.0.0.1"}, Clients: []string{"load"}, Now: time.Now()})
	if err != nil {
		b.Fatal(err)
	}
	l := res.Layout
	cert, err := tls.LoadX509KeyPair(l.ServerCert(), l.ServerKey())
	if err != nil {
		b.Fatal(err)
	}
	caPEM, err := os.ReadFile(l.ClientCACert())
	if err != nil {
		b.Fatal(err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		b.Fatal("client CA does not parse")
	}
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	gs := grpc.NewServer(grpc.Creds(credentials.NewTLS(&tls.Config{
		Certificates: []tls.Certificate{cert}, ClientCAs: pool, ClientAuth: tls.RequireAndVerifyClientCert,
	})))
	healthpb.RegisterHealthServer(gs, health.NewServer())
	reflection.Register(gs)
	go gs.Serve(lis)
	b.Cleanup(gs.Stop)
	return echoServer{addr: lis.Addr().String(), dir: dir}
}

// measure is one run of one tool: its rate of successful answers and its
// p50, as the tool itself reports them.
type measure struct {
	rate float64
	p50  time.Duration
	// fromSend is qm load's p50 from each request's actual send, as ghz
	// counts (for ghz, the same as p50).
	fromSend time.Duration
}

// ghz runs ghz at the echo: closed loop with workers when rps is 0, else
// ghz's own rate limit.
func (e echoServer) ghz(b *testing.B, bin string, workers int, rps float64, d time.Duration) measure {
	b.Helper()
	l := certs.Layout{Dir: e.dir}
	args := []string{"--call", "grpc.health.v1.Health/Check", "-d", "{}",
		"--cacert", l.ClientServerCA("load"), "--cert", l.ClientCert("load"), "--key", l.ClientKey("load"), "--cname", "localhost",
		"-c", strconv.Itoa(workers), "--connections", "1", "-z", d.String(), "--format", "json"}
	if rps > 0 {
		args = append(args, "--rps", strconv.Itoa(int(rps)))
	}
	out, err := exec.Command(bin, append(args, e.addr)...).Output()
	if err != nil {
		b.Fatalf("ghz: %v\n%s", err, out)
	}
	var rep struct {
		Count int64         `json:"count"`
		Total time.Duration `json:"total"`
		Dist  []struct {
			Percentage int           `json:"percentage"`
			Latency    time.Duration `json:"latency"`
		} `json:"latencyDistribution"`
		Status map[string]int64 `json:"statusCodeDistribution"`
	}
	if err := json.Unmarshal(out, &rep); err != nil {
		b.Fatalf("ghz output: %v\n%s", err, out)
	}
	// The calls in flight when -z runs out are cut off (Unavailable or
	// Canceled): a handful is the end of the run, more is a failure.
	ok := rep.Status["OK"]
	if ok == 0 || rep.Count-ok > 100 || rep.Total <= 0 {
		b.Fatalf("ghz: %d requests, status %v", rep.Count, rep.Status)
	}
	// Successful answers per second, as qm load's throughput counts.
	m := measure{rate: float64(ok) / rep.Total.Seconds()}
	for _, p := range rep.Dist {
		if p.Percentage == 50 {
			m.p50 = p.Latency
		}
	}
	m.fromSend = m.p50
	return m
}

// qmLoad runs `qm load` at the echo and returns its result.
func (e echoServer) qmLoad(b *testing.B, bin string, args ...string) *TargetResult {
	b.Helper()
	out := filepath.Join(b.TempDir(), "result.json")
	args = append([]string{"load", "--certs-dir", e.dir, "--identity", "load", "--target", "echo=" + e.addr, "--echo", "echo",
		"--out", out}, args...)
	cmd := exec.Command(bin, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		b.Fatalf("qm load: %v\n%s", err, stderr.String())
	}
	fh, err := os.Open(out)
	if err != nil {
		b.Fatal(err)
	}
	defer fh.Close()
	res, err := ReadResult(fh)
	if err != nil {
		b.Fatal(err)
	}
	t := res.Targets[0]
	if t.OK == 0 || len(t.Errors) != 0 {
		b.Fatalf("qm load: ok %d, errors %v", t.OK, t.Errors)
	}
	return &t
}

func (t *TargetResult) measure() measure {
	return measure{rate: t.Throughput, p50: time.Duration(t.Latency.P50Ms * float64(time.Millisecond)),
		fromSend: time.Duration(t.FromSend.P50Ms * float64(time.Millisecond))}
}

func benchBinaries(b *testing.B) (qm, ghz string) {
	qm, ghz = os.Getenv("QM_BIN"), os.Getenv("QM_GHZ")
	if qm == "" || ghz == "" {
		b.Skip("needs QM_BIN (a qm binary) and QM_GHZ (a ghz binary): make load-bench builds both")
	}
	return qm, ghz
}

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

func envDuration(name string, def time.Duration) time.Duration {
	if v, err := time.ParseDuration(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

func medianOf(ms []measure, f func(measure) float64) float64 {
	xs := make([]float64, len(ms))
	for i, m := range ms {
		xs[i] = f(m)
	}
	sort.Float64s(xs)
	return median(xs)
}

// BenchmarkGeneratorVsGhz: the most answers per second each tool gets from
// the echo with the same 50 callers on one connection (ghz's defaults),
// then each one's p50 at half of ghz's rate (qm load open loop, ghz with
// its rate limit). Reported as qm load over ghz; the issue asks for a rate
// ratio >= 1 and a p50 ratio within 10% of 1.
func BenchmarkGeneratorVsGhz(b *testing.B) {
	qm, ghz := benchBinaries(b)
	e := startEcho(b)
	rounds := envInt("LOAD_BENCH_ROUNDS", 3)
	d := envDuration("LOAD_BENCH_DURATION", 5*time.Second)
	const workers = 50
	var qmMax, ghzMax []measure
	for r := 0; r < rounds; r++ {
		// Who goes first alternates, so a drift in the machine's load
		// does not favour one.
		if r%2 == 0 {
			ghzMax = append(ghzMax, e.ghz(b, ghz, workers, 0, d))
			qmMax = append(qmMax, e.qmLoad(b, qm, "--workers", strconv.Itoa(workers), "--duration", d.String()).measure())
		} else {
			qmMax = append(qmMax, e.qmLoad(b, qm, "--workers", strconv.Itoa(workers), "--duration", d.String()).measure())
			ghzMax = append(ghzMax, e.ghz(b, ghz, workers, 0, d))
		}
		b.Logf("round %d max rate: qm load %.0f/s, ghz %.0f/s", r, qmMax[r].rate, ghzMax[r].rate)
	}
	rate := func(m measure) float64 { return m.rate }
	p50 := func(m measure) float64 { return float64(m.p50) }
	qmRate, ghzRate := medianOf(qmMax, rate), medianOf(ghzMax, rate)

	half := ghzRate / 2
	var qmHalf, ghzHalf []measure
	for r := 0; r < rounds; r++ {
		run := func() {
			t := e.qmLoad(b, qm, "--rate", strconv.Itoa(int(half)), "--duration", d.String())
			qmHalf = append(qmHalf, t.measure())
			// qm load's latency includes its own send lateness (from the
			// due time); ghz's starts when ghz sends.
			b.Logf("qm load at %.0f/s: send lateness p50 %.3fms p99 %.3fms, p50 from send %.3fms, %d of %d arrivals waited precisely",
				half, t.SendLateness.P50Ms, t.SendLateness.P99Ms, t.FromSend.P50Ms, t.PreciseWaits, t.Intended)
			if t.NotSent > 0 {
				b.Logf("qm load at %.0f/s: %d not sent", half, t.NotSent)
			}
		}
		if r%2 == 0 {
			run()
			ghzHalf = append(ghzHalf, e.ghz(b, ghz, workers, half, d))
		} else {
			ghzHalf = append(ghzHalf, e.ghz(b, ghz, workers, half, d))
			run()
		}
		// ghz's rate limiter with 50 callers sends less when answers slow
		// down (and so never sees the queue): its achieved rate says
		// whether its p50 was taken at the same load.
		b.Logf("round %d at %.0f/s: p50 qm load %v (%.0f ok/s), ghz %v (%.0f ok/s)", r, half, qmHalf[r].p50, qmHalf[r].rate, ghzHalf[r].p50, ghzHalf[r].rate)
	}
	qmP50, ghzP50 := medianOf(qmHalf, p50), medianOf(ghzHalf, p50)
	qmFromSend := medianOf(qmHalf, func(m measure) float64 { return float64(m.fromSend) })

	b.ReportMetric(qmRate, "qm-max-req/s")
	b.ReportMetric(ghzRate, "ghz-max-req/s")
	b.ReportMetric(qmRate/ghzRate, "max-rate-ratio")
	b.ReportMetric(qmP50/1e3, "qm-p50-µs")
	b.ReportMetric(ghzP50/1e3, "ghz-p50-µs")
	b.ReportMetric(qmP50/ghzP50, "p50-ratio")
	b.ReportMetric(qmFromSend/ghzP50, "p50-from-send-ratio")
	fmt.Fprintf(os.Stderr, "qm load vs ghz, %d rounds of %v: max rate %.0f/s vs %.0f/s (ratio %.3f); p50 at %.0f/s %v vs %v (ratio %.3f; qm load from its send %v, ratio %.3f)\n",
		rounds, d, qmRate, ghzRate, qmRate/ghzRate, half, time.Duration(qmP50), time.Duration(ghzP50), qmP50/ghzP50,
		time.Duration(qmFromSend), qmFromSend/ghzP50)
}

// BenchmarkGeneratorPacing: qm load's own timing error at a constant
// 2,000 requests/s (LOAD_BENCH_PACE long, 30s by default) against the
// echo, three ways in turn: the default waits (a timer, then nanosleep
// for the last millisecond while on schedule), timers only (--precise 0)
// and a busy loop for the last millisecond (--spin 1ms): the achieved rate
// over the intended (the issue asks for within 1%) and the p99 of send
// lateness (asked: under 1 ms).
func BenchmarkGeneratorPacing(b *testing.B) {
	qm, _ := benchBinaries(b)
	e := startEcho(b)
	d := envDuration("LOAD_BENCH_PACE", 30*time.Second)
	rate := envInt("LOAD_BENCH_PACE_RATE", 2000)
	for _, way := range []struct{ name, flag, value string }{
		{"precise", "--precise", "1ms"},
		{"timers", "--precise", "0s"},
		{"spin", "--spin", "1ms"},
	} {
		t := e.qmLoad(b, qm, "--rate", strconv.Itoa(rate), "--duration", d.String(), way.flag, way.value)
		achieved := t.AchievedRate / float64(rate)
		b.ReportMetric(achieved, "achieved/intended-"+way.name)
		b.ReportMetric(t.SendLateness.P99Ms*1e3, "lateness-p99-µs-"+way.name)
		fmt.Fprintf(os.Stderr, "qm load --rate %d --duration %v %s %s: intended %d, sent %d, not sent %d, achieved %.1f/s (%.4f of intended), latency p50 %.3fms (from send %.3fms), send lateness p50 %.3fms p99 %.3fms max %.3fms, precise waits %d, behind %d\n",
			rate, d, way.flag, way.value, t.Intended, t.Sent, t.NotSent, t.AchievedRate, achieved, t.Latency.P50Ms, t.FromSend.P50Ms,
			t.SendLateness.P50Ms, t.SendLateness.P99Ms, t.SendLateness.MaxMs, t.PreciseWaits, t.Behind)
	}
}
