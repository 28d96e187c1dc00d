package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"

	"github.com/quartermaster-dev/quartermaster/allocator"
	"github.com/quartermaster-dev/quartermaster/allocator/forward"
)

// multiClusterFlags are `qm serve`'s flags for multi-cluster allocation.
type multiClusterFlags struct {
	policies       string
	forwardTimeout time.Duration
	clusterName    string
}

func (m *multiClusterFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&m.policies, "policies", "", "multi-cluster policies: a YAML file (or a directory of manifests) of multicluster.agones.dev/v1 GameServerAllocationPolicy objects and the v1 Secrets they name, re-read every 2s; without it multiClusterSetting.enabled is refused")
	fs.DurationVar(&m.forwardTimeout, "forward-timeout", forward.DefaultTryTimeout, "bound on one forwarded call to a remote allocator (the caller's deadline bounds the whole request)")
	fs.StringVar(&m.clusterName, "cluster-name", "", "this allocator's name in forwarded calls' hop list, for loop refusal (default: a random one per process; give replicas of one cluster the same)")
}

// start builds the forwarder when --policies is given (nil otherwise) and
// keeps its policies in step with the file until ctx ends. The caller
// closes the forwarder when the server has stopped.
func (m *multiClusterFlags) start(ctx context.Context, log *slog.Logger, reg prometheus.Registerer, unallocated codes.Code) (*forward.Forwarder, error) {
	if m.policies == "" {
		return nil, nil
	}
	if m.forwardTimeout <= 0 {
		return nil, fmt.Errorf("--forward-timeout must be positive, got %v", m.forwardTimeout)
	}
	file, err := forward.OpenPoliciesFile(m.policies)
	if err != nil {
		return nil, err
	}
	store := forward.NewStore(file.Set)
	fwd, err := forward.New(forward.Options{
		Source: store, Self: m.clusterName, TryTimeout: m.forwardTimeout,
		UnallocatedCode: unallocated, Logger: log, Registerer: reg,
	})
	if err != nil {
		return nil, err
	}
	np, ns := file.Set.Counts()
	log.Info("multi-cluster policies loaded", "path", m.policies, "policies", np, "secrets", ns, "hop", fwd.Self())
	go file.Watch(ctx, limitsPollInterval, log, store.Replace)
	return fwd, nil
}

// multiClusterOf is fwd as the service's option: a nil interface, not a
// nil pointer in one, when there is no forwarder.
func multiClusterOf(fwd *forward.Forwarder) allocator.MultiCluster {
	if fwd == nil {
		return nil
	}
	return fwd
}
