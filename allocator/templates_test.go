package allocator_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/quartermaster-dev/quartermaster/allocator"
)

func TestParseTemplatesValid(t *testing.T) {
	c, err := allocator.LoadTemplates("testdata/templates/valid-templates.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(c.Names(), ","); got != "private-match,simple-game" {
		t.Fatalf("names %q", got)
	}
	pm, _ := c.Lookup("private-match")
	if pm.Startup() != time.Second || pm.Namespace != "default" {
		t.Errorf("private-match: startup %v namespace %q", pm.Startup(), pm.Namespace)
	}
	sg, _ := c.Lookup("simple-game")
	if sg.Fleet != "simple-game" || sg.Namespace != "default" || sg.Template != nil {
		t.Errorf("simple-game: %+v", sg)
	}
	if _, ok := c.Lookup("nope"); ok {
		t.Error("Lookup found a template that does not exist")
	}
}

func TestParseTemplatesInvalid(t *testing.T) {
	want := map[string]string{
		"invalid-unknown-field.yaml": `unknown field "tempalte"`,
		"invalid-template-name.yaml": `templates[0].name: "Private_Match" must be lowercase`,
		"invalid-placeholder.yaml":   `templates[0].template.spec.template.spec.containers[0].args[0]: unknown placeholder in "--mount={{.MountName}}"`,
		"invalid-both.yaml":          "templates[0]: has both template and fleet",
		"invalid-metadata-name.yaml": "templates[0].template.metadata.name: only labels and annotations may be set",
		"invalid-reserved-key.yaml":  `templates[0].template.metadata.annotations["quartermaster.dev/owner"]: quartermaster.dev/ keys are set by the allocator`,
		"invalid-duplicate.yaml":     `templates[1].name: "a" is used by an earlier template`,
		"invalid-startup.yaml":       `templates[0].startupDuration: "soon" is not a duration`,
		"invalid-kind.yaml":          `kind: is "Fleets", want "GameServerTemplates"`,
	}
	files, _ := filepath.Glob("testdata/templates/invalid-*.yaml")
	if len(files) != len(want) {
		t.Fatalf("%d invalid fixtures, %d expectations", len(files), len(want))
	}
	for _, f := range files {
		t.Run(filepath.Base(f), func(t *testing.T) {
			_, err := allocator.LoadTemplates(f)
			if err == nil {
				t.Fatal("accepted")
			}
			if w := want[filepath.Base(f)]; !strings.Contains(err.Error(), w) {
				t.Fatalf("error %q\nwant it to contain %q", err, w)
			}
		})
	}
}

// expansionGolden is what the golden files hold for one expansion: the
// GameServer object Create makes and the core's view of it.
type expansionGolden struct {
	Object map[string]any `json:"object"`
	Core   any            `json:"core"`
}

