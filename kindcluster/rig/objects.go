package rig

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"os"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/yaml"

	"github.com/quartermaster-dev/quartermaster/certs"
)

// FleetObjects are cluster i's Agones Fleets: replicas, labels, scheduling,
// and counters and lists of the given capacity on every server.
func FleetObjects(t *Topology, i int) []*unstructured.Unstructured {
	var out []*unstructured.Unstructured
	for _, f := range t.Spec.Clusters[i].Fleets {
		spec := map[string]any{
			"ports": []any{map[string]any{"name": "default", "containerPort": int64(7654)}},
			"template": map[string]any{"spec": map[string]any{
				"containers": []any{map[string]any{"name": "game", "image": "game-server"}},
			}},
		}
		if len(f.Counters) > 0 {
			counters := map[string]any{}
			for _, k := range sortedKeys(f.Counters) {
				counters[k] = map[string]any{"count": int64(0), "capacity": f.Counters[k].Capacity}
			}
			spec["counters"] = counters
		}
		if len(f.Lists) > 0 {
			lists := map[string]any{}
			for _, k := range sortedKeys(f.Lists) {
				lists[k] = map[string]any{"capacity": f.Lists[k].Capacity, "values": []any{}}
			}
			spec["lists"] = lists
		}
		labels := map[string]any{}
		for k, v := range f.Labels {
			labels[k] = v
		}
		out = append(out, &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "agones.dev/v1",
			"kind":       "Fleet",
			"metadata":   map[string]any{"name": f.Name, "namespace": t.Spec.Namespace},
			"spec": map[string]any{
				"replicas":   int64(f.Replicas),
				"scheduling": f.Scheduling,
				"template":   map[string]any{"metadata": map[string]any{"labels": labels}, "spec": spec},
			},
		}})
	}
	return out
}

// SecretName is the connection Secret, in every other cluster, for
// forwarding to cluster.
func SecretName(cluster string) string { return "qm-" + cluster }

// PolicyObjects are what cluster `in` holds for multi-cluster allocation:
// every policy of the topology, as a GameServerAllocationPolicy (a local
// entry, without endpoints, for the policy that names `in` itself), and for
// each other cluster a policy names, a connection Secret with the client
// certificate `in`'s allocators present there and the CA they trust.
// endpoints are the addresses `in` reaches each cluster at (its links).
func PolicyObjects(t *Topology, in string, endpoints map[string][]string, l certs.Layout) ([]*unstructured.Unstructured, error) {
	ns := t.Spec.Namespace
	var out []*unstructured.Unstructured
	secrets := map[string]bool{}
	for _, p := range t.Spec.Policies {
		target := p.ConnectionInfo.ClusterName
		info := map[string]any{"clusterName": target, "namespace": ns}
		if target != in {
			eps := endpoints[target]
			if len(eps) == 0 {
				return nil, fmt.Errorf("policy %s: no link from %s to %s", p.Name, in, target)
			}
			list := make([]any, len(eps))
			for i, e := range eps {
				list[i] = e
			}
			info["allocationEndpoints"] = list
			info["secretName"] = SecretName(target)
			secrets[target] = true
		}
		meta := map[string]any{"name": p.Name, "namespace": ns}
		if len(p.Labels) > 0 {
			labels := map[string]any{}
			for k, v := range p.Labels {
				labels[k] = v
			}
			meta["labels"] = labels
		}
		out = append(out, &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "multicluster.agones.dev/v1",
			"kind":       "GameServerAllocationPolicy",
			"metadata":   meta,
			"spec":       map[string]any{"priority": int64(p.Priority), "weight": int64(*p.Weight), "connectionInfo": info},
		}})
	}
	for _, target := range sortedKeys(secrets) {
		id := forwarderPrefix + in
		data := map[string]any{}
		for key, path := range map[string]string{"tls.crt": l.ClientCert(id), "tls.key": l.ClientKey(id), "ca.crt": l.CACert()} {
			b, err := os.ReadFile(path)
			if err != nil {
				return nil, fmt.Errorf("secret for %s: %w", target, err)
			}
			data[key] = base64.StdEncoding.EncodeToString(b)
		}
		out = append(out, &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "v1",
			"kind":       "Secret",
			"type":       "kubernetes.io/tls",
			"metadata":   map[string]any{"name": SecretName(target), "namespace": ns},
			"data":       data,
		}})
	}
	return out, nil
}

// WriteManifests writes objects as YAML documents, atomically (the
// allocators watch the file).
func WriteManifests(path string, objs []*unstructured.Unstructured) error {
	var b bytes.Buffer
	for i, o := range objs {
		if i > 0 {
			b.WriteString("---\n")
		}
		y, err := yaml.Marshal(o.Object)
		if err != nil {
			return err
		}
		b.Write(y)
	}
	return certs.WriteFileAtomic(path, b.Bytes(), 0o600)
}
