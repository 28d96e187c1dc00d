package memory

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/quartermaster-dev/quartermaster/core"
)

// APIVersion and Kind identify a fleets file.
const (
	APIVersion = "quartermaster.dev/v1alpha1"
	Kind       = "Fleets"
)

// Config is a fleets file: the simulated nodes and the fleets spread over
// them.
//
//	apiVersion: quartermaster.dev/v1alpha1
//	kind: Fleets
//	nodes: 4
//	fleets:
//	- name: simple-game
//	  namespace: default
//	  replicas: 10
//	  labels: {mode: deathmatch}
//	  ports: [default]
//	  counters: {rooms: {capacity: 10}}
//	  lists: {players: {capacity: 8}}
//	  sessionDuration: 60s
//	  startupDuration: 2s
type Config struct {
	APIVersion string      `json:"apiVersion"`
	Kind       string      `json:"kind"`
	Nodes      int         `json:"nodes"`
	Fleets     []FleetSpec `json:"fleets"`
}

// FleetSpec is one fleet: replicas game servers alike but for name, node
// and ports.
type FleetSpec struct {
	Name        string            `json:"name"`
	Namespace   string            `json:"namespace,omitempty"`
	Replicas    int               `json:"replicas"`
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
	// Ports are the names of the ports each server listens on; numbers
	// are given per node, from 7000 up. ["default"] when empty.
	Ports    []string               `json:"ports,omitempty"`
	Counters map[string]CounterSpec `json:"counters,omitempty"`
	Lists    map[string]ListSpec    `json:"lists,omitempty"`
	// SessionDuration is how long after its (last) allocation a server is
	// shut down and replaced by a fresh Ready one, as when a game session
	// ends. 0 keeps allocated servers until released.
	SessionDuration Duration `json:"sessionDuration,omitempty"`
	// StartupDuration is how long a new server stays Scheduled before it
	// becomes Ready.
	StartupDuration Duration `json:"startupDuration,omitempty"`
}

// CounterSpec is a counter's initial value.
type CounterSpec struct {
	Count    int64 `json:"count,omitempty"`
	Capacity int64 `json:"capacity"`
}

// ListSpec is a list's initial value.
type ListSpec struct {
	Values   []string `json:"values,omitempty"`
	Capacity int64    `json:"capacity"`
}

// Duration is a time.Duration written as "90s" or "1m30s" in files.
type Duration struct{ time.Duration }

// UnmarshalJSON reads a duration string ("60s") or a number of seconds.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err == nil {
		v, err := time.ParseDuration(s)
		if err != nil {
			return fmt.Errorf("duration %q: want a value like 90s or 1m30s", s)
		}
		d.Duration = v
		return nil
	}
	var secs float64
	if err := json.Unmarshal(b, &secs); err != nil {
		return fmt.Errorf("duration %s: want a string like 90s or a number of seconds", b)
	}
	d.Duration = time.Duration(secs * float64(time.Second))
	return nil
}

// MarshalJSON writes the duration as a string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(d.String()) }

// Limits that keep a mistyped file from exhausting memory.
const (
	maxNodes         = 10000
	maxTotalReplicas = 1000000
)

