package kind

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	kindcluster "github.com/quartermaster-dev/quartermaster/kindcluster"
)

// probes answers Check's docker probes: each argument list containing a
// key fails with its output.
type probes map[string]string

func (p probes) Start(kindcluster.Command) (kindcluster.Process, error) {
	return nil, errors.New("not used")
}

func (p probes) Run(_ context.Context, c kindcluster.Command) ([]byte, error) {
	args := strings.Join(c.Args, " ")
	for k, out := range p {
		if strings.Contains(args, k) {
			return []byte(out), errors.New("exit status 1")
		}
	}
	return []byte("ok\n"), nil
}

func TestCheck(t *testing.T) {
	// "true" stands in for docker: it is on PATH everywhere; the probes
	// decide what it answers.
	t.Setenv(NodeImageEnv, "")
	t.Setenv(ImageArchiveEnv, "")
	t.Setenv(ProviderEnv, "")
	kubectl := filepath.Join(t.TempDir(), "kubectl")
	archive := filepath.Join(t.TempDir(), "qm-image.tar")
	for _, tc := range []struct {
		name    string
		env     string // ProviderEnv
		opts    Options
		probes  probes
		missing []string // none when Check passes
	}{
		{"no docker", "", Options{Docker: "qm-no-such-docker", Kubectl: "true"}, nil, []string{"qm-no-such-docker is not installed"}},
		{"no daemon", "", Options{Docker: "true", Kubectl: "true"}, probes{"info": "Cannot connect to the Docker daemon at unix:///var/run/docker.sock.\nmore"},
			[]string{"true does not answer: Cannot connect to the Docker daemon at unix:///var/run/docker.sock."}},
		{"no node image", "", Options{Docker: "true", Kubectl: "true", NodeImage: "kindest/node:v9", Build: true}, probes{"inspect --format {{.Id}} kindest/node:v9": "No such image"},
			[]string{"kind's node image kindest/node:v9 is not on this machine (docker pull kindest/node:v9; with no registry, make kind-node-image and QM_KIND_NODE_IMAGE=" + OfflineNodeImage + ")"}},
		{"no qm image", "", Options{Docker: "true", Kubectl: "true"}, probes{"inspect --format {{.Id}} " + DefaultImage: "No such image"},
			[]string{"the qm image " + DefaultImage + " is not in Docker"}},
		{"qm image built by Up", "", Options{Docker: "true", Kubectl: "true", Build: true}, probes{"inspect --format {{.Id}} " + DefaultImage: "No such image"}, nil},
		{"no qm archive", "", Options{Docker: "true", Kubectl: "true", ImageArchive: archive}, probes{"inspect --format {{.Id}} " + DefaultImage: "No such image"},
			[]string{"the qm image archive " + archive + " does not exist (make kind-qm-image)"}},
		{"no kubectl", "", Options{Docker: "true", Kubectl: kubectl, Build: true}, probes{}, []string{kubectl + " does not exist"}},
		{"everything at once", "", Options{Docker: "true", Kubectl: kubectl, NodeImage: "kindest/node:v9"}, probes{"image inspect": "No such image"},
			[]string{"kind's node image kindest/node:v9", "the qm image " + DefaultImage, kubectl + " does not exist"}},
		{"podman", "podman", Options{Docker: "true", Kubectl: "true", Build: true}, probes{}, []string{"KIND_EXPERIMENTAL_PROVIDER=podman: the kind rig runs on Docker only"}},
		{"ready", "", Options{Docker: "true", Kubectl: "true", Build: true}, probes{}, nil},
		{"ready, docker named", "docker", Options{Docker: "true", Kubectl: "true", Build: true}, probes{}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(ProviderEnv, tc.env)
			err := Check(context.Background(), tc.opts, tc.probes)
			var m *MissingError
			switch {
			case len(tc.missing) == 0 && err != nil:
				t.Fatalf("Check: %v, want nil", err)
			case len(tc.missing) == 0:
			case tc.env != "" && tc.env != "docker":
				// A refused runtime is an error to fix, not a skip.
				if err == nil || errors.As(err, &m) || !strings.Contains(err.Error(), tc.missing[0]) {
					t.Fatalf("Check: %v, want a refusal containing %q", err, tc.missing[0])
				}
			case !errors.As(err, &m):
				t.Fatalf("Check: %v, want a MissingError", err)
			default:
				for _, want := range tc.missing {
					if !strings.Contains(err.Error(), want) || strings.Contains(err.Error(), "\n") {
						t.Errorf("Check: %q, want one line containing %q", err, want)
					}
				}
			}
		})
	}
}

// TestOfflineNodeImageVersion keeps OfflineNodeImage on the Kubernetes
// version mk/kube.mk builds, which make kind-node-image tags it with.
func TestOfflineNodeImageVersion(t *testing.T) {
	mk, err := os.ReadFile("../../mk/kube.mk")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^KUBE_VERSION\s*:=\s*(\S+)`).FindSubmatch(mk)
	if m == nil {
		t.Fatal("mk/kube.mk sets no KUBE_VERSION")
	}
	if want := "quartermaster.dev/kind-node:" + string(m[1]); OfflineNodeImage != want {
		t.Errorf("OfflineNodeImage = %s, want %s (mk/kube.mk's KUBE_VERSION)", OfflineNodeImage, want)
	}
}
