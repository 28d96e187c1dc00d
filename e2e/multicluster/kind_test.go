package multicluster_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"

	"github.com/quartermaster-dev/quartermaster/kindcluster/kind"
	"github.com/quartermaster-dev/quartermaster/kindcluster/rig"
)

// kindRequiredEnv turns the kind provider's skip, where Docker, kind's
// node image or kubectl is missing, into a failure (a CI job that must run
// on kind sets it).
const kindRequiredEnv = "KIND_REQUIRED"

// kindTopology is the suite's topology on the kind provider: the same
// clusters, fleets, policies and links.
func kindTopology(top *rig.Topology) *rig.Topology {
	t := *top
	t.Spec.Provider = rig.ProviderKind
	return &t
}

// kindOptions are the kind provider's options for the suite: the image
// built from this repository (or the archive and node image the
// environment names: make e2e-multicluster PROVIDER=kind sets them where
// the offline images are), the host address and link listener from the
// environment (make e2e-multicluster PROVIDER=kind KIND_HOST_ADDRESS=...),
// and runner (nil: the real one).
func kindOptions(dir, repo string, runner kind.Runner) kind.Options {
	return kind.Options{
		Dir: dir, RepoDir: repo, Build: true, Runner: runner, Wait: 5 * time.Minute,
		HostAddress: os.Getenv(kind.HostAddressEnv), LinkListen: os.Getenv(kind.LinkListenEnv),
	}
}

// upKind brings the suite's rig up as kind clusters, or skips the suite in
// one line where this machine cannot run kind.
func upKind(ctx context.Context, top *rig.Topology) rig.Handle {
	repo, err := filepath.Abs(filepath.Join("..", ".."))
	Expect(err).NotTo(HaveOccurred())
	opts := kindOptions(filepath.Join(GinkgoT().TempDir(), "rig"), repo, nil)
	if err := kind.Check(ctx, opts, nil); err != nil {
		var m *kind.MissingError
		if !errors.As(err, &m) {
			Fail(err.Error())
		}
		if os.Getenv(kindRequiredEnv) != "" {
			Fail(fmt.Sprintf("%s (%s is set)", err, kindRequiredEnv))
		}
		Skip("SKIPPED: " + err.Error())
	}
	opts.Log = GinkgoWriter
	r, err := kind.Up(ctx, kindTopology(top), opts)
	Expect(err).NotTo(HaveOccurred())
	return r
}
