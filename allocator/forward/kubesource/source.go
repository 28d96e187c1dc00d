// Package kubesource is the kubernetes backend's forward.Source: the
// GameServerAllocationPolicies and connection Secrets of a cluster, read
// through client-go informers, so that a policy edited with kubectl applies
// to the next request without a restart.
//
// Policies are watched in the namespaces the allocator serves (all, or the
// one of --watch-namespace). Secrets are watched one by one, each with a
// field selector on its name, and only while a policy names it: the
// allocator keeps in memory the few Secrets it forwards with, never every
// Secret of a namespace (which would also hold other applications' keys).
package kubesource

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/quartermaster-dev/quartermaster/allocator/forward"
	"github.com/quartermaster-dev/quartermaster/core"
)

// PoliciesResource is the resource of Agones' GameServerAllocationPolicy.
var PoliciesResource = schema.GroupVersionResource{Group: "multicluster.agones.dev", Version: "v1", Resource: "gameserverallocationpolicies"}

// DefaultSecretWait bounds how long a request waits for the first list of
// a Secret that a policy has only just named.
const DefaultSecretWait = 2 * time.Second

// Options configure a Source.
type Options struct {
	REST *rest.Config
	// Namespace is the one namespace to watch; all when empty.
	Namespace string
	Logger    *slog.Logger
	// SecretWait: see DefaultSecretWait.
	SecretWait time.Duration
}

// Source is a forward.Source (and forward.ReadySource and
// forward.SecretExplainer) backed by informers. Start it with Run.
type Source struct {
	log        *slog.Logger
	ns         string
	secretWait time.Duration
	client     kubernetes.Interface
	policies   cache.SharedIndexInformer

	// table is the policies, by namespace, sorted by name; rebuilt from
	// the informer's store on each event. The forwarder decides which of
	// them are in force (their windows) from it.
	table     atomic.Pointer[forward.PolicyTable]
	policyErr atomic.Pointer[string] // the last error listing policies

	mu      sync.Mutex
	ctx     context.Context // Run's; nil before Run
	secrets map[string]*secretWatch
}

// secretWatch is the informer of one Secret, by name.
type secretWatch struct {
	ns, name string
	inf      cache.SharedIndexInformer
	stop     context.CancelFunc
	lastErr  atomic.Pointer[string]
}

// New builds a Source; nothing is read before Run.
func New(o Options) (*Source, error) {
	if o.REST == nil {
		return nil, errors.New("kubesource: no API server configuration")
	}
	dyn, err := dynamic.NewForConfig(o.REST)
	if err != nil {
		return nil, fmt.Errorf("kubesource: %w", err)
	}
	cs, err := kubernetes.NewForConfig(o.REST)
	if err != nil {
		return nil, fmt.Errorf("kubesource: %w", err)
	}
	s := &Source{
		log: o.Logger, ns: o.Namespace, secretWait: o.SecretWait, client: cs,
		secrets: map[string]*secretWatch{},
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.secretWait <= 0 {
		s.secretWait = DefaultSecretWait
	}
	s.table.Store(forward.NewPolicyTable(nil))
	// No resync: every change arrives as an event, and a periodic resync
	// would only rebuild the same table.
	s.policies = dynamicinformer.NewFilteredDynamicInformer(dyn, PoliciesResource, o.Namespace, 0, cache.Indexers{}, nil).Informer()
	_ = s.policies.SetWatchErrorHandlerWithContext(func(ctx context.Context, r *cache.Reflector, err error) {
		msg := describe("listing GameServerAllocationPolicies", err)
		s.policyErr.Store(&msg)
		s.log.Warn("multi-cluster policies: cannot watch", "namespace", nsLabel(o.Namespace), "err", msg)
		cache.DefaultWatchErrorHandler(ctx, r, err)
	})
	_, err = s.policies.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { s.changed(obj, "added") },
		UpdateFunc: func(_, obj any) { s.changed(obj, "updated") },
		DeleteFunc: func(obj any) { s.changed(obj, "deleted") },
	})
	if err != nil {
		return nil, fmt.Errorf("kubesource: %w", err)
	}
	return s, nil
}

