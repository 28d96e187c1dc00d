package main

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"testing"

	"go.yaml.in/yaml/v3"
)

// TestDeployManifestArgs checks that deploy/allocator.yaml starts `qm serve`
// with flags it accepts, and that its replica-shard settings agree with the
// StatefulSet: every pod's ordinal is a valid shard of --replicas. A typo
// there would only show as pods crash-looping on a real cluster.
func TestDeployManifestArgs(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join("..", "..", "deploy", "allocator.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	type container struct {
		Name string   `yaml:"name"`
		Args []string `yaml:"args"`
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
		if doc.Kind == "StatefulSet" {
			if err := node.Decode(&set); err != nil {
				t.Fatal(err)
			}
		}
	}
	if set == nil || len(set.Spec.Template.Spec.Containers) != 1 {
		t.Fatalf("deploy/allocator.yaml has no StatefulSet with one container")
	}
	args := set.Spec.Template.Spec.Containers[0].Args
	if len(args) == 0 || args[0] != "serve" {
		t.Fatalf("container args %q do not run qm serve", args)
	}
	var f serveFlags
	if err := serveFlagSet(&f).Parse(args[1:]); err != nil {
		t.Fatalf("qm serve refuses the manifest's flags: %v", err)
	}
	if f.backend != "kubernetes" || f.replicas != set.Spec.Replicas {
		t.Fatalf("--backend %q, --replicas %d; want kubernetes and the StatefulSet's %d", f.backend, f.replicas, set.Spec.Replicas)
	}
	for ord := range set.Spec.Replicas {
		pod := set.Meta.Name + "-" + strconv.Itoa(ord)
		shard, err := parseReplicaShard(f.replicaShard, f.replicas, func() (string, error) { return pod, nil })
		if err != nil || shard != ord {
			t.Errorf("pod %s: shard %d, %v; want %d", pod, shard, err, ord)
		}
	}
}
