package helm_test

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
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
