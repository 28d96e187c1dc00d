package kind

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	yamlv3 "go.yaml.in/yaml/v3"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"sigs.k8s.io/yaml"

	"github.com/quartermaster-dev/quartermaster/certs"
	"github.com/quartermaster-dev/quartermaster/deploy/crds"
	"github.com/quartermaster-dev/quartermaster/kindcluster/rig"
)

// Names of what deploy/allocator.yaml creates, which the kind provider
// edits and waits for.
const (
	allocatorNamespace = "quartermaster"
	allocatorName      = "qm-allocator"
	allocatorContainer = "allocator"
	remoteCertsBinding = "qm-allocator-remote-certs"
	tlsSecret          = "qm-allocator-tls"
	clientCASecret     = "qm-allocator-client-ca"
	agentName          = "qm-fleet-agent"
)

// File is one manifest file, applied with `kubectl apply -f` in order.
type File struct {
	Name string
	Data []byte
}

// CRDs is Agones' CRDs (deploy/crds) as one manifest.
func CRDs() []byte {
	var b bytes.Buffer
	for i, f := range crds.All() {
		if i > 0 {
			b.WriteString("---\n")
		}
		b.Write(bytes.TrimLeft(f.YAML, "-\n"))
		if !bytes.HasSuffix(f.YAML, []byte("\n")) {
			b.WriteByte('\n')
		}
	}
	return b.Bytes()
}

// Manifests are what topology cluster i runs, in the order they are
// applied: the allocator (from allocatorYAML, deploy/allocator.yaml, with
// its TLS Secrets), the fleet agent, the fleets, and the policies with
// their connection Secrets, whose endpoints are the links on
// opts.HostAddress (which must be set). l holds the rig's certificates.
func Manifests(t *rig.Topology, i int, opts Options, l certs.Layout, allocatorYAML []byte) ([]File, error) {
	opts.defaults()
	if opts.HostAddress == "" {
		return nil, errors.New("no host address: the policies' endpoints are the links there")
	}
	alloc, err := allocatorObjects(t, i, opts, l, allocatorYAML)
	if err != nil {
		return nil, fmt.Errorf("allocator manifest: %w", err)
	}
	var fleets []map[string]any
	if ns := t.Spec.Namespace; ns != "default" {
		fleets = append(fleets, map[string]any{"apiVersion": "v1", "kind": "Namespace", "metadata": map[string]any{"name": ns}})
	}
	for _, f := range rig.FleetObjects(t, i) {
		fleets = append(fleets, f.Object)
	}
	policies, err := policyObjects(t, i, l, linkEndpoints(t, i, opts.HostAddress, opts.LinkPort))
	if err != nil {
		return nil, err
	}
	var out []File
	for _, f := range []struct {
		name string
		objs []map[string]any
	}{
		{"allocator.yaml", alloc},
		{"agent.yaml", agentObjects(t, i, opts)},
		{"fleets.yaml", fleets},
		{"policies.yaml", policies},
	} {
		data, err := marshalAll(f.objs)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", f.name, err)
		}
		out = append(out, File{f.name, data})
	}
	return out, nil
}

// policyObjects are cluster i's policies and connection Secrets, with every
// other cluster reached at endpoints (its links).
func policyObjects(t *rig.Topology, i int, l certs.Layout, endpoints map[string][]string) ([]map[string]any, error) {
	objs, err := rig.PolicyObjects(t, t.Spec.Clusters[i].Name, endpoints, l)
	if err != nil {
		return nil, fmt.Errorf("policies: %w", err)
	}
	out := make([]map[string]any, len(objs))
	for j, o := range objs {
		out[j] = o.Object
	}
	return out, nil
}

