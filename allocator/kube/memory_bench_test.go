package kube_test

// The kubernetes backend's memory at scale, as an operator sees it: the
// resident set of a `qm serve --backend kubernetes` process watching N
// GameServers of the size Agones really writes (owner reference,
// finalizer, health and SDK settings, a pod template with resources and
// environment, three addresses, counters, lists, and the managedFields of
// the two writers every Agones GameServer has: the controller that
// created it and the SDK sidecar that marked it Ready).
//
//	QM_BENCH_SERVERS=100000 go test -run '^$' -bench KubeMemory -benchtime 1x -timeout 30m -v ./allocator/kube/
//
// It reports the process's RSS and Go heap with no GameServers and with N,
// and the bytes each GameServer costs, against the manifest's memory
// limit (deploy/allocator.yaml).

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/quartermaster-dev/quartermaster/allocator/kube"
	"github.com/quartermaster-dev/quartermaster/kindcluster"
	"github.com/quartermaster-dev/quartermaster/kindcluster/kubetest"
)

// manifestMemoryLimit is deploy/allocator.yaml's limit for the allocator
// container.
const manifestMemoryLimit = 1 << 30

// agonesSized is a GameServer as an Agones fleet leaves it once Ready.
func agonesSized(ns, name, fleet, node string, i int) *unstructured.Unstructured {
	ip := fmt.Sprintf("10.%d.%d.%d", 1+i/65536%200, i/256%256, i%256)
	set := fleet + "-x7k2p"
	doc := fmt.Sprintf(`{
 "apiVersion": "agones.dev/v1", "kind": "GameServer",
 "metadata": {
  "name": %[2]q, "namespace": %[1]q, "generateName": %[5]q,
  "labels": {"agones.dev/fleet": %[3]q, "agones.dev/gameserverset": %[5]q, "mode": "ranked", "region": "eu-west"},
  "annotations": {"agones.dev/sdk-version": "1.44.0", "agones.dev/ready-container-id": "containerd://4f1c0a3e9b2d7c6a5e8f1b0d3c2a9e7f6b5d4c3a2e1f0b9c8d7e6f5a4b3c2d1e"},
  "finalizers": ["agones.dev"],
  "ownerReferences": [{"apiVersion": "agones.dev/v1", "kind": "GameServerSet", "name": %[5]q,
   "uid": "7b0e4a52-3c1d-4f6e-9a8b-2d5c7e1f0a93", "controller": true, "blockOwnerDeletion": true}],
  "managedFields": [
   {"manager": "controller", "operation": "Update", "apiVersion": "agones.dev/v1", "time": "2026-11-22T10:00:00Z", "fieldsType": "FieldsV1",
    "fieldsV1": {"f:metadata": {"f:annotations": {".": {}, "f:agones.dev/sdk-version": {}}, "f:finalizers": {".": {}, "v:\"agones.dev\"": {}},
     "f:generateName": {}, "f:labels": {".": {}, "f:agones.dev/fleet": {}, "f:agones.dev/gameserverset": {}, "f:mode": {}, "f:region": {}},
     "f:ownerReferences": {".": {}, "k:{\"uid\":\"7b0e4a52-3c1d-4f6e-9a8b-2d5c7e1f0a93\"}": {}}},
     "f:spec": {".": {}, "f:container": {}, "f:counters": {".": {}, "f:rooms": {".": {}, "f:capacity": {}, "f:count": {}}},
      "f:health": {".": {}, "f:failureThreshold": {}, "f:initialDelaySeconds": {}, "f:periodSeconds": {}},
      "f:lists": {".": {}, "f:players": {".": {}, "f:capacity": {}, "f:values": {}}},
      "f:ports": {}, "f:scheduling": {}, "f:sdkServer": {".": {}, "f:grpcPort": {}, "f:httpPort": {}, "f:logLevel": {}},
      "f:template": {".": {}, "f:metadata": {".": {}, "f:creationTimestamp": {}}, "f:spec": {".": {}, "f:containers": {}}}},
     "f:status": {".": {}, "f:address": {}, "f:addresses": {}, "f:eviction": {".": {}, "f:safe": {}}, "f:nodeName": {}, "f:ports": {}}}},
   {"manager": "sdk-server", "operation": "Update", "apiVersion": "agones.dev/v1", "time": "2026-11-22T10:00:04Z", "fieldsType": "FieldsV1",
    "fieldsV1": {"f:metadata": {"f:annotations": {"f:agones.dev/ready-container-id": {}}},
     "f:status": {"f:counters": {".": {}, "f:rooms": {".": {}, "f:capacity": {}, "f:count": {}}},
      "f:lists": {".": {}, "f:players": {".": {}, "f:capacity": {}, "f:values": {}}},
      "f:players": {".": {}, "f:capacity": {}, "f:count": {}}, "f:reservedUntil": {}, "f:state": {}}}}]
 },
 "spec": {
  "container": "game",
  "ports": [{"name": "default", "portPolicy": "Dynamic", "container": "game", "containerPort": 7654, "protocol": "UDP", "hostPort": %[6]d}],
  "health": {"initialDelaySeconds": 5, "periodSeconds": 5, "failureThreshold": 3},
  "scheduling": "Packed",
  "sdkServer": {"logLevel": "Info", "grpcPort": 9357, "httpPort": 9358},
  "counters": {"rooms": {"count": 0, "capacity": 4}},
  "lists": {"players": {"capacity": 16, "values": []}},
  "template": {"metadata": {"creationTimestamp": null}, "spec": {"containers": [{
   "name": "game", "image": "registry.example.com/studio/game-server:2026.11.3",
   "args": ["--port", "7654", "--tickrate", "64", "--max-players", "16"],
   "env": [{"name": "GAME_MODE", "value": "ranked"}, {"name": "LOG_LEVEL", "value": "info"}, {"name": "REGION", "value": "eu-west"}],
   "resources": {"requests": {"cpu": "500m", "memory": "512Mi"}, "limits": {"cpu": "1", "memory": "1Gi"}}}],
   "terminationGracePeriodSeconds": 30, "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "gameservers", "effect": "NoSchedule"}]}}
 },
 "status": {
  "state": "Ready", "address": %[7]q, "nodeName": %[4]q,
  "addresses": [{"type": "InternalIP", "address": %[7]q}, {"type": "ExternalIP", "address": %[7]q}, {"type": "Hostname", "address": %[4]q}],
  "ports": [{"name": "default", "port": %[6]d}],
  "players": {"count": 0, "capacity": 0},
  "counters": {"rooms": {"count": 0, "capacity": 4}},
  "lists": {"players": {"capacity": 16, "values": []}},
  "eviction": {"safe": "Never"}, "reservedUntil": null
 }
}`, ns, name, fleet, node, set, 7000+i%1000, ip)
	var obj map[string]any
	if err := json.Unmarshal([]byte(doc), &obj); err != nil {
		panic(err) // the template above is a constant; a test run shows at once
	}
	return &unstructured.Unstructured{Object: obj}
}

