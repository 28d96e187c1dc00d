package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"

	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// Simulator runs where one machine is not enough: qm sim --seeds N and
// qm plan as a Kubernetes Indexed Job, each completion index one run of
// the scenario, which a ConfigMap carries into every pod. Each pod's log is
// its report (--out -: the JSON document first); qm sim merge and qm plan
// merge read the logs.

// jobImage is the image the manifests name unless --image says otherwise,
// as deploy/loadgen.yaml does.
const jobImage = "ghcr.io/quartermaster-dev/qm:REPLACE-WITH-VERSION"

// scenarioMount is where the pods find the scenario file.
const scenarioMount = "/etc/qm/scenario"

// indexArg is what Kubernetes replaces, in a container's arguments, with
// the pod's completion index (the Job controller sets the variable).
const indexArg = "$(JOB_COMPLETION_INDEX)"

// simJob is an Indexed Job of simulator runs.
type simJob struct {
	name     string // the Job's; the ConfigMap is name-scenario
	image    string
	file     string // the scenario file as given
	data     []byte // its contents
	runs     int    // completions
	args     []string
	merge    string // the merge command, for the manifest's comment
	describe string // one line on what the Job runs
}

// podScenario is the scenario file's path inside the pods.
func (j *simJob) podScenario() string { return scenarioMount + "/" + filepath.Base(j.file) }

// manifest is the ConfigMap and the Job, as YAML documents after a comment
// that says how to run them and merge the results.
func (j *simJob) manifest() ([]byte, error) {
	labels := map[string]string{
		"app.kubernetes.io/name":    j.name,
		"app.kubernetes.io/part-of": "quartermaster",
	}
	cmName := j.name + "-scenario"
	cm := &corev1.ConfigMap{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "ConfigMap"},
		ObjectMeta: metav1.ObjectMeta{Name: cmName, Labels: labels},
		Data:       map[string]string{filepath.Base(j.file): string(j.data)},
	}
	n := int32(j.runs)
	perIndex := int32(1)
	ttl := int32(86400)
	nonRoot, noEscalation, readOnly := true, false, true
	uid := int64(65532)
	job := &batchv1.Job{
		TypeMeta:   metav1.TypeMeta{APIVersion: "batch/v1", Kind: "Job"},
		ObjectMeta: metav1.ObjectMeta{Name: j.name, Labels: labels},
		Spec: batchv1.JobSpec{
			CompletionMode: ptrTo(batchv1.IndexedCompletion),
			Completions:    &n,
			Parallelism:    &n,
			// Each index is one run of its own: a pod lost to a crash
			// or an eviction is run again once; a run that finished and
			// missed an expectation (exit status 2) is a result, the
			// same on a second go, and fails its index alone.
			BackoffLimitPerIndex: &perIndex,
			PodFailurePolicy: &batchv1.PodFailurePolicy{Rules: []batchv1.PodFailurePolicyRule{
				{
					Action: batchv1.PodFailurePolicyActionFailIndex,
					OnExitCodes: &batchv1.PodFailurePolicyOnExitCodesRequirement{
						ContainerName: ptrTo("qm"),
						Operator:      batchv1.PodFailurePolicyOnExitCodesOpIn,
						Values:        []int32{2},
					},
				},
				{
					Action:          batchv1.PodFailurePolicyActionIgnore,
					OnPodConditions: []batchv1.PodFailurePolicyOnPodConditionsPattern{{Type: corev1.DisruptionTarget, Status: corev1.ConditionTrue}},
				},
			}},
			// The results are the pods' logs: keep them a day.
			TTLSecondsAfterFinished: &ttl,
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec: corev1.PodSpec{
					RestartPolicy: corev1.RestartPolicyNever,
					SecurityContext: &corev1.PodSecurityContext{
						RunAsNonRoot:   &nonRoot,
						RunAsUser:      &uid,
						SeccompProfile: &corev1.SeccompProfile{Type: corev1.SeccompProfileTypeRuntimeDefault},
					},
					Containers: []corev1.Container{{
						Name:  "qm",
						Image: j.image,
						Args:  j.args,
						Resources: corev1.ResourceRequirements{
							Requests: corev1.ResourceList{
								corev1.ResourceCPU:    resource.MustParse("1"),
								corev1.ResourceMemory: resource.MustParse("1Gi"),
							},
						},
						SecurityContext: &corev1.SecurityContext{
							AllowPrivilegeEscalation: &noEscalation,
							ReadOnlyRootFilesystem:   &readOnly,
							Capabilities:             &corev1.Capabilities{Drop: []corev1.Capability{"ALL"}},
						},
						VolumeMounts: []corev1.VolumeMount{{Name: "scenario", MountPath: scenarioMount, ReadOnly: true}},
					}},
					Volumes: []corev1.Volume{{
						Name: "scenario",
						VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{
							LocalObjectReference: corev1.LocalObjectReference{Name: cmName},
						}},
					}},
				},
			},
		},
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, `# %s
# An Indexed Job of %d runs, one per completion index, each on a core of
# its own (requests: one CPU, 1Gi; raise the memory for a large scenario:
# a run takes up to 3 GiB of heap before its collector works harder). The
# ConfigMap carries %s into every pod.
#
# Run, collect, merge:
#   kubectl -n NAMESPACE apply -f THIS-FILE
#   kubectl -n NAMESPACE wait --for=condition=Complete --timeout=1h job/%s
#   for i in $(seq 0 %d); do
#     kubectl -n NAMESPACE logs -l batch.kubernetes.io/job-name=%s,batch.kubernetes.io/job-completion-index=$i > run-$i.json
#   done
#   %s run-*.json
# Each pod's log is its report (--out -: the JSON document first; the merge
# reads it and ignores the rest). An index whose run missed an expectation
# fails alone (exit status 2; its report is in its log), and the Job is
# Failed when any did, as qm sim --seeds exits 2. Delete the Job (and the
# ConfigMap) before running it again.
`, j.describe, j.runs, j.file, j.name, j.runs-1, j.name, j.merge)
	for _, obj := range []any{cm, job} {
		y, err := yaml.Marshal(obj)
		if err != nil {
			return nil, err
		}
		b.WriteString("---\n")
		b.Write(y)
	}
	return b.Bytes(), nil
}

func ptrTo[T any](v T) *T { return &v }

// checkJobName refuses a name the API server would (a Job's name is a DNS
// label, and the ConfigMap's adds "-scenario"), before a manifest is
// written with it.
func checkJobName(name string) error {
	if len(name) == 0 || len(name)+len("-scenario") > 63 {
		return fmt.Errorf("--job-name %q: want 1 to %d characters", name, 63-len("-scenario"))
	}
	for i, c := range name {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' && i > 0 && i < len(name)-1) {
			return fmt.Errorf("--job-name %q: want lower-case letters, digits and inner dashes (a DNS label)", name)
		}
	}
	return nil
}

// writeManifest writes the manifest to out ("" or "-": stdout).
func writeManifest(j *simJob, out string, stdout io.Writer) error {
	b, err := j.manifest()
	if err != nil {
		return err
	}
	if out == "" || out == "-" {
		_, err = stdout.Write(b)
		return err
	}
	if err := os.WriteFile(out, b, 0o644); err != nil {
		return fmt.Errorf("--out: %w", err)
	}
	return nil
}