func TestExpandTemplateGolden(t *testing.T) {
	c, err := allocator.LoadTemplates("testdata/templates/valid-templates.yaml")
	if err != nil {
		t.Fatal(err)
	}
	pm, _ := c.Lookup("private-match")
	// A Fleet's template as the API server holds it, fleet labels and all.
	var fleetTemplate map[string]any
	if err := yaml.Unmarshal([]byte(`
metadata:
  labels: {agones.dev/fleet: simple-game, mode: deathmatch}
  annotations: {quartermaster.dev/owner: forged}
spec:
  ports: [{name: default, containerPort: 7654}]
  counters: {rooms: {capacity: 10}}
  template: {spec: {containers: [{name: simple-game, image: "us-docker.pkg.dev/agones-images/examples/simple-game-server:1.35"}]}}
`), &fleetTemplate); err != nil {
		t.Fatal(err)
	}
	fromFleet, err := allocator.FleetTemplateSpec(fleetTemplate)
	if err != nil {
		t.Fatal(err)
	}
	at := time.Date(2026, 11, 22, 21, 30, 0, 123456789, time.UTC)
	cases := []struct {
		name string
		tmpl map[string]any
		e    allocator.Expansion
	}{
		// An identity with quotes and a backslash: it lands inside JSON
		// strings and container arguments, and must stay one value.
		{"template-private-match", pm.Template, allocator.Expansion{
			Template: "private-match", Namespace: "default", Name: "private-match-abcde",
			Identity: `spiffe://example.org/alice "the \ admin"`, CreatedAt: at}},
		{"template-from-fleet", fromFleet, allocator.Expansion{
			Template: "simple-game", Namespace: "games", Name: "mine", Identity: "bob", CreatedAt: at}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before, _ := json.Marshal(tc.tmpl)
			obj, err := allocator.ExpandTemplate(tc.tmpl, tc.e)
			if err != nil {
				t.Fatal(err)
			}
			if after, _ := json.Marshal(tc.tmpl); !bytes.Equal(before, after) {
				t.Fatal("ExpandTemplate changed the template")
			}
			gs, err := allocator.GameServerFromObject(obj)
			if err != nil {
				t.Fatal(err)
			}
			got, err := json.MarshalIndent(expansionGolden{obj, gs}, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, '\n')
			path := filepath.Join("testdata", "golden", tc.name+".json")
			if *update {
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run with -update to create it)", err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("expansion differs from %s (re-record with -update only if the change is meant):\n%s", path, got)
			}
			// Whatever the golden says, these must hold.
			meta := obj["metadata"].(map[string]any)
			ann := meta["annotations"].(map[string]any)
			labels := meta["labels"].(map[string]any)
			if ann[allocator.OwnerAnnotation] != tc.e.Identity || labels[allocator.TemplateLabel] != tc.e.Template {
				t.Errorf("owner %v template %v", ann[allocator.OwnerAnnotation], labels[allocator.TemplateLabel])
			}
			if _, ok := labels["agones.dev/fleet"]; ok {
				t.Error("a created server carries a fleet label: its fleet would count it")
			}
			var access []string
			if err := json.Unmarshal([]byte(ann[allocator.AccessListAnnotation].(string)), &access); err != nil || len(access) != 1 || access[0] != tc.e.Identity {
				t.Errorf("access list %v (%v)", ann[allocator.AccessListAnnotation], err)
			}
			var creator struct{ Identity, Template, CreatedAt string }
			if err := json.Unmarshal([]byte(ann[allocator.CreatorAnnotation].(string)), &creator); err != nil ||
				creator.Identity != tc.e.Identity || creator.Template != tc.e.Template || creator.CreatedAt != "2026-11-22T21:30:00.123456789Z" {
				t.Errorf("creator info %v (%v)", ann[allocator.CreatorAnnotation], err)
			}
		})
	}
}

func TestExpandTemplatePlaceholders(t *testing.T) {
	tmpl := map[string]any{"spec": map[string]any{"x": []any{"{{.Name}}/{{.Namespace}}", "{{.AccessList}}", json.Number("7")}}}
	obj, err := allocator.ExpandTemplate(tmpl, allocator.Expansion{Template: "t", Namespace: "ns", Name: "n", Identity: `a"b`})
	if err != nil {
		t.Fatal(err)
	}
	x := obj["spec"].(map[string]any)["x"].([]any)
	if x[0] != "n/ns" || x[1] != `["a\"b"]` || x[2] != json.Number("7") {
		t.Fatalf("expanded %#v", x)
	}
	if _, err := allocator.ExpandTemplate(map[string]any{"spec": map[string]any{"a": "{{.Nope}}"}}, allocator.Expansion{Template: "t"}); err == nil ||
		!strings.Contains(err.Error(), `template "t".spec.a: unknown placeholder`) {
		t.Fatalf("unknown placeholder: %v", err)
	}
}

func TestValidServerName(t *testing.T) {
	for name, ok := range map[string]bool{"a": true, "my-match-1": true, "": false, "A": false, "-a": false, "a_b": false, strings.Repeat("a", 64): false} {
		if err := allocator.ValidServerName(name); (err == nil) != ok {
			t.Errorf("%q: %v", name, err)
		}
	}
}
