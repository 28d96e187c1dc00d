package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/quartermaster-dev/quartermaster/allocator/kube"
	"github.com/quartermaster-dev/quartermaster/kindcluster/kubetest"
)

// Three `qm serve --backend kubernetes` processes with no replica flags
// find each other through Leases and take a shard each; a killed one
// (SIGKILL: its Lease stays behind) is dropped once its Lease expires, a
// stopped one (SIGTERM) at once, because it deletes its Lease.
func TestServeReplicasFindEachOther(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a real kube-apiserver and three qm serve processes")
	}
	api := kubetest.Start(t, "replicas")
	c := api.Cluster
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var ps []*qmProcess
	var bases []string
	for range 3 {
		p := startQM(t, kubeServeArgs(c.KubeconfigPath(), t.TempDir(), "--lease-namespace", "default")...)
		ps = append(ps, p)
		bases = append(bases, p.healthAddr(t))
	}
	replicasAre := func(n int) func(map[string]any) bool {
		return func(m map[string]any) bool { return m["replicas"] == float64(n) }
	}
	shards := map[float64]bool{}
	for i, p := range ps {
		p.waitLog(t, 30*time.Second, "replicas changed", replicasAre(3))
		// The metrics say the same, once every replica has seen all three.
		var got map[string]float64
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
			got = scrape(t, bases[i]+"/metrics", "qm_allocator_replicas", "qm_allocator_replica_shard", "qm_allocator_packed_spread")
			if got["qm_allocator_replicas"] == 3 || time.Now().After(deadline) {
				break
			}
		}
		if got["qm_allocator_replicas"] != 3 || got["qm_allocator_packed_spread"] != 64 {
			t.Fatalf("replica %d metrics %v, want 3 replicas and spread 64", i, got)
		}
		shards[got["qm_allocator_replica_shard"]] = true
	}
	if len(shards) != 3 {
		t.Fatalf("shards %v, want 0, 1 and 2 once each", shards)
	}
	leases, err := api.Core.CoordinationV1().Leases("default").List(ctx, metav1.ListOptions{LabelSelector: kube.GroupLabel})
	if err != nil || len(leases.Items) != 3 {
		t.Fatalf("leases: %v, %v; want 3", leases, err)
	}

	// Killed: the others notice when its Lease expires.
	marks := []int{len(ps[1].logLines()), len(ps[2].logLines())}
	killed := time.Now()
	if err := ps[0].cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	for i, p := range ps[1:] {
		p.waitLog(t, 15*time.Second, "replicas changed", after(p, marks[i], replicasAre(2)))
	}
	took := time.Since(killed)
	t.Logf("a killed replica was dropped after %s", took.Round(time.Millisecond))
	if took > 15*time.Second {
		t.Fatalf("a killed replica was dropped after %s, want within 15s", took)
	}

	// Stopped: it deletes its Lease, and the last one is alone at once.
	mark := len(ps[2].logLines())
	stopped := time.Now()
	if err := ps[1].cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := ps[1].wait(t, 30*time.Second); err != nil {
		t.Fatalf("after SIGTERM: %v, want exit 0", err)
	}
	ps[1].waitLog(t, time.Second, "replica Lease released", nil)
	ps[2].waitLog(t, 5*time.Second, "replicas changed", after(ps[2], mark, replicasAre(1)))
	t.Logf("a stopped replica was dropped after %s", time.Since(stopped).Round(time.Millisecond))
	// The killed replica's Lease is cleaned up two durations after its last
	// renewal; by then only the survivor's is left.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		leases, err = api.Core.CoordinationV1().Leases("default").List(ctx, metav1.ListOptions{LabelSelector: kube.GroupLabel})
		if err != nil {
			t.Fatal(err)
		}
		if len(leases.Items) == 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d leases left, want the survivor's only", len(leases.Items))
		}
	}
}

// after matches only lines logged after the first mark lines of p.
func after(p *qmProcess, mark int, match func(map[string]any) bool) func(map[string]any) bool {
	return func(m map[string]any) bool {
		lines := p.logLines()
		for _, l := range lines[min(mark, len(lines)):] {
			if fmt.Sprint(l) == fmt.Sprint(m) {
				return match(m)
			}
		}
		return false
	}
}

// scrape reads the named unlabelled metrics from a Prometheus text page.
func scrape(t *testing.T, url string, names ...string) map[string]float64 {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, line := range strings.Split(string(body), "\n") {
		f := strings.Fields(line)
		if len(f) != 2 {
			continue
		}
		for _, n := range names {
			if f[0] == n {
				v, err := strconv.ParseFloat(f[1], 64)
				if err != nil {
					t.Fatalf("%s: %v", line, err)
				}
				out[n] = v
			}
		}
	}
	return out
}
