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
	"github.com/quartermaster-dev/quartermaster/allocator/kube"
	"github.com/quartermaster-dev/quartermaster/allocator/mtls"
	"github.com/quartermaster-dev/quartermaster/allocator/pb/allocation"
	"github.com/quartermaster-dev/quartermaster/certs"
	"github.com/quartermaster-dev/quartermaster/core"
	"github.com/quartermaster-dev/quartermaster/kindcluster"
)

// Issue 30's load test: three `qm serve --backend kubernetes` processes on
// one real API server, callers sending every keyed request twice (to two
// different replicas, half of them at once, half after a delay), some
// requests without a key, and a third of all requests cancelled at a random
// moment. A caller that got no answer for a key sends it once more at the
// end, as a matchmaker that cares would. Then the callers' answers are
// compared with the GameServer objects on the API server: every key
// answered one server, no two keys share one, and the Allocated servers are
// exactly those some caller was told about.
func TestKeysAcrossReplicasUnderLoad(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a real kube-apiserver and three qm serve processes")
	}
	const (
		keys     = 100 // each sent twice
		unkeyed  = 40
		servers  = keys + unkeyed + 40
		workers  = 24
		maxDelay = 150 * time.Millisecond // of a duplicate sent later
		maxAbort = 60 * time.Millisecond  // a cancelled request's life
	)
	c := kindcluster.NewForTest(t, kindcluster.Options{Name: "keys-replicas", EtcdUnsafeNoFsync: true})
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()

	gss, err := c.Dynamic()
	if err != nil {
		t.Fatal(err)
	}
	gsClient := gss.Resource(kube.GameServerResource).Namespace("default")
	for i := range servers {
		if _, err := gsClient.Create(ctx, readyGameServer(t, fmt.Sprintf("gs-%03d", i)), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	// One certificate directory for the three replicas (as one Secret
	// mounted in three pods), made before any of them starts.
	state := t.TempDir()
	certDir := filepath.Join(state, "certs")
	if _, err := certs.Generate(certs.GenerateOptions{Dir: certDir, Hosts: []string{"localhost", "127.0.0.1", "::1"},
		Clients: devIdentities, Now: time.Now()}); err != nil {
		t.Fatal(err)
	}
	var clients []allocation.AllocationServiceClient
	for i := range 3 {
		ready := filepath.Join(t.TempDir(), "ready.json")
		startQM(t, kubeServeArgs(c.KubeconfigPath(), state, "--lease-namespace", "default", "--ready-file", ready)...)
		addr := waitReadyFile(t, ready)
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
		req := &allocation.AllocationRequest{Namespace: "default",
			GameServerSelectors: []*allocation.GameServerSelector{{MatchLabels: map[string]string{core.FleetLabel: "green"}}}}
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
	var extra, missing []string
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
		extra, missing = nil, nil
		for name, key := range allocated {
			if k, ok := known[name]; !ok || k != key {
				extra = append(extra, fmt.Sprintf("%s (key %q)", name, key))
			}
		}
		for name := range known {
			if _, ok := allocated[name]; !ok {
				missing = append(missing, name)
			}
		}
		if len(extra) == 0 && len(missing) == 0 || time.Now().After(deadline) {
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
	if got, want := len(allocated), keys+unkeyedOK; got != want {
		t.Errorf("%d servers Allocated, want %d: one per key and one per unkeyed answer", got, want)
	}
	t.Logf("%d answers (%d cancelled, %d failed, %d keys retried at the end); %d keys and %d unkeyed requests answered; %d servers Allocated",
		len(history), cancelled, failed, retried, len(byKey), unkeyedOK, len(allocated))
}

// readyGameServer is a Ready GameServer of fleet green in namespace default.
func readyGameServer(t *testing.T, name string) *unstructured.Unstructured {
	t.Helper()
	var obj map[string]any
	if err := json.Unmarshal([]byte(fmt.Sprintf(`{
	  "apiVersion": "agones.dev/v1", "kind": "GameServer",
	  "metadata": {"name": %q, "namespace": "default", "labels": {"agones.dev/fleet": "green"}},
	  "spec": {"container": "gs", "ports": [{"name": "default", "portPolicy": "Dynamic", "containerPort": 7654, "protocol": "UDP"}],
	    "template": {"spec": {"containers": [{"name": "gs", "image": "example/gs:0.1"}]}}},
	  "status": {"state": "Ready", "address": "10.0.0.7", "nodeName": "node-1", "ports": [{"name": "default", "port": 7001}]}}`, name)), &obj); err != nil {
		t.Fatal(err)
	}
	return &unstructured.Unstructured{Object: obj}
}

// waitReadyFile waits for qm serve's --ready-file and returns its gRPC address.
func waitReadyFile(t *testing.T, path string) string {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		var addrs map[string]string
		if b, err := os.ReadFile(path); err == nil && json.Unmarshal(b, &addrs) == nil && addrs["grpc"] != "" {
			return addrs["grpc"]
		}
		if time.Now().After(deadline) {
			t.Fatalf("no ready file %s within 30s", path)
		}
	}
}
