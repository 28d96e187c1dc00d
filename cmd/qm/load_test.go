package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"math"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/quartermaster-dev/quartermaster/loadgen"
)

const loadFleets = `apiVersion: quartermaster.dev/v1alpha1
kind: Fleets
nodes: 4
fleets:
- name: big
  replicas: 3000
  labels: {mode: load}
`

// serveForLoad starts `qm serve` as a process of its own, as a user runs
// it, and returns its addresses and certificate directory.
func serveForLoad(t *testing.T) (addrs map[string]string, certsDir string, pid int) {
	t.Helper()
	state := t.TempDir()
	fleets := filepath.Join(state, "fleets.yaml")
	if err := os.WriteFile(fleets, []byte(loadFleets), 0o644); err != nil {
		t.Fatal(err)
	}
	ready := filepath.Join(state, "ready.json")
	p := startQM(t, "serve", "--addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0", "--state-dir", state,
		"--ready-file", ready, "--fleets", fleets, "--log-format", "json")
	for deadline := time.Now().Add(20 * time.Second); ; {
		if b, err := os.ReadFile(ready); err == nil && json.Unmarshal(b, &addrs) == nil {
			return addrs, filepath.Join(state, "certs"), p.cmd.Process.Pid
		}
		select {
		case err := <-p.exited:
			p.exited <- err
			t.Fatalf("qm serve exited: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			t.Fatal("qm serve did not start")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// allocationsOK reads the server's own count of successful allocations,
// of the series carrying every one of labels (`fleet="blue"`), if any.
func allocationsOK(t *testing.T, httpAddr string, labels ...string) int64 {
	t.Helper()
	resp, err := http.Get("http://" + httpAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var n int64
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		l := sc.Text()
		if strings.HasPrefix(l, "qm_allocator_allocations_total{") && strings.Contains(l, `code="OK"`) && containsAll(l, labels) {
			f := strings.Fields(l)
			v, err := strconv.ParseFloat(f[len(f)-1], 64)
			if err != nil {
				t.Fatalf("metrics line %q: %v", l, err)
			}
			n += int64(v)
		}
	}
	return n
}

func containsAll(s string, subs []string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}

func runLoadCmd(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	var o, e bytes.Buffer
	err := commands["load"].run(context.Background(), args, &o, &e)
	return o.String(), e.String(), err
}

// qm load against a real qm serve process over mTLS: gRPC and REST
// allocations and the health-check echo take turns; the counts agree with
// the server's own metrics, every allocation is released, and the result
// file reads back.
func TestLoadAgainstServe(t *testing.T) {
	addrs, certsDir, pid := serveForLoad(t)
	addr := addrs["grpc"]
	out := filepath.Join(t.TempDir(), "result.json")
	stdout, stderr, err := runLoadCmd(t, "--certs-dir", certsDir,
		"--target", "grpc="+addr, "--target", "rest=rest://"+addr, "--target", "echo="+addr, "--echo", "echo",
		"--rate", "150", "--duration", "1s", "--window", "250ms", "--selector", "mode=load", "--server-pid", strconv.Itoa(pid),
		"--out", out, "--expect", "successRate>=0.99,p99<2s,ratio.throughput>0.5")
	if err != nil {
		t.Fatalf("qm load: %v\n%s\n%s", err, stdout, stderr)
	}
	t.Logf("\n%s", stdout)
	fh, err := os.Open(out)
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	res, err := loadgen.ReadResult(fh)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Targets) != 3 || res.Config.Reference != "echo" || len(res.Ratios) != 2 {
		t.Fatalf("targets %d, reference %q, ratios %d", len(res.Targets), res.Config.Reference, len(res.Ratios))
	}
	var allocated int64
	for _, tr := range res.Targets {
		if tr.Intended != 150 || tr.OK != tr.Sent || tr.OK < 140 || len(tr.Errors) != 0 {
			t.Errorf("%s: intended %d sent %d ok %d errors %v", tr.Name, tr.Intended, tr.Sent, tr.OK, tr.Errors)
		}
		if tr.ServerCPUSeconds <= 0 || tr.ServerCPUPerRequestMicros <= 0 {
			t.Errorf("%s: no server CPU charged", tr.Name)
		}
		if tr.Call == "allocate" {
			allocated += tr.OK
			if tr.Released != tr.OK {
				t.Errorf("%s: released %d of %d", tr.Name, tr.Released, tr.OK)
			}
		}
	}
	if got := allocationsOK(t, addrs["http"]); got != allocated {
		t.Errorf("the server counted %d allocations, qm load %d", got, allocated)
	}
	// successRate and p99 for grpc and rest (the echo is not held to
	// them), and ratio.throughput for each of the two ratios.
	if len(res.Expectations) != 6 {
		t.Errorf("expectations: %+v", res.Expectations)
	}
	for _, want := range []string{"grpc", "rest", "echo", "grpc / echo: throughput", "send lateness", "latency from the actual send"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("summary lacks %q", want)
		}
	}

	// A threshold that cannot hold sets exit status 2, and the merge of
	// two results reads them back exactly.
	_, _, err = runLoadCmd(t, "--certs-dir", certsDir, "--addr", addr, "--workers", "2", "--requests", "20",
		"--selector", "mode=load", "--expect", "p99<1us")
	if e, ok := err.(exitError); !ok || e.code != 2 {
		t.Errorf("failed threshold: err %v, want exit status 2", err)
	}
	// --out -: the result alone on stdout (a Job's pod log), the summary
	// on stderr after it.
	stdout, stderr, err = runLoadCmd(t, "--certs-dir", certsDir, "--addr", addr, "--workers", "2", "--requests", "20",
		"--selector", "mode=load", "--out", "-")
	if err != nil {
		t.Fatalf("--out -: %v\n%s", err, stderr)
	}
	if r, err := loadgen.ReadResult(strings.NewReader(stdout + stderr)); err != nil || r.Targets[0].OK != 20 {
		t.Errorf("--out -: stdout then stderr does not read back as the result (%v)\n%s", err, stdout)
	}
	if !strings.Contains(stderr, "p99.9") || strings.Contains(stdout, "p99.9") {
		t.Errorf("--out -: want the summary on stderr only; stderr:\n%s", stderr)
	}
	// --start-at: connected at once, nothing sent before the time.
	at := time.Now().Add(1500 * time.Millisecond).Truncate(time.Second).Add(time.Second)
	startOut := filepath.Join(t.TempDir(), "start.json")
	_, stderr, err = runLoadCmd(t, "--certs-dir", certsDir, "--addr", addr, "--workers", "1", "--requests", "5",
		"--selector", "mode=load", "--start-at", at.UTC().Format(time.RFC3339), "--out", startOut)
	if err != nil {
		t.Fatalf("--start-at: %v\n%s", err, stderr)
	}
	sb, err := os.ReadFile(startOut)
	if err != nil {
		t.Fatal(err)
	}
	sr, err := loadgen.ReadResult(bytes.NewReader(sb))
	if err != nil {
		t.Fatal(err)
	}
	if sr.Start.Before(at) || sr.Start.After(at.Add(time.Second)) || !strings.Contains(stderr, "starting at") {
		t.Errorf("--start-at %s: the run started at %v; stderr %q", at, sr.Start, stderr)
	}
	merged := filepath.Join(t.TempDir(), "merged.json")
	var o, e bytes.Buffer
	if err := commands["load"].run(context.Background(), []string{"merge", "--out", merged, out, out}, &o, &e); err != nil {
		t.Fatalf("merge: %v %s", err, e.String())
	}
	mb, err := os.ReadFile(merged)
	if err != nil {
		t.Fatal(err)
	}
	m, err := loadgen.ReadResult(bytes.NewReader(mb))
	if err != nil {
		t.Fatal(err)
	}
	if m.Generators != 2 || m.Targets[0].OK != 2*res.Targets[0].OK || m.Targets[0].Latency.Count != 2*res.Targets[0].Latency.Count {
		t.Errorf("merged: %d generators, ok %d (want %d)", m.Generators, m.Targets[0].OK, 2*res.Targets[0].OK)
	}
}

// qm load --allocation-keys against a real qm serve: every request, over
// gRPC and over REST, reaches the allocator with a key of its own (its
// count of keyed requests equals the requests sent), all answered, all
// released.
func TestLoadAllocationKeys(t *testing.T) {
	addrs, certsDir, _ := serveForLoad(t)
	addr := addrs["grpc"]
	out := filepath.Join(t.TempDir(), "keys.json")
	_, stderr, err := runLoadCmd(t, "--certs-dir", certsDir, "--target", "grpc="+addr, "--target", "rest=rest://"+addr,
		"--rate", "40", "--duration", "1s", "--window", "250ms", "--selector", "mode=load", "--allocation-keys", "--out", out)
	if err != nil {
		t.Fatalf("qm load --allocation-keys: %v\n%s", err, stderr)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	res, err := loadgen.ReadResult(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	if !res.Config.AllocationKeys {
		t.Error("the result does not record allocationKeys")
	}
	var sent int64
	for _, tr := range res.Targets {
		sent += tr.Sent
		if tr.OK != tr.Sent || tr.Released != tr.OK || tr.Retries != 0 {
			t.Errorf("%s: sent %d ok %d released %d retries %d", tr.Name, tr.Sent, tr.OK, tr.Released, tr.Retries)
		}
	}
	if got := metricValue(t, addrs["http"], "qm_allocator_allocation_keys_total"); got != sent || sent == 0 {
		t.Errorf("the allocator saw %d keyed requests; qm load sent %d", got, sent)
	}
	if got := metricValue(t, addrs["http"], "qm_allocator_allocation_key_replays_total"); got != 0 {
		t.Errorf("%d replays: every key should be new", got)
	}
}

// metricValue reads one unlabelled counter from the server's metrics.
func metricValue(t *testing.T, httpAddr, name string) int64 {
	t.Helper()
	resp, err := http.Get("http://" + httpAddr + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) == 2 && f[0] == name {
			v, err := strconv.ParseFloat(f[1], 64)
			if err != nil {
				t.Fatalf("metrics line %q: %v", sc.Text(), err)
			}
			return int64(v)
		}
	}
	return 0
}

func TestLoadRefusesBadInput(t *testing.T) {
	dir := t.TempDir()
	badReq := filepath.Join(dir, "bad.json")
	os.WriteFile(badReq, []byte(`{"scheduling": "Sideways"}`), 0o644)
	// A port nobody listens on, and a certificate directory with a
	// client identity, so the run gets as far as connecting.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close()
	var o, e bytes.Buffer
	if err := commands["certs"].run(context.Background(), []string{"--dir", dir + "/certs", "--clients", "dev"}, &o, &e); err != nil {
		t.Fatalf("certs: %v %s", err, e.String())
	}
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"--rate", "fast"}, 2, `--rate: "fast" is not a rate`},
		{[]string{"--rate", "0"}, 2, "--rate: rate must be above 0"},
		{[]string{"--rate", "steps:10"}, 2, "RATE@DURATION"},
		{[]string{"--rate", "100", "--workers", "4"}, 2, "exclude each other"},
		{[]string{"--workers", "0"}, 2, "--workers 0"},
		{[]string{"--duration", "-1s"}, 2, "must not be negative"},
		{[]string{"--duration", "soon"}, 2, "invalid value \"soon\" for flag -duration"},
		{[]string{"--window", "0s"}, 2, "--window"},
		{[]string{"--max-in-flight", "0"}, 2, "--max-in-flight"},
		{[]string{"--connections", "0"}, 2, "--connections"},
		{[]string{"--expect", "p99<50"}, 2, "--expect"},
		{[]string{"--expect", "speed>1"}, 2, "unknown metric"},
		{[]string{"--target", "a=nowhere"}, 2, "want HOST:PORT"},
		{[]string{"--target", "a=x:1", "--target", "a=y:1"}, 2, `two targets are named "a"`},
		{[]string{"--target", "a=x:1", "--echo", "b"}, 2, `--echo "b": no --target`},
		{[]string{"--target", "a=rest://x:1", "--echo", "a"}, 2, "the target is REST"},
		{[]string{"--unique-annotation", "bad key!"}, 2, `--unique-annotation "bad key!"`},
		{[]string{"--target", "a=rest://x:1", "--unique-annotation", "example.com/match"}, 2, "target a is rest; it is for gRPC targets only"},
		{[]string{"--attempt-timeout", "1s"}, 2, "are for --allocation-keys"},
		{[]string{"--allocation-keys", "--attempt-timeout", "1h"}, 2, "want a deadline within --timeout"},
		{[]string{"--reference", "zz"}, 2, `--reference "zz"`},
		{[]string{"--request", badReq}, 2, "Sideways"},
		{[]string{"--request", filepath.Join(dir, "missing.json")}, 2, "--request"},
		{[]string{"--request", badReq, "--selector", "a=b"}, 2, "cannot be combined"},
		{[]string{"--scenario", filepath.Join(dir, "missing.yaml")}, 2, "--scenario"},
		{[]string{"--stream", "x"}, 2, "--stream needs --scenario"},
		{[]string{"--shard", "4/4"}, 2, "--shard"},
		{[]string{"--progress", "loud"}, 2, "--progress"},
		{[]string{"--start-at", "soon"}, 2, `--start-at "soon": want a time like`},
		{[]string{"--start-at", "2099-01-01T00:00:00Z"}, 2, "more than a day from now"},
		{[]string{"stray"}, 2, "unexpected arguments"},
		{[]string{"--certs-dir", dir + "/certs", "--identity", "nobody"}, 1, `no client certificate for identity "nobody"`},
		{[]string{"--certs-dir", dir + "/certs", "--addr", closed}, 1, "cannot reach it"},
	} {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			start := time.Now()
			var o, e bytes.Buffer
			err := commands["load"].run(context.Background(), c.args, &o, &e)
			code := 0
			if ee, ok := err.(exitError); ok {
				code = ee.code
			} else if err != nil {
				code = 1
				e.WriteString(err.Error())
			}
			if code != c.code || !strings.Contains(e.String(), c.want) {
				t.Errorf("exit %d, stderr:\n%s\nwant exit %d and %q", code, e.String(), c.code, c.want)
			}
			if o.Len() != 0 {
				t.Errorf("wrote to stdout: %s", o.String())
			}
			if time.Since(start) > 12*time.Second {
				t.Errorf("took %v to refuse", time.Since(start))
			}
		})
	}
}

