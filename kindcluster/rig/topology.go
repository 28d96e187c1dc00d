package rig

import (
	"errors"
	"fmt"
	"os"
	"regexp"
	"sort"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/quartermaster-dev/quartermaster/yamlfile"
)

// APIVersion and Kind identify a topology file.
const (
	APIVersion = "quartermaster.dev/v1alpha1"
	Kind       = "Topology"
)

// Providers a topology can name.
const (
	ProviderLocal = "local"
	ProviderKind  = "kind"
)

// CallersName is the end of a link that stands for the matchmaker (`qm
// allocate`, `qm load`, the e2e suite).
const CallersName = "callers"

// Topology is one rig: clusters, their fleets and allocators, the policies
// that route between them and the links that join them. It is the rig's own
// description; a scenario file describes a rig too, and scenarios/live
// converts one to a Topology.
type Topology struct {
	APIVersion string   `yaml:"apiVersion"`
	Kind       string   `yaml:"kind"`
	Metadata   Metadata `yaml:"metadata"`
	Spec       Spec     `yaml:"spec"`
	// Unmodelled names what the description this topology was converted
	// from has that a live rig does not reproduce (see NotModelled); a
	// topology file has nothing of the kind.
	Unmodelled []string `yaml:"-"`
}

// Metadata names a topology.
type Metadata struct {
	Name        string `yaml:"name"`
	Description string `yaml:"description,omitempty"`
}

// Spec is what to bring up.
type Spec struct {
	// Provider runs the clusters: local (etcd and kube-apiserver processes,
	// the default) or kind.
	Provider string `yaml:"provider,omitempty"`
	// Namespace holds the fleets, policies and connection Secrets
	// (default "default").
	Namespace string        `yaml:"namespace,omitempty"`
	Clusters  []ClusterSpec `yaml:"clusters"`
	Policies  []Policy      `yaml:"policies,omitempty"`
	Links     Links         `yaml:"links,omitempty"`
}

// ClusterSpec is one cluster of the rig, as the topology describes it.
type ClusterSpec struct {
	Name string `yaml:"name"`
	// Provider and Region label the cluster, as a cloud's nodes are.
	Provider  string    `yaml:"provider,omitempty"`
	Region    string    `yaml:"region,omitempty"`
	Nodes     Nodes     `yaml:"nodes,omitempty"`
	Allocator Allocator `yaml:"allocator,omitempty"`
	Fleets    []Fleet   `yaml:"fleets"`
}

// Nodes is a cluster's node pool: Count nodes of Slots game servers each
// (default 10 of 20).
type Nodes struct {
	Count int `yaml:"count"`
	Slots int `yaml:"slots"`
}

// Allocator is a cluster's allocator service.
type Allocator struct {
	Replicas *int `yaml:"replicas,omitempty"` // default 1
}

// Fleet is one fleet of a cluster, all of its servers Ready at the start.
type Fleet struct {
	Name     string            `yaml:"name"`
	Labels   map[string]string `yaml:"labels,omitempty"`
	Replicas int               `yaml:"replicas"`
	// Scheduling places servers on nodes: Packed (default) or Distributed.
	Scheduling string `yaml:"scheduling,omitempty"`
	// Counters and Lists give every server of the fleet these Agones
	// counters (count 0) and lists (no values) of the given capacity.
	Counters map[string]Capacity `yaml:"counters,omitempty"`
	Lists    map[string]Capacity `yaml:"lists,omitempty"`
}

// Capacity is a counter's or list's capacity.
type Capacity struct {
	Capacity int64 `yaml:"capacity"`
}

// Policy is a GameServerAllocationPolicy routing to one of the clusters.
type Policy struct {
	Name           string            `yaml:"name"`
	Labels         map[string]string `yaml:"labels,omitempty"`
	Priority       int32             `yaml:"priority"`
	Weight         *int              `yaml:"weight,omitempty"` // default 1
	ConnectionInfo ConnectionInfo    `yaml:"connectionInfo"`
}

// ConnectionInfo names the cluster a policy routes to.
type ConnectionInfo struct {
	ClusterName string `yaml:"clusterName"`
}

// Duration is a time.Duration written with a unit, as time.ParseDuration
// reads it; a bare number is refused.
type Duration = yamlfile.Duration

// Links set the latency of every connection: from the callers to each
// cluster's allocators, and from each cluster's allocators to another's.
type Links struct {
	Callers   Link           `yaml:"callers,omitempty"`
	Clusters  Link           `yaml:"clusters,omitempty"`
	Overrides []LinkOverride `yaml:"overrides,omitempty"`
}

// Link is a one-way latency with jitter, applied in both directions (so a
// round trip costs twice the latency).
type Link struct {
	Latency Duration `yaml:"latency,omitempty"`
	Jitter  Duration `yaml:"jitter,omitempty"`
}

// LinkOverride sets the link from one end to another: From is a cluster or
// "callers", To a cluster.
type LinkOverride struct {
	From    string   `yaml:"from"`
	To      string   `yaml:"to"`
	Latency Duration `yaml:"latency,omitempty"`
	Jitter  Duration `yaml:"jitter,omitempty"`
}

