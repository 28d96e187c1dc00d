package kind

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	kindcluster "github.com/quartermaster-dev/quartermaster/kindcluster"
)

// MissingError says what this machine lacks to run kind rigs: every
// missing thing Check found, one line. Tests and `make e2e-multicluster
// PROVIDER=kind` skip on it (or fail, with KIND_REQUIRED); any other error
// from Check is a failure.
type MissingError struct{ What string }

func (e *MissingError) Error() string { return "kind provider: " + e.What }

// ProviderEnv is kind's own switch of container runtime. The rig drives
// Docker only: it builds, saves, restarts and inspects through the docker
// CLI, whose output podman and nerdctl do not all match.
const ProviderEnv = "KIND_EXPERIMENTAL_PROVIDER"

// checkProvider refuses a container runtime other than Docker.
func checkProvider() error {
	if p := os.Getenv(ProviderEnv); p != "" && p != "docker" {
		return fmt.Errorf("%s=%s: the kind rig runs on Docker only (it calls docker build, save, restart and network inspect itself); unset it to use Docker", ProviderEnv, p)
	}
	return nil
}

// Check reports whether kind rigs can run here with opts: a container
// runtime that is Docker (ProviderEnv), the docker CLI, a daemon that
// answers, kind's node image on this machine, the qm image (an archive
// given by ImageArchive, else in Docker unless Up is to build it), and
// kubectl. It changes nothing, and names everything missing at once.
// programs runs the probes (nil: child processes).
func Check(ctx context.Context, opts Options, programs kindcluster.Runner) error {
	if err := checkProvider(); err != nil {
		return err
	}
	if programs == nil {
		programs = kindcluster.ExecRunner{}
	}
	resolved := opts
	repoErr := resolved.resolve()
	var missing []string
	docker := resolved.Docker
	switch _, err := exec.LookPath(docker); {
	case err != nil:
		missing = append(missing, fmt.Sprintf("%s is not installed (not on PATH; hack/kind/setup-host.sh installs Debian's)", docker))
	default:
		if out, err := programs.Run(ctx, kindcluster.Command{Path: docker, Args: []string{"info", "--format", "{{.ServerVersion}}"}}); err != nil {
			missing = append(missing, fmt.Sprintf("%s does not answer: %s", docker, firstLine(out, err)))
			break
		}
		if _, err := programs.Run(ctx, imageInspect(docker, resolved.NodeImage)); err != nil {
			missing = append(missing, fmt.Sprintf("kind's node image %s is not on this machine (docker pull %s; with no registry, make kind-node-image and %s=%s)",
				resolved.NodeImage, resolved.NodeImage, NodeImageEnv, OfflineNodeImage))
		}
		if resolved.ImageArchive == "" && !resolved.Build {
			if _, err := programs.Run(ctx, imageInspect(docker, resolved.Image)); err != nil {
				missing = append(missing, fmt.Sprintf("the qm image %s is not in Docker (build it, or make kind-qm-image and %s=bin/kindnode/qm-image.tar)", resolved.Image, ImageArchiveEnv))
			}
		}
	}
	if a := resolved.ImageArchive; a != "" && !isFile(a) {
		missing = append(missing, fmt.Sprintf("the qm image archive %s does not exist (make kind-qm-image)", a))
	}
	kubectl := resolved.Kubectl
	if repoErr != nil && kubectl == "" {
		kubectl = "kubectl"
	}
	if filepath.Base(kubectl) == kubectl {
		if _, err := exec.LookPath(kubectl); err != nil {
			missing = append(missing, "kubectl is not on PATH (make bin/kubectl builds one)")
		}
	} else if !isFile(kubectl) {
		missing = append(missing, fmt.Sprintf("%s does not exist (make bin/kubectl builds it)", kubectl))
	}
	if len(missing) > 0 {
		return &MissingError{strings.Join(missing, "; ")}
	}
	return nil
}

func imageInspect(docker, image string) kindcluster.Command {
	return kindcluster.Command{Path: docker, Args: []string{"image", "inspect", "--format", "{{.Id}}", image}}
}

func firstLine(out []byte, err error) string {
	s := strings.TrimSpace(string(out))
	if s == "" {
		return err.Error()
	}
	line, _, _ := strings.Cut(s, "\n")
	return line
}
