package kube

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	coordinformers "k8s.io/client-go/informers/coordination/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
)

// Membership: allocator replicas find each other through coordination.k8s.io
// Leases, as client-go's leader election does, except that nobody leads:
// every replica holds a Lease of its own in the allocator's namespace,
// renews it, and reads the others'. The live Leases, sorted by name, give
// each replica the replica count and its own shard (core.Index.SetReplicaShard),
// so replicas of a plain Deployment prefer different servers without any
// per-pod configuration, and re-shard within seconds when one comes or goes.

// Defaults for MembershipConfig.
const (
	// DefaultLeaseDuration is how long a Lease stays live without renewal:
	// a replica that dies without releasing its Lease (killed, node lost)
	// gives up its shard this long after its last renewal.
	DefaultLeaseDuration = 10 * time.Second
	// DefaultRenewInterval leaves several renewals within one duration, so
	// one slow write does not make a live replica look dead.
	DefaultRenewInterval = 2 * time.Second
	// DefaultMembershipGroup labels the Leases of replicas that share
	// GameServers; replicas with another group ignore them.
	DefaultMembershipGroup = "qm-allocator"
	// GroupLabel is the label on every replica's Lease naming its group.
	GroupLabel = "quartermaster.dev/replica-group"
	// checkEvery is how often the view is recomputed without any Lease
	// event: what notices a Lease that stopped being renewed.
	checkEvery = time.Second
)

// MembershipConfig configures a Membership.
type MembershipConfig struct {
	// REST is the API server connection.
	REST *rest.Config
	// Namespace holds the Leases: the allocator's own (DefaultLeaseNamespace).
	Namespace string
	// Group names the replicas that share servers (GroupLabel); "" means
	// DefaultMembershipGroup.
	Group string
	// Identity is this replica's name (its pod name or hostname); the Lease
	// is named after it plus a random suffix, so a restarted process never
	// takes over the Lease of its previous life.
	Identity string
	// LeaseDuration and RenewInterval; 0 means the defaults.
	LeaseDuration, RenewInterval time.Duration
	Logger                       *slog.Logger
}

// Membership keeps this replica's Lease and tells its Backend the replica
// count and its shard.
type Membership struct {
	cfg     MembershipConfig
	client  kubernetes.Interface
	backend *Backend
	name    string
	log     *slog.Logger

	informer cache.SharedIndexInformer
	nudge    chan struct{}

	mu   sync.Mutex
	seen map[string]leaseSeen // by Lease name: when its renewals were observed
	view View
	// reason is the last failure to create or renew our Lease ("" when it
	// is held), so a lasting failure is logged once, not every interval.
	reason string
	held   *coordinationv1.Lease // our Lease as last written
}

// leaseSeen is what this replica knows of one Lease: its resourceVersion
// and when this replica saw it change. A Lease is live while either its
// renewTime or the moment a renewal was observed is younger than its
// duration: the first lets a starting replica ignore Leases long dead, the
// second keeps replicas whose clocks disagree with ours alive while they
// renew (the reason client-go's leader election uses observed time).
//
// A Lease is deleted as dead only when this replica itself has watched it
// go unrenewed for two durations (since): its renewTime alone says nothing
// certain about a replica whose clock is behind ours.
type leaseSeen struct {
	rv              string
	observed, since time.Time
}

// View is a replica's picture of the membership.
type View struct {
	Shard, Replicas int
	Members         []string // Lease names of the live replicas, sorted (this one included)
}

// DefaultLeaseNamespace is the allocator's own namespace: $POD_NAMESPACE,
// else the service account's namespace file in a pod, else "default".
func DefaultLeaseNamespace() string {
	if ns := os.Getenv("POD_NAMESPACE"); ns != "" {
		return ns
	}
	if b, err := os.ReadFile("/var/run/secrets/kubernetes.io/serviceaccount/namespace"); err == nil {
		if ns := strings.TrimSpace(string(b)); ns != "" {
			return ns
		}
	}
	return "default"
}

