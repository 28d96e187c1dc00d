package kindcluster_test

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/quartermaster-dev/quartermaster/kindcluster"
)

// The restart runs the very same command line again, port included.
func TestRestartAPIServerDryRun(t *testing.T) {
	dry := &kindcluster.DryRunner{}
	c, err := kindcluster.Start(context.Background(), kindcluster.Options{Name: "dry", Runner: dry, BinDir: t.TempDir(), APIServerPort: 6443, EtcdPort: 2379, EtcdPeerPort: 2380})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	if err := c.StartAPIServer(context.Background()); err == nil {
		t.Error("StartAPIServer while it runs: want an error")
	}
	if err := c.RestartAPIServer(context.Background()); err != nil {
		t.Fatal(err)
	}
	var apiservers []string
	for _, cmd := range dry.Commands() {
		if strings.HasSuffix(cmd.Path, kindcluster.APIServerBinary) {
			apiservers = append(apiservers, cmd.String())
		}
	}
	if len(apiservers) != 2 || apiservers[0] != apiservers[1] || !strings.Contains(apiservers[1], "--secure-port=6443") {
		t.Fatalf("want the same kube-apiserver command twice, got %q", apiservers)
	}
}

func TestRestartAPIServer(t *testing.T) {
	c := kindcluster.NewForTest(t, kindcluster.Options{Name: "restart", EtcdUnsafeNoFsync: true})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cs, err := c.Clientset()
	if err != nil {
		t.Fatal(err)
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "survivor", Namespace: "default"}, Data: map[string]string{"k": "v"}}
	if _, err := cs.CoreV1().ConfigMaps("default").Create(ctx, cm, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	etcdBefore, apiBefore := c.Pids()
	if err := c.StopAPIServer(); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().ConfigMaps("default").Get(ctx, "survivor", metav1.GetOptions{}); err == nil {
		t.Fatal("the API server still answers after StopAPIServer")
	}
	// A start whose wait gives up (here at once) leaves its API server
	// starting; the next start waits for that one instead of refusing.
	short, cancelShort := context.WithTimeout(ctx, time.Millisecond)
	err = c.StartAPIServer(short)
	cancelShort()
	if err == nil {
		t.Fatal("StartAPIServer within a millisecond: want its wait to give up")
	}
	_, apiStarting := c.Pids()
	if err := c.StartAPIServer(ctx); err != nil {
		t.Fatalf("StartAPIServer after a wait that gave up: %v", err)
	}
	etcdAfter, apiAfter := c.Pids()
	if apiAfter != apiStarting {
		t.Errorf("the second start made another API server (pid %d, then %d): want it to wait for the first", apiStarting, apiAfter)
	}
	if etcdAfter != etcdBefore || apiAfter == apiBefore {
		t.Errorf("pids etcd %d→%d, apiserver %d→%d: want etcd kept, apiserver new", etcdBefore, etcdAfter, apiBefore, apiAfter)
	}
	// The same client (same URL, token, CA) works again and the data survived.
	got, err := cs.CoreV1().ConfigMaps("default").Get(ctx, "survivor", metav1.GetOptions{})
	if err != nil || got.Data["k"] != "v" {
		t.Fatalf("after restart: %v %v", got, err)
	}
}