// Bounds that keep a rig on one machine.
const (
	maxClusters      = 8
	maxReplicas      = 8
	maxServersPerRig = 20_000
	maxLatency       = 10 * time.Second
	maxFileSize      = 1 << 20
)

// Load reads, decodes, defaults and validates the topology file at path.
// (scenarios/live.LoadTopology takes a scenario file as well.)
func Load(path string) (*Topology, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	t, err := Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return t, nil
}

// fileFormat is a topology file's version, kind and size bound.
var fileFormat = yamlfile.Format{Name: "topology", APIVersion: APIVersion, Kind: Kind, MaxSize: maxFileSize,
	Reword: func(_ []byte, err error) error { return yamlError(err) }}

// Parse decodes a topology strictly (unknown fields are errors, and so is
// a second document), applies defaults and validates it.
func Parse(data []byte) (*Topology, error) {
	var t Topology
	if err := fileFormat.Decode(data, &t); err != nil {
		return nil, err
	}
	t.Default()
	if err := t.Validate(); err != nil {
		return nil, err
	}
	return &t, nil
}

func yamlError(err error) error {
	var te *yaml.TypeError
	if errors.As(err, &te) {
		return fmt.Errorf("%s", strings.Join(te.Errors, "; "))
	}
	return err
}

// Default fills in what the file may leave out.
func (t *Topology) Default() {
	s := &t.Spec
	if s.Provider == "" {
		s.Provider = ProviderLocal
	}
	if s.Namespace == "" {
		s.Namespace = "default"
	}
	for i := range s.Clusters {
		c := &s.Clusters[i]
		if c.Allocator.Replicas == nil {
			one := 1
			c.Allocator.Replicas = &one
		}
		if c.Nodes.Count == 0 {
			c.Nodes.Count = 10
		}
		if c.Nodes.Slots == 0 {
			c.Nodes.Slots = 20
		}
		for j := range c.Fleets {
			if c.Fleets[j].Scheduling == "" {
				c.Fleets[j].Scheduling = "Packed"
			}
		}
	}
	for i := range s.Policies {
		if s.Policies[i].Weight == nil {
			one := 1
			s.Policies[i].Weight = &one
		}
	}
}

// FieldError is one problem, by its path in the file.
type FieldError struct {
	Path, Reason string
}

// ValidationError lists every problem with a topology.
type ValidationError struct {
	Errors []FieldError
}

func (e *ValidationError) Error() string {
	parts := make([]string, len(e.Errors))
	for i, fe := range e.Errors {
		parts[i] = fe.Path + ": " + fe.Reason
	}
	return "invalid topology: " + strings.Join(parts, "; ")
}

