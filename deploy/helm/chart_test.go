package helm_test

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
	"helm.sh/helm/v4/pkg/chart/common"
	chartutil "helm.sh/helm/v4/pkg/chart/common/util"
	"helm.sh/helm/v4/pkg/chart/v2/lint"
	"helm.sh/helm/v4/pkg/chart/v2/lint/support"
	"helm.sh/helm/v4/pkg/chart/v2/loader"
	"helm.sh/helm/v4/pkg/engine"
	"helm.sh/helm/v4/pkg/strvals"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/ from the chart")

const (
	chartDir  = "quartermaster"
	release   = "qm"
	kubeMinor = "v1.36.3" // the API server the tests run against
)

// variant is one way of installing the chart: the values files and --set
// values a user would pass, and the namespace they install into.
type variant struct {
	name      string
	namespace string
	files     []string
	set       []string
}

// The golden variants: defaults; in place of Agones' allocator with the
// chart's own values file; every optional part switched on; and on-demand
// servers (templates) on with the rest at its defaults.
var variants = []variant{
	{name: "default", namespace: "quartermaster"},
	{name: "agones", namespace: "agones-system", files: []string{filepath.Join(chartDir, "values-agones.yaml")}},
	{name: "full", namespace: "quartermaster", files: []string{filepath.Join("testdata", "values-full.yaml")}},
	{name: "templates", namespace: "quartermaster", files: []string{filepath.Join("testdata", "values-templates.yaml")}},
}

func kubeVersion(t testing.TB) *common.KubeVersion {
	t.Helper()
	kv, err := common.ParseKubeVersion(kubeMinor)
	if err != nil {
		t.Fatal(err)
	}
	return kv
}

// render does what `helm template` does with -f files and --set values:
// merge the user's values, check them against values.schema.json, render
// every template. It returns the manifests in a stable order (template
// path, then document order), each under a "# Source:" line as helm prints
// them.
func render(t testing.TB, namespace string, files, set []string) (string, error) {
	t.Helper()
	ch, err := loader.Load(chartDir)
	if err != nil {
		t.Fatalf("load chart: %v", err)
	}
	user := userValues(t, files, set)
	caps := common.DefaultCapabilities.Copy()
	caps.KubeVersion = *kubeVersion(t)
	vals, err := chartutil.ToRenderValuesWithSchemaValidation(ch, user,
		common.ReleaseOptions{Name: release, Namespace: namespace, Revision: 1, IsInstall: true}, caps, false)
	if err != nil {
		return "", err
	}
	out, err := engine.Render(ch, vals)
	if err != nil {
		return "", err
	}
	paths := make([]string, 0, len(out))
	for p := range out {
		if strings.HasSuffix(p, ".yaml") {
			paths = append(paths, p)
		}
	}
	sort.Strings(paths)
	var b strings.Builder
	for _, p := range paths {
		for _, doc := range splitDocs(out[p]) {
			fmt.Fprintf(&b, "---\n# Source: %s\n%s\n", p, doc)
		}
	}
	return b.String(), nil
}

// userValues merges values as `helm -f FILE --set K=V` does: files in
// order, later keys over earlier ones, then the --set values. (Helm's own
// pkg/cli/values does the same but also fetches URLs, which would pull
// Helm's registry and getter code into this module's build.)
func userValues(t testing.TB, files, set []string) map[string]any {
	t.Helper()
	vals := map[string]any{}
	for _, f := range files {
		raw, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		m, err := loader.LoadValues(bytes.NewReader(raw))
		if err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		vals = loader.MergeMaps(vals, m)
	}
	for _, kv := range set {
		if err := strvals.ParseInto(kv, vals); err != nil {
			t.Fatalf("--set %s: %v", kv, err)
		}
	}
	return vals
}

// splitDocs returns the non-empty YAML documents of a rendered template,
// trimmed (a document of comments only is empty too: Helm drops those).
func splitDocs(s string) []string {
	var docs []string
	for _, d := range strings.Split("\n"+s, "\n---") {
		d = strings.TrimSpace(d)
		if d == "" || onlyComments(d) {
			continue
		}
		docs = append(docs, d)
	}
	return docs
}

func onlyComments(doc string) bool {
	for _, l := range strings.Split(doc, "\n") {
		if l = strings.TrimSpace(l); l != "" && !strings.HasPrefix(l, "#") {
			return false
		}
	}
	return true
}