// procMemory is a process's resident set and peak, from /proc.
func procMemory(pid int) (rss, peak int64, err error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		k, v, ok := strings.Cut(s.Text(), ":")
		if !ok || (k != "VmRSS" && k != "VmHWM") {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("%s: %q: %w", k, v, err)
		}
		if k == "VmRSS" {
			rss = kb << 10
		} else {
			peak = kb << 10
		}
	}
	return rss, peak, s.Err()
}

// metricValue reads one unlabelled gauge from a /metrics page.
func metricValue(page, name string) float64 {
	for line := range strings.Lines(page) {
		if rest, ok := strings.CutPrefix(line, name+" "); ok {
			v, _ := strconv.ParseFloat(strings.TrimSpace(rest), 64)
			return v
		}
	}
	return -1
}

// servedMemory is what one qm serve process holds once synced.
type servedMemory struct {
	rss, peak, heapInuse, heapAlloc int64
	live                            int64 // heap marked live by the last forced collection
	synced                          time.Duration
}

// serveAndMeasure starts qm serve on the cluster, waits until it has
// synced and settled, and reads its memory.
func serveAndMeasure(ctx context.Context, b *testing.B, qm, kubeconfig, ns string) servedMemory {
	dir := b.TempDir()
	ready := filepath.Join(dir, "ready.json")
	cmd := exec.CommandContext(ctx, qm, "serve", "--backend", "kubernetes", "--kubeconfig", kubeconfig,
		"--watch-namespace", ns, "--addr", "127.0.0.1:0", "--http-addr", "127.0.0.1:0",
		"--state-dir", dir, "--ready-file", ready, "--log-format", "json", "--sync-timeout", "10m")
	logf, err := os.Create(filepath.Join(dir, "serve.log"))
	if err != nil {
		b.Fatal(err)
	}
	defer logf.Close()
	cmd.Stdout, cmd.Stderr = logf, logf
	// The runtime's GC trace gives the live heap at each collection.
	cmd.Env = append(os.Environ(), "GODEBUG=gctrace=1")
	start := time.Now()
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() {
		_ = cmd.Process.Signal(os.Interrupt)
		_ = cmd.Wait()
	}()
	var addrs map[string]string
	var synced time.Duration
	for {
		if addrs == nil {
			if raw, err := os.ReadFile(ready); err == nil && json.Unmarshal(raw, &addrs) != nil {
				addrs = nil
			}
		}
		if addrs != nil {
			if resp, err := http.Get("http://" + addrs["http"] + "/ready"); err == nil {
				resp.Body.Close()
				if resp.StatusCode == http.StatusOK {
					synced = time.Since(start)
					break
				}
			}
		}
		if cmd.ProcessState != nil || ctx.Err() != nil {
			log, _ := os.ReadFile(filepath.Join(dir, "serve.log"))
			b.Fatalf("qm serve did not get ready: %v\n%s", ctx.Err(), log)
		}
		time.Sleep(100 * time.Millisecond)
	}
	// An idle process collects at least every two minutes: the first
	// collection after the sync has settled marks what the process really
	// holds, the initial list's garbage excluded.
	time.Sleep(2 * time.Second)
	readLog := func() string { log, _ := os.ReadFile(filepath.Join(dir, "serve.log")); return string(log) }
	_, before := gcLiveHeap(readLog())
	live := int64(-1)
	for deadline := time.Now().Add(150 * time.Second); time.Now().Before(deadline); time.Sleep(time.Second) {
		if l, n := gcLiveHeap(readLog()); n > before {
			live = l
			break
		}
	}
	if live < 0 {
		b.Fatalf("no collection within 150s of the sync")
	}
	resp, err := http.Get("http://" + addrs["http"] + "/metrics")
	if err != nil {
		b.Fatal(err)
	}
	page := new(strings.Builder)
	_, _ = bufio.NewReader(resp.Body).WriteTo(page)
	resp.Body.Close()
	rss, peak, err := procMemory(cmd.Process.Pid)
	if err != nil {
		b.Fatal(err)
	}
	return servedMemory{rss: rss, peak: peak, synced: synced, live: live,
		heapInuse: int64(metricValue(page.String(), "go_memstats_heap_inuse_bytes")),
		heapAlloc: int64(metricValue(page.String(), "go_memstats_heap_alloc_bytes"))}
}

