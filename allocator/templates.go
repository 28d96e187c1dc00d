package allocator

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"sort"
	"strings"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/quartermaster-dev/quartermaster/allocator/wire"
	"github.com/quartermaster-dev/quartermaster/core"
)

// TemplatesKind identifies a templates file (apiVersion LimitsAPIVersion).
const TemplatesKind = "GameServerTemplates"

// What Create writes on the servers it makes. Ownership itself is
// OwnerAnnotation, as for allocations.
const (
	// TemplateLabel names the template a server was created from. It marks
	// a server as made on demand: fleet agents start such servers (as
	// Agones' controller starts any standalone GameServer), and List
	// reports the template.
	TemplateLabel = wire.TemplateLabel
	// CreatorAnnotation is seed 004's CreatorInfo: a JSON object naming
	// the identity that created the server, the template and when.
	CreatorAnnotation = "quartermaster.dev/creator"
	// AccessListAnnotation is seed 004's AccessList: a JSON list of the
	// identities the server should let in (the creator's).
	AccessListAnnotation = "quartermaster.dev/access-list"
	// CreatingAnnotation is on a created server until it is allocated to
	// its creator. Backends keep a server carrying it out of everyone
	// else's allocations even once it is Ready: it is already spoken for.
	CreatingAnnotation = "quartermaster.dev/creating"
)

// TemplatesConfig is a templates file: the game servers Create may make.
//
//	apiVersion: quartermaster.dev/v1alpha1
//	kind: GameServerTemplates
//	templates:
//	- name: private-match            # what `qm create --template` names
//	  namespace: default             # where its servers go ("default")
//	  startupDuration: 2s            # memory backend: time from created to Ready
//	  template:                      # an Agones GameServerTemplateSpec
//	    metadata:
//	      labels: {mode: private}
//	    spec:
//	      ports: [{name: default, containerPort: 7654}]
//	      counters: {players: {capacity: 8}}
//	      template:
//	        spec:
//	          containers:
//	          - name: game
//	            image: example/game:1.0
//	            args: ["--name={{.Name}}", "--admins={{.AccessList}}"]
//	- name: simple-game
//	  fleet: simple-game             # this Fleet's spec.template, read when used
//
// String values in a template may use {{.Name}}, {{.Namespace}},
// {{.AccessList}} and {{.CreatorInfo}}; they are replaced inside the decoded
// string, so a value can never break out of its place in the object.
type TemplatesConfig struct {
	APIVersion string         `json:"apiVersion"`
	Kind       string         `json:"kind"`
	Templates  []TemplateSpec `json:"templates"`
}

// TemplateSpec is one template.
type TemplateSpec struct {
	Name      string `json:"name"`
	Namespace string `json:"namespace,omitempty"`
	// Fleet, instead of Template: the named Fleet's spec.template (in
	// Namespace), read from the backend at each Create.
	Fleet string `json:"fleet,omitempty"`
	// Template is an Agones GameServerTemplateSpec: metadata (labels and
	// annotations only) and spec.
	Template map[string]any `json:"template,omitempty"`
	// StartupDuration is how long the memory backend takes to bring a
	// new server to Ready (a fleet template takes its fleet's). On
	// Kubernetes, Agones' controller (or qm agent) decides.
	StartupDuration string `json:"startupDuration,omitempty"`

	startup time.Duration
}

// Startup is the parsed StartupDuration.
func (t *TemplateSpec) Startup() time.Duration { return t.startup }

// Lookup returns the template called name.
func (c *TemplatesConfig) Lookup(name string) (*TemplateSpec, bool) {
	if c == nil {
		return nil, false
	}
	for i := range c.Templates {
		if c.Templates[i].Name == name {
			return &c.Templates[i], true
		}
	}
	return nil, false
}

// Names lists the templates' names in file order.
func (c *TemplatesConfig) Names() []string {
	if c == nil {
		return nil
	}
	out := make([]string, len(c.Templates))
	for i, t := range c.Templates {
		out[i] = t.Name
	}
	return out
}

// LoadTemplates reads and validates a templates file.
func LoadTemplates(path string) (*TemplatesConfig, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	c, err := ParseTemplates(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// WatchTemplates re-reads path every interval until ctx ends and calls
// apply with the templates when the file changed and is valid; an invalid
// file is logged and the templates in force stay.
func WatchTemplates(ctx context.Context, path string, interval time.Duration, log *slog.Logger, apply func(*TemplatesConfig)) {
	last, _ := os.ReadFile(path)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		b, err := os.ReadFile(path)
		if err != nil || bytes.Equal(b, last) {
			if err != nil {
				log.Error("templates file unreadable; keeping the templates in force", "path", path, "err", err)
			}
			continue
		}
		last = b
		c, err := ParseTemplates(b)
		if err != nil {
			log.Error("templates file invalid; keeping the templates in force", "path", path, "err", err)
			continue
		}
		apply(c)
		log.Info("templates reloaded", "path", path, "templates", len(c.Templates))
	}
}

// dnsLabel is a Kubernetes object name that is also a DNS label, what a
// GameServer's name (and so its pod's) must be.
var dnsLabel = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)

