package soakrun

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/quartermaster-dev/quartermaster/kindcluster/rig"
	"github.com/quartermaster-dev/quartermaster/soak"
)

var fleetGVR = schema.GroupVersionResource{Group: "agones.dev", Version: "v1", Resource: "fleets"}

// lossyPeriod and lossyOn shape a lossy link: every period it goes down
// for the first lossyOn of it (its connections closed, new ones
// refused), so some calls get through and some do not. (A reset_peer
// toxic switched on and off this often can hang toxiproxy's removal of
// it on a busy connection.)
const (
	lossyPeriod = 2 * time.Second
	lossyOn     = 500 * time.Millisecond
)

// injector applies the schedule's faults to what the run drives. rig is
// nil when the allocator runs elsewhere: only the faults that need no
// more than the API servers are injected then.
type injector struct {
	rig       *rig.Rig
	clusters  []string
	dyn       map[string]dynamic.Interface
	namespace string
	rng       *rand.Rand
	rngMu     sync.Mutex
	hist      *history
	log       func(format string, args ...any)

	// linkMu guards links, apart from mu: switching a link may be slow,
	// and must not hold up the progress line or other faults' records.
	linkMu sync.Mutex
	links  map[linkFault]int // how many faults hold each link fault on

	mu      sync.Mutex
	current map[int]string // faults in force, for the progress line
	seq     int
	skipped map[string]string // kind -> why it was not injected
	failed  []string
	done    map[string]int // kind -> faults injected
}

type linkFault struct {
	p *rig.Proxy
	f rig.Fault
}

// needsRig are the kinds that act on a rig's processes, links or
// Secrets; against an allocator elsewhere they are skipped.
var needsRig = map[string]bool{
	soak.FaultReplicaKill: true, soak.FaultAPIServerRestart: true, soak.FaultLinkCut: true,
	soak.FaultLinkSlow: true, soak.FaultLinkLossy: true, soak.FaultSecretRotate: true, soak.FaultSlowRemote: true,
	soak.FaultAnswerLost: true,
}

func (in *injector) intn(n int) int {
	in.rngMu.Lock()
	defer in.rngMu.Unlock()
	return in.rng.IntN(n)
}

// run injects every fault at its time from start, each in its own
// goroutine (faults of different entries may overlap), and returns when
// all have ended or ctx is done (ending those in force).
func (in *injector) run(ctx context.Context, start time.Time, faults []soak.ScheduledFault) {
	var wg sync.WaitGroup
	for _, f := range faults {
		if needsRig[f.Kind] && in.rig == nil {
			in.skip(f.Kind, "needs the rig (its processes, links or Secrets): not injected against an allocator running elsewhere")
			continue
		}
		// Targets are picked in schedule order, so a seed gives the same
		// faults on the same targets.
		target := f.Target
		if target == "" {
			target = in.pickTarget(f.Kind)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			t := time.NewTimer(time.Until(start.Add(f.Start)))
			defer t.Stop()
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
			in.one(ctx, f, target, start.Add(f.End))
		}()
	}
	wg.Wait()
}

func (in *injector) skip(kind, why string) {
	in.mu.Lock()
	defer in.mu.Unlock()
	if _, ok := in.skipped[kind]; !ok {
		in.skipped[kind] = why
		in.log("fault %s: skipped: %s", kind, why)
	}
}

// pickTarget chooses what a fault without a named target hits.
func (in *injector) pickTarget(kind string) string {
	cl := in.clusters[in.intn(len(in.clusters))]
	switch kind {
	case soak.FaultReplicaKill:
		n := len(in.rig.Cluster(cl).Replicas)
		return fmt.Sprintf("%s/%d", cl, in.intn(n))
	case soak.FaultLinkCut, soak.FaultLinkSlow, soak.FaultLinkLossy:
		if len(in.clusters) < 2 {
			return rig.CallersName + "->" + cl
		}
		to := cl
		for to == cl {
			to = in.clusters[in.intn(len(in.clusters))]
		}
		return cl + "->" + to
	case soak.FaultAnswerLost:
		// The callers' own answers: what their keys are for (a
		// forwarder's lost answers are link-lossy's and link-cut's).
		return rig.CallersName + "->" + cl
	}
	return cl
}