// allocatorObjects edits deploy/allocator.yaml for cluster i: the image
// (already on the node, so never pulled), the replicas (the workload's,
// and the --replicas flag where the manifest shards statically),
// --cluster-name, a fixed NodePort, and the Secrets binding in the
// topology's namespace; the TLS Secrets the workload mounts follow the
// Namespace. The workload may be a StatefulSet or a Deployment.
func allocatorObjects(t *rig.Topology, i int, opts Options, l certs.Layout, src []byte) ([]map[string]any, error) {
	docs, err := decodeAll(src)
	if err != nil {
		return nil, err
	}
	c := t.Spec.Clusters[i]
	replicas := *c.Allocator.Replicas
	secrets, err := tlsSecrets(l)
	if err != nil {
		return nil, err
	}
	var out []map[string]any
	found := map[string]bool{}
	for _, d := range docs {
		u := unstructured.Unstructured{Object: d}
		out = append(out, d)
		switch kind, name := u.GetKind(), u.GetName(); {
		case kind == "Namespace" && name == allocatorNamespace:
			found[kind] = true
			out = append(out, secrets...)
			out = append(out, limitsObject())
		case isWorkload(kind) && name == allocatorName:
			found["workload"] = true
			if err := editWorkload(d, c.Name, replicas, opts.Image); err != nil {
				return nil, err
			}
		case kind == "Service" && name == allocatorName:
			found[kind] = true
			if err := editService(d); err != nil {
				return nil, err
			}
			for k := range replicas {
				out = append(out, replicaService(d, k))
			}
		case kind == "RoleBinding" && name == remoteCertsBinding:
			found[kind] = true
			u.SetNamespace(t.Spec.Namespace)
		}
	}
	for _, k := range []string{"Namespace", "workload", "Service", "RoleBinding"} {
		if !found[k] {
			return nil, fmt.Errorf("no %s of the allocator (want the %s namespace, the %s StatefulSet or Deployment and %s Service, the %s RoleBinding)",
				k, allocatorNamespace, allocatorName, allocatorName, remoteCertsBinding)
		}
	}
	return out, nil
}

// runtimeDeepCopy copies a decoded object.
func runtimeDeepCopy(d map[string]any) map[string]any { return runtime.DeepCopyJSON(d) }

func isWorkload(kind string) bool { return kind == "StatefulSet" || kind == "Deployment" }

// allocatorWorkload is the kind of the allocator's workload in
// deploy/allocator.yaml ("statefulset" or "deployment", as kubectl names
// them), for `kubectl rollout status`.
func allocatorWorkload(src []byte) (string, error) {
	docs, err := decodeAll(src)
	if err != nil {
		return "", err
	}
	for _, d := range docs {
		u := unstructured.Unstructured{Object: d}
		if isWorkload(u.GetKind()) && u.GetName() == allocatorName {
			return strings.ToLower(u.GetKind()), nil
		}
	}
	return "", fmt.Errorf("no StatefulSet or Deployment %s", allocatorName)
}

// allocatorHTTPPort is the container port named http of the allocator in
// deploy/allocator.yaml: its /metrics, which Metrics reads through the API
// server's pod proxy.
func allocatorHTTPPort(src []byte) (int, error) {
	docs, err := decodeAll(src)
	if err != nil {
		return 0, err
	}
	for _, d := range docs {
		u := unstructured.Unstructured{Object: d}
		if !isWorkload(u.GetKind()) || u.GetName() != allocatorName {
			continue
		}
		containers, _, _ := unstructured.NestedSlice(d, "spec", "template", "spec", "containers")
		for _, raw := range containers {
			ct, ok := raw.(map[string]any)
			if !ok || ct["name"] != allocatorContainer {
				continue
			}
			ports, _, _ := unstructured.NestedSlice(ct, "ports")
			for _, rp := range ports {
				p, ok := rp.(map[string]any)
				if !ok || p["name"] != "http" {
					continue
				}
				// Decoded YAML numbers may be int64 or float64.
				switch n := p["containerPort"].(type) {
				case int64:
					if n > 0 && n < 65536 {
						return int(n), nil
					}
				case float64:
					if n > 0 && n < 65536 && n == float64(int(n)) {
						return int(n), nil
					}
				}
				return 0, fmt.Errorf("the %s container's port http has no valid containerPort: %v", allocatorContainer, p["containerPort"])
			}
		}
	}
	return 0, fmt.Errorf("the %s container of %s has no port named http", allocatorContainer, allocatorName)
}

func editWorkload(d map[string]any, cluster string, replicas int, image string) error {
	if err := unstructured.SetNestedField(d, int64(replicas), "spec", "replicas"); err != nil {
		return err
	}
	containers, _, _ := unstructured.NestedSlice(d, "spec", "template", "spec", "containers")
	for j, raw := range containers {
		ct, ok := raw.(map[string]any)
		if !ok || ct["name"] != allocatorContainer {
			continue
		}
		ct["image"] = image
		ct["imagePullPolicy"] = "IfNotPresent"
		args, _, err := unstructured.NestedStringSlice(ct, "args")
		if err != nil {
			return fmt.Errorf("container %s: args: %w", allocatorContainer, err)
		}
		var next []any
		static := false
		for _, a := range args {
			// The manifest's own values of what the topology decides are
			// dropped and set below.
			if strings.HasPrefix(a, "--replicas=") {
				static = true
				continue
			}
			if strings.HasPrefix(a, "--cluster-name=") {
				continue
			}
			next = append(next, a)
		}
		// A manifest whose replicas learn their number from each other
		// (no --replicas) is left to do so.
		if static {
			next = append(next, "--replicas="+strconv.Itoa(replicas))
		}
		next = append(next, "--cluster-name="+cluster, "--limits="+limitsDir+"/"+limitsKey)
		ct["args"] = next
		mounts, _, _ := unstructured.NestedSlice(ct, "volumeMounts")
		ct["volumeMounts"] = append(mounts, map[string]any{"name": limitsConfigMap, "mountPath": limitsDir, "readOnly": true})
		containers[j] = ct
		if err := unstructured.SetNestedSlice(d, containers, "spec", "template", "spec", "containers"); err != nil {
			return err
		}
		volumes, _, _ := unstructured.NestedSlice(d, "spec", "template", "spec", "volumes")
		volumes = append(volumes, map[string]any{"name": limitsConfigMap, "configMap": map[string]any{"name": limitsConfigMap}})
		return unstructured.SetNestedSlice(d, volumes, "spec", "template", "spec", "volumes")
	}
	return fmt.Errorf("%s %s has no container %q", d["kind"], allocatorName, allocatorContainer)
}

