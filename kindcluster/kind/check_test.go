package kind

import (
	"context"
	"errors"
	"path/filepath"
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
	kubectl := filepath.Join(t.TempDir(), "kubectl")
	for _, tc := range []struct {
		name    string
		opts    Options
		probes  probes
		missing string // "" when Check passes
	}{
		{"no docker", Options{Docker: "qm-no-such-docker"}, nil, "qm-no-such-docker is not installed"},
		{"no daemon", Options{Docker: "true"}, probes{"info": "Cannot connect to the Docker daemon at unix:///var/run/docker.sock.\nmore"},
			"true does not answer: Cannot connect to the Docker daemon at unix:///var/run/docker.sock."},
		{"no node image", Options{Docker: "true", NodeImage: "kindest/node:v9"}, probes{"image inspect": "No such image"},
			"kind's node image kindest/node:v9 is not on this machine (docker pull kindest/node:v9)"},
		{"no kubectl", Options{Docker: "true", Kubectl: kubectl}, probes{}, kubectl + " does not exist"},
		{"ready", Options{Docker: "true", Kubectl: "true"}, probes{}, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := Check(context.Background(), tc.opts, tc.probes)
			var m *MissingError
			switch {
			case tc.missing == "" && err != nil:
				t.Fatalf("Check: %v, want nil", err)
			case tc.missing == "":
			case !errors.As(err, &m):
				t.Fatalf("Check: %v, want a MissingError", err)
			case !strings.Contains(err.Error(), tc.missing) || strings.Contains(err.Error(), "\n"):
				t.Fatalf("Check: %q, want one line containing %q", err, tc.missing)
			}
		})
	}
}