func nsLabel(ns string) string {
	if ns == "" {
		return "(all)"
	}
	return ns
}

// describe turns an informer's error into what the operator should check.
func describe(what string, err error) string {
	switch {
	case apierrors.IsForbidden(err):
		return fmt.Sprintf("%s is forbidden to this allocator's account (the RBAC rules in deploy/allocator.yaml grant it): %v", what, err)
	case apierrors.IsNotFound(err):
		return fmt.Sprintf("%s: the API server does not serve the resource (is the GameServerAllocationPolicy CRD installed?): %v", what, err)
	}
	return fmt.Sprintf("%s: %v", what, err)
}

// Run starts the informers; they stop when ctx ends. It does not wait
// for them to list: until the policies are listed, Ready says why not.
func (s *Source) Run(ctx context.Context) {
	s.mu.Lock()
	s.ctx = ctx
	// A Secret asked for before Run waited for it.
	for _, w := range s.secrets {
		go w.inf.RunWithContext(s.childLocked(w))
	}
	s.mu.Unlock()
	go s.policies.RunWithContext(ctx)
}

// WaitForSync waits until the policies have been listed or ctx ends.
func (s *Source) WaitForSync(ctx context.Context) bool {
	return cache.WaitForCacheSync(ctx.Done(), s.policies.HasSynced)
}

// Ready implements forward.ReadySource.
func (s *Source) Ready() error {
	if s.policies.HasSynced() {
		return nil
	}
	if e := s.policyErr.Load(); e != nil {
		return errors.New(*e)
	}
	return errors.New("the GameServerAllocationPolicies are still being listed")
}

// Policies implements forward.Source.
func (s *Source) Policies(namespace string) []core.Policy {
	return s.table.Load().Policies(namespace)
}

// PolicyTable implements forward.Lister.
func (s *Source) PolicyTable() *forward.PolicyTable { return s.table.Load() }

// changed rebuilds the policy table after an event and starts or stops
// Secret watches to match. Events of one informer arrive one at a time.
func (s *Source) changed(obj any, what string) {
	if u, ok := obj.(*unstructured.Unstructured); ok && what != "deleted" {
		// Say what is wrong with a policy once, when it changes: one that
		// cannot be read (a malformed window) is skipped, one with a bad
		// connection is kept and requests that reach it fail with the
		// same words.
		if b, err := json.Marshal(u.Object); err == nil {
			ns, p, err := forward.PolicyFromJSON(b)
			switch {
			case err != nil:
				s.log.Error("multi-cluster policy skipped: it is not used until it is fixed", "policy", u.GetNamespace()+"/"+u.GetName(), "err", err)
			case forward.CheckPolicy(p) != nil:
				s.log.Warn("multi-cluster policy is not usable; requests that reach it will say so", "policy", ns+"/"+u.GetName(), "err", forward.CheckPolicy(p))
			}
		}
	}
	byNS := map[string][]core.Policy{}
	wanted := map[string]bool{}
	for _, o := range s.policies.GetStore().List() {
		u, ok := o.(*unstructured.Unstructured)
		if !ok {
			continue
		}
		b, err := json.Marshal(u.Object)
		if err != nil {
			continue
		}
		ns, p, err := forward.PolicyFromJSON(b)
		if err != nil {
			continue // logged at its own event, above
		}
		byNS[ns] = append(byNS[ns], p)
		if !p.Connection.IsLocal() && p.Connection.SecretName != "" {
			// Agones reads the Secret from the policy's (the request's)
			// namespace.
			wanted[ns+"/"+p.Connection.SecretName] = true
		}
	}
	for _, ps := range byNS {
		sort.Slice(ps, func(i, j int) bool { return ps[i].Name < ps[j].Name })
	}
	s.table.Store(forward.NewPolicyTable(byNS))
	s.reconcileSecrets(wanted)
	n := 0
	for _, ps := range byNS {
		n += len(ps)
	}
	if u, ok := obj.(metav1.Object); ok {
		s.log.Info("multi-cluster policy "+what, "policy", u.GetNamespace()+"/"+u.GetName(), "policies", n, "secrets watched", len(wanted))
	}
}

