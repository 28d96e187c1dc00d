package multicluster_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/quartermaster-dev/quartermaster/allocator/pb/allocation"
	qmv1 "github.com/quartermaster-dev/quartermaster/allocator/pb/quartermaster/v1"
	"github.com/quartermaster-dev/quartermaster/certs"
	"github.com/quartermaster-dev/quartermaster/kindcluster"
	"github.com/quartermaster-dev/quartermaster/kindcluster/rig"
)

// TestMultiCluster runs the multi-cluster e2e suite on a rig of real API
// servers, allocators and fleet agents (`make e2e-multicluster`; also part
// of `make test`, skipped only under -short). With QM_E2E_PROVIDER=kind
// (`make e2e-multicluster PROVIDER=kind`) the same specs run on kind
// clusters instead, or are skipped with one line where Docker, kind's node
// image or kubectl is missing (KIND_REQUIRED=1 makes that a failure).
func TestMultiCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("brings up a multi-cluster rig of real API servers; skipped under -short")
	}
	RegisterFailHandler(Fail)
	RunSpecs(t, "multi-cluster e2e")
}

var (
	// theRig is the running rig, local or kind: the specs reach it only
	// through rig.Handle.
	theRig rig.Handle
	client *tls.Config
	// conns are the callers' connections, per cluster and replica, through
	// the callers' links.
	conns = map[string][]*grpc.ClientConn{}
	// dynamics are the clusters' API clients, made once.
	dynamics   = map[string]dynamic.Interface{}
	clientsets = map[string]kubernetes.Interface{}
)

const fleetSize = 30

var gameServers = schema.GroupVersionResource{Group: "agones.dev", Version: "v1", Resource: "gameservers"}
var fleetsGVR = schema.GroupVersionResource{Group: "agones.dev", Version: "v1", Resource: "fleets"}

var _ = BeforeSuite(func(ctx SpecContext) {
	top, err := rig.Load("testdata/topology.yaml")
	Expect(err).NotTo(HaveOccurred())
	start := time.Now()
	switch p := provider(); p {
	case rig.ProviderLocal:
		theRig = upLocal(ctx, top)
	case rig.ProviderKind:
		theRig = upKind(ctx, top)
	default:
		Fail(fmt.Sprintf("%s=%s: want %s or %s", providerEnv, p, rig.ProviderLocal, rig.ProviderKind))
	}
	DeferCleanup(func() {
		if out := os.Getenv("QM_E2E_OUT"); out != "" {
			Expect(measured.write(out)).To(Succeed())
			GinkgoWriter.Printf("results: %s\n", out)
		}
		for _, cs := range conns {
			for _, c := range cs {
				c.Close()
			}
		}
		Expect(theRig.Stop()).To(Succeed())
	})
	GinkgoWriter.Printf("rig up on %s in %v\n", provider(), time.Since(start).Round(time.Millisecond))

	client = callerTLS(theRig.CallerCerts())
	for _, name := range theRig.ClusterNames() {
		for _, addr := range theRig.CallerAddrs(name) {
			conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(client)),
				// Back soon after an allocator is: on kind an API-server
				// restart restarts the allocators too, and grpc's default
				// backoff would keep the callers away for up to two
				// minutes after.
				grpc.WithConnectParams(grpc.ConnectParams{
					Backoff:           backoff.Config{BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: 2 * time.Second},
					MinConnectTimeout: 5 * time.Second,
				}))
			Expect(err).NotTo(HaveOccurred())
			conns[name] = append(conns[name], conn)
		}
		cfg, err := theRig.RESTConfig(name)
		Expect(err).NotTo(HaveOccurred())
		dynamics[name], err = dynamic.NewForConfig(cfg)
		Expect(err).NotTo(HaveOccurred())
		clientsets[name], err = kubernetes.NewForConfig(cfg)
		Expect(err).NotTo(HaveOccurred())
	}
}, NodeTimeout(setupTimeout()))

// providerEnv chooses the rig's provider: local (the default) or kind.
const providerEnv = "QM_E2E_PROVIDER"

func provider() string {
	if p := os.Getenv(providerEnv); p != "" {
		return p
	}
	return rig.ProviderLocal
}

// setupTimeout bounds bringing the rig up: a minute or so locally; on
// kind, building the image and creating a cluster per topology cluster.
func setupTimeout() time.Duration {
	if provider() == rig.ProviderKind {
		return 30 * time.Minute
	}
	return 5 * time.Minute
}