func editService(d map[string]any) error {
	ports, _, _ := unstructured.NestedSlice(d, "spec", "ports")
	for j, raw := range ports {
		p, ok := raw.(map[string]any)
		if !ok || p["name"] != "allocator" {
			continue
		}
		p["nodePort"] = int64(AllocatorNodePort)
		ports[j] = p
		if err := unstructured.SetNestedSlice(d, ports, "spec", "ports"); err != nil {
			return err
		}
		return unstructured.SetNestedField(d, "NodePort", "spec", "type")
	}
	return fmt.Errorf("the Service %s has no port named allocator", allocatorName)
}

// replicaService is the allocator's Service narrowed to replica k: the
// pod the rig labels ReplicaLabel=k (labelReplicas), on its own NodePort,
// which kind maps to a host port of its own, so each caller link reaches
// one replica and the spec that wants two replicas gets two.
func replicaService(svc map[string]any, k int) map[string]any {
	d := runtimeDeepCopy(svc)
	u := unstructured.Unstructured{Object: d}
	u.SetName(ReplicaServiceName(k))
	u.SetResourceVersion("")
	selector, _, _ := unstructured.NestedStringMap(d, "spec", "selector")
	if selector == nil {
		selector = map[string]string{}
	}
	selector[ReplicaLabel] = strconv.Itoa(k)
	sel := map[string]any{}
	for key, v := range selector {
		sel[key] = v
	}
	_ = unstructured.SetNestedMap(d, sel, "spec", "selector")
	ports, _, _ := unstructured.NestedSlice(d, "spec", "ports")
	for j, raw := range ports {
		if p, ok := raw.(map[string]any); ok && p["name"] == "allocator" {
			p["nodePort"] = int64(ReplicaNodePort(k))
			ports[j] = p
		}
	}
	_ = unstructured.SetNestedSlice(d, ports, "spec", "ports")
	return d
}

// The allocators' identity limits, as on the local rig (rig.Limits): the
// callers' identity is an admin, so the suite lists and releases what the
// forwarders allocated on its behalf; mounted from a ConfigMap and passed
// as --limits.
const (
	limitsConfigMap = "qm-allocator-limits"
	limitsDir       = "/etc/qm/limits"
	limitsKey       = "limits.yaml"
)

func limitsObject() map[string]any {
	return map[string]any{"apiVersion": "v1", "kind": "ConfigMap",
		"metadata": map[string]any{"name": limitsConfigMap, "namespace": allocatorNamespace},
		"data":     map[string]any{limitsKey: rig.Limits}}
}

// ReplicaServiceName is the Service of the allocator replica labelled k.
func ReplicaServiceName(k int) string { return allocatorName + "-replica-" + strconv.Itoa(k) }

// ReplicaLabel is the label the rig gives each allocator pod, 0 to
// replicas-1, so a Service per replica selects one pod.
const ReplicaLabel = "quartermaster.dev/caller-link"

// tlsSecrets are the two Secrets deploy/allocator.yaml asks for: the
// server certificate and the CA client certificates must chain to.
func tlsSecrets(l certs.Layout) ([]map[string]any, error) {
	read := func(files map[string]string) (map[string]any, error) {
		data := map[string]any{}
		for key, path := range files {
			b, err := os.ReadFile(path)
			if err != nil {
				return nil, err
			}
			data[key] = base64.StdEncoding.EncodeToString(b)
		}
		return data, nil
	}
	server, err := read(map[string]string{"tls.crt": l.ServerCert(), "tls.key": l.ServerKey()})
	if err != nil {
		return nil, err
	}
	ca, err := read(map[string]string{"ca.crt": l.ClientCACert()})
	if err != nil {
		return nil, err
	}
	secret := func(name, typ string, data map[string]any) map[string]any {
		return map[string]any{"apiVersion": "v1", "kind": "Secret", "type": typ,
			"metadata": map[string]any{"name": name, "namespace": allocatorNamespace}, "data": data}
	}
	return []map[string]any{
		secret(tlsSecret, "kubernetes.io/tls", server),
		secret(clientCASecret, "Opaque", ca),
	}, nil
}

