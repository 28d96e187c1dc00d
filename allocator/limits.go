package allocator

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"golang.org/x/time/rate"
	"sigs.k8s.io/yaml"

	"github.com/quartermaster-dev/quartermaster/core"
)

// LimitsAPIVersion and LimitsKind identify a limits file.
const (
	LimitsAPIVersion = "quartermaster.dev/v1alpha1"
	LimitsKind       = "AllocatorLimits"
)

// LimitsConfig is the limits file: who may allocate, where, how much and
// how fast. Identities are the callers' certificate identities (URI SAN,
// else CN).
//
//	apiVersion: quartermaster.dev/v1alpha1
//	kind: AllocatorLimits
//	default:                    # identities not listed; omit to refuse them
//	  namespaces: [default]
//	  maxAllocations: 1         # seed 004's "one instance per user"
//	  requestsPerSecond: 5
//	  templates: [private-match] # may Create from these (see TemplatesConfig)
//	identities:
//	  matchmaker:
//	    namespaces: ["*"]
//	    requestsPerSecond: 2000
//	    burst: 4000
//	  ops:
//	    admin: true
//	    clientCA: ops-ca.crt    # only certificates from this CA file may be "ops"
type LimitsConfig struct {
	APIVersion string                    `json:"apiVersion"`
	Kind       string                    `json:"kind"`
	Default    *IdentityLimits           `json:"default,omitempty"`
	Identities map[string]IdentityLimits `json:"identities,omitempty"`
}

// IdentityLimits are one identity's rights. Zero values mean "no limit".
type IdentityLimits struct {
	// Namespaces it may allocate in; "*" (or an empty list) for any.
	Namespaces []string `json:"namespaces,omitempty"`
	// MaxAllocations is how many allocations it may hold at once; 0 for
	// no limit.
	MaxAllocations int `json:"maxAllocations,omitempty"`
	// RequestsPerSecond is its sustained allocation request rate; 0 for
	// no limit. Burst is how many it may send at once (RequestsPerSecond,
	// at least 1, when 0).
	RequestsPerSecond float64 `json:"requestsPerSecond,omitempty"`
	Burst             int     `json:"burst,omitempty"`
	// Admin may list and release every identity's allocations.
	Admin bool `json:"admin,omitempty"`
	// Templates it may create game servers from (the AllocationAdmin
	// API's Create); "*" for any, none when empty. Created servers count
	// against MaxAllocations.
	Templates []string `json:"templates,omitempty"`
	// ClientCA, when set, is the file in the client CA directory (a base
	// name such as "ops-ca.crt") whose CA must have issued the identity's
	// certificate: another trusted CA cannot mint it. On default it binds
	// every identity not listed. Enforced by mtls.Server (see
	// ClientCABindings).
	ClientCA string `json:"clientCA,omitempty"`
}

// ClientCABindings returns the clientCA settings for
// mtls.Server.SetClientCABindings: listed identities' files, and the
// default's for everyone else.
func (c *LimitsConfig) ClientCABindings() (byIdentity map[string]string, fallback string) {
	if c == nil {
		return nil, ""
	}
	byIdentity = map[string]string{}
	for id, l := range c.Identities {
		byIdentity[id] = l.ClientCA
	}
	if c.Default != nil {
		fallback = c.Default.ClientCA
	}
	return byIdentity, fallback
}

// LoadLimits reads and validates a limits file.
func LoadLimits(path string) (*LimitsConfig, error) {
	f, err := OpenLimitsFile(path)
	if err != nil {
		return nil, err
	}
	return f.Config, nil
}

// LimitsFile is a limits file and what was last read from it.
type LimitsFile struct {
	path string
	last []byte
	// Config is the file's limits as last read.
	Config *LimitsConfig
}

