package kind

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/quartermaster-dev/quartermaster/allocator/pb/allocation"
)

// LiveEnv turns TestKindRig on where Docker and kind's node image exist
// (QM_KIND_E2E=1 go test -run TestKindRig ./kindcluster/kind/): it builds
// the image and makes real kind clusters, minutes of work that `go test
// ./...` must not start on its own. It is the quick check of the provider
// alone; make e2e-multicluster PROVIDER=kind runs the whole e2e suite.
const LiveEnv = "QM_KIND_E2E"

// TestKindRig brings the example rig up on kind and checks burst to cloud
// end to end: the on-prem cluster serves while it has a Ready server, the
// next request is forwarded to the cloud over kind's network, and the
// GameServer objects on both API servers agree with what the caller got.
func TestKindRig(t *testing.T) {
	if err := Check(context.Background(), Options{}, nil); err != nil {
		var m *MissingError
		if errors.As(err, &m) {
			t.Skip(err.Error())
		}
		t.Fatal(err)
	}
	if os.Getenv(LiveEnv) == "" {
		t.Skipf("Docker and kind's node image are here; %s=1 (make e2e-multicluster PROVIDER=kind) runs the rig on kind", LiveEnv)
	}
	top := loadExample(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	r, err := Up(ctx, top, Options{Dir: t.TempDir() + "/rig", Build: true, Log: testLog{t}, HostAddress: os.Getenv(HostAddressEnv), LinkListen: os.Getenv(LinkListenEnv)})
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := r.Stop(); err != nil {
			t.Error(err)
		}
	}()

	cert, err := tls.LoadX509KeyPair(r.Certs.ClientCert(CallerIdentity), r.Certs.ClientKey(CallerIdentity))
	if err != nil {
		t.Fatal(err)
	}
	ca, err := os.ReadFile(r.Certs.CACert())
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	conn, err := grpc.NewClient(r.Clusters[0].CallerAddr, grpc.WithTransportCredentials(credentials.NewTLS(
		&tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: pool, MinVersion: tls.VersionTLS12})))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	client := allocation.NewAllocationServiceClient(conn)
	req := &allocation.AllocationRequest{
		MultiClusterSetting: &allocation.MultiClusterSetting{Enabled: true,
			PolicySelector: &allocation.LabelSelector{MatchLabels: map[string]string{"route": "burst"}}},
		GameServerSelectors: []*allocation.GameServerSelector{{MatchLabels: map[string]string{"game": "shooter"}}},
	}
	onPrem := top.Spec.Clusters[0].Fleets[0].Replicas
	sources := map[string]int{}
	for n := range onPrem + 1 {
		rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
		resp, err := client.Allocate(rctx, req)
		rcancel()
		if err != nil {
			t.Fatalf("allocation %d: %v", n, err)
		}
		sources[resp.GetSource()]++
	}
	// The cloud answers through on-prem's link to it, which the policy
	// names.
	toCloud := r.Proxies.Find("on-prem", "cloud")[0].Addr()
	if sources["local"] != onPrem || sources[toCloud] != 1 {
		t.Errorf("sources %v: want %d local (on-prem) and then 1 from %s", sources, onPrem, toCloud)
	}
	for i, want := range []int{onPrem, 1} {
		if got := allocatedOn(ctx, t, r.Clusters[i].Kubeconfig, top.Spec.Namespace); got != want {
			t.Errorf("cluster %s holds %d Allocated GameServers, want %d", r.Clusters[i].Name, got, want)
		}
	}
}

func allocatedOn(ctx context.Context, t *testing.T, kubeconfig, ns string) int {
	t.Helper()
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		t.Fatal(err)
	}
	dc, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	gvr := schema.GroupVersionResource{Group: "agones.dev", Version: "v1", Resource: "gameservers"}
	list, err := dc.Resource(gvr).Namespace(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, gs := range list.Items {
		if st, _, _ := unstructured.NestedString(gs.Object, "status", "state"); st == "Allocated" {
			n++
		}
	}
	return n
}

type testLog struct{ t *testing.T }

func (l testLog) Write(p []byte) (int, error) {
	l.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
