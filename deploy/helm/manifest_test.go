package helm_test

import (
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// manifestObject is what the drift check compares between
// deploy/allocator.yaml and the chart's default rendering.
type manifestObject struct {
	Kind     string `yaml:"kind"`
	Metadata struct {
		Name string `yaml:"name"`
	} `yaml:"metadata"`
	Rules []map[string]any `yaml:"rules"`
	Spec  struct {
		Template struct {
			Spec struct {
				SecurityContext map[string]any `yaml:"securityContext"`
				Containers      []struct {
					Args            []string       `yaml:"args"`
					Resources       map[string]any `yaml:"resources"`
					StartupProbe    map[string]any `yaml:"startupProbe"`
					LivenessProbe   map[string]any `yaml:"livenessProbe"`
					ReadinessProbe  map[string]any `yaml:"readinessProbe"`
					SecurityContext map[string]any `yaml:"securityContext"`
					VolumeMounts    []struct {
						MountPath string `yaml:"mountPath"`
					} `yaml:"volumeMounts"`
				} `yaml:"containers"`
			} `yaml:"spec"`
		} `yaml:"template"`
		Ports []map[string]any `yaml:"ports"`
	} `yaml:"spec"`
}

func decodeAll(t *testing.T, manifests string) map[string]manifestObject {
	t.Helper()
	out := map[string]manifestObject{}
	for _, o := range objects(t, manifests) {
		var m manifestObject
		if err := o.raw.Decode(&m); err != nil {
			t.Fatal(err)
		}
		out[m.Kind+"/"+m.Metadata.Name] = m
	}
	return out
}

// TestDefaultsCoverManifest keeps the chart's defaults a superset of
// deploy/allocator.yaml, the plain manifest it replaces: every RBAC rule,
// every qm serve argument, the probes, resources and security contexts, the
// mounts and the Service ports there are here too. When the manifest gains
// something (a rule, a flag), this fails until the chart has it.
func TestDefaultsCoverManifest(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "allocator.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	man := decodeAll(t, string(raw))
	chart := decodeAll(t, mustRender(t, variants[0]))
	if len(man) == 0 {
		t.Fatal("deploy/allocator.yaml has no objects")
	}
	for key, m := range man {
		if m.Kind == "Namespace" {
			continue // Helm's release namespace (-n NS --create-namespace)
		}
		c, ok := chart[key]
		if !ok {
			t.Errorf("the chart renders no %s", key)
			continue
		}
		for _, r := range m.Rules {
			found := false
			for _, cr := range c.Rules {
				found = found || reflect.DeepEqual(r, cr)
			}
			if !found {
				t.Errorf("%s: the chart lacks the manifest's rule %v", key, r)
			}
		}
		for _, p := range m.Spec.Ports {
			found := false
			for _, cp := range c.Spec.Ports {
				found = found || reflect.DeepEqual(p, cp)
			}
			if !found {
				t.Errorf("%s: the chart lacks the manifest's port %v", key, p)
			}
		}
		if m.Kind != "Deployment" {
			continue
		}
		ms, cs := m.Spec.Template.Spec, c.Spec.Template.Spec
		if len(ms.Containers) != 1 || len(cs.Containers) != 1 {
			t.Fatalf("%s: want one container in each, have %d and %d", key, len(ms.Containers), len(cs.Containers))
		}
		mc, cc := ms.Containers[0], cs.Containers[0]
		args := strings.Join(cc.Args, "\n") + "\n"
		for _, a := range mc.Args {
			if !strings.Contains(args, a+"\n") {
				t.Errorf("%s: the chart's qm serve lacks the manifest's argument %s", key, a)
			}
		}
		for what, pair := range map[string][2]any{
			"pod securityContext": {ms.SecurityContext, cs.SecurityContext},
			"securityContext":     {mc.SecurityContext, cc.SecurityContext},
			"resources":           {mc.Resources, cc.Resources},
			"startupProbe":        {mc.StartupProbe, cc.StartupProbe},
			"livenessProbe":       {mc.LivenessProbe, cc.LivenessProbe},
			"readinessProbe":      {mc.ReadinessProbe, cc.ReadinessProbe},
		} {
			if !reflect.DeepEqual(pair[0], pair[1]) {
				t.Errorf("%s %s: manifest %v, chart %v", key, what, pair[0], pair[1])
			}
		}
		mounts := map[string]bool{}
		for _, v := range cc.VolumeMounts {
			mounts[v.MountPath] = true
		}
		for _, v := range mc.VolumeMounts {
			if !mounts[v.MountPath] {
				t.Errorf("%s: the chart mounts nothing at the manifest's %s", key, v.MountPath)
			}
		}
	}
}

// TestTemplatesOverlayMatchesChart keeps deploy/allocator-templates.yaml
// and its Deployment patch (the plain manifest's on-demand opt-in) in step
// with the chart's templates.enabled: the same ClusterRole rules, no more
// and no fewer; the same qm serve arguments added to the defaults; the
// templates file mounted at the same place from a ConfigMap of the same
// name and key. The plain manifest itself stays without Create, like the
// chart's defaults (TestDefaultsCoverManifest).
func TestTemplatesOverlayMatchesChart(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "allocator-templates.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	overlay := decodeAll(t, string(raw))
	on := decodeAll(t, mustRender(t, onDemand))
	off := decodeAll(t, mustRender(t, variants[0]))

	const role = "ClusterRole/qm-allocator-templates"
	if o, c := overlay[role], on[role]; len(o.Rules) == 0 || !reflect.DeepEqual(o.Rules, c.Rules) {
		t.Errorf("%s: allocator-templates.yaml has rules %v, the chart %v", role, o.Rules, c.Rules)
	}
	if _, ok := overlay["RoleBinding/qm-allocator-templates"]; !ok {
		t.Error("allocator-templates.yaml binds qm-allocator-templates nowhere")
	}
	for key := range overlay {
		if _, ok := on[key]; !ok {
			t.Errorf("allocator-templates.yaml has %s, which the chart's templates.enabled does not render", key)
		}
	}

	// What templates.enabled adds to qm serve's arguments and mounts,
	// against what the patch adds.
	dep := func(m map[string]manifestObject) (args []string, mounts map[string]bool) {
		d := m["Deployment/qm-allocator"].Spec.Template.Spec
		if len(d.Containers) != 1 {
			t.Fatalf("the chart renders %d allocator containers", len(d.Containers))
		}
		mounts = map[string]bool{}
		for _, v := range d.Containers[0].VolumeMounts {
			mounts[v.MountPath] = true
		}
		return d.Containers[0].Args, mounts
	}
	onArgs, onMounts := dep(on)
	offArgs, offMounts := dep(off)
	var wantArgs []string
	for _, a := range onArgs {
		if !slices.Contains(offArgs, a) && !strings.HasPrefix(a, "--limits=") {
			wantArgs = append(wantArgs, a)
		}
	}

	var patch []struct {
		Op    string `yaml:"op"`
		Path  string `yaml:"path"`
		Value any    `yaml:"value"`
	}
	raw, err = os.ReadFile(filepath.Join("..", "allocator-templates-patch.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(raw, &patch); err != nil {
		t.Fatalf("allocator-templates-patch.yaml: %v", err)
	}
	var gotArgs []string
	var mountPaths []string
	cms := map[string]string{} // volume name -> ConfigMap
	mountVol := map[string]string{}
	for _, op := range patch {
		if op.Op != "add" {
			t.Errorf("patch op %q at %s: want add only (the manifest's own entries stay)", op.Op, op.Path)
		}
		switch op.Path {
		case "/spec/template/spec/containers/0/args/-":
			gotArgs = append(gotArgs, fmt.Sprint(op.Value))
		case "/spec/template/spec/containers/0/volumeMounts/-":
			m, _ := op.Value.(map[string]any)
			p := fmt.Sprint(m["mountPath"])
			mountPaths = append(mountPaths, p)
			mountVol[p] = fmt.Sprint(m["name"])
			if m["readOnly"] != true {
				t.Errorf("the patch mounts %s writable", p)
			}
		case "/spec/template/spec/volumes/-":
			m, _ := op.Value.(map[string]any)
			if cm, ok := m["configMap"].(map[string]any); ok {
				cms[fmt.Sprint(m["name"])] = fmt.Sprint(cm["name"])
			}
		default:
			t.Errorf("patch path %s: not one this test knows", op.Path)
		}
	}
	if !reflect.DeepEqual(gotArgs, wantArgs) {
		t.Errorf("the patch adds qm serve arguments %q; templates.enabled adds %q", gotArgs, wantArgs)
	}
	for _, p := range mountPaths {
		if !onMounts[p] || offMounts[p] {
			t.Errorf("the patch mounts %s; the chart mounts it only with templates.enabled: %v", p, onMounts[p] && !offMounts[p])
		}
		if cm := cms[mountVol[p]]; cm != "qm-allocator-templates" {
			t.Errorf("the patch mounts ConfigMap %q at %s, want qm-allocator-templates", cm, p)
		}
	}
	if len(mountPaths) != 1 {
		t.Errorf("the patch adds %d mounts, want the templates directory only", len(mountPaths))
	}
	if _, ok := overlay["ConfigMap/qm-allocator-templates"]; !ok {
		t.Error("allocator-templates.yaml has no ConfigMap qm-allocator-templates")
	}
}
