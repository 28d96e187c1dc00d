package deploy_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"

	"github.com/quartermaster-dev/quartermaster/kindcluster"
)

const loadManifest = "loadgen.yaml"

// The load generators' Indexed Job applies (server-side dry run, with the
// API server's defaulting, admission and strict field validation) and
// comes back as an Indexed Job whose pods each know their index. That the
// --shard N agrees with completions, and the flags parse, is checked by
// cmd/qm's tests against the same file.
func TestLoadJobManifest(t *testing.T) {
	c := kindcluster.NewForTest(t, kindcluster.Options{Name: "deploy-load", EtcdUnsafeNoFsync: true})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	out, err := c.Kubectl(ctx, "apply", "--dry-run=server", "--validate=strict", "-n", "default", "-f", loadManifest, "-o", "json")
	if err != nil {
		t.Fatalf("dry run: %v\n%s", err, out)
	}
	var job batchv1.Job
	if err := json.Unmarshal(out, &job); err != nil {
		t.Fatalf("dry run output is not a Job: %v\n%s", err, out)
	}
	s := job.Spec
	if job.Kind != "Job" || job.Name != "qm-load" || s.CompletionMode == nil || *s.CompletionMode != batchv1.IndexedCompletion {
		t.Fatalf("kind %q name %q completionMode %v: want the Indexed Job qm-load", job.Kind, job.Name, s.CompletionMode)
	}
	if s.Completions == nil || s.Parallelism == nil || *s.Completions != *s.Parallelism || *s.Completions < 2 {
		t.Errorf("completions %v, parallelism %v: want the same number (>= 2), every generator at once", s.Completions, s.Parallelism)
	}
	// A failed generator is not re-run: a second go is a different load.
	if s.BackoffLimit == nil || *s.BackoffLimit != 0 || s.Template.Spec.RestartPolicy != "Never" {
		t.Errorf("backoffLimit %v, restartPolicy %q: want 0 and Never", s.BackoffLimit, s.Template.Spec.RestartPolicy)
	}
	cs := s.Template.Spec.Containers
	if len(cs) != 1 || len(cs[0].Args) == 0 || cs[0].Args[0] != "load" {
		t.Fatalf("containers: %+v", cs)
	}
	var shard string
	for _, a := range cs[0].Args {
		if v, ok := strings.CutPrefix(a, "--shard="); ok {
			shard = v
		}
	}
	// The index comes from the variable the Job controller sets in every
	// pod of an Indexed Job.
	if !strings.HasPrefix(shard, "$(JOB_COMPLETION_INDEX)/") {
		t.Errorf("--shard=%q: want $(JOB_COMPLETION_INDEX)/N", shard)
	}

	// A change that breaks the schema is refused, so the dry run above is
	// a check that can fail.
	good, err := os.ReadFile(loadManifest)
	if err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte(strings.Replace(string(good), "completionMode: Indexed", "completionMode: Sideways", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err = c.Kubectl(ctx, "apply", "--dry-run=server", "-n", "default", "-f", bad)
	if err == nil || !strings.Contains(string(out), "completionMode") {
		t.Errorf("a Job with completionMode Sideways: %v\n%s", err, out)
	}
}
