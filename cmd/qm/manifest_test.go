package main

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	"go.yaml.in/yaml/v3"
)

// TestDeployManifestArgs checks that deploy/allocator.yaml starts `qm serve`
// with flags it accepts, and that its replicas find each other through
// Leases (no fixed --replicas/--replica-shard, which a Deployment's pods
// could not tell apart) in the namespace its POD_NAMESPACE names. A typo
// there would only show as pods crash-looping on a real cluster.
func TestDeployManifestArgs(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "deploy", "allocator.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	type container struct {
		Name string   `yaml:"name"`
		Args []string `yaml:"args"`
		Env  []struct {
			Name      string `yaml:"name"`
			ValueFrom struct {
				FieldRef struct {
					FieldPath string `yaml:"fieldPath"`
				} `yaml:"fieldRef"`
			} `yaml:"valueFrom"`
		} `yaml:"env"`
	}
	var set *struct {
		Kind string `yaml:"kind"`
		Meta struct {
			Name string `yaml:"name"`
		} `yaml:"metadata"`
		Spec struct {
			Replicas int `yaml:"replicas"`
			Template struct {
				Spec struct {
					Containers []container `yaml:"containers"`
				} `yaml:"spec"`
			} `yaml:"template"`
		} `yaml:"spec"`
	}
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	for {
		var doc struct {
			Kind string `yaml:"kind"`
		}
		var node yaml.Node
		if err := dec.Decode(&node); errors.Is(err, io.EOF) {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		if err := node.Decode(&doc); err != nil {
			t.Fatal(err)
		}
		if doc.Kind == "Deployment" {
			if err := node.Decode(&set); err != nil {
				t.Fatal(err)
			}
		}
	}
	if set == nil || len(set.Spec.Template.Spec.Containers) != 1 {
		t.Fatalf("deploy/allocator.yaml has no Deployment with one container")
	}
	args := set.Spec.Template.Spec.Containers[0].Args
	if len(args) == 0 || args[0] != "serve" {
		t.Fatalf("container args %q do not run qm serve", args)
	}
	var f serveFlags
	if err := serveFlagSet(&f).Parse(args[1:]); err != nil {
		t.Fatalf("qm serve refuses the manifest's flags: %v", err)
	}
	if f.backend != "kubernetes" || f.replicas != 0 || f.replicaShard != "" || !f.replica.membership || set.Spec.Replicas < 2 {
		t.Fatalf("--backend %q, --replicas %d, --replica-shard %q, --membership %v, %d replicas; want kubernetes, Lease membership and several replicas",
			f.backend, f.replicas, f.replicaShard, f.replica.membership, set.Spec.Replicas)
	}
	podNS := false
	for _, e := range set.Spec.Template.Spec.Containers[0].Env {
		podNS = podNS || e.Name == "POD_NAMESPACE" && e.ValueFrom.FieldRef.FieldPath == "metadata.namespace"
	}
	if !podNS && f.replica.leaseNamespace == "" {
		t.Errorf("the allocator's Leases go to no namespace of its own: want POD_NAMESPACE from metadata.namespace")
	}
}