// maxTemplateName leaves room for "-" and a five-character suffix within
// the 63 characters of a DNS label.
const maxTemplateName = 57

// ValidServerName says what is wrong with name as a created server's name,
// or nil.
func ValidServerName(name string) error {
	if len(name) > 63 || !dnsLabel.MatchString(name) {
		return fmt.Errorf("%q is not a valid game server name: lowercase letters, digits and '-', starting and ending with a letter or digit, at most 63 characters", name)
	}
	return nil
}

// ParseTemplates decodes a templates file strictly and validates it.
func ParseTemplates(data []byte) (*TemplatesConfig, error) {
	j, err := yaml.YAMLToJSON(data)
	if err != nil {
		return nil, fmt.Errorf("not valid YAML: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(j))
	dec.DisallowUnknownFields()
	dec.UseNumber() // numbers in a template go to the API server as written
	var c TemplatesConfig
	if err := dec.Decode(&c); err != nil {
		return nil, fmt.Errorf("decoding templates: %w", err)
	}
	var errs []string
	if c.APIVersion != LimitsAPIVersion {
		errs = append(errs, fmt.Sprintf("apiVersion: is %q, want %q", c.APIVersion, LimitsAPIVersion))
	}
	if c.Kind != TemplatesKind {
		errs = append(errs, fmt.Sprintf("kind: is %q, want %q", c.Kind, TemplatesKind))
	}
	seen := map[string]bool{}
	for i := range c.Templates {
		t := &c.Templates[i]
		field := fmt.Sprintf("templates[%d]", i)
		switch {
		case t.Name == "":
			errs = append(errs, field+".name: must not be empty")
		case len(t.Name) > maxTemplateName || !dnsLabel.MatchString(t.Name):
			errs = append(errs, fmt.Sprintf("%s.name: %q must be lowercase letters, digits and '-' (at most %d characters), as it starts the names of its servers", field, t.Name, maxTemplateName))
		case seen[t.Name]:
			errs = append(errs, fmt.Sprintf("%s.name: %q is used by an earlier template", field, t.Name))
		}
		seen[t.Name] = true
		if t.Namespace == "" {
			t.Namespace = core.DefaultNamespace
		} else if !dnsLabel.MatchString(t.Namespace) {
			errs = append(errs, fmt.Sprintf("%s.namespace: %q is not a namespace name", field, t.Namespace))
		}
		switch {
		case t.Fleet == "" && t.Template == nil:
			errs = append(errs, field+": needs template (a GameServerTemplateSpec) or fleet (a Fleet's name)")
		case t.Fleet != "" && t.Template != nil:
			errs = append(errs, field+": has both template and fleet; use one")
		case t.Fleet != "" && !dnsLabel.MatchString(t.Fleet):
			errs = append(errs, fmt.Sprintf("%s.fleet: %q is not a Fleet name", field, t.Fleet))
		case t.Template != nil:
			if err := checkTemplate(t.Template); err != nil {
				errs = append(errs, fmt.Sprintf("%s.template%v", field, err))
			}
		}
		if t.StartupDuration != "" {
			d, err := time.ParseDuration(t.StartupDuration)
			if err != nil || d < 0 {
				errs = append(errs, fmt.Sprintf("%s.startupDuration: %q is not a duration such as 2s", field, t.StartupDuration))
			}
			t.startup = d
		}
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("invalid templates: %s", strings.Join(errs, "; "))
	}
	return &c, nil
}

// pathError is a problem at a place in a template, printed as
// ".spec.ports[0].name: reason".
type pathError struct {
	path   string
	reason string
}

func (e *pathError) Error() string { return e.path + ": " + e.reason }

// checkTemplate validates a GameServerTemplateSpec: only metadata and spec
// at the top, only labels and annotations (string maps, none of ours) in
// metadata, an object as spec, and only known placeholders.
func checkTemplate(t map[string]any) error {
	for k := range t {
		if k != "metadata" && k != "spec" {
			return &pathError{"." + k, "unknown field: a GameServerTemplateSpec has metadata and spec"}
		}
	}
	if m, ok := t["metadata"]; ok {
		meta, ok := m.(map[string]any)
		if !ok {
			return &pathError{".metadata", "must be an object"}
		}
		for k, v := range meta {
			if k != "labels" && k != "annotations" {
				return &pathError{".metadata." + k, "only labels and annotations may be set: the allocator names the server"}
			}
			sm, ok := v.(map[string]any)
			if !ok {
				return &pathError{".metadata." + k, "must be a map of strings"}
			}
			for key, val := range sm {
				if _, ok := val.(string); !ok {
					return &pathError{fmt.Sprintf(".metadata.%s[%q]", k, key), "must be a string"}
				}
				if strings.HasPrefix(key, "quartermaster.dev/") {
					return &pathError{fmt.Sprintf(".metadata.%s[%q]", k, key), "quartermaster.dev/ keys are set by the allocator"}
				}
			}
		}
	}
	spec, ok := t["spec"].(map[string]any)
	if !ok {
		return &pathError{".spec", "must be an object (a GameServerSpec)"}
	}
	return checkPlaceholders(".spec", spec)
}

// placeholders are what a template's strings may refer to.
var placeholders = []string{"{{.Name}}", "{{.Namespace}}", "{{.AccessList}}", "{{.CreatorInfo}}"}

func checkPlaceholders(path string, v any) error {
	switch x := v.(type) {
	case string:
		rest := x
		for _, p := range placeholders {
			rest = strings.ReplaceAll(rest, p, "")
		}
		if i := strings.Index(rest, "{{"); i >= 0 {
			return &pathError{path, fmt.Sprintf("unknown placeholder in %q: known are %s", x, strings.Join(placeholders, ", "))}
		}
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if err := checkPlaceholders(path+"."+k, x[k]); err != nil {
				return err
			}
		}
	case []any:
		for i, e := range x {
			if err := checkPlaceholders(fmt.Sprintf("%s[%d]", path, i), e); err != nil {
				return err
			}
		}
	}
	return nil
}

// Expansion is what a template is expanded with: seed 004's Name,
// AccessList and CreatorInfo, from the caller's request and identity.
type Expansion struct {
	Template  string
	Namespace string
	Name      string
	Identity  string
	CreatedAt time.Time
}

// AccessList is the JSON list of identities the server should admit.
func (e Expansion) AccessList() string {
	b, _ := json.Marshal([]string{e.Identity})
	return string(b)
}

// CreatorInfo is the JSON description of who created the server, for
// CreatorAnnotation.
func (e Expansion) CreatorInfo() string {
	b, _ := json.Marshal(struct {
		Identity  string `json:"identity"`
		Template  string `json:"template"`
		CreatedAt string `json:"createdAt"`
	}{e.Identity, e.Template, e.CreatedAt.UTC().Format(time.RFC3339Nano)})
	return string(b)
}

// fleetOnlyLabels are a Fleet's servers' labels that a created server must
// not carry: its Fleet would count it as its own.
var fleetOnlyLabels = []string{core.FleetLabel, "agones.dev/gameserverset"}

// ExpandTemplate returns the GameServer (an agones.dev/v1 object as a JSON
// tree) that Create makes from tmpl, a GameServerTemplateSpec. tmpl is not
// changed. The server carries the template's labels and annotations, with
// TemplateLabel, OwnerAnnotation, CreatorAnnotation, AccessListAnnotation
// and CreatingAnnotation added over them, and the template's spec with the
// placeholders replaced.
func ExpandTemplate(tmpl map[string]any, e Expansion) (map[string]any, error) {
	if err := checkTemplate(tmpl); err != nil {
		return nil, fmt.Errorf("template %q%v", e.Template, err)
	}
	r := strings.NewReplacer(
		"{{.Name}}", e.Name,
		"{{.Namespace}}", e.Namespace,
		"{{.AccessList}}", e.AccessList(),
		"{{.CreatorInfo}}", e.CreatorInfo(),
	)
	meta, _ := tmpl["metadata"].(map[string]any)
	labels := map[string]any{}
	annotations := map[string]any{}
	if l, ok := meta["labels"].(map[string]any); ok {
		for k, v := range l {
			labels[k] = r.Replace(v.(string))
		}
	}
	if a, ok := meta["annotations"].(map[string]any); ok {
		for k, v := range a {
			annotations[k] = r.Replace(v.(string))
		}
	}
	for _, k := range fleetOnlyLabels {
		delete(labels, k)
	}
	labels[TemplateLabel] = e.Template
	annotations[OwnerAnnotation] = e.Identity
	annotations[CreatorAnnotation] = e.CreatorInfo()
	annotations[AccessListAnnotation] = e.AccessList()
	annotations[CreatingAnnotation] = "true"
	return map[string]any{
		"apiVersion": "agones.dev/v1",
		"kind":       "GameServer",
		"metadata": map[string]any{
			"name":        e.Name,
			"namespace":   e.Namespace,
			"labels":      labels,
			"annotations": annotations,
		},
		"spec": replaceStrings(tmpl["spec"], r),
	}, nil
}

// replaceStrings is a deep copy of v with r applied to every string value.
func replaceStrings(v any, r *strings.Replacer) any {
	switch x := v.(type) {
	case string:
		return r.Replace(x)
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			out[k] = replaceStrings(e, r)
		}
		return out
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = replaceStrings(e, r)
		}
		return out
	}
	return v
}

