package kind

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/quartermaster-dev/quartermaster/certs"
	kindcluster "github.com/quartermaster-dev/quartermaster/kindcluster"
	"github.com/quartermaster-dev/quartermaster/kindcluster/rig"
)

// The kind rig is a rig.Handle: the e2e suite runs its specs on it as on
// the local provider.
var _ rig.Handle = (*Rig)(nil)

// notef is the dry run's note, when the runner is one: a Runner with a
// Notef method (DryRun) only records, so what would wait on a cluster or
// talk to its API server is noted instead.
func (r *Rig) notef() (func(string, ...any), bool) {
	n, ok := r.opts.Runner.(interface{ Notef(string, ...any) })
	if !ok {
		return nil, false
	}
	return n.Notef, true
}

func (r *Rig) find(name string) (int, error) {
	i := slices.IndexFunc(r.Clusters, func(c Cluster) bool { return c.Name == name })
	if i < 0 {
		return -1, fmt.Errorf("kind rig %q has no cluster %q (it has %s)", r.Topology.Metadata.Name, name, strings.Join(r.ClusterNames(), ", "))
	}
	return i, nil
}

// ClusterNames implements rig.Handle.
func (r *Rig) ClusterNames() []string {
	out := make([]string, len(r.Clusters))
	for i, c := range r.Clusters {
		out[i] = c.Name
	}
	return out
}

// RESTConfig implements rig.Handle, from the kubeconfig kind wrote for the
// cluster (its API server on 127.0.0.1).
func (r *Rig) RESTConfig(cluster string) (*rest.Config, error) {
	i, err := r.find(cluster)
	if err != nil {
		return nil, err
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", r.Clusters[i].Kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("cluster %q: %w", cluster, err)
	}
	return cfg, nil
}

// CallerAddrs implements rig.Handle: the callers' links to the cluster,
// one per allocator replica, each to that replica alone (its own Service
// and host port, the pod chosen by labelReplicas), as on the local rig.
func (r *Rig) CallerAddrs(cluster string) []string {
	var out []string
	for _, l := range r.Proxies.Find(rig.CallersName, cluster) {
		out = append(out, l.Addr())
	}
	return out
}

// CallerCerts implements rig.Handle.
func (r *Rig) CallerCerts() certs.Layout { return r.Certs }

// Links implements rig.Handle.
func (r *Rig) Links() *rig.Proxies { return r.Proxies }

// SelfEndpoint implements rig.Handle: the cluster's link to itself on the
// host address.
func (r *Rig) SelfEndpoint(cluster string) string {
	for _, l := range r.Proxies.Find(cluster, cluster) {
		return l.Addr()
	}
	return ""
}

func (r *Rig) clientset(cluster string) (kubernetes.Interface, error) {
	cfg, err := r.RESTConfig(cluster)
	if err != nil {
		return nil, err
	}
	return kubernetes.NewForConfig(cfg)
}

// allocatorSelector picks the allocator's pods (deploy/allocator.yaml's
// label).
const allocatorSelector = "app.kubernetes.io/name=" + allocatorName

// Metrics implements rig.Handle: every allocator pod's /metrics, read
// through the API server's pod proxy, since kind maps no host port to it.
func (r *Rig) Metrics(ctx context.Context, cluster string) (string, error) {
	cs, err := r.clientset(cluster)
	if err != nil {
		return "", err
	}
	pods, err := cs.CoreV1().Pods(allocatorNamespace).List(ctx, metav1.ListOptions{LabelSelector: allocatorSelector})
	if err != nil {
		return "", fmt.Errorf("cluster %q: allocator pods: %w", cluster, err)
	}
	if len(pods.Items) == 0 {
		return "", fmt.Errorf("cluster %q: no allocator pods (%s in %s)", cluster, allocatorSelector, allocatorNamespace)
	}
	var b strings.Builder
	for _, p := range pods.Items {
		text, err := cs.CoreV1().Pods(allocatorNamespace).ProxyGet("http", p.Name, strconv.Itoa(r.httpPort), "/metrics", nil).DoRaw(ctx)
		if err != nil {
			return "", fmt.Errorf("cluster %q: pod %s: /metrics: %w", cluster, p.Name, err)
		}
		b.Write(text)
		if len(text) > 0 && text[len(text)-1] != '\n' {
			b.WriteByte('\n')
		}
	}
	return b.String(), nil
}

