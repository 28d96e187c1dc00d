package soakrun

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/quartermaster-dev/quartermaster/kindcluster/rig"
	"github.com/quartermaster-dev/quartermaster/soak"
)

// shape is what a schedule's targets may name: the clusters, each with
// its replica count and fleets. Against allocators elsewhere the replicas
// and fleets are not known (nil fleets, no replicas) and only the cluster
// is checked.
type shape struct {
	clusters []string
	replicas map[string]int
	fleets   map[string][]string
}

func topologyShape(t *rig.Topology) shape {
	s := shape{replicas: map[string]int{}, fleets: map[string][]string{}}
	for _, c := range t.Spec.Clusters {
		s.clusters = append(s.clusters, c.Name)
		n := 1
		if c.Allocator.Replicas != nil {
			n = *c.Allocator.Replicas
		}
		s.replicas[c.Name] = n
		for _, f := range c.Fleets {
			s.fleets[c.Name] = append(s.fleets[c.Name], f.Name)
		}
	}
	return s
}

func targetsShape(ts []Target) shape {
	var s shape
	for _, t := range ts {
		if !slices.Contains(s.clusters, t.Cluster) {
			s.clusters = append(s.clusters, t.Cluster)
		}
	}
	return s
}

// checkTargets holds every target a schedule names against what the run
// drives, so a misspelt cluster is an error before the rig comes up, not
// a failed fault minutes into the run. The error names the entry
// (spec.faults[i].targets[j]) and what exists.
func checkTargets(s *soak.ScheduleFile, sh shape) error {
	for i, e := range s.Spec.Faults {
		for j, target := range e.Targets {
			if err := sh.checkTarget(e.Kind, target); err != nil {
				return fmt.Errorf("schedule: spec.faults[%d].targets[%d]: %s %q: %v", i, j, e.Kind, target, err)
			}
		}
	}
	return nil
}

func (sh shape) checkTarget(kind, target string) error {
	switch kind {
	case soak.FaultReplicaKill:
		if sh.replicas == nil {
			return nil // skipped against allocators elsewhere
		}
		cl, n, err := replicaTarget(target)
		if err != nil {
			return fmt.Errorf("want CLUSTER/REPLICA, like east/0")
		}
		if err := sh.cluster(cl); err != nil {
			return err
		}
		if n >= sh.replicas[cl] {
			return fmt.Errorf("cluster %s has %d allocator replicas, numbered from 0", cl, sh.replicas[cl])
		}
	case soak.FaultLinkCut, soak.FaultLinkSlow, soak.FaultLinkLossy, soak.FaultAnswerLost:
		if sh.replicas == nil {
			return nil
		}
		from, to, ok := strings.Cut(target, "->")
		if !ok {
			return fmt.Errorf("want FROM->TO (FROM a cluster or %s, TO a cluster)", rig.CallersName)
		}
		if from != rig.CallersName {
			if err := sh.cluster(from); err != nil {
				return fmt.Errorf("from: %v (or %s)", err, rig.CallersName)
			}
		}
		if err := sh.cluster(to); err != nil {
			return fmt.Errorf("to: %v", err)
		}
		if from == to {
			return fmt.Errorf("a cluster has no link to itself")
		}
	case soak.FaultFleetScale:
		cl, fleet, _ := strings.Cut(target, "/")
		if err := sh.cluster(cl); err != nil {
			return err
		}
		if fleet != "" && sh.fleets != nil && !slices.Contains(sh.fleets[cl], fleet) {
			return fmt.Errorf("cluster %s has no fleet %q (it has %s)", cl, fleet, strings.Join(sh.fleets[cl], ", "))
		}
	default: // a cluster
		if sh.replicas == nil {
			return nil
		}
		return sh.cluster(target)
	}
	return nil
}

func (sh shape) cluster(name string) error {
	if slices.Contains(sh.clusters, name) {
		return nil
	}
	return fmt.Errorf("no cluster %q (the run has %s)", name, strings.Join(sh.clusters, ", "))
}

// replicaTarget reads CLUSTER/N.
func replicaTarget(target string) (string, int, error) {
	cl, num, ok := strings.Cut(target, "/")
	n, err := strconv.Atoi(num)
	if !ok || err != nil || n < 0 {
		return "", 0, fmt.Errorf("target %q: want CLUSTER/REPLICA, like east/0", target)
	}
	return cl, n, nil
}
