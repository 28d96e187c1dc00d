package multicluster_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/quartermaster-dev/quartermaster/allocator/pb/allocation"
	qmv1 "github.com/quartermaster-dev/quartermaster/allocator/pb/quartermaster/v1"
	"github.com/quartermaster-dev/quartermaster/kindcluster"
	"github.com/quartermaster-dev/quartermaster/kindcluster/rig"
)

// TestMultiCluster runs the multi-cluster e2e suite on a rig of real API
// servers, allocators and fleet agents (`make e2e-multicluster`; also part
// of `make test`, skipped only under -short).
func TestMultiCluster(t *testing.T) {
	if testing.Short() {
		t.Skip("brings up a multi-cluster rig of real API servers; skipped under -short")
	}
	RegisterFailHandler(Fail)
	RunSpecs(t, "multi-cluster e2e")
}

var (
	theRig *rig.Rig
	client *tls.Config
	// conns are the callers' connections, per cluster and replica, through
	// the callers' links.
	conns = map[string][]*grpc.ClientConn{}
)

const fleetSize = 30

var gameServers = schema.GroupVersionResource{Group: "agones.dev", Version: "v1", Resource: "gameservers"}
var fleetsGVR = schema.GroupVersionResource{Group: "agones.dev", Version: "v1", Resource: "fleets"}

var _ = BeforeSuite(func(ctx SpecContext) {
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

	top, err := rig.Load("testdata/topology.yaml")
	Expect(err).NotTo(HaveOccurred())
	start := time.Now()
	theRig, err = rig.Up(ctx, top, rig.Options{
		Dir: filepath.Join(GinkgoT().TempDir(), "rig"), QM: qm, BinDir: binDir, Log: GinkgoWriter,
	})
	Expect(err).NotTo(HaveOccurred())
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
	GinkgoWriter.Printf("rig up in %v\n", time.Since(start).Round(time.Millisecond))

	client = callerTLS(theRig.Certs)
	for _, c := range theRig.Clusters {
		for _, addr := range theRig.CallerAddrs(c.Name) {
			conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(client)))
			Expect(err).NotTo(HaveOccurred())
			conns[c.Name] = append(conns[c.Name], conn)
		}
	}
}, NodeTimeout(5*time.Minute))

func callerTLS(l interface {
	ClientCert(string) string
	ClientKey(string) string
	CACert() string
}) *tls.Config {
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
	for _, l := range theRig.Proxies.All() {
		if l.Addr() == resp.GetSource() {
			return l.To
		}
	}
	return "unknown source " + resp.GetSource()
}

// allocatedOn lists the names of the Allocated GameServers on a cluster's
// API server.
func allocatedOn(ctx context.Context, cluster string) []string {
	dc, err := theRig.Cluster(cluster).Kube.Dynamic()
	Expect(err).NotTo(HaveOccurred())
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
	dc, err := theRig.Cluster(cluster).Kube.Dynamic()
	Expect(err).NotTo(HaveOccurred())
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

// releaseAll gives back every allocation on every cluster (the callers'
// identity is an admin on the rig) and waits for the fleets to be whole.
func releaseAll(ctx context.Context) {
	for _, c := range theRig.Clusters {
		admin := qmv1.NewAllocationAdminClient(conns[c.Name][0])
		list, err := admin.List(ctx, &qmv1.ListRequest{AllOwners: true})
		Expect(err).NotTo(HaveOccurred())
		for _, a := range list.GetAllocations() {
			_, err := admin.Release(ctx, &qmv1.ReleaseRequest{Namespace: a.GetNamespace(), GameServerName: a.GetGameServerName()})
			Expect(err).NotTo(HaveOccurred())
		}
	}
	for _, c := range theRig.Clusters {
		Eventually(func(ctx context.Context) int { return readyOn(ctx, c.Name) }).WithContext(ctx).
			WithTimeout(2*time.Minute).WithPolling(250*time.Millisecond).Should(BeNumerically(">=", fleetSize), "cluster %s Ready", c.Name)
		Eventually(func(ctx context.Context) []string { return allocatedOn(ctx, c.Name) }).WithContext(ctx).
			WithTimeout(time.Minute).Should(BeEmpty())
	}
}

func scaleFleet(ctx context.Context, cluster string, replicas int) {
	dc, err := theRig.Cluster(cluster).Kube.Dynamic()
	Expect(err).NotTo(HaveOccurred())
	patch := fmt.Sprintf(`{"spec":{"replicas":%d}}`, replicas)
	_, err = dc.Resource(fleetsGVR).Namespace("default").Patch(ctx, "game", types.MergePatchType, []byte(patch), metav1.PatchOptions{})
	Expect(err).NotTo(HaveOccurred())
	// Exactly: a fleet scaled down still has its extra servers until the
	// agent has deleted them.
	Eventually(func(ctx context.Context) [2]int { return [2]int{readyOn(ctx, cluster), countOn(ctx, cluster)} }).WithContext(ctx).
		WithTimeout(3*time.Minute).WithPolling(500*time.Millisecond).Should(Equal([2]int{replicas, replicas}), "cluster %s: Ready and all servers after scaling", cluster)
}

func countOn(ctx context.Context, cluster string) int {
	dc, err := theRig.Cluster(cluster).Kube.Dynamic()
	Expect(err).NotTo(HaveOccurred())
	list, err := dc.Resource(gameServers).Namespace("default").List(ctx, metav1.ListOptions{})
	if err != nil {
		return -1
	}
	return len(list.Items)
}

// metric reads the sum of a counter's samples whose labels include every
// one of want, from an allocator's /metrics.
func metric(ctx context.Context, httpAddr, name string, want ...string) float64 {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+httpAddr+"/metrics", nil)
	Expect(err).NotTo(HaveOccurred())
	resp, err := http.DefaultClient.Do(req)
	Expect(err).NotTo(HaveOccurred())
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	Expect(err).NotTo(HaveOccurred())
	sum := 0.0
lines:
	for _, line := range strings.Split(string(out), "\n") {
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
