package main

import (
	"bytes"
	"errors"
	"flag"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/quartermaster-dev/quartermaster/allocator"
)

// TestHelmChartArgs does for the Helm chart (deploy/helm/quartermaster)
// what TestDeployManifestArgs does for deploy/allocator.yaml, on the chart's
// golden renderings (deploy/helm's tests keep those equal to what the chart
// renders): the allocator's arguments are flags qm serve accepts, the
// replicas take their shards from Leases (a Deployment's pod names carry no
// ordinal), the directories it is given are the ones mounted, a rendered limits or
// templates file is one qm serve loads, and
// the loadgen Job's pods run valid qm load shards of the whole.
func TestHelmChartArgs(t *testing.T) {
	goldens, err := filepath.Glob(filepath.Join("..", "..", "deploy", "helm", "testdata", "*.golden.yaml"))
	if err != nil || len(goldens) == 0 {
		t.Fatalf("no golden renderings of the chart: %v", err)
	}
	for _, path := range goldens {
		t.Run(filepath.Base(path), func(t *testing.T) {
			raw, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			docs := chartDocs(t, raw)
			sets := 0
			for _, d := range docs {
				switch d.Kind {
				case "Deployment":
					sets++
					checkChartDeployment(t, d, docs)
				case "Job":
					checkChartLoadJob(t, d)
				}
			}
			if sets != 1 {
				t.Errorf("%d Deployments, want 1", sets)
			}
		})
	}
}

type chartContainer struct {
	Name         string   `yaml:"name"`
	Args         []string `yaml:"args"`
	VolumeMounts []struct {
		Name      string `yaml:"name"`
		MountPath string `yaml:"mountPath"`
	} `yaml:"volumeMounts"`
}

// chartDoc is the part of a rendered object these checks read.
type chartDoc struct {
	Kind string `yaml:"kind"`
	Meta struct {
		Name string `yaml:"name"`
	} `yaml:"metadata"`
	Data map[string]string `yaml:"data"`
	Spec struct {
		Replicas    int `yaml:"replicas"`
		Completions int `yaml:"completions"`
		Parallelism int `yaml:"parallelism"`
		Template    struct {
			Spec struct {
				Containers []chartContainer `yaml:"containers"`
				Volumes    []struct {
					Name      string `yaml:"name"`
					ConfigMap *struct {
						Name string `yaml:"name"`
					} `yaml:"configMap"`
				} `yaml:"volumes"`
			} `yaml:"spec"`
		} `yaml:"template"`
	} `yaml:"spec"`
}

func chartDocs(t *testing.T, raw []byte) []chartDoc {
	t.Helper()
	var docs []chartDoc
	dec := yaml.NewDecoder(bytes.NewReader(raw))
	for {
		var d chartDoc
		if err := dec.Decode(&d); errors.Is(err, io.EOF) {
			return docs
		} else if err != nil {
			t.Fatal(err)
		}
		docs = append(docs, d)
	}
}

