package live

import (
	"fmt"
	"os"

	"go.yaml.in/yaml/v3"

	"github.com/quartermaster-dev/quartermaster/kindcluster/rig"
	"github.com/quartermaster-dev/quartermaster/scenarios"
)

// LoadTopology reads the rig a file describes: a topology file as
// rig.Load reads it, or a scenario file, whose clusters and policies
// describe the rig and whose clusters' rtt sets the callers' link to each
// (`qm cluster up --topology FILE` takes either).
func LoadTopology(path string) (*rig.Topology, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var head struct {
		Kind string `yaml:"kind"`
	}
	if yaml.Unmarshal(data, &head) != nil || head.Kind != scenarios.Kind {
		return rig.Load(path)
	}
	s, err := scenarios.Parse(data)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	t := Topology(s)
	t.Default()
	if err := t.Validate(); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &t, nil
}

// Topology is the rig a scenario describes: its clusters, fleets and
// policies, the callers' link to each cluster from the cluster's rtt (half
// of it each way), and, under NotModelled, what the scenario models that a
// rig does not reproduce.
func Topology(s *scenarios.Scenario) rig.Topology {
	t := topologyOf(s)
	for _, c := range s.Spec.Clusters {
		if c.RTT == nil {
			continue
		}
		l, _ := linkOf(c.RTT)
		t.Spec.Links.Overrides = append(t.Spec.Links.Overrides,
			rig.LinkOverride{From: rig.CallersName, To: c.Name, Latency: l.Latency, Jitter: l.Jitter})
	}
	return t
}

// topologyOf converts a scenario's clusters and policies, with no links.
func topologyOf(s *scenarios.Scenario) rig.Topology {
	t := rig.Topology{
		APIVersion: rig.APIVersion,
		Kind:       rig.Kind,
		Metadata:   rig.Metadata{Name: s.Metadata.Name, Description: s.Metadata.Description},
		Unmodelled: rigNotModelled(s),
	}
	for _, c := range s.Spec.Clusters {
		rc := rig.ClusterSpec{
			Name: c.Name, Provider: c.Provider, Region: c.Region,
			Nodes:     rig.Nodes{Count: c.Nodes.Count, Slots: c.Nodes.Slots},
			Allocator: rig.Allocator{Replicas: c.Allocator.Replicas},
		}
		for _, f := range c.Fleets {
			rc.Fleets = append(rc.Fleets, rig.Fleet{
				Name: f.Name, Labels: f.Labels, Replicas: f.Replicas, Scheduling: f.Scheduling,
				Counters: capacities(f.Counters), Lists: capacities(f.Lists),
			})
		}
		t.Spec.Clusters = append(t.Spec.Clusters, rc)
	}
	for _, p := range s.Spec.Policies {
		t.Spec.Policies = append(t.Spec.Policies, rig.Policy{
			Name: p.Name, Labels: p.Labels, Priority: p.Priority, Weight: p.Weight,
			ConnectionInfo: rig.ConnectionInfo{ClusterName: p.ConnectionInfo.ClusterName},
		})
	}
	return t
}

func capacities(m map[string]scenarios.Capacity) map[string]rig.Capacity {
	if m == nil {
		return nil
	}
	out := make(map[string]rig.Capacity, len(m))
	for k, v := range m {
		out[k] = rig.Capacity{Capacity: v.Capacity}
	}
	return out
}

// rigNotModelled names what a scenario describes that a rig does not
// reproduce: the simulator's models of API-server latency, informer delay,
// decision time, costs, fleet buffers and start-up delays, and policy
// windows (a rig has no spec.start to read relative edges against, so its
// policies go out without them: always in force).
func rigNotModelled(s *scenarios.Scenario) []string {
	var out []string
	for i, c := range s.Spec.Clusters {
		p := fmt.Sprintf("spec.clusters[%d]", i)
		if c.APIServer.WriteLatency != nil {
			out = append(out, p+".apiServer.writeLatency: the rig's API server is real; its own latency applies")
		}
		if c.Allocator.InformerDelay != nil {
			out = append(out, p+".allocator.informerDelay: the allocators' informers are real; their own delay applies")
		}
		if c.Allocator.DecisionTime != nil {
			out = append(out, p+".allocator.decisionTime: the allocators are real; their own time applies")
		}
		if c.CostPerNodeHour != 0 {
			out = append(out, p+".costPerNodeHour: a rig has no cost")
		}
		for j, f := range c.Fleets {
			if f.Buffer != nil {
				out = append(out, fmt.Sprintf("%s.fleets[%d].buffer: the rig's fleets have a fixed size", p, j))
			}
			if f.StartupDelay != nil {
				out = append(out, fmt.Sprintf("%s.fleets[%d].startupDelay: the fleet agent's start-up delay applies", p, j))
			}
		}
	}
	for i, p := range s.Spec.Policies {
		if p.Window != nil {
			out = append(out, fmt.Sprintf("spec.policies[%d].window (%s): a rig's policies are always in force; window annotations on a policy object (docs/policy-windows.md) apply live", i, p.Name))
		}
	}
	return out
}
