package kind

import (
	"context"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"sigs.k8s.io/kind/pkg/apis/config/v1alpha4"

	kindcluster "github.com/quartermaster-dev/quartermaster/kindcluster"
	"github.com/quartermaster-dev/quartermaster/kindcluster/rig"
)

// apiServerDocker stands in for docker where a kind node would be: its
// `docker restart --time 0 NODE` restarts a real local API server, as restarting a
// kind node restarts the cluster's; every command is recorded.
// Being no dry run (no Notef), it makes the Rig wait for real.
type apiServerDocker struct {
	node      string
	cluster   *kindcluster.Cluster
	restarted chan struct{} // closed once the API server is back

	mu   sync.Mutex
	runs []string
}

var errNotKind = errors.New("not a kind cluster")

func (d *apiServerDocker) Create(string, *v1alpha4.Cluster, string, string, time.Duration) error {
	return errNotKind
}
func (d *apiServerDocker) KubeConfig(string) (string, error) { return "", errNotKind }
func (d *apiServerDocker) LoadImage(string, string) error    { return errNotKind }
func (d *apiServerDocker) Delete(string, string) error       { return errNotKind }

func (d *apiServerDocker) Run(ctx context.Context, c kindcluster.Command) ([]byte, error) {
	d.mu.Lock()
	d.runs = append(d.runs, c.String())
	d.mu.Unlock()
	if c.Path == "docker" && strings.Join(c.Args, " ") == "restart --time 0 "+d.node {
		err := d.cluster.RestartAPIServer(ctx)
		close(d.restarted)
		return nil, err
	}
	return nil, fmt.Errorf("unexpected command %s", c)
}