func checkChartDeployment(t *testing.T, set chartDoc, docs []chartDoc) {
	cs := set.Spec.Template.Spec.Containers
	if len(cs) != 1 || len(cs[0].Args) == 0 || cs[0].Args[0] != "serve" {
		t.Fatalf("Deployment %s: want one container running qm serve, have %+v", set.Meta.Name, cs)
	}
	var f serveFlags
	if err := serveFlagSet(&f).Parse(cs[0].Args[1:]); err != nil {
		t.Fatalf("qm serve refuses the chart's flags: %v", err)
	}
	if f.backend != "kubernetes" {
		t.Fatalf("--backend %q, want kubernetes", f.backend)
	}
	// Several replicas share the servers by Lease membership; fixed
	// shards would need --replicas kept in step with the Deployment and,
	// for "hostname", pod names with ordinals, which a Deployment's lack.
	if f.replicas != 0 || f.replicaShard != "" {
		t.Errorf("--replicas %d, --replica-shard %q: a Deployment's replicas take their shards from Leases", f.replicas, f.replicaShard)
	}
	if set.Spec.Replicas > 1 && !f.replica.membership {
		t.Errorf("%d replicas with --membership=false: they would all prefer the same servers", set.Spec.Replicas)
	}
	mounts := map[string]string{} // mount path -> volume
	for _, m := range cs[0].VolumeMounts {
		mounts[m.MountPath] = m.Name
	}
	for flagName, dir := range map[string]string{"--tls-dir": f.tlsDir, "--client-ca-dir": f.clientCADir} {
		if _, ok := mounts[dir]; !ok {
			t.Errorf("%s=%s is not a mounted volume (mounts: %v)", flagName, dir, mounts)
		}
	}
	if f.limits != "" {
		checkChartFile(t, set, docs, mounts, "--limits", f.limits, func(data []byte) error {
			_, err := allocator.ParseLimits(data)
			return err
		})
	}
	if f.templates != "" {
		checkChartFile(t, set, docs, mounts, "--templates", f.templates, func(data []byte) error {
			_, err := allocator.ParseTemplates(data)
			return err
		})
	}
}

// checkChartFile: a file qm serve is given (the limits, the templates) is
// a key of a ConfigMap mounted at its directory, and qm serve's own parser
// accepts what the chart rendered there.
func checkChartFile(t *testing.T, set chartDoc, docs []chartDoc, mounts map[string]string, flagName, path string, parse func([]byte) error) {
	t.Helper()
	vol, ok := mounts[filepath.Dir(path)]
	if !ok {
		t.Fatalf("%s=%s is not in a mounted volume (mounts: %v)", flagName, path, mounts)
	}
	var cmName string
	for _, v := range set.Spec.Template.Spec.Volumes {
		if v.Name == vol && v.ConfigMap != nil {
			cmName = v.ConfigMap.Name
		}
	}
	for _, d := range docs {
		if d.Kind != "ConfigMap" || d.Meta.Name != cmName {
			continue
		}
		data, ok := d.Data[filepath.Base(path)]
		if !ok {
			t.Fatalf("ConfigMap %s has no key %s", cmName, filepath.Base(path))
		}
		if err := parse([]byte(data)); err != nil {
			t.Errorf("qm serve refuses the chart's %s file: %v\n%s", flagName, err, data)
		}
		return
	}
	t.Logf("%s reads ConfigMap %q, which the chart does not render (an existingConfigMap)", flagName, cmName)
}

func checkChartLoadJob(t *testing.T, job chartDoc) {
	n := job.Spec.Completions
	cs := job.Spec.Template.Spec.Containers
	if n < 1 || job.Spec.Parallelism != n || len(cs) != 1 || len(cs[0].Args) == 0 || cs[0].Args[0] != "load" {
		t.Fatalf("Job %s: want N parallel completions of one qm load container: %+v", job.Meta.Name, job.Spec)
	}
	for i := range n {
		// Kubernetes puts the pod's index in for $(JOB_COMPLETION_INDEX).
		args := make([]string, len(cs[0].Args)-1)
		for k, a := range cs[0].Args[1:] {
			args[k] = strings.ReplaceAll(a, "$(JOB_COMPLETION_INDEX)", strconv.Itoa(i))
		}
		var c connFlags
		var f loadFlags
		fs := loadFlagSet(&c, &f)
		if err := fs.Parse(args); err != nil {
			t.Fatalf("pod %d: qm load refuses %q: %v", i, args, err)
		}
		set := map[string]bool{}
		fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
		if _, err := planLoad(&c, &f, set); err != nil {
			t.Errorf("pod %d: %q: %v", i, args, err)
		}
		if want := strconv.Itoa(i) + "/" + strconv.Itoa(n); !set["shard"] || !strings.Contains(strings.Join(args, " "), "--shard="+want) {
			t.Errorf("pod %d: want --shard=%s in %q", i, want, args)
		}
		if f.out != "-" {
			t.Errorf("pod %d: --out %q: the result must go to the pod's log (--out=-)", i, f.out)
		}
	}
}