// upLocal brings the rig up on this machine: etcd and kube-apiserver
// processes, the qm of this tree as allocators and fleet agents.
func upLocal(ctx context.Context, top *rig.Topology) rig.Handle {
	binDir, err := kindcluster.DefaultBinDir()
	Expect(err).NotTo(HaveOccurred())
	Expect(kindcluster.CheckBinaries(binDir, kindcluster.EtcdBinary, kindcluster.APIServerBinary)).To(Succeed())

	// The rig runs the qm of this tree, built once.
	qm := filepath.Join(GinkgoT().TempDir(), "qm")
	build := exec.CommandContext(ctx, "go", "build", "-o", qm, "./cmd/qm")
	build.Dir = filepath.Dir(filepath.Dir(binDir)) // the module root holds bin/
	if st, err := os.Stat(filepath.Join(build.Dir, "go.mod")); err != nil || st.IsDir() {
		build.Dir = filepath.Join("..", "..")
	}
	out, err := build.CombinedOutput()
	Expect(err).NotTo(HaveOccurred(), "go build ./cmd/qm: %s", out)

	r, err := rig.Up(ctx, top, rig.Options{
		Dir: filepath.Join(GinkgoT().TempDir(), "rig"), QM: qm, BinDir: binDir, Log: GinkgoWriter,
	})
	Expect(err).NotTo(HaveOccurred())
	return r
}

func callerTLS(l certs.Layout) *tls.Config {
	cert, err := tls.LoadX509KeyPair(l.ClientCert(rig.CallerIdentity), l.ClientKey(rig.CallerIdentity))
	Expect(err).NotTo(HaveOccurred())
	ca, err := os.ReadFile(l.CACert())
	Expect(err).NotTo(HaveOccurred())
	pool := x509.NewCertPool()
	Expect(pool.AppendCertsFromPEM(ca)).To(BeTrue())
	return &tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: pool, MinVersion: tls.VersionTLS12}
}

// multi is a multi-cluster request for the shooter fleets by the policies
// of one route.
func multi(route string) *allocation.AllocationRequest {
	return &allocation.AllocationRequest{
		MultiClusterSetting: &allocation.MultiClusterSetting{
			Enabled:        true,
			PolicySelector: &allocation.LabelSelector{MatchLabels: map[string]string{"route": route}},
		},
		GameServerSelectors: []*allocation.GameServerSelector{{MatchLabels: map[string]string{"game": "shooter"}}},
	}
}

func allocate(ctx context.Context, conn *grpc.ClientConn, req *allocation.AllocationRequest, deadline time.Duration) (*allocation.AllocationResponse, time.Duration, error) {
	ctx, cancel := context.WithTimeout(ctx, deadline)
	defer cancel()
	start := time.Now()
	resp, err := allocation.NewAllocationServiceClient(conn).Allocate(ctx, req)
	return resp, time.Since(start), err
}

// clusterOf names the cluster that served a response to a request that
// entered at entry: "local" is entry itself, anything else a link's
// address.
func clusterOf(entry string, resp *allocation.AllocationResponse) string {
	if resp.GetSource() == "local" {
		return entry
	}
	for _, l := range theRig.Links().All() {
		if l.Addr() == resp.GetSource() {
			return l.To
		}
	}
	return "unknown source " + resp.GetSource()
}

// allocatedOn lists the names of the Allocated GameServers on a cluster's
// API server.
func allocatedOn(ctx context.Context, cluster string) []string {
	dc := dynamics[cluster]
	list, err := dc.Resource(gameServers).Namespace("default").List(ctx, metav1.ListOptions{})
	Expect(err).NotTo(HaveOccurred())
	var out []string
	for _, gs := range list.Items {
		if st, _, _ := unstructured.NestedString(gs.Object, "status", "state"); st == "Allocated" {
			out = append(out, gs.GetName())
		}
	}
	return out
}

func readyOn(ctx context.Context, cluster string) int {
	dc := dynamics[cluster]
	list, err := dc.Resource(gameServers).Namespace("default").List(ctx, metav1.ListOptions{})
	if err != nil {
		return 0
	}
	n := 0
	for _, gs := range list.Items {
		if st, _, _ := unstructured.NestedString(gs.Object, "status", "state"); st == "Ready" {
			n++
		}
	}
	return n
}

// releaseWorkers is how many Release calls releaseAll has in flight.
const releaseWorkers = 8

