package soakrun

import (
	"context"
	"fmt"
	"sort"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/quartermaster-dev/quartermaster/soak"
)

var gameServerGVR = schema.GroupVersionResource{Group: "agones.dev", Version: "v1", Resource: "gameservers"}

// readAttempts and readPause bound how long a snapshot waits for an API
// server that is slow to answer (one just restarted, say) before it
// records the cluster as unread.
const (
	readAttempts = 5
	readPause    = 2 * time.Second
)

// takeSnapshot reads every GameServer object in namespace (all
// namespaces when empty) on every cluster. A cluster that cannot be read
// is recorded with its error, so the checker says so rather than take the
// absence of its objects as evidence.
func takeSnapshot(ctx context.Context, clusters []string, dyn map[string]dynamic.Interface, namespace string) *soak.Snapshot {
	snap := &soak.Snapshot{Taken: time.Now().UTC()}
	for _, cl := range clusters {
		items, err := listGameServers(ctx, dyn[cl], namespace)
		if err != nil {
			snap.Clusters = append(snap.Clusters, soak.ClusterRead{Name: cl, Error: err.Error()})
			continue
		}
		snap.Clusters = append(snap.Clusters, soak.ClusterRead{Name: cl})
		for _, gs := range items {
			state, _, _ := unstructured.NestedString(gs.Object, "status", "state")
			if state == "" {
				state = "Unknown" // not yet given a state by its controller
			}
			snap.GameServers = append(snap.GameServers, soak.FromObject(cl, gs.GetNamespace(), gs.GetName(), state, gs.GetAnnotations()))
		}
	}
	sort.SliceStable(snap.GameServers, func(i, j int) bool {
		a, b := snap.GameServers[i], snap.GameServers[j]
		if a.Cluster != b.Cluster {
			return a.Cluster < b.Cluster
		}
		if a.Namespace != b.Namespace {
			return a.Namespace < b.Namespace
		}
		return a.Name < b.Name
	})
	return snap
}

func listGameServers(ctx context.Context, dc dynamic.Interface, namespace string) ([]unstructured.Unstructured, error) {
	if dc == nil {
		return nil, fmt.Errorf("no API client")
	}
	var lastErr error
	for range readAttempts {
		lctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		list, err := dc.Resource(gameServerGVR).Namespace(namespace).List(lctx, metav1.ListOptions{})
		cancel()
		if err == nil {
			return list.Items, nil
		}
		lastErr = err
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(readPause):
		}
	}
	return nil, fmt.Errorf("list gameservers: %w", lastErr)
}