// FleetTemplateSpec reduces a Fleet's spec.template to what a created
// server may take from it: its labels (without the Fleet's own),
// annotations and spec. It fails, naming the field, when they are not
// what a GameServerTemplateSpec holds.
func FleetTemplateSpec(fleetTemplate map[string]any) (map[string]any, error) {
	out := map[string]any{}
	if m, ok := fleetTemplate["metadata"].(map[string]any); ok {
		meta := map[string]any{}
		for _, k := range []string{"labels", "annotations"} {
			if sm, ok := m[k].(map[string]any); ok {
				c := map[string]any{}
				for key, v := range sm {
					if !strings.HasPrefix(key, "quartermaster.dev/") {
						c[key] = v
					}
				}
				meta[k] = c
			}
		}
		out["metadata"] = meta
	}
	spec, ok := fleetTemplate["spec"].(map[string]any)
	if !ok {
		return nil, &pathError{".spec.template.spec", "missing or not an object"}
	}
	out["spec"] = spec
	if err := checkTemplate(out); err != nil {
		return nil, fmt.Errorf(".spec.template%v", err)
	}
	return out, nil
}

// GameServerFromObject is the core's view of a created GameServer object
// before any node has it: labels, annotations, the names of its ports
// (spec.ports; "default" when none, as Agones' default port) and its
// counters and lists (spec.counters, spec.lists). State is Scheduled.
func GameServerFromObject(obj map[string]any) (*core.GameServer, error) {
	meta, _ := obj["metadata"].(map[string]any)
	spec, _ := obj["spec"].(map[string]any)
	gs := &core.GameServer{State: core.StateScheduled}
	gs.Name, _ = meta["name"].(string)
	gs.Namespace, _ = meta["namespace"].(string)
	gs.Labels = stringMap(meta["labels"])
	gs.Annotations = stringMap(meta["annotations"])
	ports, _ := spec["ports"].([]any)
	for i, p := range ports {
		pm, ok := p.(map[string]any)
		if !ok {
			return nil, &pathError{fmt.Sprintf("spec.ports[%d]", i), "must be an object"}
		}
		name, _ := pm["name"].(string)
		if name == "" {
			name = fmt.Sprintf("p%d", i)
		}
		gs.Ports = append(gs.Ports, core.Port{Name: name})
	}
	if len(gs.Ports) == 0 {
		gs.Ports = []core.Port{{Name: "default"}}
	}
	if cs, ok := spec["counters"].(map[string]any); ok {
		gs.Counters = map[string]core.Counter{}
		for k, v := range cs {
			var c struct {
				Count    int64 `json:"count"`
				Capacity int64 `json:"capacity"`
			}
			if err := remarshal(v, &c); err != nil {
				return nil, &pathError{"spec.counters." + k, err.Error()}
			}
			gs.Counters[k] = core.Counter{Count: c.Count, Capacity: c.Capacity}
		}
	}
	if ls, ok := spec["lists"].(map[string]any); ok {
		gs.Lists = map[string]core.List{}
		for k, v := range ls {
			var l struct {
				Capacity int64    `json:"capacity"`
				Values   []string `json:"values"`
			}
			if err := remarshal(v, &l); err != nil {
				return nil, &pathError{"spec.lists." + k, err.Error()}
			}
			gs.Lists[k] = core.List{Values: l.Values, Capacity: l.Capacity}
		}
	}
	return gs, nil
}

func stringMap(v any) map[string]string {
	m, _ := v.(map[string]any)
	if len(m) == 0 {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, e := range m {
		if s, ok := e.(string); ok {
			out[k] = s
		}
	}
	return out
}

func remarshal(in, out any) error {
	b, err := json.Marshal(in)
	if err != nil {
		return err
	}
	return json.Unmarshal(b, out)
}
