package kindcluster_test

import (
	"encoding/json"
	"errors"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/quartermaster-dev/quartermaster/kindcluster"
)

// TestIntegration runs the suite against a real etcd + kube-apiserver. It
// is part of `make test` (whose TEST_DEPS build the binaries) and skipped
// only under -short.
func TestIntegration(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a real kube-apiserver; skipped under -short")
	}
	RegisterFailHandler(Fail)
	RunSpecs(t, "kindcluster integration")
}

var (
	gameServers = schema.GroupVersionResource{Group: "agones.dev", Version: "v1", Resource: "gameservers"}
	fleets      = schema.GroupVersionResource{Group: "agones.dev", Version: "v1", Resource: "fleets"}
	policies    = schema.GroupVersionResource{Group: "multicluster.agones.dev", Version: "v1", Resource: "gameserverallocationpolicies"}
)

const ns = "qm-e2e"

// One cluster for the whole suite: starting one costs ~10 s of a 2-core
// machine, and every spec below works in its own objects.
var (
	cluster *kindcluster.Cluster
	dyn     dynamic.Interface
)

var _ = BeforeSuite(func(ctx SpecContext) {
	binDir, err := kindcluster.DefaultBinDir()
	Expect(err).NotTo(HaveOccurred())
	// Fail, never skip, when the binaries are missing: a silent skip would
	// let `make test` pass without testing anything real.
	Expect(kindcluster.CheckBinaries(binDir, kindcluster.EtcdBinary, kindcluster.APIServerBinary, kindcluster.KubectlBinary)).To(Succeed())

	start := time.Now()
	cluster, err = kindcluster.Start(ctx, kindcluster.Options{
		Name:              "suite",
		BinDir:            binDir,
		EtcdUnsafeNoFsync: true,
		Log:               GinkgoWriter,
	})
	Expect(err).NotTo(HaveOccurred())
	GinkgoWriter.Printf("cluster up in %s\n", time.Since(start).Round(time.Millisecond))
	// Runs on failure and on Ctrl-C too (Ginkgo's interrupt handler runs
	// cleanups), so no API server outlives the suite.
	DeferCleanup(func() {
		if CurrentSpecReport().Failed() {
			GinkgoWriter.Println(cluster.LogTail())
		}
		Expect(cluster.Stop()).To(Succeed())
	})

	dyn, err = cluster.Dynamic()
	Expect(err).NotTo(HaveOccurred())
	cs, err := cluster.Clientset()
	Expect(err).NotTo(HaveOccurred())
	_, err = cs.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{})
	Expect(err).NotTo(HaveOccurred())
}, NodeTimeout(5*time.Minute))

// fromJSON builds an object from a literal, the way a client that knows
// nothing of our schema (Agones) would send it.
func fromJSON(s string) *unstructured.Unstructured {
	u := &unstructured.Unstructured{}
	Expect(json.Unmarshal([]byte(s), &u.Object)).To(Succeed())
	return u
}

// normalize round-trips through JSON so that numbers compare equal whether
// they came from a literal (float64) or the server (int64).
func normalize(v any) any {
	b, err := json.Marshal(v)
	Expect(err).NotTo(HaveOccurred())
	var out any
	Expect(json.Unmarshal(b, &out)).To(Succeed())
	return out
}

// agonesGameServer is shaped like what Agones itself stores: a whole pod
// template, fields our schema does not name, and nulls Agones' Go structs
// serialize (reservedUntil).
const agonesGameServer = `{
  "apiVersion": "agones.dev/v1",
  "kind": "GameServer",
  "metadata": {
    "name": "gs-1",
    "labels": {"agones.dev/fleet": "f1", "agones.dev/gameserverset": "f1-abc"},
    "annotations": {"agones.dev/sdk-version": "1.60.0"}
  },
  "spec": {
    "container": "game",
    "ports": [{"name": "default", "portPolicy": "Dynamic", "containerPort": 7654, "protocol": "UDP", "hostPort": 7001}],
    "health": {"disabled": false, "periodSeconds": 5, "failureThreshold": 3, "initialDelaySeconds": 5},
    "scheduling": "Packed",
    "sdkServer": {"logLevel": "Info", "grpcPort": 9357, "httpPort": 9358},
    "counters": {"rooms": {"count": 1, "capacity": 10}},
    "lists": {"players": {"capacity": 8, "values": ["p1"]}},
    "eviction": {"safe": "Never"},
    "immutableReplicas": 1,
    "template": {
      "metadata": {"creationTimestamp": null, "labels": {"app": "game"}},
      "spec": {
        "containers": [{
          "name": "game",
          "image": "example.com/game:1.0",
          "resources": {"limits": {"cpu": "500m", "memory": "256Mi"}},
          "env": [{"name": "MODE", "value": "ranked"}],
          "futureField": {"nested": [1, 2, 3]}
        }],
        "tolerations": [{"key": "game", "operator": "Exists", "effect": "NoSchedule"}],
        "nodeSelector": {"pool": "game"}
      }
    }
  },
  "status": {
    "state": "Ready",
    "address": "10.1.2.3",
    "addresses": [{"type": "InternalIP", "address": "10.1.2.3"}, {"type": "Hostname", "address": "node-1"}],
    "ports": [{"name": "default", "port": 7001}],
    "nodeName": "node-1",
    "reservedUntil": null,
    "players": {"count": 0, "capacity": 0, "ids": null},
    "counters": {"rooms": {"count": 1, "capacity": 10}},
    "lists": {"players": {"capacity": 8, "values": ["p1"]}},
    "eviction": {"safe": "Never"},
    "immutableReplicas": 1,
    "someFutureStatus": {"x": "y"}
  }
}`