// handleRig is a kind Rig over a real local API server standing in for the
// on-prem kind cluster, as Up would have left it (without Up, which needs
// Docker): its kubeconfig, certificates, and runner.
func handleRig(t *testing.T, c *kindcluster.Cluster, runner Runner) *Rig {
	t.Helper()
	top := loadExample(t)
	dir := t.TempDir()
	r := &Rig{Topology: top, Dir: dir, HostAddress: "172.18.0.1", Proxies: rig.NewProxies(), httpPort: 8080,
		opts: Options{Runner: runner, Wait: time.Minute}}
	r.opts.defaults()
	t.Cleanup(r.Proxies.Close)
	for i, tc := range top.Spec.Clusters {
		r.Clusters = append(r.Clusters, Cluster{Name: tc.Name, Kind: ClusterName(tc.Name), Kubeconfig: c.KubeconfigPath(), CallerAddr: CallerAddr(i, r.opts)})
		if err := os.MkdirAll(r.manifestsDir(tc.Name), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.makeCerts(r.HostAddress); err != nil {
		t.Fatal(err)
	}
	return r
}

// TestHandleOnAPIServer drives the kind Rig's Handle methods that talk to
// a cluster, against a real kube-apiserver standing in for the on-prem
// kind cluster: a Secret rotation lands on the API server, an API-server
// restart returns only once the allocator and agent pods are Ready again
// after it (a Ready condition from before does not count), and the
// metrics of every allocator pod are read through the API server's pod
// proxy.
func TestHandleOnAPIServer(t *testing.T) {
	c := kindcluster.NewForTest(t, kindcluster.Options{Name: "kind-handle", EtcdUnsafeNoFsync: true})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	docker := &apiServerDocker{node: NodeHost("on-prem"), cluster: c, restarted: make(chan struct{})}
	r := handleRig(t, c, docker)
	var h rig.Handle = r
	cfg, err := h.RESTConfig("on-prem")
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}

	t.Run("rotation", func(t *testing.T) {
		dc, err := dynamic.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		objs, err := rig.PolicyObjects(r.Topology, "on-prem", linkEndpoints(r.Topology, 0, r.HostAddress, r.opts.LinkPort), r.Certs)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range objs {
			if o.GetKind() == "Secret" {
				if _, err := dc.Resource(schema.GroupVersionResource{Version: "v1", Resource: "secrets"}).Namespace(o.GetNamespace()).Create(ctx, o, metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
		}
		secret := func() []byte {
			s, err := cs.CoreV1().Secrets("default").Get(ctx, rig.SecretName("cloud"), metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			return s.Data["tls.crt"]
		}
		before := secret()
		if err := h.RotateSecrets(ctx, "on-prem"); err != nil {
			t.Fatal(err)
		}
		after := secret()
		if string(after) == string(before) {
			t.Fatal("the Secret on the API server still holds the old certificate")
		}
		block, _ := pem.Decode(after)
		if block == nil {
			t.Fatal("the rotated tls.crt is not PEM")
		}
		cert, err := x509.ParseCertificate(block.Bytes)
		if err != nil {
			t.Fatal(err)
		}
		ca, err := os.ReadFile(r.Certs.CACert())
		if err != nil {
			t.Fatal(err)
		}
		pool := x509.NewCertPool()
		pool.AppendCertsFromPEM(ca)
		if _, err := cert.Verify(x509.VerifyOptions{Roots: pool, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
			t.Errorf("the rotated certificate does not chain to the rig's CA: %v", err)
		}
		if file, err := os.ReadFile(filepath.Join(r.manifestsDir("on-prem"), "40-policies.yaml")); err != nil || !strings.Contains(string(file), "172.18.0.1:29444") {
			t.Errorf("policies manifest after rotation: %v, want it rewritten with the links", err)
		}
	})

	// The allocator and agent pods as a kubelet would have reported them
	// before the restart: Ready an hour ago. Their IP is this machine's,
	// where a /metrics server listens, so the pod proxy reaches it.
	ns := allocatorNamespace
	if _, err := cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	podIP, metricsPort := metricsServer(t)
	r.httpPort = metricsPort
	pods := map[string]string{"qm-allocator-0": allocatorName, "qm-fleet-agent-0": agentName}
	setReady := func(at time.Time) {
		t.Helper()
		for name := range pods {
			p, err := cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			p.Status.Phase = corev1.PodRunning
			p.Status.PodIP = podIP
			p.Status.PodIPs = []corev1.PodIP{{IP: podIP}}
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(at)}}
			if _, err := cs.CoreV1().Pods(ns).UpdateStatus(ctx, p, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	for name, app := range pods {
		_, err := cs.CoreV1().Pods(ns).Create(ctx, &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app.kubernetes.io/name": app}},
			Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: DefaultImage}}},
		}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
	}
	setReady(time.Now().Add(-time.Hour))

	t.Run("metrics", func(t *testing.T) {
		text, err := h.Metrics(ctx, "on-prem")
		if err != nil {
			t.Fatal(err)
		}
		if text != "qm_forward_tries_total{cluster=\"cloud\",outcome=\"breaker_open\"} 3\n" {
			t.Errorf("metrics through the pod proxy: %q", text)
		}
	})

	t.Run("restart", func(t *testing.T) {
		done := make(chan error, 1)
		go func() { done <- h.RestartAPIServer(ctx, "on-prem") }()
		select {
		case <-docker.restarted:
		case err := <-done:
			t.Fatalf("RestartAPIServer returned (%v) before the API server was back", err)
		}
		// Long enough for a wait that trusted the Ready conditions from
		// before the restart to have returned.
		select {
		case err := <-done:
			t.Fatalf("RestartAPIServer returned (%v) while the pods were still Ready from before the restart", err)
		case <-time.After(1500 * time.Millisecond):
		}
		setReady(time.Now())
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(30 * time.Second):
			t.Fatal("RestartAPIServer did not return once the pods were Ready again")
		}
		docker.mu.Lock()
		runs := strings.Join(docker.runs, "\n")
		docker.mu.Unlock()
		if runs != "docker restart --time 0 qm-on-prem-control-plane" {
			t.Errorf("commands: %q, want the one docker restart", runs)
		}
	})

	if err := h.RestartAPIServer(ctx, "edge"); err == nil || !strings.Contains(err.Error(), `no cluster "edge"`) {
		t.Errorf("restart of an unknown cluster: %v", err)
	}
}

// metricsServer serves one counter at /metrics on this machine's first
// address that a pod proxy may reach (not loopback, which the API server
// refuses), and returns the address and port; it skips the test where
// there is none.
func metricsServer(t *testing.T) (string, int) {
	t.Helper()
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		t.Fatal(err)
	}
	ip := ""
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLoopback() && !n.IP.IsLinkLocalUnicast() {
			ip = n.IP.String()
			break
		}
	}
	if ip == "" {
		t.Skip("no non-loopback IPv4 address for a pod proxy to reach")
	}
	ln, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/metrics" {
			http.NotFound(w, r)
			return
		}
		fmt.Fprint(w, "qm_forward_tries_total{cluster=\"cloud\",outcome=\"breaker_open\"} 3")
	})}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return ip, ln.Addr().(*net.TCPAddr).Port
}