func mustRender(t testing.TB, v variant) string {
	t.Helper()
	out, err := render(t, v.namespace, v.files, v.set)
	if err != nil {
		t.Fatalf("render %s: %v", v.name, err)
	}
	return out
}

func goldenPath(name string) string { return filepath.Join("testdata", name+".golden.yaml") }

// TestGolden compares each variant's rendering with its golden file (go test
// -update rewrites them; read the diff before committing it). cmd/qm's
// TestHelmChartArgs parses the allocator arguments in these files with qm
// serve's own flag set, so the goldens are also what ties the chart to the
// binary.
func TestGolden(t *testing.T) {
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			got := mustRender(t, v)
			if *update {
				if err := os.WriteFile(goldenPath(v.name), []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(goldenPath(v.name))
			if err != nil {
				t.Fatalf("%v (run go test -update to write it)", err)
			}
			if got != string(want) {
				t.Errorf("rendering differs from %s (go test -update rewrites it):\n%s", goldenPath(v.name), lineDiff(string(want), got))
			}
		})
	}
}

// lineDiff is a short first-difference report, enough to find the change.
func lineDiff(want, got string) string {
	w, g := strings.Split(want, "\n"), strings.Split(got, "\n")
	for i := 0; i < len(w) || i < len(g); i++ {
		var wl, gl string
		if i < len(w) {
			wl = w[i]
		}
		if i < len(g) {
			gl = g[i]
		}
		if wl != gl {
			return fmt.Sprintf("line %d:\n  want %q\n  got  %q", i+1, wl, gl)
		}
	}
	return "(no line differs)"
}

// TestLint runs `helm lint`'s rules (Chart.yaml, values against the
// schema, every template rendered and parsed, CRDs) for each variant's
// values, and fails on anything above INFO.
func TestLint(t *testing.T) {
	for _, v := range variants {
		t.Run(v.name, func(t *testing.T) {
			res := lint.RunAll(chartDir, userValues(t, v.files, v.set), v.namespace, lint.WithKubeVersion(kubeVersion(t)))
			for _, m := range res.Messages {
				if m.Severity > support.InfoSev {
					t.Errorf("lint: %s", m)
				} else {
					t.Logf("lint: %s", m)
				}
			}
		})
	}
	// And the same rules do fail a bad value, naming it.
	res := lint.RunAll(chartDir, map[string]any{"replicas": 0}, "quartermaster", lint.WithKubeVersion(kubeVersion(t)))
	if res.HighestSeverity < support.ErrorSev || !strings.Contains(fmt.Sprint(res.Messages), "/replicas") {
		t.Errorf("lint accepted replicas: 0: %v", res.Messages)
	}
}