// OpenLimitsFile reads and validates a limits file.
func OpenLimitsFile(path string) (*LimitsFile, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	c, err := ParseLimits(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return &LimitsFile{path: path, last: b, Config: c}, nil
}

// Watch re-reads the file every interval until ctx ends, and calls apply
// with its limits each time its content changes, so limits can be edited
// (or a ConfigMap updated) without a restart. A file that cannot be read
// or does not validate is logged and the limits in force stay.
func (f *LimitsFile) Watch(ctx context.Context, interval time.Duration, log *slog.Logger, apply func(*LimitsConfig)) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		b, err := os.ReadFile(f.path)
		if err != nil {
			log.Error("limits file unreadable; keeping the limits in force", "path", f.path, "err", err)
			continue
		}
		if bytes.Equal(b, f.last) {
			continue
		}
		f.last = b
		c, err := ParseLimits(b)
		if err != nil {
			log.Error("limits file invalid; keeping the limits in force", "path", f.path, "err", err)
			continue
		}
		f.Config = c
		apply(c)
		log.Info("limits reloaded", "path", f.path, "identities", len(c.Identities), "default", c.Default != nil)
	}
}

// ParseLimits decodes a limits file strictly (a misspelt key is an error,
// not a silently missing limit) and validates it.
func ParseLimits(data []byte) (*LimitsConfig, error) {
	j, err := yaml.YAMLToJSON(data)
	if err != nil {
		return nil, fmt.Errorf("not valid YAML: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(j))
	dec.DisallowUnknownFields()
	var c LimitsConfig
	if err := dec.Decode(&c); err != nil {
		return nil, fmt.Errorf("decoding limits: %w", err)
	}
	var errs []string
	if c.APIVersion != LimitsAPIVersion {
		errs = append(errs, fmt.Sprintf("apiVersion: is %q, want %q", c.APIVersion, LimitsAPIVersion))
	}
	if c.Kind != LimitsKind {
		errs = append(errs, fmt.Sprintf("kind: is %q, want %q", c.Kind, LimitsKind))
	}
	check := func(field string, l IdentityLimits) {
		if l.MaxAllocations < 0 {
			errs = append(errs, field+".maxAllocations: must not be negative")
		}
		if l.RequestsPerSecond < 0 {
			errs = append(errs, field+".requestsPerSecond: must not be negative")
		}
		if l.Burst < 0 {
			errs = append(errs, field+".burst: must not be negative")
		}
		if ca := l.ClientCA; ca != "" && (strings.ContainsAny(ca, `/\`) || strings.HasPrefix(ca, ".") ||
			!(strings.HasSuffix(ca, ".crt") || strings.HasSuffix(ca, ".pem"))) {
			errs = append(errs, fmt.Sprintf("%s.clientCA: %q is not the name of a *.crt or *.pem file in the client CA directory", field, ca))
		}
		for i, t := range l.Templates {
			if t != "*" && !dnsLabel.MatchString(t) {
				errs = append(errs, fmt.Sprintf("%s.templates[%d]: %q is not a template name or \"*\"", field, i, t))
			}
		}
		for i, ns := range l.Namespaces {
			if ns == "*" {
				continue
			}
			if _, err := core.Normalize(&core.Request{Namespace: ns}); err != nil || ns == "" {
				errs = append(errs, fmt.Sprintf("%s.namespaces[%d]: %q is not a namespace name or \"*\"", field, i, ns))
			}
		}
	}
	if c.Default != nil {
		check("default", *c.Default)
	}
	ids := make([]string, 0, len(c.Identities))
	for id := range c.Identities {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	for _, id := range ids {
		if id == "" {
			errs = append(errs, "identities: an identity name is empty")
		}
		check(fmt.Sprintf("identities[%q]", id), c.Identities[id])
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("invalid limits: %s", strings.Join(errs, "; "))
	}
	return &c, nil
}

// limiter enforces a LimitsConfig. A nil *limiter allows everything and
// makes nobody an admin: the behaviour without a limits file.
type limiter struct {
	cfg *LimitsConfig
	mu  sync.Mutex
	ids map[string]*holder
}

// holder is one identity's live state.
type holder struct {
	limits IdentityLimits
	anyNS  bool
	ns     map[string]bool
	rate   *rate.Limiter // nil: no rate limit

	mu      sync.Mutex
	pending int // allocations under way
}

func newLimiter(cfg *LimitsConfig) *limiter {
	if cfg == nil {
		return nil
	}
	return &limiter{cfg: cfg, ids: map[string]*holder{}}
}

// maxTrackedIdentities bounds the holders made from the default limits, so
// many distinct certificates cannot grow memory without end.
const maxTrackedIdentities = 100000

// holderFor returns identity's state, or nil when the identity may not
// allocate at all.
func (l *limiter) holderFor(identity string) *holder {
	l.mu.Lock()
	defer l.mu.Unlock()
	if h := l.ids[identity]; h != nil {
		return h
	}
	lim, ok := l.cfg.Identities[identity]
	if !ok {
		if l.cfg.Default == nil || len(l.ids) >= maxTrackedIdentities {
			return nil
		}
		lim = *l.cfg.Default
	}
	h := &holder{limits: lim}
	h.anyNS = len(lim.Namespaces) == 0
	h.ns = map[string]bool{}
	for _, ns := range lim.Namespaces {
		if ns == "*" {
			h.anyNS = true
		}
		h.ns[ns] = true
	}
	if lim.RequestsPerSecond > 0 {
		burst := lim.Burst
		if burst == 0 {
			burst = max(int(lim.RequestsPerSecond), 1)
		}
		h.rate = rate.NewLimiter(rate.Limit(lim.RequestsPerSecond), burst)
	}
	l.ids[identity] = h
	return h
}

// isAdmin reports whether identity may see and release everyone's
// allocations.
func (l *limiter) isAdmin(identity string) bool {
	if l == nil {
		return false
	}
	if lim, ok := l.cfg.Identities[identity]; ok {
		return lim.Admin
	}
	return l.cfg.Default != nil && l.cfg.Default.Admin
}

// limitError is a refusal by the limits: the code to answer with and why.
type limitError struct {
	permission bool // PermissionDenied; otherwise ResourceExhausted
	reason     string
	msg        string
}

func (e *limitError) Error() string { return e.msg }

// admit checks identity's rights for one allocation in namespace and, when
// it passes, reserves a place among its allocations. The returned holder
// (nil when nothing is tracked) must be given to done.
func (l *limiter) admit(identity, namespace string, now time.Time, b Backend) (*holder, error) {
	if l == nil {
		return nil, nil
	}
	h := l.holderFor(identity)
	if h == nil {
		return nil, &limitError{permission: true, reason: "unknown_identity",
			msg: fmt.Sprintf("identity %q may not allocate: it is not listed in the allocator's limits and there is no default", identity)}
	}
	if !h.anyNS && !h.ns[namespace] {
		return nil, &limitError{permission: true, reason: "namespace",
			msg: fmt.Sprintf("identity %q may not allocate in namespace %q (allowed: %s)", identity, namespace, strings.Join(h.limits.Namespaces, ", "))}
	}
	if h.rate != nil && !h.rate.AllowN(now, 1) {
		return nil, &limitError{reason: "rate",
			msg: fmt.Sprintf("identity %q is over its request rate of %g/s (burst %d); retry later", identity, h.limits.RequestsPerSecond, h.rate.Burst())}
	}
	max := h.limits.MaxAllocations
	if max == 0 {
		return nil, nil
	}
	// What the identity holds is counted from the backend's servers (their
	// owner annotations), not from this process's memory: allocations made
	// through other replicas, or before a restart, count too.
	h.mu.Lock()
	defer h.mu.Unlock()
	if n := b.CountAllocatedTo(identity) + h.pending; n >= max {
		return nil, &limitError{reason: "max_allocations",
			msg: fmt.Sprintf("identity %q already holds %d of its %d allowed allocations%s; release (or destroy) one first", identity, n, max, heldNames(b, identity))}
	}
	h.pending++
	return h, nil
}

// done ends a reservation from admit. The allocation made, if any, is in
// the backend's count by now (the index takes a commit before answering).
func (h *holder) done() {
	if h == nil {
		return
	}
	h.mu.Lock()
	h.pending--
	h.mu.Unlock()
}

// heldNames names (some of) what identity holds, for the refusal at its
// limit: " (default/a, default/b)". It is only asked when refusing.
func heldNames(b Backend, identity string) string {
	const most = 3
	held := b.AllocatedTo(identity)
	if len(held) == 0 {
		return ""
	}
	names := make([]string, 0, most+1)
	for _, gs := range held {
		names = append(names, gs.Namespace+"/"+gs.Name)
	}
	sort.Strings(names)
	if len(names) > most {
		names = append(names[:most], fmt.Sprintf("and %d more", len(held)-most))
	}
	return " (" + strings.Join(names, ", ") + ")"
}