// reconcileSecrets watches exactly the Secrets in wanted.
func (s *Source) reconcileSecrets(wanted map[string]bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for key, w := range s.secrets {
		if !wanted[key] {
			if w.stop != nil {
				w.stop()
			}
			delete(s.secrets, key)
		}
	}
	for key := range wanted {
		if _, ok := s.secrets[key]; !ok {
			s.watchLocked(key)
		}
	}
}

// watchLocked starts the informer of the Secret namespace/name (key).
func (s *Source) watchLocked(key string) *secretWatch {
	ns, name, _ := cache.SplitMetaNamespaceKey(key)
	w := &secretWatch{ns: ns, name: name}
	sel := fields.OneTermEqualSelector("metadata.name", name).String()
	secrets := s.client.CoreV1().Secrets(ns)
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = sel
			return secrets.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = sel
			return secrets.Watch(ctx, o)
		},
	}
	w.inf = cache.NewSharedIndexInformer(lw, &corev1.Secret{}, 0, cache.Indexers{})
	// Only the data and version are used; managed fields and annotations
	// (kubectl's last-applied copy holds the key again) are dropped.
	_ = w.inf.SetTransform(func(o any) (any, error) {
		if sec, ok := o.(*corev1.Secret); ok {
			sec.ManagedFields = nil
			sec.Annotations = nil
		}
		return o, nil
	})
	_ = w.inf.SetWatchErrorHandlerWithContext(func(ctx context.Context, r *cache.Reflector, err error) {
		msg := describe("reading Secret "+key, err)
		if apierrors.IsForbidden(err) {
			msg += fmt.Sprintf("; bind the ClusterRole qm-allocator-remote-certs to the allocator's ServiceAccount in namespace %q (a RoleBinding, as deploy/allocator.yaml does for default)", ns)
		}
		w.lastErr.Store(&msg)
		s.log.Warn("multi-cluster connection Secret: cannot watch", "secret", key, "err", msg)
		cache.DefaultWatchErrorHandler(ctx, r, err)
	})
	s.secrets[key] = w
	if s.ctx != nil {
		go w.inf.RunWithContext(s.childLocked(w))
	}
	return w
}

func (s *Source) childLocked(w *secretWatch) context.Context {
	ctx, cancel := context.WithCancel(s.ctx)
	w.stop = cancel
	return ctx
}

// Secret implements forward.Source. A Secret that a policy has only just
// named may not be listed yet: the call waits for that, at most SecretWait.
func (s *Source) Secret(namespace, name string) (forward.Secret, bool) {
	key := namespace + "/" + name
	s.mu.Lock()
	w := s.secrets[key]
	if w == nil {
		// A policy naming it arrived between the request's read of the
		// policies and now; the next event would start it anyway.
		w = s.watchLocked(key)
	}
	running := s.ctx != nil
	s.mu.Unlock()
	if !running {
		return forward.Secret{}, false
	}
	if !w.inf.HasSynced() {
		ctx, cancel := context.WithTimeout(context.Background(), s.secretWait)
		cache.WaitForCacheSync(ctx.Done(), w.inf.HasSynced)
		cancel()
	}
	o, ok, err := w.inf.GetStore().GetByKey(key)
	if err != nil || !ok {
		return forward.Secret{}, false
	}
	sec, ok := o.(*corev1.Secret)
	if !ok {
		return forward.Secret{}, false
	}
	return forward.Secret{Namespace: namespace, Name: name, Data: sec.Data, Version: sec.ResourceVersion}, true
}

// SecretError implements forward.SecretExplainer.
func (s *Source) SecretError(namespace, name string) error {
	key := namespace + "/" + name
	s.mu.Lock()
	w := s.secrets[key]
	s.mu.Unlock()
	if w == nil {
		return nil
	}
	if !w.inf.HasSynced() {
		if e := w.lastErr.Load(); e != nil {
			return errors.New(*e)
		}
		return fmt.Errorf("not listed yet after %v", s.secretWait)
	}
	return nil
}

// WatchedSecrets returns the keys (namespace/name) of the Secrets being
// watched, sorted: those the policies name.
func (s *Source) WatchedSecrets() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, 0, len(s.secrets))
	for k := range s.secrets {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