func BenchmarkKubeMemory(b *testing.B) {
	n := envInt("QM_BENCH_SERVERS", 100000)
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Minute)
	defer cancel()
	qm := filepath.Join(b.TempDir(), "qm")
	if out, err := exec.CommandContext(ctx, "go", "build", "-o", qm, "../../cmd/qm").CombinedOutput(); err != nil {
		b.Fatalf("building qm: %v\n%s", err, out)
	}
	// etcd's default 2 GiB quota is room for about 300k such objects.
	c := kindcluster.NewForTest(b, kindcluster.Options{Name: "kube-memory", EtcdUnsafeNoFsync: true})
	api := kubetest.Clients(b, c)
	api.Namespace(b, ctx, "empty")
	api.Namespace(b, ctx, "fleet")
	// Many writers, and none of client-go's per-object warnings (Agones'
	// finalizer name draws one) on the benchmark's output.
	cfg := c.RESTConfig()
	cfg.QPS, cfg.Burst, cfg.WarningHandler = 5000, 5000, rest.NoWarnings{}
	dc, err := dynamic.NewForConfig(cfg)
	if err != nil {
		b.Fatal(err)
	}
	gss := dc.Resource(kube.GameServerResource).Namespace("fleet")
	sample, _ := json.Marshal(agonesSized("fleet", "fleet-a-00000", "fleet-a", "node-00", 0).Object)
	start := time.Now()
	if err := createAgonesSized(ctx, b, gss, n); err != nil {
		b.Fatal(err)
	}
	created, err := gss.Get(ctx, "fleet-a-00000", metav1.GetOptions{})
	if err != nil {
		b.Fatal(err)
	}
	stored, _ := json.Marshal(created.Object)
	b.Logf("created %d GameServers in %s; each %d bytes of JSON as sent, %d as the API server returns it", n, time.Since(start).Round(time.Second), len(sample), len(stored))
	b.ResetTimer()

	empty := serveAndMeasure(ctx, b, qm, c.KubeconfigPath(), "empty")
	full := serveAndMeasure(ctx, b, qm, c.KubeconfigPath(), "fleet")
	b.StopTimer()
	mib := func(x int64) float64 { return float64(x) / (1 << 20) }
	b.Logf("no GameServers:  RSS %.0f MiB (peak %.0f), live heap %.0f MiB", mib(empty.rss), mib(empty.peak), mib(empty.live))
	b.Logf("%d GameServers: RSS %.0f MiB (peak %.0f), heap in use %.0f MiB, live heap %.0f MiB; synced in %s",
		n, mib(full.rss), mib(full.peak), mib(full.heapInuse), mib(full.live), full.synced.Round(time.Millisecond))
	perServer := float64(full.rss-empty.rss) / float64(n)
	b.Logf("per GameServer: %.0f bytes of RSS, %.0f of live heap; peak RSS is %.2f of the manifest's %d MiB limit",
		perServer, float64(full.live-empty.live)/float64(n), float64(full.peak)/manifestMemoryLimit, manifestMemoryLimit>>20)
	if path := os.Getenv("QM_BENCH_HEAPPROFILE"); path != "" {
		heapProfile(ctx, b, c, path)
	}
	b.ReportMetric(mib(full.rss), "MiB-rss")
	b.ReportMetric(mib(full.peak), "MiB-peak-rss")
	b.ReportMetric(perServer, "B-rss/server")
	b.ReportMetric(float64(full.live-empty.live)/float64(n), "B-live/server")
	b.ReportMetric(float64(full.peak)/manifestMemoryLimit, "peak/limit")
}

