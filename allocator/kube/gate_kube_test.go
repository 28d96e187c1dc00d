//go:build unix

package kube_test

// BenchmarkGateKube is the kubernetes backend as the performance gate
// measures it (mk/report.sh, reports/README.md): the allocator's CPU time
// per allocation on a real API server, with its heap allocations and
// bytes per allocation.
//
// The CPU is this process's (getrusage), which holds the backend: its
// writes to the API server, the watch events its informer decodes and its
// index. The API server and etcd are processes of their own, so their CPU
// is not in the figure. One caller allocates one server at a time from a
// fleet of fresh GameServers in a namespace of the sample's own.
//
// QM_GATE_KUBECONFIG names a running API server's kubeconfig (with the
// CRDs installed: `qm cluster up` prints one), which mk/report.sh starts
// once for all samples of both sides; without it the benchmark starts a
// local cluster of its own (seconds), as the suite does.
//
//	go test -run '^$' -bench GateKube -benchtime 200x ./allocator/kube/
//
// Metrics: cpu-ns/op (over batches of gateKubeBatch operations, the lower
// quartile of this process's user and system CPU per allocation;
// cpu-mean-ns/op is the same over the whole sample, reported only),
// server-allocs/op and server-B/op (its heap allocations and bytes per
// allocation, from runtime/metrics, as the other gate benchmarks name the
// measured side's).

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/quartermaster-dev/quartermaster/allocator/kube"
	"github.com/quartermaster-dev/quartermaster/core"
	"github.com/quartermaster-dev/quartermaster/internal/gatebench"
	"github.com/quartermaster-dev/quartermaster/kindcluster"
)

// gateKubeconfigEnv names the kubeconfig of a running API server.
const gateKubeconfigEnv = "QM_GATE_KUBECONFIG"

// gateKubeWarmUp allocations come before the measurement.
const gateKubeWarmUp = 20

// gateGameServer is a Ready GameServer of fleet "gate" as Agones writes
// one.
func gateGameServer(ns, name string, node int) (*unstructured.Unstructured, error) {
	var obj map[string]any
	err := json.Unmarshal(fmt.Appendf(nil, `{
	  "apiVersion": "agones.dev/v1", "kind": "GameServer",
	  "metadata": {"name": %q, "namespace": %q, "labels": {%q: "gate"}, "annotations": {"agones.dev/sdk-version": "1.60.0"}},
	  "spec": {"container": "gs", "ports": [{"name": "default", "portPolicy": "Dynamic", "containerPort": 7654, "protocol": "UDP"}],
	    "template": {"metadata": {"creationTimestamp": null}, "spec": {"containers": [{"name": "gs", "image": "example/gs:0.1",
	      "resources": {"requests": {"cpu": "20m"}}}]}}},
	  "status": {"state": "Ready", "address": "10.0.0.7", "nodeName": "node-%02d",
	    "addresses": [{"type": "InternalIP", "address": "10.0.0.7"}], "ports": [{"name": "default", "port": 7001}],
	    "players": {"count": 0, "capacity": 0}, "eviction": {"safe": "Never"}}}`, name, ns, core.FleetLabel, node), &obj)
	return &unstructured.Unstructured{Object: obj}, err
}

// gateRESTConfig is the API server to measure against: QM_GATE_KUBECONFIG's,
// or a local cluster started for this benchmark.
func gateRESTConfig(b *testing.B) *rest.Config {
	if path := os.Getenv(gateKubeconfigEnv); path != "" {
		cfg, err := clientcmd.BuildConfigFromFlags("", path)
		if err != nil {
			b.Fatalf("%s=%s: %v", gateKubeconfigEnv, path, err)
		}
		return cfg
	}
	return kindcluster.NewForTest(b, kindcluster.Options{Name: "kube-gate", EtcdUnsafeNoFsync: true}).RESTConfig()
}

func BenchmarkGateKube(b *testing.B) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cfg := gateRESTConfig(b)
	// The sample's own writes (namespace, servers) must not wait on
	// client-go's default rate limit.
	cfg.QPS, cfg.Burst = kube.DefaultQPS, kube.DefaultBurst
	suffix := make([]byte, 4)
	if _, err := rand.Read(suffix); err != nil {
		b.Fatal(err)
	}
	ns := "gate-" + hex.EncodeToString(suffix)
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		b.Fatal(err)
	}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	dc, err := dynamic.NewForConfig(cfg)
	if err != nil {
		b.Fatal(err)
	}
	gss := dc.Resource(kube.GameServerResource).Namespace(ns)
	// A bare API server runs no namespace controller, so the sample's
	// GameServers are deleted by hand, leaving a shared server as it was.
	b.Cleanup(func() {
		_ = gss.DeleteCollection(context.Background(), metav1.DeleteOptions{}, metav1.ListOptions{})
		_ = cs.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{})
	})
	servers := gateKubeServers()
	if err := gateCreateServers(ctx, gss, ns, servers); err != nil {
		b.Fatal(err)
	}
	be, err := kube.New(kube.Config{REST: cfg, Namespace: ns, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		b.Fatal(err)
	}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	if err := be.Start(runCtx); err != nil {
		b.Fatal(err)
	}
	req, err := core.Normalize(&core.Request{Namespace: ns, Selectors: []core.Selector{{MatchLabels: map[string]string{core.FleetLabel: "gate"}}}})
	if err != nil {
		b.Fatal(err)
	}
	seed := uint64(0)
	allocate := func() {
		seed++
		if _, err := be.Allocate(ctx, req, time.Now(), seed); err != nil {
			b.Fatalf("allocation %d of %d servers: %v", seed, servers, err)
		}
	}
	for range gateKubeWarmUp {
		allocate()
	}
	sample := gatebench.NewSampler(b, gateKubeBatch, gatebench.Self)
	for b.Loop() {
		if sample.Ops()+gateKubeWarmUp >= servers {
			b.Fatalf("more allocations than the sample's %d servers: give -benchtime as a count (200x)", servers)
		}
		allocate()
		sample.Done()
	}
	// The informer's watch events for the last writes are part of their
	// cost; a moment lets them arrive before the last reading.
	time.Sleep(100 * time.Millisecond)
	sample.Report(b)
}

// gateKubeBatch is how many allocations one reading of this process's
// CPU covers (gatebench.Sampler).
const gateKubeBatch = 20

// gateKubeServers is how many servers a sample needs: the warm-up and
// the -benchtime count's allocations (a duration allows for 500).
func gateKubeServers() int {
	if f := flag.Lookup("test.benchtime"); f != nil {
		if v, ok := strings.CutSuffix(f.Value.String(), "x"); ok {
			if n, err := strconv.Atoi(v); err == nil && n > 0 {
				return n + gateKubeWarmUp + 1
			}
		}
	}
	return 500
}

// gateCreateServers creates n Ready GameServers of fleet "gate" in ns.
func gateCreateServers(ctx context.Context, gss dynamic.ResourceInterface, ns string, n int) error {
	next := make(chan int)
	errs := make(chan error, 1)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for i := range next {
				u, err := gateGameServer(ns, fmt.Sprintf("gate-%05d", i), i%16)
				if err == nil {
					_, err = gss.Create(ctx, u, metav1.CreateOptions{})
				}
				if err != nil {
					select {
					case errs <- fmt.Errorf("creating GameServer %d of %d: %w", i, n, err):
					default:
					}
				}
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
	select {
	case err := <-errs:
		return err
	default:
		return nil
	}
}
