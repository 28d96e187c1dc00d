package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"k8s.io/client-go/rest"

	"github.com/quartermaster-dev/quartermaster/allocator"
	"github.com/quartermaster-dev/quartermaster/allocator/forward"
	"github.com/quartermaster-dev/quartermaster/allocator/forward/kubesource"
)

// multiClusterFlags are `qm serve`'s flags for multi-cluster allocation.
type multiClusterFlags struct {
	policies       string
	forwardTimeout time.Duration
	clusterName    string
	breaker        forward.BreakerOptions
	ownKeys        bool

	// kubeREST is set by the kubernetes backend: without --policies, the
	// policies and Secrets then come from its API server.
	kubeREST      *rest.Config
	kubeNamespace string
	// placements is set by the kubernetes backend: its replicas' shared
	// record of where keyed multi-cluster requests went (nil: this
	// process's own).
	placements forward.Placements
	// keyWindow and maxKeys bound this process's own record (the
	// service's --allocation-key-window and --allocation-key-max).
	keyWindow time.Duration
	maxKeys   int
}

func (m *multiClusterFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&m.policies, "policies", "", "multi-cluster policies: a YAML file (or a directory of manifests) of multicluster.agones.dev/v1 GameServerAllocationPolicy objects and the v1 Secrets they name, re-read every 2s. Without it, --backend kubernetes watches the API server's policies and Secrets, and the memory backend refuses multiClusterSetting.enabled")
	fs.DurationVar(&m.forwardTimeout, "forward-timeout", forward.DefaultTryTimeout, "bound on one forwarded call to a remote allocator (the caller's deadline bounds the whole request)")
	fs.BoolVar(&m.ownKeys, "forward-own-keys", false, "give a forwarded request that came without an idempotency key one of this allocator's own, so that a lost answer to it is retried and its allocation given back like a keyed request's, at the cost of the remote's keyed path on every forwarded request")
	fs.StringVar(&m.clusterName, "cluster-name", "", "this allocator's name in forwarded calls' hop list, for loop refusal (default: a random one per process; give replicas of one cluster the same)")
	// A live scenario run at time scale N divides these by N with the rest
	// of the scenario's timeline.
	fs.DurationVar(&m.breaker.OpenFor, "breaker-open", 0, "how long a remote allocator's breaker skips it after 3 transport failures in a row, before a probe (default 1s; doubled per failed probe)")
	fs.DurationVar(&m.breaker.MaxOpenFor, "breaker-max-open", 0, "the longest a breaker stays open between probes (default 30s)")
}

// start builds the forwarder and keeps its policies in step with their
// source until ctx ends: the --policies file when given, else the API
// server's objects when the backend is kubernetes; without either it
// returns nil (no forwarder). The caller closes the forwarder when the
// server has stopped.
func (m *multiClusterFlags) start(ctx context.Context, log *slog.Logger, reg prometheus.Registerer, unallocated codes.Code) (*forward.Forwarder, error) {
	if m.forwardTimeout <= 0 {
		return nil, fmt.Errorf("--forward-timeout must be positive, got %v", m.forwardTimeout)
	}
	if m.breaker.OpenFor < 0 || m.breaker.MaxOpenFor < 0 {
		return nil, fmt.Errorf("--breaker-open and --breaker-max-open must not be negative, got %v and %v", m.breaker.OpenFor, m.breaker.MaxOpenFor)
	}
	if m.policies == "" {
		if m.kubeREST == nil {
			return nil, nil
		}
		return m.startKube(ctx, log, reg, unallocated)
	}
	file, err := forward.OpenPoliciesFile(m.policies)
	if err != nil {
		return nil, err
	}
	store := forward.NewStore(file.Set)
	fwd, err := forward.New(forward.Options{
		Source: store, Self: m.clusterName, TryTimeout: m.forwardTimeout, Breaker: m.breaker,
		UnallocatedCode: unallocated, Logger: log, Registerer: reg, OwnKeys: m.ownKeys, Placements: m.placements,
		KeyWindow: m.keyWindow, MaxKeys: m.maxKeys,
	})
	if err != nil {
		return nil, err
	}
	np, ns := file.Set.Counts()
	log.Info("multi-cluster policies loaded", "path", m.policies, "policies", np, "secrets", ns, "hop", fwd.Self())
	go file.Watch(ctx, limitsPollInterval, log, store.Replace)
	return fwd, nil
}

// startKube builds the forwarder on informers of the API server's
// GameServerAllocationPolicies and the Secrets they name. The informers
// list in the background: until they have, multi-cluster requests answer
// Unavailable saying so, and single-cluster ones are unaffected.
func (m *multiClusterFlags) startKube(ctx context.Context, log *slog.Logger, reg prometheus.Registerer, unallocated codes.Code) (*forward.Forwarder, error) {
	src, err := kubesource.New(kubesource.Options{REST: m.kubeREST, Namespace: m.kubeNamespace, Logger: log})
	if err != nil {
		return nil, err
	}
	fwd, err := forward.New(forward.Options{
		Source: src, Self: m.clusterName, TryTimeout: m.forwardTimeout, Breaker: m.breaker,
		UnallocatedCode: unallocated, Logger: log, Registerer: reg, OwnKeys: m.ownKeys, Placements: m.placements,
		KeyWindow: m.keyWindow, MaxKeys: m.maxKeys,
	})
	if err != nil {
		return nil, err
	}
	src.Run(ctx)
	go func() {
		if src.WaitForSync(ctx) {
			log.Info("multi-cluster policies listed from the API server", "hop", fwd.Self())
		}
	}()
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