// releaseAll gives back every allocation on every cluster (the callers'
// identity is an admin on the rig) and waits for the fleets to be whole.
func releaseAll(ctx context.Context) {
	for _, c := range theRig.ClusterNames() {
		admin := qmv1.NewAllocationAdminClient(conns[c][0])
		// Eventually: after a restart the callers' connection may still
		// be waiting to reconnect.
		var list *qmv1.ListResponse
		Eventually(func(ctx context.Context) (err error) {
			list, err = admin.List(ctx, &qmv1.ListRequest{AllOwners: true})
			return err
		}).WithContext(ctx).WithTimeout(time.Minute).WithPolling(500 * time.Millisecond).Should(Succeed())
		// Several at a time: after the spread spec there are thousands,
		// each an update through the cluster's API server.
		allocs := make(chan *qmv1.Allocation)
		errs := make(chan error, releaseWorkers)
		for range releaseWorkers {
			go func() {
				var first error
				for a := range allocs {
					if _, err := admin.Release(ctx, &qmv1.ReleaseRequest{Namespace: a.GetNamespace(), GameServerName: a.GetGameServerName()}); err != nil && first == nil {
						first = fmt.Errorf("release %s/%s: %w", a.GetNamespace(), a.GetGameServerName(), err)
					}
				}
				errs <- first
			}()
		}
		for _, a := range list.GetAllocations() {
			allocs <- a
		}
		close(allocs)
		for range releaseWorkers {
			Expect(<-errs).NotTo(HaveOccurred())
		}
	}
	for _, c := range theRig.ClusterNames() {
		Eventually(func(ctx context.Context) int { return readyOn(ctx, c) }).WithContext(ctx).
			WithTimeout(2*time.Minute).WithPolling(250*time.Millisecond).Should(BeNumerically(">=", fleetSize), "cluster %s Ready", c)
		Eventually(func(ctx context.Context) []string { return allocatedOn(ctx, c) }).WithContext(ctx).
			WithTimeout(time.Minute).Should(BeEmpty())
	}
}

func scaleFleet(ctx context.Context, cluster string, replicas int) {
	dc := dynamics[cluster]
	patch := fmt.Sprintf(`{"spec":{"replicas":%d}}`, replicas)
	_, err := dc.Resource(fleetsGVR).Namespace("default").Patch(ctx, "game", types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	Expect(err).NotTo(HaveOccurred())
	// Exactly: a fleet scaled down still has its extra servers until the
	// agent has deleted them.
	Eventually(func(ctx context.Context) [2]int { return [2]int{readyOn(ctx, cluster), countOn(ctx, cluster)} }).WithContext(ctx).
		WithTimeout(3*time.Minute).WithPolling(500*time.Millisecond).Should(Equal([2]int{replicas, replicas}), "cluster %s: Ready and all servers after scaling", cluster)
}

func countOn(ctx context.Context, cluster string) int {
	dc := dynamics[cluster]
	list, err := dc.Resource(gameServers).Namespace("default").List(ctx, metav1.ListOptions{})
	if err != nil {
		return -1
	}
	return len(list.Items)
}

// metric reads the sum of a counter's samples whose labels include every
// one of want, over every allocator replica of a cluster.
func metric(ctx context.Context, cluster, name string, want ...string) float64 {
	text, err := theRig.Metrics(ctx, cluster)
	Expect(err).NotTo(HaveOccurred())
	sum := 0.0
lines:
	for _, line := range strings.Split(text, "\n") {
		if !strings.HasPrefix(line, name+"{") {
			continue
		}
		for _, w := range want {
			if !strings.Contains(line, w) {
				continue lines
			}
		}
		var v float64
		fields := strings.Fields(line)
		if _, err := fmt.Sscan(fields[len(fields)-1], &v); err == nil {
			sum += v
		}
	}
	return sum
}

// replicaMetric is metric for each allocator replica of a cluster apart,
// in the order Handle.Metrics gives them: its text is every replica's
// exposition one after another, and a replica's starts where a metric
// family seen already in the current one comes again.
func replicaMetric(ctx context.Context, cluster, name string, want ...string) []float64 {
	text, err := theRig.Metrics(ctx, cluster)
	Expect(err).NotTo(HaveOccurred())
	var out []float64
	var seen map[string]bool
lines:
	for _, line := range strings.Split(text, "\n") {
		if family, ok := strings.CutPrefix(line, "# HELP "); ok {
			family, _, _ = strings.Cut(family, " ")
			if seen == nil || seen[family] {
				seen = map[string]bool{}
				out = append(out, 0)
			}
			seen[family] = true
			continue
		}
		if !strings.HasPrefix(line, name+"{") || len(out) == 0 {
			continue
		}
		for _, w := range want {
			if !strings.Contains(line, w) {
				continue lines
			}
		}
		var v float64
		fields := strings.Fields(line)
		if _, err := fmt.Sscan(fields[len(fields)-1], &v); err == nil {
			out[len(out)-1] += v
		}
	}
	return out
}
