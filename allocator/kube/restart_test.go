package kube_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/quartermaster-dev/quartermaster/allocator/kube"
	"github.com/quartermaster-dev/quartermaster/core"
	"github.com/quartermaster-dev/quartermaster/kindcluster"
	"github.com/quartermaster-dev/quartermaster/kindcluster/kubetest"
)

// The API server goes away in the middle of allocation load and comes back
// on the same port. This spec needs a cluster of its own to restart.
var _ = Describe("an API server restart during allocation load", func() {
	It("recovers, resyncs, and neither loses nor duplicates an allocation", func() {
		ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
		DeferCleanup(cancel)
		bin, err := kindcluster.DefaultBinDir()
		Expect(err).NotTo(HaveOccurred())
		rc, err := kindcluster.Start(ctx, kindcluster.Options{Name: "kube-restart", BinDir: bin, EtcdUnsafeNoFsync: true})
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(func() {
			if CurrentSpecReport().Failed() {
				GinkgoWriter.Println(rc.LogTail())
			}
			Expect(rc.Stop()).To(Succeed())
		})

		const ns, servers, replicas, workers = "restart", 600, 2, 8
		rapi := kubetest.Clients(GinkgoTB(), rc)
		rapi.Namespace(GinkgoTB(), ctx, ns)
		gss := rapi.GameServers(ns)
		rapi.CreateFleet(GinkgoTB(), ctx, ns, "green", 0, servers)

		var backends []*kube.Backend
		for i := range replicas {
			b, err := kube.New(kube.Config{REST: rc.RESTConfig(), Namespace: ns, PackedSpread: 8, ReplicaShard: i, Replicas: replicas})
			Expect(err).NotTo(HaveOccurred())
			Expect(b.Start(ctx)).To(Succeed())
			backends = append(backends, b)
		}

		// Load: every worker allocates until told to stop, and records what
		// the backend reported successful.
		type success struct {
			name, allocatedAt string
		}
		var (
			mu        sync.Mutex
			successes []success
			failures  atomic.Int64
			afterUp   atomic.Int64
			exited    atomic.Int64 // workers that saw the fleet used up
			lastErr   atomic.Value // the newest failure's text, for the failure message
			restarted atomic.Bool
			stop      = make(chan struct{})
			wg        sync.WaitGroup
		)
		req := request(&core.Request{Namespace: ns, Selectors: []core.Selector{{MatchLabels: map[string]string{core.FleetLabel: "green"}}}})
		for w := range workers {
			wg.Go(func() {
				defer GinkgoRecover()
				b := backends[w%replicas]
				for i := 0; ; i++ {
					select {
					case <-stop:
						return
					case <-ctx.Done():
						return
					default:
					}
					// Until the API server is back, keep most of the fleet for
					// after the restart: a slow stop must not let the load use
					// it all up before the outage begins.
					mu.Lock()
					held := len(successes)
					mu.Unlock()
					if !restarted.Load() && held >= servers/3 {
						time.Sleep(20 * time.Millisecond)
						continue
					}
					cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
					a, err := b.Allocate(cctx, req, time.Now(), uint64(w<<32|i))
					ccancel()
					if err != nil {
						failures.Add(1)
						lastErr.Store(fmt.Sprintf("%T: %v", err, err))
						if errors.Is(err, core.ErrNoMatch) && restarted.Load() {
							exited.Add(1)
							return // the fleet is used up
						}
						time.Sleep(20 * time.Millisecond) // do not spin while the server is away
						continue
					}
					mu.Lock()
					successes = append(successes, success{a.GameServer.Name, a.GameServer.LastAllocated()})
					mu.Unlock()
					if restarted.Load() {
						afterUp.Add(1)
					}
				}
			})
		}
		// Some load first, then the outage.
		Eventually(func() int { mu.Lock(); defer mu.Unlock(); return len(successes) }, time.Minute, 10*time.Millisecond).Should(BeNumerically(">=", 50))
		mu.Lock()
		before := len(successes)
		mu.Unlock()
		Expect(rc.StopAPIServer()).To(Succeed())
		time.Sleep(time.Second) // the informers' watches break; allocations fail
		Expect(rc.StartAPIServer(ctx)).To(Succeed())
		restarted.Store(true)
		// Allocation resumes through the same backends.
		Eventually(afterUp.Load, 90*time.Second, 50*time.Millisecond).Should(BeNumerically(">=", 100), func() string {
			// What the workers were doing, for a failure that only says
			// how far allocation got.
			mu.Lock()
			defer mu.Unlock()
			return fmt.Sprintf("allocations after the restart (%d before the outage, %d in all of %d servers; %d failed attempts, the last %v; %d of %d workers stopped on no match)",
				before, len(successes), servers, failures.Load(), lastErr.Load(), exited.Load(), workers)
		})
		close(stop)
		wg.Wait()
		GinkgoWriter.Printf("allocations: %d before the outage, %d in all, %d after the restart; %d failed attempts\n",
			before, len(successes), afterUp.Load(), failures.Load())

		// Resync: a fleet created after the restart is seen by every
		// replica, and each replica's view of the old one matches the server.
		rapi.CreateFleet(GinkgoTB(), ctx, ns, "blue", 0, 5)
		for i, b := range backends {
			Eventually(func() error {
				_, err := b.Allocate(ctx, fleetRequest(ns, "blue"), time.Now(), uint64(i))
				return err
			}, 30*time.Second, 50*time.Millisecond).Should(Succeed(), "replica %d sees a fleet made after the restart", i)
		}
		list, err := gss.List(ctx, metav1.ListOptions{})
		Expect(err).NotTo(HaveOccurred())
		serverState := map[string]string{}
		allocated := map[string]string{} // name -> last-allocated
		for _, u := range list.Items {
			st := nestedString(u.Object, "status", "state")
			serverState[u.GetName()] = st
			if st == "Allocated" && u.GetLabels()[core.FleetLabel] == "green" {
				allocated[u.GetName()] = u.GetAnnotations()[core.LastAllocatedAnnotation]
			}
		}
		for i, b := range backends {
			Eventually(func() []string {
				var diff []string
				for _, gs := range b.Index().List() {
					if want := serverState[gs.Name]; want != string(gs.State) {
						diff = append(diff, fmt.Sprintf("%s: index %s, server %s", gs.Name, gs.State, want))
					}
				}
				if n := b.Index().Len(); n != len(serverState) {
					diff = append(diff, fmt.Sprintf("index holds %d servers, the API server %d", n, len(serverState)))
				}
				return diff
			}, 30*time.Second, 100*time.Millisecond).Should(BeEmpty(), "replica %d's index matches the API server", i)
		}

		// No duplicates: each server reported at most once. Nothing lost:
		// every reported allocation is Allocated on the API server, as it was
		// reported (same allocation time, so not overwritten by another).
		seen := map[string]bool{}
		for _, s := range successes {
			Expect(seen[s.name]).To(BeFalse(), "%s allocated twice", s.name)
			seen[s.name] = true
			Expect(allocated).To(HaveKeyWithValue(s.name, s.allocatedAt), "reported allocation of %s is on the API server", s.name)
		}
		// An Update the API server committed while its answer was lost to
		// the outage shows up as Allocated but unreported; a graceful
		// shutdown drains requests in flight, so expect none or very few.
		unreported := len(allocated) - len(successes)
		GinkgoWriter.Printf("Allocated on the server: %d, reported: %d, unreported: %d\n", len(allocated), len(successes), unreported)
		Expect(unreported).To(BeNumerically("<=", 2*workers), "allocations committed but never reported")
	})
})
