package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/quartermaster-dev/quartermaster/kindcluster"
	"github.com/quartermaster-dev/quartermaster/plan"
)

// parseJobManifest splits a --job-manifest output into its ConfigMap and
// Job, strictly: a field the types do not have fails.
func parseJobManifest(t *testing.T, manifest string) (*corev1.ConfigMap, *batchv1.Job) {
	t.Helper()
	docs := strings.Split(manifest, "\n---\n")
	if len(docs) != 3 || !strings.HasPrefix(docs[0], "# ") {
		t.Fatalf("want a comment, a ConfigMap and a Job, got %d parts:\n%s", len(docs), manifest)
	}
	var cm corev1.ConfigMap
	var job batchv1.Job
	if err := yaml.UnmarshalStrict([]byte(docs[1]), &cm); err != nil || cm.Kind != "ConfigMap" {
		t.Fatalf("ConfigMap: %v\n%s", err, docs[1])
	}
	if err := yaml.UnmarshalStrict([]byte(docs[2]), &job); err != nil || job.Kind != "Job" {
		t.Fatalf("Job: %v\n%s", err, docs[2])
	}
	s := job.Spec
	if s.CompletionMode == nil || *s.CompletionMode != batchv1.IndexedCompletion || s.Completions == nil ||
		s.Parallelism == nil || *s.Parallelism != *s.Completions || len(s.Template.Spec.Containers) != 1 {
		t.Fatalf("want an Indexed Job, all indexes at once, one container: %+v", s)
	}
	v := s.Template.Spec.Volumes
	if len(v) != 1 || v[0].ConfigMap == nil || v[0].ConfigMap.Name != cm.Name {
		t.Fatalf("the pods do not mount the ConfigMap %s: %+v", cm.Name, v)
	}
	return &cm, &job
}

// runJobPods runs every pod of the Job here, as Kubernetes would: the
// ConfigMap's files where the pod mounts them, $(JOB_COMPLETION_INDEX) in
// the arguments replaced by the pod's index. It returns the files holding
// the pods' logs (stdout, then stderr) and their exit statuses.
func runJobPods(t *testing.T, cm *corev1.ConfigMap, job *batchv1.Job) ([]string, []int) {
	t.Helper()
	dir := t.TempDir()
	for name, data := range cm.Data {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	c := job.Spec.Template.Spec.Containers[0]
	mount := c.VolumeMounts[0].MountPath + "/"
	var logs []string
	var codes []int
	for i := range int(*job.Spec.Completions) {
		args := slices.Clone(c.Args)
		sawIndex := false
		for j, a := range args {
			if a == indexArg {
				sawIndex = true
			}
			a = strings.ReplaceAll(a, indexArg, strconv.Itoa(i))
			if rest, ok := strings.CutPrefix(a, mount); ok {
				a = filepath.Join(dir, rest)
			}
			args[j] = a
		}
		if !sawIndex {
			t.Fatalf("the pods' arguments %q do not take the completion index", c.Args)
		}
		code, stdout, stderr := runQM(args...)
		log := filepath.Join(dir, "log-"+strconv.Itoa(i))
		if err := os.WriteFile(log, []byte(stdout+stderr), 0o644); err != nil {
			t.Fatal(err)
		}
		logs, codes = append(logs, log), append(codes, code)
	}
	return logs, codes
}

// TestSimJobManifest: qm sim --seeds 3 --job-manifest's pods, run as
// Kubernetes would run them, write logs that qm sim merge turns into
// exactly what qm sim --seeds 3 writes, byte for byte.
func TestSimJobManifest(t *testing.T) {
	dir := t.TempDir()
	scFile := filepath.Join(dir, "one-fleet.yaml")
	if err := os.WriteFile(scFile, []byte(planScenario), 0o644); err != nil {
		t.Fatal(err)
	}
	code, manifest, stderr := runQM("sim", scFile, "--seeds", "3", "--job-manifest", "--image", "example.com/qm:test")
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, stderr)
	}
	cm, job := parseJobManifest(t, manifest)
	if *job.Spec.Completions != 3 || job.Name != "qm-sim" || job.Spec.Template.Spec.Containers[0].Image != "example.com/qm:test" {
		t.Fatalf("job %s, %d completions, image %s", job.Name, *job.Spec.Completions, job.Spec.Template.Spec.Containers[0].Image)
	}
	if cm.Data["one-fleet.yaml"] != planScenario {
		t.Fatalf("the ConfigMap does not carry the scenario: %v", cm.Data)
	}
	logs, codes := runJobPods(t, cm, job)
	if !slices.Equal(codes, []int{0, 0, 0}) {
		t.Fatalf("pods' exit statuses %v", codes)
	}
	merged := filepath.Join(dir, "merged.json")
	slices.Reverse(logs)
	if code, stdout, stderr := runQM(append([]string{"sim", "merge", "--out", merged}, logs...)...); code != 0 {
		t.Fatalf("merge: exit %d\n%s\n%s", code, stdout, stderr)
	}
	whole := filepath.Join(dir, "whole.json")
	if code, stdout, stderr := runQM("sim", scFile, "--seeds", "3", "--quiet", "--out", whole); code != 0 {
		t.Fatalf("--seeds 3: exit %d\n%s\n%s", code, stdout, stderr)
	}
	a, _ := os.ReadFile(merged)
	b, _ := os.ReadFile(whole)
	if len(a) == 0 || !bytes.Equal(a, b) {
		t.Fatalf("the Job's merged logs differ from --seeds 3:\n%s\n---\n%s", a, b)
	}

	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"sim", scFile, "--seeds", "3", "--job-manifest", "--index", "1"}, "it takes no --index or --replay"},
		{[]string{"sim", scFile, "--seeds", "3", "--job-manifest", "--job-name", "Big_Name"}, "a DNS label"},
	} {
		if code, _, stderr := runQM(tc.args...); code != 2 || !strings.Contains(stderr, tc.want) {
			t.Errorf("%q: exit %d, %s", tc.args, code, stderr)
		}
	}
}