// NewMembership prepares b's membership; Run takes part in it.
func NewMembership(cfg MembershipConfig, b *Backend) (*Membership, error) {
	if cfg.REST == nil {
		return nil, errors.New("kube: MembershipConfig.REST is required")
	}
	if b == nil {
		return nil, errors.New("kube: membership needs the Backend whose shard it sets")
	}
	if cfg.Namespace == "" {
		cfg.Namespace = DefaultLeaseNamespace()
	}
	if cfg.Group == "" {
		cfg.Group = DefaultMembershipGroup
	}
	if errs := validLabelValue(cfg.Group); errs != "" {
		return nil, fmt.Errorf("kube: membership group %q: %s", cfg.Group, errs)
	}
	if cfg.LeaseDuration <= 0 {
		cfg.LeaseDuration = DefaultLeaseDuration
	}
	if cfg.RenewInterval <= 0 {
		cfg.RenewInterval = DefaultRenewInterval
	}
	if cfg.RenewInterval >= cfg.LeaseDuration {
		return nil, fmt.Errorf("kube: membership renew interval %s must be shorter than the lease duration %s", cfg.RenewInterval, cfg.LeaseDuration)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	rc := rest.CopyConfig(cfg.REST)
	client, err := kubernetes.NewForConfig(rc)
	if err != nil {
		return nil, fmt.Errorf("kube: membership client: %w", err)
	}
	name, err := leaseName(cfg.Identity)
	if err != nil {
		return nil, err
	}
	m := &Membership{
		cfg: cfg, client: client, backend: b, name: name,
		log:   cfg.Logger.With("lease", name, "lease_namespace", cfg.Namespace),
		nudge: make(chan struct{}, 1),
		seen:  map[string]leaseSeen{},
		view:  View{Shard: 0, Replicas: 1, Members: []string{name}},
	}
	selector := labels.Set{GroupLabel: cfg.Group}.String()
	m.informer = coordinformers.NewFilteredLeaseInformer(client, cfg.Namespace, 0, cache.Indexers{}, func(o *metav1.ListOptions) {
		o.LabelSelector = selector
	})
	if _, err := m.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { m.poke() },
		UpdateFunc: func(_, _ any) { m.poke() },
		DeleteFunc: func(any) { m.poke() },
	}); err != nil {
		return nil, fmt.Errorf("kube: lease informer: %w", err)
	}
	return m, nil
}

// leaseName is identity made into a DNS label, plus a random suffix.
func leaseName(identity string) (string, error) {
	var sb strings.Builder
	for _, r := range strings.ToLower(identity) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '-':
			sb.WriteRune(r)
		default:
			sb.WriteByte('-')
		}
	}
	base := strings.Trim(sb.String(), "-")
	if len(base) > 48 {
		base = strings.Trim(base[:48], "-")
	}
	if base == "" {
		base = "qm-allocator"
	}
	var suffix [4]byte
	if _, err := rand.Read(suffix[:]); err != nil {
		return "", fmt.Errorf("kube: lease name: %w", err)
	}
	return base + "-" + hex.EncodeToString(suffix[:]), nil
}

// validLabelValue says what is wrong with v as a label value ("" if nothing).
func validLabelValue(v string) string {
	if len(v) > 63 {
		return "longer than 63 characters"
	}
	for i, r := range v {
		alnum := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9'
		if !alnum && (i == 0 || i == len(v)-1 || (r != '-' && r != '_' && r != '.')) {
			return "want letters, digits, '-', '_' or '.', starting and ending with a letter or digit"
		}
	}
	return ""
}

func (m *Membership) poke() {
	select {
	case m.nudge <- struct{}{}:
	default:
	}
}

// Name is this replica's Lease name.
func (m *Membership) Name() string { return m.name }

// View returns the membership as this replica sees it now.
func (m *Membership) View() View {
	m.mu.Lock()
	defer m.mu.Unlock()
	v := m.view
	v.Members = slices.Clone(v.Members)
	return v
}

// Run holds this replica's Lease and follows the others' until ctx ends,
// then deletes the Lease, so that the others take over its shard at once
// rather than after its duration. A Lease that cannot be created or renewed
// (RBAC missing, API server down) is retried every renew interval; the
// replica meanwhile goes on with the view it has, and conflicts widen its
// spread where views disagree.
func (m *Membership) Run(ctx context.Context) {
	m.run(ctx, true)
}

func (m *Membership) run(ctx context.Context, release bool) {
	go m.informer.RunWithContext(ctx)
	m.renew(ctx)
	renew := time.NewTicker(m.cfg.RenewInterval)
	defer renew.Stop()
	check := time.NewTicker(checkEvery)
	defer check.Stop()
	for {
		select {
		case <-ctx.Done():
			if release {
				m.release()
			}
			return
		case <-renew.C:
			m.renew(ctx)
		case <-check.C:
		case <-m.nudge:
		}
		if m.informer.HasSynced() {
			m.recompute(time.Now())
		}
	}
}

// renew creates or renews our Lease. One attempt is bounded by the renew
// interval, so a slow API server delays the next attempt (and the view's
// updates, which share the loop) by no more than that.
func (m *Membership) renew(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, m.cfg.RenewInterval)
	defer cancel()
	m.renewOnce(ctx)
}

func (m *Membership) renewOnce(ctx context.Context) {
	now := metav1.NewMicroTime(time.Now())
	m.mu.Lock()
	held := m.held
	m.mu.Unlock()
	var err error
	if held == nil {
		secs := int32(m.cfg.LeaseDuration / time.Second)
		l := &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: m.name, Namespace: m.cfg.Namespace, Labels: map[string]string{
				GroupLabel: m.cfg.Group, "app.kubernetes.io/managed-by": "quartermaster",
			}},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: &m.name, LeaseDurationSeconds: &secs, AcquireTime: &now, RenewTime: &now},
		}
		held, err = m.client.CoordinationV1().Leases(m.cfg.Namespace).Create(ctx, l, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			// Our create went through but its answer was lost: take it.
			held, err = m.client.CoordinationV1().Leases(m.cfg.Namespace).Get(ctx, m.name, metav1.GetOptions{})
		}
	} else {
		l := held.DeepCopy()
		l.Spec.RenewTime = &now
		held, err = m.client.CoordinationV1().Leases(m.cfg.Namespace).Update(ctx, l, metav1.UpdateOptions{})
		switch {
		case apierrors.IsNotFound(err):
			// Someone took it for dead (we were cut off longer than its
			// duration) and cleaned it up: create it again.
			m.setHeld(nil)
			m.renewOnce(ctx)
			return
		case apierrors.IsConflict(err):
			// Only we write our Lease, except a cleanup that lost to us;
			// read it again and renew on the next tick.
			held, err = m.client.CoordinationV1().Leases(m.cfg.Namespace).Get(ctx, m.name, metav1.GetOptions{})
		}
	}
	if err != nil {
		if errors.Is(ctx.Err(), context.Canceled) {
			return // stopping
		}
		m.failed(err)
		return
	}
	m.setHeld(held)
}

