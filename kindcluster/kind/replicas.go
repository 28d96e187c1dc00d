package kind

import (
	"context"
	"fmt"
	"slices"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// labelReplicas gives each of cluster i's allocator pods its own
// ReplicaLabel value, 0 to replicas-1, so each replica's Service
// (ReplicaServiceName) selects exactly one pod and each caller link
// reaches a replica of its own. A pod keeps a value it already has; pods
// without one (new, or a duplicate) get the free values in name order.
// In a dry run it only notes what it would do.
func (r *Rig) labelReplicas(ctx context.Context, i int) error {
	c := r.Clusters[i]
	want := *r.Topology.Spec.Clusters[i].Allocator.Replicas
	if note, dry := r.notef(); dry {
		note("label %s's %d allocator pod(s) (%s) %s=0..%d, one each, for the replicas' Services", c.Name, want, allocatorSelector, ReplicaLabel, want-1)
		return nil
	}
	cs, err := r.clientset(c.Name)
	if err != nil {
		return err
	}
	pods, err := cs.CoreV1().Pods(allocatorNamespace).List(ctx, metav1.ListOptions{LabelSelector: allocatorSelector})
	if err != nil {
		return fmt.Errorf("cluster %q: allocator pods: %w", c.Name, err)
	}
	live := slices.DeleteFunc(pods.Items, func(p corev1.Pod) bool {
		return p.DeletionTimestamp != nil || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed
	})
	labels := make([]string, len(live))
	for n, p := range live {
		labels[n] = p.Labels[ReplicaLabel]
	}
	for n, k := range assignReplicas(labels, want) {
		if k < 0 || labels[n] == strconv.Itoa(k) {
			continue
		}
		patch := fmt.Sprintf(`{"metadata":{"labels":{%q:%q}}}`, ReplicaLabel, strconv.Itoa(k))
		if _, err := cs.CoreV1().Pods(allocatorNamespace).Patch(ctx, live[n].Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			return fmt.Errorf("cluster %q: label pod %s: %w", c.Name, live[n].Name, err)
		}
		r.logf("cluster %q: allocator pod %s is replica %d", c.Name, live[n].Name, k)
	}
	if len(live) < want {
		return fmt.Errorf("cluster %q: %d allocator pods for %d replicas", c.Name, len(live), want)
	}
	return nil
}

// assignReplicas gives each pod (by its current label) a replica index,
// 0 to want-1, each used once: a pod keeps a valid index no earlier pod
// holds; the others take the free ones in order; pods beyond want get -1.
func assignReplicas(labels []string, want int) []int {
	out := make([]int, len(labels))
	taken := make([]bool, want)
	for n, l := range labels {
		out[n] = -1
		if k, err := strconv.Atoi(l); err == nil && k >= 0 && k < want && !taken[k] && strconv.Itoa(k) == l {
			out[n], taken[k] = k, true
		}
	}
	next := 0
	for n := range labels {
		if out[n] >= 0 {
			continue
		}
		for next < want && taken[next] {
			next++
		}
		if next == want {
			break
		}
		out[n], taken[next] = next, true
	}
	return out
}