// planWithoutWalls is a plan's JSON with its wall times zeroed: the one
// part two runs of a plan may differ in.
func planWithoutWalls(t *testing.T, file string) string {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var res plan.Result
	if err := json.Unmarshal(b, &res); err != nil {
		t.Fatal(err)
	}
	for i := range res.Points {
		res.Points[i].WallSeconds = 0
	}
	out, _ := json.Marshal(res)
	return string(out)
}

// TestPlanJobManifest: qm plan --job-manifest's pods, merged by qm plan
// merge, give the plan qm plan itself writes (wall times aside) when
// their values settle the answer, and name the range to search next when
// they do not.
func TestPlanJobManifest(t *testing.T) {
	dir := t.TempDir()
	scFile := filepath.Join(dir, "one-fleet.yaml")
	if err := os.WriteFile(scFile, []byte(planScenario), 0o644); err != nil {
		t.Fatal(err)
	}
	question := []string{scFile, "--target", "successRate>=0.98,p99<200ms", "--vary", "fleets.game.replicas=1..8", "--points", "6"}
	code, manifest, stderr := runQM(append([]string{"plan", "--job-manifest"}, question...)...)
	if code != 0 {
		t.Fatalf("exit %d\n%s", code, stderr)
	}
	cm, job := parseJobManifest(t, manifest)
	if *job.Spec.Completions != 8 || job.Name != "qm-plan" {
		t.Fatalf("job %s with %d completions, want qm-plan with 8 (1..8)", job.Name, *job.Spec.Completions)
	}
	logs, codes := runJobPods(t, cm, job)
	if !slices.Equal(codes, []int{0, 0, 0, 0, 0, 0, 0, 0}) {
		t.Fatalf("pods' exit statuses %v (a value that misses is a result, not a failure)", codes)
	}
	merged := filepath.Join(dir, "merged.json")
	code, stdout, stderr := runQM(append([]string{"plan", "merge", "--out", merged}, logs...)...)
	if code != 0 || !strings.Contains(stdout, "answer: fleets.game.replicas = 6") {
		t.Fatalf("merge: exit %d\n%s\n%s", code, stdout, stderr)
	}
	whole := filepath.Join(dir, "whole.json")
	if code, stdout, stderr := runQM(append([]string{"plan", "--quiet", "--out", whole}, question...)...); code != 0 {
		t.Fatalf("qm plan: exit %d\n%s\n%s", code, stdout, stderr)
	}
	if a, b := planWithoutWalls(t, merged), planWithoutWalls(t, whole); a != b {
		t.Fatalf("the Job's merged points differ from qm plan's:\n%s\n---\n%s", a, b)
	}

	// Four values over 1..32 narrow the answer without settling it.
	code, manifest, _ = runQM("plan", scFile, "--target", "successRate>=0.98", "--vary", "fleets.game.replicas=1..32", "--job-manifest", "--job-name", "wide")
	if code != 0 {
		t.Fatalf("exit %d", code)
	}
	cm, job = parseJobManifest(t, manifest)
	logs, _ = runJobPods(t, cm, job)
	code, _, stderr = runQM(append([]string{"plan", "merge"}, logs...)...)
	if code != 3 || !strings.Contains(stderr, "run the next plan with --vary fleets.game.replicas=1..11") {
		t.Fatalf("unsettled merge: exit %d, %s", code, stderr)
	}
	if code, _, stderr := runQM("plan", "merge", logs[0], scFile); code != 1 || !strings.Contains(stderr, "not a plan's point") {
		t.Errorf("a scenario merged as a point: exit %d, %s", code, stderr)
	}
	if code, stdout, _ := runQM("plan", "merge", "-h"); code != 0 || !strings.Contains(stdout, "usage: qm plan merge") {
		t.Errorf("qm plan merge -h: exit %d\n%s", code, stdout)
	}
}