// agentObjects run `qm agent` in the cluster, in the allocator's namespace
// with RBAC for exactly what the agent does: it lists fleets and writes
// their status, and creates, readies and replaces GameServers.
func agentObjects(t *rig.Topology, i int, opts Options) []map[string]any {
	c := t.Spec.Clusters[i]
	labels := map[string]any{"app.kubernetes.io/name": agentName, "app.kubernetes.io/part-of": "quartermaster"}
	meta := func(namespaced bool) map[string]any {
		m := map[string]any{"name": agentName, "labels": labels}
		if namespaced {
			m["namespace"] = allocatorNamespace
		}
		return m
	}
	return []map[string]any{
		{"apiVersion": "v1", "kind": "ServiceAccount", "metadata": meta(true)},
		{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole", "metadata": meta(false),
			"rules": []any{
				map[string]any{"apiGroups": []any{"agones.dev"}, "resources": []any{"fleets"}, "verbs": []any{"get", "list", "watch"}},
				map[string]any{"apiGroups": []any{"agones.dev"}, "resources": []any{"fleets/status"}, "verbs": []any{"update"}},
				map[string]any{"apiGroups": []any{"agones.dev"}, "resources": []any{"gameservers"},
					"verbs": []any{"get", "list", "watch", "create", "update", "delete"}},
			}},
		{"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRoleBinding", "metadata": meta(false),
			"roleRef":  map[string]any{"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": agentName},
			"subjects": []any{map[string]any{"kind": "ServiceAccount", "name": agentName, "namespace": allocatorNamespace}}},
		{"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta(true),
			"spec": map[string]any{
				// One agent: two would both create servers for one fleet.
				"replicas": int64(1),
				"strategy": map[string]any{"type": "Recreate"},
				"selector": map[string]any{"matchLabels": map[string]any{"app.kubernetes.io/name": agentName}},
				"template": map[string]any{
					"metadata": map[string]any{"labels": labels},
					"spec": map[string]any{
						"serviceAccountName": agentName,
						"securityContext": map[string]any{"runAsNonRoot": true, "runAsUser": int64(65532), "runAsGroup": int64(65532),
							"seccompProfile": map[string]any{"type": "RuntimeDefault"}},
						"containers": []any{map[string]any{
							"name": "agent", "image": opts.Image, "imagePullPolicy": "IfNotPresent",
							"args": []any{"agent", "--namespace=" + t.Spec.Namespace,
								"--nodes=" + strconv.Itoa(c.Nodes.Count), "--max-per-node=" + strconv.Itoa(c.Nodes.Slots),
								"--startup=100ms", "--interval=200ms", "--session=0s"},
							"securityContext": map[string]any{"allowPrivilegeEscalation": false, "readOnlyRootFilesystem": true,
								"capabilities": map[string]any{"drop": []any{"ALL"}}},
						}},
					},
				},
			}},
	}
}

// decodeAll reads every YAML document of src (empty ones skipped).
func decodeAll(src []byte) ([]map[string]any, error) {
	dec := yamlv3.NewDecoder(bytes.NewReader(src))
	var out []map[string]any
	for n := 1; ; n++ {
		var d map[string]any
		err := dec.Decode(&d)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", n, err)
		}
		if d == nil {
			continue
		}
		if _, ok := d["kind"].(string); !ok {
			return nil, fmt.Errorf("document %d has no kind", n)
		}
		// Round-trip through JSON so numbers and maps have the types
		// unstructured expects (int64, map[string]any).
		j, err := yaml.Marshal(d)
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", n, err)
		}
		var u map[string]any
		if err := yaml.Unmarshal(j, &u); err != nil {
			return nil, fmt.Errorf("document %d: %w", n, err)
		}
		out = append(out, u)
	}
	if len(out) == 0 {
		return nil, errors.New("no objects")
	}
	return out, nil
}

func marshalAll(objs []map[string]any) ([]byte, error) {
	var b bytes.Buffer
	for i, o := range objs {
		if i > 0 {
			b.WriteString("---\n")
		}
		y, err := yaml.Marshal(o)
		if err != nil {
			return nil, err
		}
		b.Write(y)
	}
	return b.Bytes(), nil
}
