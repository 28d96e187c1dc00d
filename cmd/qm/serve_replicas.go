package main

import (
	"context"
	"flag"
	"log/slog"
	"os"

	"github.com/quartermaster-dev/quartermaster/allocator/kube"
)

// replicaFlags are qm serve's flags for replicas finding each other
// through Leases (--backend kubernetes without --replicas).
type replicaFlags struct {
	membership     bool
	leaseNamespace string
	replicaGroup   string
}

func (r *replicaFlags) register(fs *flag.FlagSet) {
	fs.BoolVar(&r.membership, "membership", true, "--backend kubernetes: find the other replicas through coordination.k8s.io Leases and share the servers by shard (ignored with --replicas)")
	fs.StringVar(&r.leaseNamespace, "lease-namespace", "", "namespace of the replicas' Leases (default: $POD_NAMESPACE, else the pod's service account namespace, else default)")
	fs.StringVar(&r.replicaGroup, "replica-group", kube.DefaultMembershipGroup, "replicas with the same group (and Lease namespace) share the servers by shard")
}

// startMembership takes part in the replicas' membership until the
// returned stop is called; stop deletes this replica's Lease, so that the
// others take over its shard at once. With --replica-shard (fixed shards) or
// --membership=false it does nothing.
func startMembership(ctx context.Context, f serveFlags, kb *kube.Backend, log *slog.Logger) (stop func(), err error) {
	if kb == nil || f.replicaShard != "" || !f.replica.membership {
		return func() {}, nil
	}
	restCfg, err := kubeRESTConfig(f.kubeconfig)
	if err != nil {
		return nil, err
	}
	identity, _ := os.Hostname()
	m, err := kube.NewMembership(kube.MembershipConfig{
		REST: restCfg, Namespace: f.replica.leaseNamespace, Group: f.replica.replicaGroup,
		Identity: identity, Logger: log,
	}, kb)
	if err != nil {
		return nil, err
	}
	mctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		m.Run(mctx)
	}()
	log.Info("taking part in the replicas' membership", "lease", m.Name(), "group", f.replica.replicaGroup)
	return func() { cancel(); <-done }, nil
}
