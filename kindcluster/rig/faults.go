package rig

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
)

// Faults a soak run injects into a running local rig, beyond the links'
// (Proxies) and the two every Handle has (RestartAPIServer,
// RotateSecrets): an allocator replica killed and started again, an API
// server held down for a while, a fleet scaled.

// ForwarderIdentity is the client identity cluster's allocators present
// when they forward to another cluster: what the allocator there records
// as the holder of what it allocates for them.
func ForwarderIdentity(cluster string) string { return forwarderPrefix + cluster }

func (r *Rig) replica(cluster string, n int) (*Replica, error) {
	c, err := r.cluster(cluster)
	if err != nil {
		return nil, err
	}
	if n < 0 || n >= len(c.Replicas) {
		return nil, fmt.Errorf("cluster %q has %d allocator replicas; there is no replica %d", cluster, len(c.Replicas), n)
	}
	rep := &c.Replicas[n]
	if rep.proc == nil {
		return nil, fmt.Errorf("cluster %q: allocator %d was never started (a dry run?)", cluster, n)
	}
	return rep, nil
}

// KillReplica kills allocator replica n of cluster with SIGKILL, as the
// OOM killer or a lost node would, and returns once it has exited. Its
// links stay: callers that use them meet a refused connection until
// StartReplica.
func (r *Rig) KillReplica(cluster string, n int) error {
	rep, err := r.replica(cluster, n)
	if err != nil {
		return err
	}
	r.mu.Lock()
	p := rep.proc
	r.mu.Unlock()
	select {
	case <-p.Done():
		return fmt.Errorf("cluster %q: allocator %d is not running (exited: %v)", cluster, n, p.Err())
	default:
	}
	proc, err := os.FindProcess(p.Pid())
	if err != nil {
		return err
	}
	if err := proc.Kill(); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("cluster %q: kill allocator %d: %w", cluster, n, err)
	}
	<-p.Done()
	r.logf("cluster %q: allocator %d killed", cluster, n)
	return nil
}

// StartReplica starts allocator replica n of cluster again, with the
// command line it first had (the same gRPC address, so its links reach
// it), once it is not running, and waits until it is ready.
func (r *Rig) StartReplica(ctx context.Context, cluster string, n int) error {
	rep, err := r.replica(cluster, n)
	if err != nil {
		return err
	}
	r.mu.Lock()
	old := rep.proc
	r.mu.Unlock()
	select {
	case <-old.Done():
	default:
		return fmt.Errorf("cluster %q: allocator %d is still running (KillReplica first)", cluster, n)
	}
	if err := os.Remove(rep.ready); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	p, err := r.start(fmt.Sprintf("%s allocator %d", cluster, n), rep.cmd)
	if err != nil {
		return err
	}
	grpcAddr, httpAddr, err := waitReady(ctx, rep.ready, p, r.opts.StartTimeout)
	r.mu.Lock()
	rep.proc, rep.Pid = p, p.Pid()
	if err == nil {
		rep.GRPC, rep.HTTP = grpcAddr, httpAddr
	}
	r.mu.Unlock()
	if err != nil {
		return fmt.Errorf("cluster %q: allocator %d after a restart: %w (log: %s)", cluster, n, err, rep.cmd.LogFile)
	}
	r.logf("cluster %q: allocator %d started again", cluster, n)
	return r.writeState()
}

// StopAPIServer stops cluster's kube-apiserver and leaves etcd running;
// StartAPIServer brings it back on the same port. Between the two the
// allocators and the fleet agent see their API server gone.
func (r *Rig) StopAPIServer(cluster string) error {
	c, err := r.cluster(cluster)
	if err != nil {
		return err
	}
	if c.Kube == nil {
		return errors.New("the rig has no API servers (a dry run?)")
	}
	return c.Kube.StopAPIServer()
}

// StartAPIServer starts cluster's kube-apiserver again after
// StopAPIServer and waits until it serves.
func (r *Rig) StartAPIServer(ctx context.Context, cluster string) error {
	c, err := r.cluster(cluster)
	if err != nil {
		return err
	}
	if c.Kube == nil {
		return errors.New("the rig has no API servers (a dry run?)")
	}
	if err := c.Kube.StartAPIServer(ctx); err != nil {
		return err
	}
	return r.writeState()
}

// FleetNames are cluster's fleets, in the topology's order.
func (r *Rig) FleetNames(cluster string) []string {
	for _, c := range r.Topology.Spec.Clusters {
		if c.Name == cluster {
			var out []string
			for _, f := range c.Fleets {
				out = append(out, f.Name)
			}
			return out
		}
	}
	return nil
}

// FleetReplicas is the replica count the topology gives cluster's fleet
// (-1 when there is no such fleet).
func (r *Rig) FleetReplicas(cluster, fleet string) int {
	for _, c := range r.Topology.Spec.Clusters {
		if c.Name != cluster {
			continue
		}
		for _, f := range c.Fleets {
			if f.Name == fleet {
				return f.Replicas
			}
		}
	}
	return -1
}

// ScaleFleet sets a fleet's spec.replicas on cluster's API server; the
// fleet agent makes or removes servers to match (never an Allocated one).
func (r *Rig) ScaleFleet(ctx context.Context, cluster, fleet string, replicas int) error {
	c, err := r.cluster(cluster)
	if err != nil {
		return err
	}
	_, dc, err := r.clients(c)
	if err != nil {
		return err
	}
	return ScaleFleet(ctx, dc.Resource(fleetGVR).Namespace(r.Topology.Spec.Namespace), fleet, replicas)
}

// fleetScaler is the part of a dynamic client ScaleFleet needs.
type fleetScaler interface {
	Patch(ctx context.Context, name string, pt types.PatchType, data []byte, options metav1.PatchOptions, subresources ...string) (*unstructured.Unstructured, error)
}

// ScaleFleet sets the named Fleet's spec.replicas through a client for
// Fleets in its namespace (a merge patch: the fleet's other fields stay).
func ScaleFleet(ctx context.Context, fleets fleetScaler, fleet string, replicas int) error {
	if replicas < 0 {
		return fmt.Errorf("fleet %s: replicas must not be negative, got %d", fleet, replicas)
	}
	patch := fmt.Sprintf(`{"spec":{"replicas":%d}}`, replicas)
	if _, err := fleets.Patch(ctx, fleet, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("scale fleet %s to %d: %w", fleet, replicas, err)
	}
	return nil
}

// LogDir is where cluster's processes write their logs.
func (r *Rig) LogDir(cluster string) string { return filepath.Join(r.Dir, cluster) }
