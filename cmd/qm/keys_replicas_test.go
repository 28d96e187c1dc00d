package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"sort"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/quartermaster-dev/quartermaster/allocator"
	"github.com/quartermaster-dev/quartermaster/allocator/mtls"
	"github.com/quartermaster-dev/quartermaster/allocator/pb/allocation"
	"github.com/quartermaster-dev/quartermaster/certs"
	"github.com/quartermaster-dev/quartermaster/core"
	"github.com/quartermaster-dev/quartermaster/kindcluster/kubetest"
)

// Issue 30's load test: three `qm serve --backend kubernetes` processes on
// one real API server, callers sending every keyed request twice (to two
// different replicas, half of them at once, half after a delay), some
// requests without a key, and a third of all requests cancelled at a random
// moment. A caller that got no answer for a key sends it once more at the
// end, as a matchmaker that cares would. Then the callers' answers are
// compared with the GameServer objects on the API server: every key
// answered one server, no two keys share one, and the Allocated servers are
// exactly those some caller was told about, but for one kind: a request
// without a key whose caller gave up while the answer was on its way back
// (the server committed and answered before it could see the cancel). No
// allocator can tell that answer was never read; only a key closes it. So
// requests without a key use a fleet of their own, and the servers
// Allocated there that no caller knows of may be at most the answers the
// replicas sent for that fleet (their metrics) that no caller received.
func TestKeysAcrossReplicasUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a real kube-apiserver and three qm serve processes")
	}
	const (
		keys     = 100 // each sent twice
		unkeyed  = 40
		servers  = keys + 40    // for keyed requests, fleet green
		loose    = unkeyed + 20 // for requests without a key, fleet blue
		workers  = 24
		maxDelay = 150 * time.Millisecond // of a duplicate sent later
		maxAbort = 60 * time.Millisecond  // a cancelled request's life
	)
	api := kubetest.Start(t, "keys-replicas")
	c := api.Cluster
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	api.CreateFleet(t, ctx, "default", "green", 0, servers)
	api.CreateFleet(t, ctx, "default", "blue", 0, loose)
	gsClient := api.GameServers("default")

	// One certificate directory for the three replicas (as one Secret
	// mounted in three pods), made before any of them starts.
	state := t.TempDir()
	certDir := filepath.Join(state, "certs")
	if _, err := certs.Generate(certs.GenerateOptions{Dir: certDir, Hosts: []string{"localhost", "127.0.0.1", "::1"},
		Clients: devIdentities, Now: time.Now()}); err != nil {
		t.Fatal(err)
	}
	var clients []allocation.AllocationServiceClient
	var httpAddrs []string
	for i := range 3 {
		ready := filepath.Join(t.TempDir(), "ready.json")
		startQM(t, kubeServeArgs(c.KubeconfigPath(), state, "--lease-namespace", "default", "--ready-file", ready)...)
		addrs := waitReadyFile(t, ready)
		addr := addrs["grpc"]
		httpAddrs = append(httpAddrs, addrs["http"])
		tlsCfg, err := mtls.ClientConfigFromDir(certDir, "alice")
		if err != nil {
			t.Fatal(err)
		}
		conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(tlsCfg)))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		clients = append(clients, allocation.NewAllocationServiceClient(conn))
		t.Logf("replica %d serves gRPC on %s", i, addr)
	}

	// The history: every answer, by key ("" for requests without one).
	type answer struct {
		key, server string
		replica     int
		cancelled   bool
		err         error
	}
	var mu sync.Mutex
	var history []answer
	send := func(replica int, key string, abort bool, rng *rand.Rand) {
		fleet := "green"
		if key == "" {
			fleet = "blue"
		}
		req := &allocation.AllocationRequest{Namespace: "default",
			GameServerSelectors: []*allocation.GameServerSelector{{MatchLabels: map[string]string{core.FleetLabel: fleet}}}}
		if key != "" {
			req.Metadata = &allocation.MetaPatch{Annotations: map[string]string{allocator.AllocationKeyAnnotation: key}}
		}
		rctx, rcancel := context.WithTimeout(ctx, 30*time.Second)
		defer rcancel()
		if abort {
			d := time.Duration(rng.Int64N(int64(maxAbort)))
			var stop context.CancelFunc
			rctx, stop = context.WithTimeout(rctx, d)
			defer stop()
		}
		resp, err := clients[replica].Allocate(rctx, req)
		// The server may end a request at its deadline a moment before
		// the caller's own timer fires: either way it was given up.
		code := status.Code(err)
		a := answer{key: key, replica: replica, err: err, cancelled: abort && (code == codes.DeadlineExceeded || code == codes.Canceled)}
		if err == nil {
			a.server = resp.GameServerName
		}
		mu.Lock()
		history = append(history, a)
		mu.Unlock()
	}

	// The schedule: each key's two copies and the unkeyed requests, in a
	// shuffled order, run by a pool of callers.
	type job func(rng *rand.Rand)
	var jobs []job
	for k := range keys {
		key := fmt.Sprintf("match-%03d", k)
		first, second := k%3, (k+1)%3
		together := k%2 == 0
		jobs = append(jobs, func(rng *rand.Rand) {
			// Everything random is drawn here, before the copies start:
			// each copy then has a generator of its own (rng is not safe
			// for two goroutines at once).
			abortA, abortB := rng.IntN(3) == 0, rng.IntN(3) == 0
			delay := time.Duration(rng.Int64N(int64(maxDelay)))
			rngA := rand.New(rand.NewPCG(rng.Uint64(), uint64(k)))
			rngB := rand.New(rand.NewPCG(rng.Uint64(), uint64(k)))
			var wg sync.WaitGroup
			wg.Go(func() { send(first, key, abortA, rngA) })
			if !together {
				time.Sleep(delay)
			}
			wg.Go(func() { send(second, key, abortB, rngB) })
			wg.Wait()
		})
	}
	for u := range unkeyed {
		jobs = append(jobs, func(rng *rand.Rand) { send(u%3, "", rng.IntN(3) == 0, rng) })
	}
	order := rand.New(rand.NewPCG(30, 1))
	order.Shuffle(len(jobs), func(i, j int) { jobs[i], jobs[j] = jobs[j], jobs[i] })
	queue := make(chan job)
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 7))
			for j := range queue {
				j(rng)
			}
		})
	}
	for _, j := range jobs {
		queue <- j
	}
	close(queue)
	wg.Wait()

	// A key no copy got an answer for is sent once more, to a third replica.
	answered := map[string]bool{}
	for _, a := range history {
		if a.key != "" && a.err == nil {
			answered[a.key] = true
		}
	}
	retried := 0
	for k := range keys {
		key := fmt.Sprintf("match-%03d", k)
		if !answered[key] {
			retried++
			send((k+2)%3, key, false, nil)
		}
	}

	// The callers' view.
	byKey := map[string]string{} // key -> its server
	known := map[string]string{} // server -> the key (or "" unkeyed) it was answered for
	cancelled, failed, unkeyedOK := 0, 0, 0
	for _, a := range history {
		if a.err != nil {
			if a.cancelled {
				cancelled++
			} else {
				failed++
				t.Errorf("key %q on replica %d: %v", a.key, a.replica, a.err)
			}
			continue
		}
		if a.key == "" {
			unkeyedOK++
		} else if prev, ok := byKey[a.key]; ok && prev != a.server {
			t.Errorf("key %s answered two servers: %s and %s", a.key, prev, a.server)
		} else {
			byKey[a.key] = a.server
		}
		if prev, ok := known[a.server]; ok && (prev != a.key || a.key == "") {
			t.Errorf("server %s answered for %q and for %q", a.server, prev, a.key)
		}
		known[a.server] = a.key
	}
	if len(byKey) != keys {
		t.Errorf("%d of %d keys answered after the retries", len(byKey), keys)
	}

	// The API server's view, once the replicas have given back what
	// cancelled requests without a key left behind.
	var allocated map[string]string
	var extra, unread, missing []string
	deadline := time.Now().Add(20 * time.Second)
	for {
		allocated = map[string]string{}
		l, err := gsClient.List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, u := range l.Items {
			if st, _, _ := unstructured.NestedString(u.Object, "status", "state"); st == "Allocated" {
				allocated[u.GetName()] = u.GetAnnotations()[allocator.AllocationKeyAnnotation]
			}
		}
		extra, unread, missing = nil, nil, nil
		for name, key := range allocated {
			switch k, ok := known[name]; {
			case !ok && key == "":
				unread = append(unread, name)
			case !ok || k != key:
				extra = append(extra, fmt.Sprintf("%s (key %q)", name, key))
			}
		}
		for name := range known {
			if _, ok := allocated[name]; !ok {
				missing = append(missing, name)
			}
		}
		if len(extra) == 0 && len(unread) == 0 && len(missing) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	sort.Strings(extra)
	sort.Strings(missing)
	if len(extra) > 0 {
		t.Errorf("%d servers Allocated that no caller knows of (or for another key): %v", len(extra), extra)
	}
	if len(missing) > 0 {
		t.Errorf("%d servers answered but not Allocated: %v", len(missing), missing)
	}
	var sent int64
	for _, a := range httpAddrs {
		sent += allocationsOK(t, a, `fleet="blue"`)
	}
	inFlight := sent - int64(unkeyedOK)
	sort.Strings(unread)
	if int64(len(unread)) > inFlight {
		t.Errorf("%d servers Allocated without a key that no caller knows of, but only %d answers without a key were sent and not received (a cancelled allocation not given back): %v",
			len(unread), inFlight, unread)
	}
	if got, want := len(allocated), keys+unkeyedOK+len(unread); got != want {
		t.Errorf("%d servers Allocated, want %d: one per key, one per unkeyed answer, %d answers lost on their way", got, want, len(unread))
	}
	t.Logf("%d answers (%d cancelled, %d failed, %d keys retried at the end); %d keys and %d unkeyed requests answered (%d sent); %d servers Allocated, %d of them answers lost on their way",
		len(history), cancelled, failed, retried, len(byKey), unkeyedOK, sent, len(allocated), len(unread))
}

// waitReadyFile waits for qm serve's --ready-file and returns its
// addresses ("grpc", "http", ...).
func waitReadyFile(t *testing.T, path string) map[string]string {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		var addrs map[string]string
		if b, err := os.ReadFile(path); err == nil && json.Unmarshal(b, &addrs) == nil && addrs["grpc"] != "" {
			return addrs
		}
		if time.Now().After(deadline) {
			t.Fatalf("no ready file %s within 30s", path)
		}
	}
}