var dnsLabel = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$`)

// Validate checks the topology and names every problem.
func (t *Topology) Validate() error {
	c := &topologyChecker{}
	s := &t.Spec
	if s.Provider != ProviderLocal && s.Provider != ProviderKind {
		c.add("spec.provider", "must be %s or %s, not %q", ProviderLocal, ProviderKind, s.Provider)
	}
	if !dnsLabel.MatchString(s.Namespace) {
		c.add("spec.namespace", "%q is not a Kubernetes namespace name", s.Namespace)
	}
	clusters := c.clusters(s.Clusters)
	c.policies(s.Policies, clusters)
	c.links(s.Links, clusters)
	if len(c.errs) == 0 {
		return nil
	}
	return &ValidationError{Errors: c.errs}
}

// topologyChecker collects the problems Validate finds, each at its path.
type topologyChecker struct{ errs []FieldError }

func (c *topologyChecker) add(path, format string, args ...any) {
	c.errs = append(c.errs, FieldError{path, fmt.Sprintf(format, args...)})
}

// clusters checks the clusters and their fleets, and the rig's size in
// all; it returns the clusters' names.
func (c *topologyChecker) clusters(cs []ClusterSpec) map[string]bool {
	if len(cs) == 0 {
		c.add("spec.clusters", "at least one cluster is needed")
	}
	if len(cs) > maxClusters {
		c.add("spec.clusters", "at most %d clusters fit on one machine, got %d", maxClusters, len(cs))
	}
	names := map[string]bool{}
	servers := 0
	for i, cl := range cs {
		p := fmt.Sprintf("spec.clusters[%d]", i)
		switch {
		case !dnsLabel.MatchString(cl.Name):
			c.add(p+".name", "%q must be a DNS label (lower-case letters, digits, '-')", cl.Name)
		case cl.Name == CallersName:
			c.add(p+".name", "%q is reserved for the callers' end of a link", cl.Name)
		case names[cl.Name]:
			c.add(p+".name", "%q is used by another cluster", cl.Name)
		}
		names[cl.Name] = true
		if r := *cl.Allocator.Replicas; r < 1 || r > maxReplicas {
			c.add(p+".allocator.replicas", "must be 1 to %d, got %d", maxReplicas, r)
		}
		if cl.Nodes.Count < 1 || cl.Nodes.Slots < 1 {
			c.add(p+".nodes", "count and slots must be positive")
		}
		servers += c.fleets(p, cl.Fleets)
	}
	if servers > maxServersPerRig {
		c.add("spec.clusters", "%d game servers in all; a rig on one machine holds at most %d (scale the fleets down)", servers, maxServersPerRig)
	}
	return names
}

// fleets checks one cluster's fleets (p is the cluster's path) and returns
// how many game servers they ask for.
func (c *topologyChecker) fleets(p string, fs []Fleet) (servers int) {
	names := map[string]bool{}
	for j, f := range fs {
		fp := fmt.Sprintf("%s.fleets[%d]", p, j)
		if !dnsLabel.MatchString(f.Name) {
			c.add(fp+".name", "%q must be a DNS label", f.Name)
		}
		if names[f.Name] {
			c.add(fp+".name", "%q is used by another fleet of this cluster", f.Name)
		}
		names[f.Name] = true
		if f.Replicas < 0 {
			c.add(fp+".replicas", "must not be negative")
		}
		servers += max(f.Replicas, 0)
		if f.Scheduling != "Packed" && f.Scheduling != "Distributed" {
			c.add(fp+".scheduling", "must be Packed or Distributed, not %q", f.Scheduling)
		}
		for _, k := range sortedKeys(f.Counters) {
			if v := f.Counters[k].Capacity; k == "" || v < 0 {
				c.add(fmt.Sprintf("%s.counters[%q]", fp, k), "needs a name and a capacity of at least 0")
			}
		}
		for _, k := range sortedKeys(f.Lists) {
			if v := f.Lists[k].Capacity; k == "" || v < 0 || v > 1000 {
				c.add(fmt.Sprintf("%s.lists[%q]", fp, k), "needs a name and a capacity of 0 to 1000")
			}
		}
	}
	return servers
}

// policies checks the policies against the clusters' names.
func (c *topologyChecker) policies(ps []Policy, clusters map[string]bool) {
	names := map[string]bool{}
	for i, p := range ps {
		pp := fmt.Sprintf("spec.policies[%d]", i)
		if !dnsLabel.MatchString(p.Name) {
			c.add(pp+".name", "%q must be a DNS label", p.Name)
		}
		if names[p.Name] {
			c.add(pp+".name", "%q is used by another policy", p.Name)
		}
		names[p.Name] = true
		if !clusters[p.ConnectionInfo.ClusterName] {
			c.add(pp+".connectionInfo.clusterName", "%q is not one of the clusters (%s)", p.ConnectionInfo.ClusterName, strings.Join(sortedKeys(clusters), ", "))
		}
		if p.Priority < 0 {
			c.add(pp+".priority", "must not be negative")
		}
		if *p.Weight < 0 {
			c.add(pp+".weight", "must not be negative")
		}
	}
}

// links checks the default links and the overrides, whose ends must be
// the callers or clusters.
func (c *topologyChecker) links(ls Links, clusters map[string]bool) {
	c.link("spec.links.callers", ls.Callers)
	c.link("spec.links.clusters", ls.Clusters)
	seen := map[[2]string]bool{}
	for i, o := range ls.Overrides {
		p := fmt.Sprintf("spec.links.overrides[%d]", i)
		if o.From != CallersName && !clusters[o.From] {
			c.add(p+".from", "%q is neither %q nor a cluster", o.From, CallersName)
		}
		if !clusters[o.To] {
			c.add(p+".to", "%q is not a cluster", o.To)
		}
		if o.From == o.To {
			c.add(p, "a link joins two different ends")
		}
		if seen[[2]string{o.From, o.To}] {
			c.add(p, "the link %s -> %s is set twice", o.From, o.To)
		}
		seen[[2]string{o.From, o.To}] = true
		c.link(p, Link{o.Latency, o.Jitter})
	}
}

// link checks one link's latency and jitter.
func (c *topologyChecker) link(path string, l Link) {
	if l.Latency < 0 || l.Latency.D() > maxLatency {
		c.add(path+".latency", "must be 0 to %v", maxLatency)
	}
	if l.Jitter < 0 || l.Jitter > l.Latency {
		c.add(path+".jitter", "must be 0 to the latency (%v)", l.Latency.D())
	}
}

// LinkBetween is the link from one end ("callers" or a cluster) to a
// cluster: its override, else the callers' or the clusters' default.
func (t *Topology) LinkBetween(from, to string) Link {
	for _, o := range t.Spec.Links.Overrides {
		if o.From == from && o.To == to {
			return Link{o.Latency, o.Jitter}
		}
	}
	if from != CallersName {
		return t.Spec.Links.Clusters
	}
	return t.Spec.Links.Callers
}

// NotModelled names what the description the topology came from has that a
// live rig does not reproduce (a scenario's models of API-server latency,
// informer delay, decision time, costs, fleet buffers, start-up delays and
// policy windows), so a run can say so instead of differing silently.
func (t *Topology) NotModelled() []string { return t.Unmodelled }

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