func (m *Membership) setHeld(l *coordinationv1.Lease) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.held = l
	if l != nil && m.reason != "" {
		m.log.Info("holding the replica Lease again", "after", m.reason)
		m.reason = ""
	}
}

// failed logs a create or renew failure when its reason is new.
func (m *Membership) failed(err error) {
	reason := Reason(err)
	m.mu.Lock()
	changed := reason != m.reason
	m.reason = reason
	m.mu.Unlock()
	if !changed {
		return
	}
	hint := ""
	if reason == ReasonForbidden {
		hint = "grant get/list/watch/create/update/delete on leases.coordination.k8s.io in this namespace (deploy/allocator.yaml), or give --replicas and --replica-shard"
	}
	m.log.Warn("cannot hold the replica Lease; other replicas will not count this one until it can", "reason", reason, "err", err, "hint", hint)
}

// release deletes our Lease (on a graceful stop).
func (m *Membership) release() {
	m.mu.Lock()
	held := m.held
	m.mu.Unlock()
	if held == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := m.client.CoordinationV1().Leases(m.cfg.Namespace).Delete(ctx, m.name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		m.log.Warn("could not delete the replica Lease; the others will drop it when it expires", "err", err)
		return
	}
	m.log.Info("replica Lease released")
}

// recompute derives the view from the Leases in the informer's store, cleans
// up Leases seen unrenewed for two durations, and tells the backend when the
// view changes.
func (m *Membership) recompute(now time.Time) {
	var live []string
	var dead []*coordinationv1.Lease
	m.mu.Lock()
	present := map[string]bool{}
	for _, obj := range m.informer.GetStore().List() {
		l, ok := obj.(*coordinationv1.Lease)
		if !ok {
			continue
		}
		present[l.Name] = true
		s, known := m.seen[l.Name]
		if !known || s.rv != l.ResourceVersion {
			s = leaseSeen{rv: l.ResourceVersion, observed: now, since: now}
			if !known && l.Spec.RenewTime != nil && l.Spec.RenewTime.Time.Before(now) {
				// First sight: a Lease whose renewal is older than what we
				// just observed counts from its renewal.
				s.observed = l.Spec.RenewTime.Time
			}
			m.seen[l.Name] = s
		}
		dur := m.cfg.LeaseDuration
		if l.Spec.LeaseDurationSeconds != nil && *l.Spec.LeaseDurationSeconds > 0 {
			dur = time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second
		}
		switch {
		case l.Name == m.name || now.Sub(s.observed) < dur:
			live = append(live, l.Name)
		case now.Sub(s.since) > 2*dur && l.DeletionTimestamp == nil:
			dead = append(dead, l)
		}
	}
	for name := range m.seen {
		if !present[name] {
			delete(m.seen, name)
		}
	}
	if !slices.Contains(live, m.name) {
		// Our own Lease may not be written or delivered yet; we take part
		// regardless, and the others count us once they see it.
		live = append(live, m.name)
	}
	slices.Sort(live)
	v := View{Shard: slices.Index(live, m.name), Replicas: len(live), Members: live}
	changed := v.Shard != m.view.Shard || v.Replicas != m.view.Replicas
	old := m.view
	m.view = v
	m.mu.Unlock()

	if changed {
		m.backend.setReplicas(v.Shard, v.Replicas)
		m.log.Info("replicas changed", "replicas", v.Replicas, "shard", v.Shard, "was_replicas", old.Replicas, "was_shard", old.Shard, "members", strings.Join(v.Members, ","))
	}
	for _, l := range dead {
		m.cleanUp(l)
	}
}

// cleanUp deletes the Lease of a replica dead for two durations, on the
// condition that it is still the version we saw (a replica that came back
// meanwhile keeps it). Every replica may try; all but one find it gone.
func (m *Membership) cleanUp(l *coordinationv1.Lease) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rv := l.ResourceVersion
	err := m.client.CoordinationV1().Leases(l.Namespace).Delete(ctx, l.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: &rv}})
	switch {
	case err == nil:
		m.log.Info("deleted the Lease of a replica that stopped renewing it", "dead_lease", l.Name)
	case apierrors.IsNotFound(err), apierrors.IsConflict(err):
	default:
		m.log.Debug("could not delete an expired replica Lease", "dead_lease", l.Name, "err", err)
	}
}