// TestSchemaRefusesBadValues: a wrong value fails before anything is
// rendered, and the message names the field.
func TestSchemaRefusesBadValues(t *testing.T) {
	for _, tc := range []struct {
		set   string
		field string // what the error must name
	}{
		{"replicas=0", "replicas"},
		{"replicas=three", "replicas"},
		{"replica=3", "replica"}, // a typo: unknown keys are refused
		{"service.type=Loadbalancer", "/service/type"},
		{"service.port=70000", "/service/port"},
		{"service.annotations.foo=1", "/service/annotations/foo"},
		{"image.pullPolicy=Sometimes", "/image/pullPolicy"},
		{"watchNamespace=Games!", "/watchNamespace"},
		{"serve.drainDelay=5 seconds", "/serve/drainDelay"},
		{"serve.logFormat=xml", "/serve/logFormat"},
		{"installCRDs=maybe", "/installCRDs"},
		{"limits.config.identites.x.admin=true", "identites"},
		{"limits.config.identities.matchmaker.requestPerSecond=5", "/limits/config/identities/matchmaker"},
		{"limits.config.default.maxAllocations=-1", "/limits/config/default/maxAllocations"},
		{"tls.certManager.issuerRef.kind=ClusterIssuer", "/tls/certManager/issuerRef"},
		{"loadgen.shards=0", "/loadgen/shards"},
		{"metrics.serviceMonitor.enable=true", "enable"},
		{"name=QM_Allocator", "/name"},
		{"membership=false", "/replicas"}, // three replicas without Leases
		{"rbac.forwarding.namespaces[0]=Games", "/rbac/forwarding/namespaces/0"},
		{"templates.enable=true", "enable"},
		{"templates.fleets=maybe", "/templates/fleets"},
		{"templates.namespaces[0]=Games", "/templates/namespaces/0"},
		{"templates.content[0].name=Private_Match", "/templates/content/0/name"},
		{"templates.content[0].name=p,templates.content[0].fleet=f,templates.content[0].imag=x", "imag"},
		{"templates.content[0].name=p,templates.content[0].namespace=Games,templates.content[0].fleet=f", "/templates/content/0/namespace"},
		{"templates.content[0].name=p", "/templates/content/0"},                                                                     // neither template nor fleet
		{"templates.content[0].name=p,templates.content[0].fleet=f,templates.content[0].template.spec.x=1", "/templates/content/0"}, // both
		{"templates.content[0].name=p,templates.content[0].template.metadata.name=x", "/templates/content/0/template/metadata"},
		{"templates.content[0].name=p,templates.content[0].fleet=f,templates.content[0].startupDuration=1 second", "/templates/content/0/startupDuration"},
		{"limits.config.default.templates=private-match", "/limits/config/default/templates"}, // a string, not a list
	} {
		t.Run(tc.set, func(t *testing.T) {
			_, err := render(t, "quartermaster", nil, []string{tc.set})
			if err == nil {
				t.Fatalf("--set %s was accepted", tc.set)
			}
			if !strings.Contains(err.Error(), "schema") || !strings.Contains(err.Error(), tc.field) {
				t.Errorf("--set %s: error does not name %q as a schema failure:\n%v", tc.set, tc.field, err)
			}
		})
	}
}