// Ctrl-C in the middle of a run, as a user presses it at a qm load
// process: it stops sending, writes the result so far marked interrupted,
// exits 130, and leaves nothing behind: every server it allocated is
// given back, and the server's count agrees with the partial result.
func TestLoadInterruptWritesPartialResult(t *testing.T) {
	addrs, certsDir, _ := serveForLoad(t)
	out := filepath.Join(t.TempDir(), "partial.json")
	p := startQM(t, "load", "--certs-dir", certsDir, "--addr", addrs["grpc"], "--selector", "mode=load",
		"--rate", "200", "--duration", "1h", "--session", "1h", "--out", out)
	for deadline := time.Now().Add(20 * time.Second); allocationsOK(t, addrs["http"]) < 50; {
		if time.Now().After(deadline) {
			t.Fatalf("the load did not get going\n%s", p.stderr.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
	if err := p.cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	var err error
	select {
	case err = <-p.exited:
	case <-time.After(15 * time.Second):
		t.Fatal("qm load did not stop within 15s of Ctrl-C")
	}
	if code := p.cmd.ProcessState.ExitCode(); code != 130 {
		t.Errorf("exit %v (code %d), want 130\n%s", err, code, p.stderr.String())
	}
	if !strings.Contains(p.stderr.String(), "interrupted") {
		t.Errorf("stderr does not say it was interrupted:\n%s", p.stderr.String())
	}
	fh, err := os.Open(out)
	if err != nil {
		t.Fatalf("no partial result: %v", err)
	}
	defer fh.Close()
	res, err := loadgen.ReadResult(fh)
	if err != nil {
		t.Fatal(err)
	}
	r := res.Targets[0]
	if !res.Interrupted || r.OK < 50 || res.DurationSeconds > 60 {
		t.Errorf("interrupted %v, ok %d, duration %.1fs: want a partial result of the seconds before Ctrl-C", res.Interrupted, r.OK, res.DurationSeconds)
	}
	// What was meant to go is the schedule up to Ctrl-C, not the hour.
	if max := int64(res.DurationSeconds*200) + 50; r.Intended > max || r.NotSent > 50 {
		t.Errorf("intended %d, not sent %d in %.1fs at 200/s: the rest of the schedule is not part of the result", r.Intended, r.NotSent, res.DurationSeconds)
	}
	// The sessions were to be held for an hour: Ctrl-C gives them back
	// at once rather than leave the fleet allocated.
	if got := allocationsOK(t, addrs["http"]); got != r.OK || r.Released != r.OK {
		t.Errorf("server counted %d allocations; the result has %d ok, %d released", got, r.OK, r.Released)
	}
}

// deploy/loadgen.yaml's Indexed Job: every pod's arguments (its index put
// in for $(JOB_COMPLETION_INDEX), as Kubernetes does) are flags qm load
// accepts, the shards are 0..N-1 of N = completions, each has arrivals of
// its own, and together they send the whole rate.
func TestLoadJobManifestShards(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "deploy", "loadgen.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var job struct {
		Kind string `yaml:"kind"`
		Spec struct {
			CompletionMode string `yaml:"completionMode"`
			Completions    int    `yaml:"completions"`
			Parallelism    int    `yaml:"parallelism"`
			Template       struct {
				Spec struct {
					Containers []struct {
						Args []string `yaml:"args"`
					} `yaml:"containers"`
				} `yaml:"spec"`
			} `yaml:"template"`
		} `yaml:"spec"`
	}
	if err := yaml.Unmarshal(raw, &job); err != nil {
		t.Fatal(err)
	}
	n := job.Spec.Completions
	if job.Kind != "Job" || job.Spec.CompletionMode != "Indexed" || n < 2 || job.Spec.Parallelism != n || len(job.Spec.Template.Spec.Containers) != 1 {
		t.Fatalf("want an Indexed Job of N >= 2 parallel completions and one container: %+v", job)
	}
	args := job.Spec.Template.Spec.Containers[0].Args
	if len(args) == 0 || args[0] != "load" {
		t.Fatalf("args %q do not run qm load", args)
	}
	// plan parses one pod's arguments; count is the number of requests
	// its schedule has in its measured time.
	plan := func(pod []string) *loadPlan {
		t.Helper()
		var c connFlags
		var f loadFlags
		fs := loadFlagSet(&c, &f)
		if err := fs.Parse(pod); err != nil {
			t.Fatalf("qm load refuses %q: %v", pod, err)
		}
		set := map[string]bool{}
		fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
		p, err := planLoad(&c, &f, set)
		if err != nil {
			t.Fatalf("%q: %v", pod, err)
		}
		if f.out != "-" {
			t.Errorf("--out %q: the result must go to the pod's log (--out=-)", f.out)
		}
		return p
	}
	count := func(p *loadPlan) float64 {
		pc := p.opt.NewPacer()
		var k uint64
		for ; ; k++ {
			if d, stop := pc.Pace(0, k); stop || d >= p.opt.Duration {
				return float64(k)
			}
		}
	}
	var total float64
	var whole []string
	seeds := map[uint64]bool{}
	for i := 0; i < n; i++ {
		var pod []string
		for _, a := range args[1:] {
			pod = append(pod, strings.ReplaceAll(a, "$(JOB_COMPLETION_INDEX)", strconv.Itoa(i)))
			if i == 0 && !strings.HasPrefix(a, "--shard") {
				whole = append(whole, a)
			}
		}
		p := plan(pod)
		if s := p.cfg.Shard; s == nil || s.Index != i || s.Count != n {
			t.Fatalf("pod %d: shard %+v, want %d/%d (--shard's N must be completions)", i, s, i, n)
		}
		if seeds[p.cfg.Seed] {
			t.Errorf("pod %d: seed %d is another pod's: their arrivals would coincide", i, p.cfg.Seed)
		}
		seeds[p.cfg.Seed] = true
		total += count(p)
	}
	// The same arguments without --shard: one generator sending it all.
	one := count(plan(whole))
	if math.Abs(total-one) > 0.01*one {
		t.Errorf("the %d shards send %.0f requests together, one generator %.0f: want the same within 1%%", n, total, one)
	}
	t.Logf("%d shards: %.0f requests, one generator: %.0f", n, total, one)
}