// one injects one fault, holds it until end, ends it and writes it.
func (in *injector) one(ctx context.Context, f soak.ScheduledFault, target string, end time.Time) {
	started := time.Now()
	undo, err := in.apply(ctx, f.Kind, target)
	if err != nil {
		in.fail("%s on %s: %v", f.Kind, target, err)
		return
	}
	in.mu.Lock()
	in.seq++
	id := in.seq
	in.current[id] = f.Kind + " " + target
	in.mu.Unlock()
	in.log("fault %s on %s: started", f.Kind, target)

	t := time.NewTimer(time.Until(end))
	select {
	case <-ctx.Done():
	case <-t.C:
	}
	t.Stop()
	// Ending a fault must not be cut short by the run's end: a replica
	// left dead or a link left cut would spoil the snapshot.
	// An end that fails (the API server it needs is down under another
	// fault, say) is tried again until it works or the bound passes.
	uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 3*time.Minute)
	uerr := undo(uctx)
	for uerr != nil && uctx.Err() == nil {
		in.log("fault %s on %s: ending it: %v; trying again", f.Kind, target, uerr)
		select {
		case <-uctx.Done():
		case <-time.After(2 * time.Second):
			uerr = undo(uctx)
		}
	}
	cancel()
	ended := time.Now()
	in.mu.Lock()
	delete(in.current, id)
	in.done[f.Kind]++
	in.mu.Unlock()
	in.hist.fault(soak.Fault{Kind: f.Kind, Target: target, Start: started, End: ended})
	if uerr != nil {
		in.fail("%s on %s: ending it: %v", f.Kind, target, uerr)
		return
	}
	in.log("fault %s on %s: ended after %s", f.Kind, target, ended.Sub(started).Round(time.Millisecond))
}

func (in *injector) fail(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	in.mu.Lock()
	in.failed = append(in.failed, msg)
	in.mu.Unlock()
	in.log("fault %s", msg)
}

// inForce names the faults in force, for the progress line.
func (in *injector) inForce() string {
	in.mu.Lock()
	defer in.mu.Unlock()
	var out []string
	for _, s := range in.current {
		out = append(out, s)
	}
	if len(out) == 0 {
		return "none"
	}
	sortStrings(out)
	return strings.Join(out, ", ")
}

// apply starts a fault and returns what ends it.
func (in *injector) apply(ctx context.Context, kind, target string) (func(context.Context) error, error) {
	switch kind {
	case soak.FaultReplicaKill:
		cl, n, err := replicaTarget(target)
		if err != nil {
			return nil, err
		}
		if err := in.rig.KillReplica(cl, n); err != nil {
			return nil, err
		}
		return func(ctx context.Context) error { return in.rig.StartReplica(ctx, cl, n) }, nil
	case soak.FaultAPIServerRestart:
		if err := in.rig.StopAPIServer(target); err != nil {
			return nil, err
		}
		return func(ctx context.Context) error { return in.rig.StartAPIServer(ctx, target) }, nil
	case soak.FaultLinkCut, soak.FaultLinkSlow, soak.FaultAnswerLost:
		links, err := in.linksOf(target)
		if err != nil {
			return nil, err
		}
		fault := rig.FaultDown
		switch kind {
		case soak.FaultLinkSlow:
			fault = rig.FaultSlow
		case soak.FaultAnswerLost:
			fault = rig.FaultAnswerLost
		}
		if err := in.setLinks(links, fault, true); err != nil {
			return nil, err
		}
		return func(context.Context) error { return in.setLinks(links, fault, false) }, nil
	case soak.FaultLinkLossy:
		links, err := in.linksOf(target)
		if err != nil {
			return nil, err
		}
		return in.lossy(links), nil
	case soak.FaultSlowRemote:
		if in.rig.Cluster(target) == nil {
			return nil, fmt.Errorf("no cluster %q", target)
		}
		// Every way into the cluster from the others: the remote answers
		// its forwarders slowly, its own callers as before.
		var links []*rig.Proxy
		for _, from := range in.clusters {
			if from != target {
				links = append(links, in.rig.Links().Find(from, target)...)
			}
		}
		if len(links) == 0 {
			links = in.rig.Links().Find(rig.CallersName, target)
		}
		if err := in.setLinks(links, rig.FaultSlow, true); err != nil {
			return nil, err
		}
		return func(context.Context) error { return in.setLinks(links, rig.FaultSlow, false) }, nil
	case soak.FaultSecretRotate:
		if err := in.rig.RotateSecrets(ctx, target); err != nil {
			return nil, err
		}
		return func(context.Context) error { return nil }, nil
	case soak.FaultFleetScale:
		return in.scale(ctx, target)
	}
	return nil, fmt.Errorf("unknown fault kind %q", kind)
}