var fleetName = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,38}[a-z0-9])?$`)

// LoadConfig reads a fleets file.
func LoadConfig(path string) (*Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	c, err := ParseConfig(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return c, nil
}

// ParseConfig decodes a fleets file strictly (unknown fields are errors, so
// a misspelt key is not silently ignored), applies defaults and validates.
// Errors name the field.
func ParseConfig(data []byte) (*Config, error) {
	j, err := yaml.YAMLToJSON(data)
	if err != nil {
		return nil, fmt.Errorf("not valid YAML: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(j))
	dec.DisallowUnknownFields()
	var c Config
	if err := dec.Decode(&c); err != nil {
		return nil, fmt.Errorf("decoding fleets: %w", err)
	}
	if err := c.defaultAndValidate(); err != nil {
		return nil, err
	}
	return &c, nil
}

func (c *Config) defaultAndValidate() error {
	var errs []string
	add := func(field, format string, args ...any) {
		errs = append(errs, field+": "+fmt.Sprintf(format, args...))
	}
	if c.APIVersion != APIVersion {
		add("apiVersion", "is %q, want %q", c.APIVersion, APIVersion)
	}
	if c.Kind != Kind {
		add("kind", "is %q, want %q", c.Kind, Kind)
	}
	if c.Nodes == 0 {
		c.Nodes = 1
	}
	if c.Nodes < 0 || c.Nodes > maxNodes {
		add("nodes", "is %d, want 1..%d", c.Nodes, maxNodes)
	}
	seen := map[core.Key]bool{}
	total := 0
	for i := range c.Fleets {
		f := &c.Fleets[i]
		p := "fleets[" + strconv.Itoa(i) + "]"
		if f.Namespace == "" {
			f.Namespace = core.DefaultNamespace
		}
		if !fleetName.MatchString(f.Name) {
			add(p+".name", "%q is not a valid fleet name (lowercase letters, digits and '-', at most 40)", f.Name)
		}
		if !fleetName.MatchString(f.Namespace) {
			add(p+".namespace", "%q is not a valid namespace", f.Namespace)
		}
		k := core.Key{Namespace: f.Namespace, Name: f.Name}
		if seen[k] {
			add(p+".name", "fleet %s/%s is defined twice", f.Namespace, f.Name)
		}
		seen[k] = true
		if f.Replicas < 0 {
			add(p+".replicas", "is %d, must not be negative", f.Replicas)
		}
		total += max(f.Replicas, 0)
		if len(f.Ports) == 0 {
			f.Ports = []string{"default"}
		}
		if len(f.Ports) > 16 {
			add(p+".ports", "has %d ports, at most 16", len(f.Ports))
		}
		if v, ok := f.Labels[core.FleetLabel]; ok && v != f.Name {
			add(p+".labels", "%s is %q but must be the fleet's name (it is set automatically)", core.FleetLabel, v)
		}
		for _, k := range sortedKeys(f.Counters) {
			cs := f.Counters[k]
			if cs.Capacity < 0 || cs.Count < 0 || cs.Count > cs.Capacity {
				add(p+".counters["+strconv.Quote(k)+"]", "want 0 <= count <= capacity, got count %d, capacity %d", cs.Count, cs.Capacity)
			}
		}
		for _, k := range sortedKeys(f.Lists) {
			ls := f.Lists[k]
			if ls.Capacity < 0 || ls.Capacity > core.MaxListCapacity || int64(len(ls.Values)) > ls.Capacity {
				add(p+".lists["+strconv.Quote(k)+"]", "want len(values) <= capacity <= %d, got %d values, capacity %d",
					core.MaxListCapacity, len(ls.Values), ls.Capacity)
			}
		}
		if f.SessionDuration.Duration < 0 {
			add(p+".sessionDuration", "must not be negative")
		}
		if f.StartupDuration.Duration < 0 {
			add(p+".startupDuration", "must not be negative")
		}
	}
	if total > maxTotalReplicas {
		add("fleets", "%d replicas in all, at most %d", total, maxTotalReplicas)
	}
	if len(errs) > 0 {
		return fmt.Errorf("invalid fleets: %s", strings.Join(errs, "; "))
	}
	return nil
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// DemoConfig is the fleet set `qm serve` runs without --fleets: a few small
// fleets that show labels, counters and lists, with sessions short enough
// that a demo sees servers come back.
func DemoConfig() *Config {
	c := &Config{
		APIVersion: APIVersion,
		Kind:       Kind,
		Nodes:      3,
		Fleets: []FleetSpec{
			{
				Name: "simple-game", Replicas: 6,
				Labels:          map[string]string{"mode": "deathmatch"},
				SessionDuration: Duration{2 * time.Minute},
			},
			{
				Name: "rooms", Replicas: 4,
				Labels:          map[string]string{"mode": "lobby"},
				Counters:        map[string]CounterSpec{"rooms": {Capacity: 10}},
				Lists:           map[string]ListSpec{"players": {Capacity: 8}},
				SessionDuration: Duration{5 * time.Minute},
			},
			{
				Name: "ranked", Namespace: "ranked", Replicas: 4,
				Labels:          map[string]string{"mode": "ranked", "region": "eu"},
				Ports:           []string{"game", "query"},
				SessionDuration: Duration{2 * time.Minute},
				StartupDuration: Duration{2 * time.Second},
			},
		},
	}
	if err := c.defaultAndValidate(); err != nil {
		panic("memory: the demo fleets are invalid: " + err.Error())
	}
	return c
}