// TestChartCRDsMatchDeploy: the chart carries copies of deploy/crds (a
// chart cannot read files outside its directory); they must not drift.
func TestChartCRDsMatchDeploy(t *testing.T) {
	src, err := filepath.Glob(filepath.Join("..", "crds", "*.yaml"))
	if err != nil || len(src) == 0 {
		t.Fatalf("deploy/crds: %v, %d files", err, len(src))
	}
	copies, err := filepath.Glob(filepath.Join(chartDir, "files", "crds", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if len(copies) != len(src) {
		t.Errorf("chart has %d CRD files, deploy/crds %d: copy deploy/crds/*.yaml to %s/files/crds/", len(copies), len(src), chartDir)
	}
	for _, s := range src {
		want, err := os.ReadFile(s)
		if err != nil {
			t.Fatal(err)
		}
		got, err := os.ReadFile(filepath.Join(chartDir, "files", "crds", filepath.Base(s)))
		if err != nil || !bytes.Equal(got, want) {
			t.Errorf("%s/files/crds/%s differs from deploy/crds (%v): copy it again", chartDir, filepath.Base(s), err)
		}
	}
}

// object is the part of a rendered object the tests look at.
type object struct {
	APIVersion string `yaml:"apiVersion"`
	Kind       string `yaml:"kind"`
	Metadata   struct {
		Name        string            `yaml:"name"`
		Namespace   string            `yaml:"namespace"`
		Annotations map[string]string `yaml:"annotations"`
	} `yaml:"metadata"`
	Data map[string]string `yaml:"data"`
	raw  yaml.Node
}

func objects(t testing.TB, manifests string) []object {
	t.Helper()
	dec := yaml.NewDecoder(strings.NewReader(manifests))
	var out []object
	for {
		var o object
		if err := dec.Decode(&o.raw); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatalf("rendered YAML does not parse: %v", err)
		}
		if err := o.raw.Decode(&o); err != nil {
			t.Fatal(err)
		}
		if o.Kind == "" {
			continue
		}
		out = append(out, o)
	}
	return out
}

func find(objs []object, kind, name string) *object {
	for i := range objs {
		if objs[i].Kind == kind && objs[i].Metadata.Name == name {
			return &objs[i]
		}
	}
	return nil
}

// TestRenderedParts checks what the goldens cannot say on their own: the
// parts that depend on values are there or not, and the limits file the
// chart writes is there.
func TestRenderedParts(t *testing.T) {
	def := objects(t, mustRender(t, variants[0]))
	for _, want := range []struct{ kind, name string }{
		{"ServiceAccount", "qm-allocator"}, {"ClusterRole", "qm-allocator"}, {"ClusterRoleBinding", "qm-allocator"},
		{"ClusterRole", "qm-allocator-remote-certs"}, {"RoleBinding", "qm-allocator-remote-certs"},
		{"Role", "qm-allocator-replicas"}, {"RoleBinding", "qm-allocator-replicas"},
		{"Deployment", "qm-allocator"}, {"Service", "qm-allocator"},
		{"CustomResourceDefinition", "gameservers.agones.dev"}, {"CustomResourceDefinition", "fleets.agones.dev"},
		{"CustomResourceDefinition", "gameserverallocationpolicies.multicluster.agones.dev"},
	} {
		if find(def, want.kind, want.name) == nil {
			t.Errorf("default rendering lacks %s %s", want.kind, want.name)
		}
	}
	for _, o := range def {
		if o.Kind == "CustomResourceDefinition" && o.Metadata.Annotations["helm.sh/resource-policy"] != "keep" {
			t.Errorf("CRD %s would be deleted with the release (no keep policy)", o.Metadata.Name)
		}
		switch o.Kind {
		case "Job", "ConfigMap", "Certificate", "Issuer", "ServiceMonitor", "StatefulSet":
			t.Errorf("default rendering has an optional %s %s", o.Kind, o.Metadata.Name)
		}
	}

	// One replica without membership: told so, and no Lease Role.
	lone := mustRender(t, variant{name: "lone", namespace: "quartermaster", set: []string{"membership=false", "replicas=1"}})
	if !strings.Contains(lone, "- --membership=false\n") || find(objects(t, lone), "Role", "qm-allocator-replicas") != nil {
		t.Errorf("membership=false: want --membership=false and no Lease Role")
	}

	ag := objects(t, mustRender(t, variants[1]))
	if svc := find(ag, "Service", "agones-allocator"); svc == nil || svc.Metadata.Namespace != "agones-system" {
		t.Errorf("values-agones.yaml: no Service agones-allocator in agones-system")
	}
	for _, o := range ag {
		if o.Kind == "CustomResourceDefinition" {
			t.Errorf("values-agones.yaml installs CRD %s, which Agones owns", o.Metadata.Name)
		}
	}

	full := objects(t, mustRender(t, variants[2]))
	// cmd/qm's TestHelmChartArgs parses this file with the allocator's
	// own parser (from the golden file).
	if cm := find(full, "ConfigMap", "qm-allocator-limits"); cm == nil || !strings.Contains(cm.Data["limits.yaml"], "kind: AllocatorLimits") {
		t.Error("full rendering has no limits ConfigMap with an AllocatorLimits file")
	}
	for _, want := range []struct{ kind, name string }{
		{"Job", "qm-allocator-load"}, {"ServiceMonitor", "qm-allocator"}, {"Issuer", "qm-allocator-selfsigned"},
		{"Issuer", "qm-allocator-ca"}, {"Certificate", "qm-allocator-ca"}, {"Certificate", "qm-allocator-tls"},
		{"Certificate", "qm-allocator-load-client"},
	} {
		if find(full, want.kind, want.name) == nil {
			t.Errorf("full rendering lacks %s %s", want.kind, want.name)
		}
	}
	// The ServiceMonitor finds exactly one Service, and it has the port
	// the monitor scrapes.
	var sm struct {
		Spec struct {
			Selector struct {
				MatchLabels map[string]string `yaml:"matchLabels"`
			} `yaml:"selector"`
			Endpoints []struct {
				Port string `yaml:"port"`
			} `yaml:"endpoints"`
		} `yaml:"spec"`
	}
	if o := find(full, "ServiceMonitor", "qm-allocator"); o != nil {
		if err := o.raw.Decode(&sm); err != nil {
			t.Fatal(err)
		}
		var matched []string
		for _, svc := range full {
			var s struct {
				Metadata struct {
					Labels map[string]string `yaml:"labels"`
				} `yaml:"metadata"`
				Spec struct {
					Ports []struct {
						Name string `yaml:"name"`
					} `yaml:"ports"`
				} `yaml:"spec"`
			}
			if svc.Kind != "Service" || svc.raw.Decode(&s) != nil {
				continue
			}
			all := len(sm.Spec.Selector.MatchLabels) > 0
			for k, v := range sm.Spec.Selector.MatchLabels {
				all = all && s.Metadata.Labels[k] == v
			}
			if !all {
				continue
			}
			matched = append(matched, svc.Metadata.Name)
			for _, ep := range sm.Spec.Endpoints {
				found := false
				for _, p := range s.Spec.Ports {
					found = found || p.Name == ep.Port
				}
				if !found {
					t.Errorf("ServiceMonitor scrapes port %q, which Service %s lacks", ep.Port, svc.Metadata.Name)
				}
			}
		}
		if len(matched) != 1 {
			t.Errorf("ServiceMonitor selects Services %v, want exactly one", matched)
		}
	}
	if rb := find(full, "RoleBinding", "qm-allocator"); rb == nil || rb.Metadata.Namespace != "games" {
		t.Errorf("watchNamespace=games: no RoleBinding qm-allocator in games")
	}
	if find(full, "ClusterRoleBinding", "qm-allocator") != nil {
		t.Errorf("watchNamespace=games still binds the ClusterRole cluster-wide")
	}
}

// onDemand is the templates variant.
var onDemand = variants[3]

// TestTemplatesOnDemand: with templates.enabled the allocator gets its
// templates file, mounted from a ConfigMap that qm serve can read, and the
// right to create and delete GameServers (and read Fleets) in the
// templates' namespaces only; without it, none of that.
func TestTemplatesOnDemand(t *testing.T) {
	if onDemand.name != "templates" {
		t.Fatalf("variants[3] is %q, want the templates variant", onDemand.name)
	}
	for _, v := range variants[:3] {
		out := mustRender(t, v)
		if strings.Contains(out, "--templates") || strings.Contains(out, "qm-allocator-templates") {
			t.Errorf("%s: templates.enabled is off, yet the rendering has --templates or a templates object", v.name)
		}
		for _, o := range objects(t, out) {
			for _, r := range rules(t, o) {
				for _, verb := range r.Verbs {
					if verb == "create" || verb == "delete" {
						for _, res := range r.Resources {
							if res == "gameservers" {
								t.Errorf("%s: %s %s grants %s on gameservers without templates.enabled", v.name, o.Kind, o.Metadata.Name, verb)
							}
						}
					}
				}
			}
		}
	}

	out := mustRender(t, onDemand)
	objs := objects(t, out)
	if !strings.Contains(out, "- --templates=/etc/qm/templates/templates.yaml\n") {
		t.Error("templates.enabled: qm serve gets no --templates=/etc/qm/templates/templates.yaml")
	}
	cm := find(objs, "ConfigMap", "qm-allocator-templates")
	if cm == nil {
		t.Fatal("templates.enabled: no ConfigMap qm-allocator-templates")
	}
	// The file is what the values say, placeholders untouched by Helm.
	// (cmd/qm's TestHelmChartArgs parses it with qm serve's own parser.)
	var file struct {
		APIVersion string           `yaml:"apiVersion"`
		Kind       string           `yaml:"kind"`
		Templates  []map[string]any `yaml:"templates"`
	}
	if err := yaml.Unmarshal([]byte(cm.Data["templates.yaml"]), &file); err != nil {
		t.Fatalf("templates.yaml does not parse: %v", err)
	}
	if file.Kind != "GameServerTemplates" || file.APIVersion != "quartermaster.dev/v1alpha1" || len(file.Templates) != 2 ||
		file.Templates[0]["name"] != "private-match" || file.Templates[1]["fleet"] != "simple-game" {
		t.Errorf("templates.yaml is not the values' two templates: %+v", file)
	}
	if !strings.Contains(cm.Data["templates.yaml"], "--admins={{.AccessList}}") {
		t.Errorf("templates.yaml lost the placeholder {{.AccessList}}:\n%s", cm.Data["templates.yaml"])
	}

	role := find(objs, "ClusterRole", "qm-allocator-templates")
	if role == nil {
		t.Fatal("templates.enabled: no ClusterRole qm-allocator-templates")
	}
	want := []rule{
		{APIGroups: []string{"agones.dev"}, Resources: []string{"gameservers"}, Verbs: []string{"create", "delete"}},
		{APIGroups: []string{"agones.dev"}, Resources: []string{"fleets"}, Verbs: []string{"get"}},
	}
	if got := rules(t, *role); !reflect.DeepEqual(got, want) {
		t.Errorf("ClusterRole qm-allocator-templates rules %+v, want exactly %+v", got, want)
	}
	// Bound where the templates make servers: games (private-match) and
	// default (simple-game names none), not cluster-wide.
	var bound []string
	for _, o := range objs {
		if o.Kind == "RoleBinding" && o.Metadata.Name == "qm-allocator-templates" {
			bound = append(bound, o.Metadata.Namespace)
		}
		if o.Kind == "ClusterRoleBinding" && o.Metadata.Name == "qm-allocator-templates" {
			t.Error("the templates ClusterRole is bound cluster-wide")
		}
	}
	if !reflect.DeepEqual(bound, []string{"default", "games"}) {
		t.Errorf("qm-allocator-templates bound in %v, want [default games]", bound)
	}

	// No Fleet templates: templates.fleets=false drops the Fleet rule.
	noFleet := objects(t, mustRender(t, variant{name: "nofleet", namespace: "quartermaster", set: []string{
		"templates.enabled=true", "templates.fleets=false", "templates.content[0].name=p", "templates.content[0].template.spec.x=1"}}))
	if role := find(noFleet, "ClusterRole", "qm-allocator-templates"); role == nil || len(rules(t, *role)) != 1 {
		t.Errorf("templates.fleets=false: want the gameservers rule only")
	}

	// A ConfigMap of the user's: mounted, none rendered, bound in the
	// namespaces given.
	own := mustRender(t, variant{name: "own", namespace: "quartermaster", set: []string{
		"templates.enabled=true", "templates.existingConfigMap=my-templates", "templates.namespaces={arena,lobby}"}})
	ownObjs := objects(t, own)
	if find(ownObjs, "ConfigMap", "qm-allocator-templates") != nil || !strings.Contains(own, "name: my-templates\n") {
		t.Error("templates.existingConfigMap: want the user's ConfigMap mounted and none rendered")
	}
	bound = nil
	for _, o := range ownObjs {
		if o.Kind == "RoleBinding" && o.Metadata.Name == "qm-allocator-templates" {
			bound = append(bound, o.Metadata.Namespace)
		}
	}
	if !reflect.DeepEqual(bound, []string{"arena", "lobby"}) {
		t.Errorf("templates.namespaces={arena,lobby}: bound in %v", bound)
	}
}

// TestTemplatesRefused: settings under which Create could not work fail
// the install, and the message names the value to fix.
func TestTemplatesRefused(t *testing.T) {
	tmpl := []string{"templates.enabled=true", "templates.content[0].name=p", "templates.content[0].template.spec.x=1"}
	fleet := []string{"templates.enabled=true", "templates.content[0].name=f", "templates.content[0].fleet=simple-game"}
	for _, tc := range []struct {
		name string
		set  []string
		want string
	}{
		{"no templates", []string{"templates.enabled=true"}, "templates.content"},
		{"both sources", append(tmpl, "templates.existingConfigMap=mine"), "not both"},
		{"own ConfigMap, no namespaces", []string{"templates.enabled=true", "templates.existingConfigMap=mine"}, "templates.namespaces"},
		{"fleet without the Fleet rule", append(fleet, "templates.fleets=false"), `reads Fleet "simple-game"`},
		{"namespaces miss a template's", append(tmpl, "templates.content[0].namespace=arena", "templates.namespaces={lobby}"), `"arena"`},
		{"outside watchNamespace", append(tmpl, "watchNamespace=games"), `namespace "default" is not watchNamespace "games"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := render(t, "quartermaster", nil, tc.set)
			if err == nil {
				t.Fatalf("--set %v was accepted", tc.set)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("--set %v: error does not say %q:\n%v", tc.set, tc.want, err)
			}
		})
	}
	// In watchNamespace, it renders.
	if _, err := render(t, "quartermaster", nil, append(tmpl, "watchNamespace=games", "templates.content[0].namespace=games")); err != nil {
		t.Errorf("a template in watchNamespace: %v", err)
	}
}

// rule is one RBAC rule as rendered.
type rule struct {
	APIGroups []string `yaml:"apiGroups"`
	Resources []string `yaml:"resources"`
	Verbs     []string `yaml:"verbs"`
}

func rules(t *testing.T, o object) []rule {
	t.Helper()
	var r struct {
		Rules []rule `yaml:"rules"`
	}
	if err := o.raw.Decode(&r); err != nil {
		t.Fatal(err)
	}
	return r.Rules
}