// createAgonesSized creates n Agones-sized GameServers in fleets of 1,000
// with 16 writers, printing progress every 10,000.
func createAgonesSized(ctx context.Context, b *testing.B, gss dynamic.ResourceInterface, n int) error {
	next := atomic.Int64{}
	var done atomic.Int64
	var wg sync.WaitGroup
	var firstErr atomic.Value
	for range 16 {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= n || firstErr.Load() != nil {
					return
				}
				fleet := fmt.Sprintf("fleet-%c", 'a'+i/1000%26) + strconv.Itoa(i/26000)
				u := agonesSized("fleet", fmt.Sprintf("%s-%06d", fleet, i), fleet, fmt.Sprintf("node-%03d", i/8), i)
				if i == 0 {
					u = agonesSized("fleet", "fleet-a-00000", "fleet-a", "node-00", 0)
				}
				if _, err := gss.Create(ctx, u, metav1.CreateOptions{FieldManager: "controller"}); err != nil {
					firstErr.CompareAndSwap(nil, fmt.Errorf("creating GameServer %d: %w", i, err))
					return
				}
				if d := done.Add(1); d%10000 == 0 {
					b.Logf("  %d created", d)
				}
			}
		})
	}
	wg.Wait()
	if err, _ := firstErr.Load().(error); err != nil {
		return err
	}
	return nil
}

// heapProfile syncs a backend in this process and writes a heap profile
// of what it keeps (QM_BENCH_HEAPPROFILE=FILE), to see where the bytes go.
func heapProfile(ctx context.Context, b *testing.B, c *kindcluster.Cluster, path string) {
	be, err := kube.New(kube.Config{REST: c.RESTConfig(), Namespace: "fleet"})
	if err != nil {
		b.Fatal(err)
	}
	bctx, stop := context.WithCancel(ctx)
	defer stop()
	if err := be.Start(bctx); err != nil {
		b.Fatal(err)
	}
	runtime.GC()
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	if err := pprof.WriteHeapProfile(f); err != nil {
		b.Fatal(err)
	}
	runtime.KeepAlive(be)
}

// gcLiveHeap reads a GODEBUG=gctrace=1 log ("gc N @t s: ... A->B->C MB,
// ..."): the live heap C of the last collection, and how many there were.
func gcLiveHeap(log string) (live int64, collections int) {
	live = -1
	for line := range strings.Lines(log) {
		if !strings.HasPrefix(line, "gc ") {
			continue
		}
		for _, f := range strings.Split(line, ",") {
			f = strings.TrimSpace(f)
			if !strings.HasSuffix(f, " MB") || strings.Count(f, "->") != 2 {
				continue
			}
			parts := strings.Split(strings.TrimSuffix(f, " MB"), "->")
			if mb, err := strconv.ParseInt(parts[2], 10, 64); err == nil {
				live, collections = mb<<20, collections+1
			}
		}
	}
	return live, collections
}
