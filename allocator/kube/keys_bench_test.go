//go:build unix

package kube_test

// BenchmarkKeys is what an idempotency key costs on the kubernetes backend:
// one caller allocating one server at a time on a real API server, as
// BenchmarkGateKube does, in three modes, each on a fleet of its own in a
// namespace of its own:
//
//   - unkeyed: requests without a key (the backend's path untouched);
//   - keyed: every request with a fresh key (the record's create, the
//     allocation, the record's update);
//   - replay: the keyed mode's keys sent again from a second replica (the
//     record's read and the server's read; nothing written).
//
// Per allocation it reports this process's CPU (cpu-ns/op: the backend and
// its informer), the API server's and etcd's (apiserver-cpu-ns/op,
// etcd-cpu-ns/op, from /proc), and its heap allocations. Give -benchtime as
// a count:
//
//	go test -run '^$' -bench Keys -benchtime 200x ./allocator/kube/

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/quartermaster-dev/quartermaster/allocator"
	"github.com/quartermaster-dev/quartermaster/allocator/kube"
	"github.com/quartermaster-dev/quartermaster/core"
	"github.com/quartermaster-dev/quartermaster/internal/gatebench"
	"github.com/quartermaster-dev/quartermaster/kindcluster"
	"github.com/quartermaster-dev/quartermaster/kindcluster/kubetest"
)

func BenchmarkKeys(b *testing.B) {
	cl := kindcluster.NewForTest(b, kindcluster.Options{Name: "kube-keys", EtcdUnsafeNoFsync: true})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cfg := cl.RESTConfig()
	cfg.QPS, cfg.Burst = kube.DefaultQPS, kube.DefaultBurst
	api := kubetest.Clients(b, cl)
	for _, mode := range []string{"unkeyed", "keyed", "replay"} {
		b.Run(mode, func(b *testing.B) {
			ns := fmt.Sprintf("keys-%s-%d", mode, time.Now().UnixNano())
			api.Namespace(b, ctx, ns)
			servers := gateKubeServers()
			if err := gateCreateServers(ctx, api.GameServers(ns), ns, servers); err != nil {
				b.Fatal(err)
			}
			runCtx, stop := context.WithCancel(ctx)
			defer stop()
			replica := func() *kube.Backend {
				be, err := kube.New(kube.Config{REST: cfg, Namespace: ns, KeyNamespace: ns, Logger: slog.New(slog.DiscardHandler)})
				if err != nil {
					b.Fatal(err)
				}
				if err := be.Start(runCtx); err != nil {
					b.Fatal(err)
				}
				return be
			}
			be := replica()
			reqFor := func(key string) *core.Request {
				r := &core.Request{Namespace: ns, Selectors: []core.Selector{{MatchLabels: map[string]string{core.FleetLabel: "gate"}}},
					Metadata: core.MetaPatch{Annotations: map[string]string{allocator.OwnerAnnotation: "bench"}}}
				if key != "" {
					r.Metadata.Annotations[allocator.AllocationKeyAnnotation] = key
				}
				n, err := core.Normalize(r)
				if err != nil {
					b.Fatal(err)
				}
				return n
			}
			unkeyed := reqFor("")
			seed := uint64(0)
			allocate := func(on *kube.Backend, key string) {
				seed++
				req := unkeyed
				if key != "" {
					req = reqFor(key)
				}
				if _, err := on.Allocate(ctx, req, time.Now(), seed); err != nil {
					b.Fatalf("allocation %d of %d servers: %v", seed, servers, err)
				}
			}
			keyOf := func(i int) string {
				if mode == "unkeyed" {
					return ""
				}
				return fmt.Sprintf("k-%d", i)
			}
			on := be
			if mode == "replay" {
				// The keys are made first, on the first replica; the
				// second replays them.
				for i := range servers - 1 {
					allocate(be, keyOf(i))
				}
				on = replica()
			}
			for i := range gateKubeWarmUp {
				allocate(on, keyOf(i))
			}
			before, cpu0 := gatebench.Self(b), readCPU(cl)
			ops := 0
			for b.Loop() {
				if ops+gateKubeWarmUp >= servers-1 {
					b.Fatalf("more allocations than the sample's %d servers: give -benchtime as a count (200x)", servers)
				}
				allocate(on, keyOf(gateKubeWarmUp+ops))
				ops++
			}
			// The informer's watch events for the last writes are part
			// of their cost.
			time.Sleep(100 * time.Millisecond)
			after, cpu := gatebench.Self(b), readCPU(cl).sub(cpu0)
			n := float64(ops)
			b.ReportMetric(float64(after.CPUNs-before.CPUNs)/n, "cpu-ns/op")
			b.ReportMetric(float64(cpu.apiserver.Nanoseconds())/n, "apiserver-cpu-ns/op")
			b.ReportMetric(float64(cpu.etcd.Nanoseconds())/n, "etcd-cpu-ns/op")
			b.ReportMetric(float64(after.Objects-before.Objects)/n, "heap-allocs/op")
		})
	}
}