// linksOf reads FROM->TO: every replica's link from FROM (a cluster or
// "callers") to TO.
func (in *injector) linksOf(target string) ([]*rig.Proxy, error) {
	from, to, ok := strings.Cut(target, "->")
	if !ok {
		return nil, fmt.Errorf("target %q: want FROM->TO (FROM a cluster or %s, TO a cluster)", target, rig.CallersName)
	}
	links := in.rig.Links().Find(from, to)
	if len(links) == 0 {
		return nil, fmt.Errorf("target %q: the rig has no link from %s to %s", target, from, to)
	}
	return links, nil
}

// setLinks switches a fault on or off on links, counting holders: two
// faults that slow one link overlap without the first's end ending both.
func (in *injector) setLinks(links []*rig.Proxy, f rig.Fault, on bool) error {
	in.linkMu.Lock()
	defer in.linkMu.Unlock()
	for _, l := range links {
		k := linkFault{l, f}
		if on {
			in.links[k]++
			if in.links[k] > 1 {
				continue
			}
		} else {
			if in.links[k] == 0 {
				continue
			}
			in.links[k]--
			if in.links[k] > 0 {
				continue
			}
		}
		if err := l.Set(f, on); err != nil {
			return err
		}
	}
	return nil
}

// lossy resets the links' connections for part of every period until
// the returned function ends it.
func (in *injector) lossy(links []*rig.Proxy) func(context.Context) error {
	stop := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		var err error
		defer func() { done <- err }()
		for {
			if err = in.setLinks(links, rig.FaultDown, true); err != nil {
				return
			}
			select {
			case <-stop:
				err = in.setLinks(links, rig.FaultDown, false)
				return
			case <-time.After(lossyOn):
			}
			if err = in.setLinks(links, rig.FaultDown, false); err != nil {
				return
			}
			select {
			case <-stop:
				return
			case <-time.After(lossyPeriod - lossyOn):
			}
		}
	}()
	var once sync.Once
	return func(context.Context) error {
		var err error
		first := false
		once.Do(func() {
			first = true
			close(stop)
			err = <-done
		})
		if !first {
			// Tried again after a failed end: the flapping has stopped;
			// bring the links up.
			err = in.setLinks(links, rig.FaultDown, false)
		}
		return err
	}
}

// scale halves a fleet (CLUSTER or CLUSTER/FLEET; the cluster's first
// fleet by name when none is named) and restores it at the end.
func (in *injector) scale(ctx context.Context, target string) (func(context.Context) error, error) {
	cl, fleet, _ := strings.Cut(target, "/")
	dc := in.dyn[cl]
	if dc == nil {
		return nil, fmt.Errorf("no cluster %q to scale a fleet on", cl)
	}
	fleets := dc.Resource(fleetGVR).Namespace(in.namespace)
	var obj *unstructured.Unstructured
	if fleet == "" {
		list, err := fleets.List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, fmt.Errorf("list fleets: %w", err)
		}
		if len(list.Items) == 0 {
			return nil, fmt.Errorf("cluster %s has no fleet in namespace %s", cl, in.namespace)
		}
		items := list.Items
		sortFleets(items)
		obj = &items[0]
		fleet = obj.GetName()
	} else {
		var err error
		if obj, err = fleets.Get(ctx, fleet, metav1.GetOptions{}); err != nil {
			return nil, fmt.Errorf("fleet %s: %w", fleet, err)
		}
	}
	replicas, _, _ := unstructured.NestedInt64(obj.Object, "spec", "replicas")
	if err := rig.ScaleFleet(ctx, fleets, fleet, int(replicas/2)); err != nil {
		return nil, err
	}
	return func(ctx context.Context) error { return rig.ScaleFleet(ctx, fleets, fleet, int(replicas)) }, nil
}