// RestartAPIServer implements rig.Handle by restarting the cluster's
// control-plane node container (`docker restart`), then waiting for the
// API server's /readyz and for the allocator and fleet agent pods to be
// Ready again. On a one-node kind cluster the node is every node, so its
// pods, the allocators' included, restart with the API server: a harder
// outage than the local provider's, where only kube-apiserver stops.
func (r *Rig) RestartAPIServer(ctx context.Context, cluster string) error {
	i, err := r.find(cluster)
	if err != nil {
		return err
	}
	since := time.Now()
	node := NodeHost(cluster)
	r.logf("restarting %s (docker restart --time 0 %s)", cluster, node)
	// At once (killed, not asked to stop): a node's systemd may ignore
	// Docker's stop signal, and then the API server would keep serving
	// for the whole grace period after the "restart" began.
	if _, err := r.opts.Runner.Run(ctx, kindcluster.Command{Path: r.opts.Docker, Args: []string{"restart", "--time", "0", node}}); err != nil {
		return fmt.Errorf("cluster %q: restart: %w", cluster, err)
	}
	want := *r.Topology.Spec.Clusters[i].Allocator.Replicas
	if note, dry := r.notef(); dry {
		note("wait up to %v for %s's /readyz, then for its %d allocator pod(s) (%s) and fleet agent pod Ready since the restart",
			r.opts.Wait, cluster, want, allocatorSelector)
		return nil
	}
	cs, err := r.clientset(cluster)
	if err != nil {
		return err
	}
	deadline := time.Now().Add(r.opts.Wait)
	readyz := func(ctx context.Context) (bool, string) {
		out, err := cs.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		if err != nil {
			return false, err.Error()
		}
		return strings.TrimSpace(string(out)) == "ok", string(out)
	}
	if err := poll(ctx, deadline, "the API server's /readyz", readyz); err != nil {
		return fmt.Errorf("cluster %q: %w", cluster, err)
	}
	// Ready since the restart: a pod's Ready condition from before it
	// may still stand until the kubelet has looked again.
	for _, w := range []struct {
		selector string
		n        int
	}{{allocatorSelector, want}, {"app.kubernetes.io/name=" + agentName, 1}} {
		ready := func(ctx context.Context) (bool, string) {
			pods, err := cs.CoreV1().Pods(allocatorNamespace).List(ctx, metav1.ListOptions{LabelSelector: w.selector})
			if err != nil {
				return false, err.Error()
			}
			n := readySince(pods.Items, since)
			return n >= w.n, fmt.Sprintf("%d of %d pods Ready since the restart", n, w.n)
		}
		if err := poll(ctx, deadline, w.selector, ready); err != nil {
			return fmt.Errorf("cluster %q: %w", cluster, err)
		}
	}
	// The same pods come back with their labels; a pod made anew gets one.
	if err := r.labelReplicas(ctx, i); err != nil {
		return err
	}
	r.logf("cluster %q is back", cluster)
	return nil
}

// readySince counts the pods whose Ready condition turned true at or after
// since (conditions have a resolution of one second).
func readySince(pods []corev1.Pod, since time.Time) int {
	n := 0
	for _, p := range pods {
		if p.DeletionTimestamp != nil {
			continue
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue && !c.LastTransitionTime.Time.Before(since.Truncate(time.Second)) {
				n++
			}
		}
	}
	return n
}

// poll calls check every half second until it says done, the deadline
// passes or ctx ends; the error names what was awaited and what check
// said last.
func poll(ctx context.Context, deadline time.Time, what string, check func(context.Context) (bool, string)) error {
	last := ""
	for {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		done, said := check(cctx)
		cancel()
		if done {
			return nil
		}
		last = said
		if time.Now().After(deadline) {
			return fmt.Errorf("waiting for %s: gave up (last: %s)", what, strings.TrimSpace(last))
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w (last: %s)", what, ctx.Err(), strings.TrimSpace(last))
		case <-time.After(500 * time.Millisecond):
		}
	}
}

var secretsGVR = schema.GroupVersionResource{Version: "v1", Resource: "secrets"}

// RotateSecrets implements rig.Handle: a new client certificate (new key)
// for the identity the cluster's allocators forward with, written into the
// cluster's connection Secrets through its API server, where the
// allocators watch them; its policies manifest is rewritten to match.
func (r *Rig) RotateSecrets(ctx context.Context, cluster string) error {
	i, err := r.find(cluster)
	if err != nil {
		return err
	}
	if err := rig.RenewForwarderCert(r.Certs, cluster); err != nil {
		return err
	}
	objs, err := rig.PolicyObjects(r.Topology, cluster, linkEndpoints(r.Topology, i, r.HostAddress, r.opts.LinkPort), r.Certs)
	if err != nil {
		return err
	}
	all := make([]map[string]any, len(objs))
	for n, o := range objs {
		all[n] = o.Object
	}
	data, err := marshalAll(all)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(r.manifestsDir(cluster), manifestOrder[3]), data, 0o600); err != nil {
		return err
	}
	note, dry := r.notef()
	var dc dynamic.Interface
	if !dry {
		cfg, err := r.RESTConfig(cluster)
		if err != nil {
			return err
		}
		if dc, err = dynamic.NewForConfig(cfg); err != nil {
			return err
		}
	}
	for _, o := range objs {
		if o.GetKind() != "Secret" {
			continue
		}
		if dry {
			note("update Secret %s/%s on %s's API server: a new client certificate for %s", o.GetNamespace(), o.GetName(), cluster, rig.ForwarderIdentity(cluster))
			continue
		}
		res := dc.Resource(secretsGVR).Namespace(o.GetNamespace())
		cur, err := res.Get(ctx, o.GetName(), metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("cluster %q: Secret %s: %w", cluster, o.GetName(), err)
		}
		o.SetResourceVersion(cur.GetResourceVersion())
		if _, err := res.Update(ctx, o, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("cluster %q: update Secret %s: %w", cluster, o.GetName(), err)
		}
	}
	return nil
}
