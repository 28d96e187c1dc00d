package kind

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"

	kindcluster "github.com/quartermaster-dev/quartermaster/kindcluster"
)

// MissingError says what this machine lacks to run kind rigs. Tests and
// `make e2e-multicluster PROVIDER=kind` skip on it; any other error from
// Check is a failure.
type MissingError struct{ What string }

func (e *MissingError) Error() string { return "kind provider: " + e.What }

// Check reports whether kind rigs can run here: a container runtime that
// answers (Docker), kind's node image already pulled, and kubectl. It
// changes nothing. programs runs the probes (nil: child processes).
func Check(ctx context.Context, opts Options, programs kindcluster.Runner) error {
	opts.defaults()
	if programs == nil {
		programs = kindcluster.ExecRunner{}
	}
	if _, err := exec.LookPath(opts.Docker); err != nil {
		return &MissingError{fmt.Sprintf("%s is not installed (not on PATH)", opts.Docker)}
	}
	if out, err := programs.Run(ctx, kindcluster.Command{Path: opts.Docker, Args: []string{"info", "--format", "{{.ServerVersion}}"}}); err != nil {
		return &MissingError{fmt.Sprintf("%s does not answer: %s", opts.Docker, firstLine(out, err))}
	}
	if _, err := programs.Run(ctx, kindcluster.Command{Path: opts.Docker, Args: []string{"image", "inspect", "--format", "{{.Id}}", opts.NodeImage}}); err != nil {
		return &MissingError{fmt.Sprintf("kind's node image %s is not on this machine (docker pull %s)", opts.NodeImage, opts.NodeImage)}
	}
	kubectl := opts.Kubectl
	if kubectl == "" {
		o := opts
		if err := o.resolve(); err == nil {
			kubectl = o.Kubectl
		} else {
			kubectl = "kubectl"
		}
	}
	if filepath.Base(kubectl) == kubectl {
		if _, err := exec.LookPath(kubectl); err != nil {
			return &MissingError{"kubectl is not on PATH (make bin/kubectl builds one)"}
		}
	} else if !isFile(kubectl) {
		return &MissingError{fmt.Sprintf("%s does not exist (make bin/kubectl builds it)", kubectl)}
	}
	return nil
}

func firstLine(out []byte, err error) string {
	s := strings.TrimSpace(string(out))
	if s == "" {
		return err.Error()
	}
	line, _, _ := strings.Cut(s, "\n")
	return line
}