// TestJobManifestsDryRun applies both commands' manifests to a real API
// server with a server-side dry run (defaulting, validation of the Job's
// index and failure-policy fields, strict field validation): they are
// objects a cluster takes, and come back as the Indexed Jobs written. One
// made invalid on purpose is refused, so the check can fail.
func TestJobManifestsDryRun(t *testing.T) {
	c := kindcluster.NewForTest(t, kindcluster.Options{Name: "sim-jobs", EtcdUnsafeNoFsync: true})
	cs, err := c.Clientset()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir := t.TempDir()
	scFile := filepath.Join(dir, "one-fleet.yaml")
	if err := os.WriteFile(scFile, []byte(planScenario), 0o644); err != nil {
		t.Fatal(err)
	}
	dry := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}, FieldValidation: "Strict"}
	for _, args := range [][]string{
		{"sim", scFile, "--seeds", "4", "--job-manifest"},
		{"plan", scFile, "--target", "successRate>=0.98", "--vary", "fleets.game.replicas=1..32", "--points", "3", "--job-manifest"},
	} {
		code, manifest, stderr := runQM(args...)
		if code != 0 {
			t.Fatalf("%q: exit %d\n%s", args, code, stderr)
		}
		cm, job := parseJobManifest(t, manifest)
		if _, err := cs.CoreV1().ConfigMaps("default").Create(ctx, cm, dry); err != nil {
			t.Fatalf("%s: ConfigMap: %v", args[0], err)
		}
		got, err := cs.BatchV1().Jobs("default").Create(ctx, job, dry)
		if err != nil {
			t.Fatalf("%s: Job: %v", args[0], err)
		}
		s := got.Spec
		if s.CompletionMode == nil || *s.CompletionMode != batchv1.IndexedCompletion || *s.Completions != *job.Spec.Completions ||
			s.BackoffLimitPerIndex == nil || s.PodFailurePolicy == nil || len(s.PodFailurePolicy.Rules) != 2 ||
			!slices.Equal(s.Template.Spec.Containers[0].Args, job.Spec.Template.Spec.Containers[0].Args) {
			t.Fatalf("%s: the API server's Job differs from the manifest's: %+v", args[0], s)
		}
		// Without a per-index backoff limit a FailIndex rule is invalid.
		bad := job.DeepCopy()
		bad.Spec.BackoffLimitPerIndex = nil
		if _, err := cs.BatchV1().Jobs("default").Create(ctx, bad, dry); err == nil || !strings.Contains(err.Error(), "FailIndex") {
			t.Errorf("%s: a FailIndex rule without backoffLimitPerIndex: %v", args[0], err)
		}
	}
}