var _ = Describe("a local cluster", Ordered, func() {
	It("has Quartermaster's CRDs Established, with Agones' subresources", func(ctx SpecContext) {
		ext, err := cluster.APIExtensions()
		Expect(err).NotTo(HaveOccurred())
		crds := map[string]*apiextensionsv1.CustomResourceDefinition{}
		for _, name := range []string{"gameservers.agones.dev", "fleets.agones.dev", "gameserverallocationpolicies.multicluster.agones.dev"} {
			crd, err := ext.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, name, metav1.GetOptions{})
			Expect(err).NotTo(HaveOccurred())
			Expect(crd.Status.Conditions).To(ContainElement(And(
				HaveField("Type", apiextensionsv1.Established), HaveField("Status", apiextensionsv1.ConditionTrue))), name)
			crds[name] = crd
		}
		gs := crds["gameservers.agones.dev"].Spec.Versions[0].Subresources
		Expect(gs).NotTo(BeNil())
		Expect(gs.Status).To(BeNil(), "GameServer must have no status subresource: Agones writes status with a plain Update")
		Expect(gs.Scale).NotTo(BeNil())
		flt := crds["fleets.agones.dev"].Spec.Versions[0].Subresources
		Expect(flt.Status).NotTo(BeNil())
		Expect(flt.Scale.LabelSelectorPath).To(HaveValue(Equal(".status.labelSelector")))
		Expect(crds["gameserverallocationpolicies.multicluster.agones.dev"].Spec.Names.ShortNames).To(ConsistOf("gsap"))
	})

	It("keeps every field Agones writes on a GameServer", func(ctx SpecContext) {
		sent := fromJSON(agonesGameServer)
		created, err := dyn.Resource(gameServers).Namespace(ns).Create(ctx, sent, metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())
		got, err := dyn.Resource(gameServers).Namespace(ns).Get(ctx, "gs-1", metav1.GetOptions{})
		Expect(err).NotTo(HaveOccurred())
		for _, obj := range []*unstructured.Unstructured{created, got} {
			Expect(normalize(obj.Object["spec"])).To(Equal(normalize(sent.Object["spec"])))
			Expect(normalize(obj.Object["status"])).To(Equal(normalize(sent.Object["status"])))
			Expect(obj.GetLabels()).To(Equal(sent.GetLabels()))
			Expect(obj.GetAnnotations()).To(Equal(sent.GetAnnotations()))
		}
		Expect(got.GetGeneration()).To(Equal(int64(1)))
	})

	It("writes GameServer status with an ordinary Update, bumping generation, with optimistic concurrency", func(ctx SpecContext) {
		api := dyn.Resource(gameServers).Namespace(ns)
		before, err := api.Get(ctx, "gs-1", metav1.GetOptions{})
		Expect(err).NotTo(HaveOccurred())

		next := before.DeepCopy()
		Expect(unstructured.SetNestedField(next.Object, "Allocated", "status", "state")).To(Succeed())
		Expect(unstructured.SetNestedField(next.Object, int64(2), "status", "counters", "rooms", "count")).To(Succeed())
		ann := next.GetAnnotations()
		ann["agones.dev/last-allocated"] = time.Now().UTC().Format(time.RFC3339Nano)
		next.SetAnnotations(ann)
		after, err := api.Update(ctx, next, metav1.UpdateOptions{})
		Expect(err).NotTo(HaveOccurred())

		state, _, _ := unstructured.NestedString(after.Object, "status", "state")
		Expect(state).To(Equal("Allocated"))
		Expect(after.GetGeneration()).To(Equal(before.GetGeneration()+1),
			"without a status subresource every update bumps generation, as on Agones")
		Expect(after.GetResourceVersion()).NotTo(Equal(before.GetResourceVersion()))
		// Everything the update did not touch is still there.
		Expect(normalize(after.Object["spec"])).To(Equal(normalize(before.Object["spec"])))
		future, _, _ := unstructured.NestedString(after.Object, "status", "someFutureStatus", "x")
		Expect(future).To(Equal("y"))

		// A second writer holding the old resourceVersion loses.
		stale := before.DeepCopy()
		Expect(unstructured.SetNestedField(stale.Object, "Allocated", "status", "state")).To(Succeed())
		_, err = api.Update(ctx, stale, metav1.UpdateOptions{})
		Expect(apierrors.IsConflict(err)).To(BeTrue(), "stale update: %v", err)

		// And there is no /status endpoint to write to.
		_, err = api.UpdateStatus(ctx, after, metav1.UpdateOptions{})
		Expect(apierrors.IsNotFound(err)).To(BeTrue(), "UpdateStatus on a GameServer: %v", err)
	})

	It("validates the typed GameServer fields", func(ctx SpecContext) {
		bad := fromJSON(`{"apiVersion":"agones.dev/v1","kind":"GameServer","metadata":{"name":"gs-bad"},
			"spec":{},"status":{"counters":{"rooms":{"count":-1,"capacity":10}}}}`)
		_, err := dyn.Resource(gameServers).Namespace(ns).Create(ctx, bad, metav1.CreateOptions{})
		Expect(apierrors.IsInvalid(err)).To(BeTrue(), "negative counter: %v", err)
	})

	It("creates a GameServerAllocationPolicy and refuses a negative priority", func(ctx SpecContext) {
		api := dyn.Resource(policies).Namespace(ns)
		_, err := api.Create(ctx, fromJSON(`{"apiVersion":"multicluster.agones.dev/v1","kind":"GameServerAllocationPolicy",
			"metadata":{"name":"east","labels":{"cluster":"east"}},
			"spec":{"priority":1,"weight":100,"connectionInfo":{"clusterName":"east",
			  "allocationEndpoints":["34.1.2.3"],"secretName":"east-tls","namespace":"default","serverCa":"LS0tLQ=="}}}`), metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())
		got, err := api.Get(ctx, "east", metav1.GetOptions{})
		Expect(err).NotTo(HaveOccurred())
		eps, _, _ := unstructured.NestedStringSlice(got.Object, "spec", "connectionInfo", "allocationEndpoints")
		Expect(eps).To(Equal([]string{"34.1.2.3"}))

		_, err = api.Create(ctx, fromJSON(`{"apiVersion":"multicluster.agones.dev/v1","kind":"GameServerAllocationPolicy",
			"metadata":{"name":"bad"},"spec":{"priority":-1,"weight":1,"connectionInfo":{"clusterName":"x"}}}`), metav1.CreateOptions{})
		Expect(apierrors.IsInvalid(err)).To(BeTrue(), "negative priority: %v", err)
	})

	It("scales a Fleet through its scale subresource", func(ctx SpecContext) {
		api := dyn.Resource(fleets).Namespace(ns)
		_, err := api.Create(ctx, fromJSON(`{"apiVersion":"agones.dev/v1","kind":"Fleet","metadata":{"name":"f1"},
			"spec":{"replicas":2,"scheduling":"Packed","strategy":{"type":"RollingUpdate","rollingUpdate":{"maxSurge":"25%","maxUnavailable":"25%"}},
			  "template":{"metadata":{"labels":{"app":"game"}},"spec":{"ports":[{"name":"default","containerPort":7654}],
			    "template":{"spec":{"containers":[{"name":"game","image":"example.com/game:1.0"}]}}}}}}`), metav1.CreateOptions{})
		Expect(err).NotTo(HaveOccurred())

		// A fleet agent reports status through /status.
		f, err := api.Get(ctx, "f1", metav1.GetOptions{})
		Expect(err).NotTo(HaveOccurred())
		Expect(unstructured.SetNestedMap(f.Object, map[string]any{
			"replicas": int64(2), "readyReplicas": int64(2), "allocatedReplicas": int64(0), "reservedReplicas": int64(0),
			"labelSelector": "agones.dev/fleet=f1",
		}, "status")).To(Succeed())
		_, err = api.UpdateStatus(ctx, f, metav1.UpdateOptions{})
		Expect(err).NotTo(HaveOccurred())

		scale, err := api.Get(ctx, "f1", metav1.GetOptions{}, "scale")
		Expect(err).NotTo(HaveOccurred())
		Expect(scale.GetKind()).To(Equal("Scale"))
		replicas, _, _ := unstructured.NestedInt64(scale.Object, "spec", "replicas")
		Expect(replicas).To(Equal(int64(2)))
		selector, _, _ := unstructured.NestedString(scale.Object, "status", "selector")
		Expect(selector).To(Equal("agones.dev/fleet=f1"))

		Expect(unstructured.SetNestedField(scale.Object, int64(5), "spec", "replicas")).To(Succeed())
		_, err = api.Update(ctx, scale, metav1.UpdateOptions{}, "scale")
		Expect(err).NotTo(HaveOccurred())
		f, err = api.Get(ctx, "f1", metav1.GetOptions{})
		Expect(err).NotTo(HaveOccurred())
		replicas, _, _ = unstructured.NestedInt64(f.Object, "spec", "replicas")
		Expect(replicas).To(Equal(int64(5)))
		surge, _, _ := unstructured.NestedString(f.Object, "spec", "strategy", "rollingUpdate", "maxSurge")
		Expect(surge).To(Equal("25%"), "strategy fields beyond type are kept")
	})

	It("answers kubectl, with the version and printer columns", func(ctx SpecContext) {
		out, err := cluster.Kubectl(ctx, "version", "-o", "json")
		Expect(err).NotTo(HaveOccurred())
		var v struct {
			Client struct{ GitVersion string } `json:"clientVersion"`
			Server struct{ GitVersion string } `json:"serverVersion"`
		}
		Expect(json.Unmarshal(out, &v)).To(Succeed(), string(out))
		Expect(v.Server.GitVersion).To(Equal("v1.36.3"))
		Expect(v.Client.GitVersion).To(Equal("v1.36.3"))

		out, err = cluster.Kubectl(ctx, "get", "gs", "-n", ns)
		Expect(err).NotTo(HaveOccurred())
		lines := strings.Split(strings.TrimSpace(string(out)), "\n")
		Expect(lines).To(HaveLen(2), string(out))
		Expect(strings.Fields(lines[0])).To(Equal([]string{"NAME", "STATE", "ADDRESS", "PORT", "NODE", "AGE"}))
		Expect(strings.Fields(lines[1])[:5]).To(Equal([]string{"gs-1", "Allocated", "10.1.2.3", "7001", "node-1"}))

		out, err = cluster.Kubectl(ctx, "get", "gsap", "-n", ns, "-o", "name")
		Expect(err).NotTo(HaveOccurred())
		Expect(strings.TrimSpace(string(out))).To(Equal("gameserverallocationpolicy.multicluster.agones.dev/east"))
	})

	It("runs more clusters side by side, each on its own ports and directory", func(ctx SpecContext) {
		more, err := kindcluster.StartMany(ctx, []kindcluster.Options{
			{Name: "east", EtcdUnsafeNoFsync: true}, {Name: "west", EtcdUnsafeNoFsync: true},
		})
		Expect(err).NotTo(HaveOccurred())
		DeferCleanup(func() { Expect(kindcluster.StopAll(more)).To(Succeed()) })
		seen := map[string]bool{cluster.Server(): true, cluster.Dir(): true}
		for _, c := range more {
			Expect(seen).NotTo(HaveKey(c.Server()))
			Expect(seen).NotTo(HaveKey(c.Dir()))
			seen[c.Server()], seen[c.Dir()] = true, true
			d, err := c.Dynamic()
			Expect(err).NotTo(HaveOccurred())
			// Each cluster is its own world: gs-1 exists only in the suite's.
			_, err = d.Resource(gameServers).Namespace(ns).Get(ctx, "gs-1", metav1.GetOptions{})
			Expect(apierrors.IsNotFound(err)).To(BeTrue(), "%s: %v", c.Name(), err)
		}
		Expect(kindcluster.StopAll(more)).To(Succeed())
		for _, c := range more {
			_, err := os.Stat(c.Dir())
			Expect(errors.Is(err, os.ErrNotExist)).To(BeTrue())
		}
	}, NodeTimeout(5*time.Minute))

	It("stops without leaving a process or a directory behind", func() {
		etcdPID, apiPID := cluster.Pids()
		dir := cluster.Dir()
		Expect(cluster.Stop()).To(Succeed())
		for _, pid := range []int{etcdPID, apiPID} {
			Expect(pid).To(BeNumerically(">", 0))
			Expect(syscall.Kill(pid, 0)).To(MatchError(syscall.ESRCH), "process %d still exists", pid)
		}
		_, err := os.Stat(dir)
		Expect(errors.Is(err, os.ErrNotExist)).To(BeTrue(), "dir %s: %v", dir, err)
		Expect(cluster.Stop()).To(Succeed(), "Stop is idempotent")
	})
})
