package forward

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/quartermaster-dev/quartermaster/core"
)

// The objects a policies file holds, as a cluster stores them.
const (
	PolicyAPIVersion = "multicluster.agones.dev/v1"
	PolicyKind       = "GameServerAllocationPolicy"
	SecretAPIVersion = "v1"
	SecretKind       = "Secret"
)

// Keys of a connection Secret, as Agones reads them.
const (
	SecretCertKey = "tls.crt"
	SecretKeyKey  = "tls.key"
	SecretCAKey   = "ca.crt"
)

// DefaultPort is the port of an allocation endpoint given without one,
// Agones' allocator Service port.
const DefaultPort = "443"

// Source gives the forwarder the policies and Secrets in force. Both
// answers are read per request, so a Source that changes (a reloaded
// file, an informer) applies to the requests that start after the change.
type Source interface {
	// Policies returns the policies of namespace, in a stable order.
	Policies(namespace string) []core.Policy
	// Secret returns the Secret namespace/name, if there is one.
	Secret(namespace, name string) (Secret, bool)
}

// ReadySource is a Source that can be not ready yet (an informer before
// its first list). The forwarder answers Unavailable with Ready's error
// rather than "no policy matches" while it is not.
type ReadySource interface {
	Source
	Ready() error
}

// SecretExplainer is a Source that can say why a Secret is missing (for
// example, that reading it is forbidden), for the caller's error.
type SecretExplainer interface {
	Source
	// SecretError returns why Secret(namespace, name) found nothing, or
	// nil when it simply does not exist.
	SecretError(namespace, name string) error
}

// Secret is a connection Secret: the client certificate and key a
// forwarder presents (tls.crt, tls.key) and optionally the CA it trusts
// for the remote server (ca.crt).
type Secret struct {
	Namespace, Name string
	Data            map[string][]byte
	// Version changes whenever Data does; clients are cached per
	// (endpoint, Version), so a rotated Secret gets a new client.
	Version string
}

// SecretVersion is a digest of a Secret's data, used as its version where
// no resourceVersion is at hand (files).
func SecretVersion(data map[string][]byte) string {
	keys := make([]string, 0, len(data))
	for k := range data {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	h := sha256.New()
	for _, k := range keys {
		fmt.Fprintf(h, "%d:%s%d:", len(k), k, len(data[k]))
		h.Write(data[k])
	}
	return hex.EncodeToString(h.Sum(nil)[:12])
}

// Set is a fixed collection of policies and Secrets: what one read of a
// policies file gave. It is a Source.
type Set struct {
	policies map[string][]core.Policy // by namespace, in file order
	secrets  map[string]Secret        // by namespace/name
	table    *PolicyTable             // policies, for Lister
}

// NewSet builds a Set from policies (by namespace) and Secrets, for
// callers that hold the objects already.
func NewSet(policies map[string][]core.Policy, secrets []Secret) *Set {
	s := &Set{policies: map[string][]core.Policy{}, secrets: map[string]Secret{}}
	s.table = NewPolicyTable(s.policies)
	for ns, ps := range policies {
		s.policies[ns] = append([]core.Policy(nil), ps...)
	}
	for _, sec := range secrets {
		if sec.Version == "" {
			sec.Version = SecretVersion(sec.Data)
		}
		s.secrets[sec.Namespace+"/"+sec.Name] = sec
	}
	return s
}

// Policies implements Source.
func (s *Set) Policies(namespace string) []core.Policy {
	if s == nil {
		return nil
	}
	return s.policies[namespace]
}

// PolicyTable implements Lister.
func (s *Set) PolicyTable() *PolicyTable {
	if s == nil || s.table == nil {
		return emptyTable
	}
	return s.table
}

// Secret implements Source.
func (s *Set) Secret(namespace, name string) (Secret, bool) {
	if s == nil {
		return Secret{}, false
	}
	sec, ok := s.secrets[namespace+"/"+name]
	return sec, ok
}

// Counts reports how many policies and Secrets the set holds.
func (s *Set) Counts() (policies, secrets int) {
	for _, ps := range s.policies {
		policies += len(ps)
	}
	return policies, len(s.secrets)
}

// Store is a Source whose Set can be replaced while requests read it.
type Store struct{ cur atomic.Pointer[Set] }

// NewStore returns a Store holding set.
func NewStore(set *Set) *Store {
	s := &Store{}
	s.cur.Store(set)
	return s
}

// Replace makes set the one in force for requests that start from now on.
func (s *Store) Replace(set *Set) { s.cur.Store(set) }

// Policies implements Source.
func (s *Store) Policies(namespace string) []core.Policy { return s.cur.Load().Policies(namespace) }

// PolicyTable implements Lister: the table of the Set in force.
func (s *Store) PolicyTable() *PolicyTable { return s.cur.Load().PolicyTable() }

// Secret implements Source.
func (s *Store) Secret(namespace, name string) (Secret, bool) {
	return s.cur.Load().Secret(namespace, name)
}

// objectMeta is the part of Kubernetes' ObjectMeta a policies file may
// carry. Fields that a manifest exported from a cluster has but that mean
// nothing here are accepted and ignored, so `kubectl get -o yaml` output
// loads; anything else is an error, so that a misspelt key is never
// silently dropped.
type objectMeta struct {
	Name              string            `json:"name"`
	Namespace         string            `json:"namespace,omitempty"`
	Labels            map[string]string `json:"labels,omitempty"`
	Annotations       map[string]string `json:"annotations,omitempty"`
	UID               json.RawMessage   `json:"uid,omitempty"`
	ResourceVersion   json.RawMessage   `json:"resourceVersion,omitempty"`
	Generation        json.RawMessage   `json:"generation,omitempty"`
	CreationTimestamp json.RawMessage   `json:"creationTimestamp,omitempty"`
	ManagedFields     json.RawMessage   `json:"managedFields,omitempty"`
}

type policyObject struct {
	APIVersion string          `json:"apiVersion"`
	Kind       string          `json:"kind"`
	Metadata   objectMeta      `json:"metadata"`
	Spec       policySpec      `json:"spec"`
	Status     json.RawMessage `json:"status,omitempty"`
}

// policySpec is Agones' GameServerAllocationPolicySpec.
type policySpec struct {
	Priority       int32          `json:"priority"`
	Weight         int            `json:"weight"`
	ConnectionInfo connectionInfo `json:"connectionInfo"`
}

type connectionInfo struct {
	ClusterName         string   `json:"clusterName"`
	AllocationEndpoints []string `json:"allocationEndpoints,omitempty"`
	SecretName          string   `json:"secretName,omitempty"`
	Namespace           string   `json:"namespace,omitempty"`
	// ServerCA is PEM, base64 in YAML and JSON as Kubernetes writes []byte.
	ServerCA []byte `json:"serverCa,omitempty"`
}

type secretObject struct {
	APIVersion string            `json:"apiVersion"`
	Kind       string            `json:"kind"`
	Metadata   objectMeta        `json:"metadata"`
	Type       string            `json:"type,omitempty"`
	Immutable  *bool             `json:"immutable,omitempty"`
	Data       map[string][]byte `json:"data,omitempty"`
	StringData map[string]string `json:"stringData,omitempty"`
}

type typeMeta struct {
	APIVersion string            `json:"apiVersion"`
	Kind       string            `json:"kind"`
	Items      []json.RawMessage `json:"items"`
}

// LoadPolicies reads a policies file, or every *.yaml, *.yml and *.json
// file of a directory (not its subdirectories, in name order), into a Set.
// An error names the file, the object and the field.
func LoadPolicies(path string) (*Set, error) {
	files, err := readPolicyFiles(path)
	if err != nil {
		return nil, err
	}
	return parseFiles(files)
}

type namedFile struct {
	name string
	data []byte
}

func readPolicyFiles(path string) ([]namedFile, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("policies: %w", err)
	}
	if !st.IsDir() {
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("policies: %w", err)
		}
		return []namedFile{{path, b}}, nil
	}
	entries, err := os.ReadDir(path)
	if err != nil {
		return nil, fmt.Errorf("policies: %w", err)
	}
	var out []namedFile
	for _, e := range entries {
		n := e.Name()
		// Kubernetes mounts ConfigMaps and Secrets through ..data
		// symlinks and dot-directories; only the visible files count.
		if strings.HasPrefix(n, ".") || e.IsDir() {
			continue
		}
		switch strings.ToLower(filepath.Ext(n)) {
		case ".yaml", ".yml", ".json":
		default:
			continue
		}
		full := filepath.Join(path, n)
		b, err := os.ReadFile(full)
		if err != nil {
			return nil, fmt.Errorf("policies: %w", err)
		}
		if fi, err := os.Stat(full); err == nil && fi.IsDir() {
			continue
		}
		out = append(out, namedFile{full, b})
	}
	return out, nil
}

// ParsePolicies decodes one policies file: YAML documents separated by
// "---", each a GameServerAllocationPolicy, a Secret, a v1 List of them,
// or a YAML sequence of them. name is used in errors.
func ParsePolicies(name string, data []byte) (*Set, error) {
	return parseFiles([]namedFile{{name, data}})
}

func parseFiles(files []namedFile) (*Set, error) {
	s := &Set{policies: map[string][]core.Policy{}, secrets: map[string]Secret{}}
	s.table = NewPolicyTable(s.policies)
	seenPolicy := map[string]string{} // namespace/name → where
	secretAt := map[string]string{}   // namespace/name → where
	var errs []string
	for _, f := range files {
		docs, err := splitDocuments(f.data)
		if err != nil {
			errs = append(errs, fmt.Sprintf("%s: %v", f.name, err))
			continue
		}
		for di, doc := range docs {
			objs, err := objectsOf(doc)
			where := fmt.Sprintf("%s: document %d", f.name, di+1)
			if err != nil {
				errs = append(errs, fmt.Sprintf("%s: %v", where, err))
				continue
			}
			for oi, obj := range objs {
				w := where
				if len(objs) > 1 {
					w += fmt.Sprintf(", item %d", oi+1)
				}
				if err := s.add(obj, w, seenPolicy, secretAt); err != nil {
					errs = append(errs, err.Error())
				}
			}
		}
	}
	errs = append(errs, s.checkSecrets(secretAt)...)
	if len(errs) > 0 {
		return nil, fmt.Errorf("invalid policies: %s", strings.Join(errs, "; "))
	}
	return s, nil
}

// splitDocuments returns the non-empty YAML documents of data as JSON.
func splitDocuments(data []byte) ([][]byte, error) {
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var out [][]byte
	for n := 1; ; n++ {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", n, err)
		}
		j, err := yaml.YAMLToJSON(doc)
		if err != nil {
			return nil, fmt.Errorf("document %d: not valid YAML: %w", n, err)
		}
		if t := bytes.TrimSpace(j); len(t) == 0 || string(t) == "null" {
			continue
		}
		out = append(out, j)
	}
}

// objectsOf returns the objects in one document: itself, the items of a
// List, or the elements of a sequence.
func objectsOf(doc []byte) ([]json.RawMessage, error) {
	doc = bytes.TrimSpace(doc)
	if len(doc) > 0 && doc[0] == '[' {
		var items []json.RawMessage
		if err := json.Unmarshal(doc, &items); err != nil {
			return nil, err
		}
		return items, nil
	}
	var tm typeMeta
	if err := json.Unmarshal(doc, &tm); err != nil {
		return nil, fmt.Errorf("not an object: %w", err)
	}
	if tm.Kind == "List" {
		if tm.APIVersion != "v1" {
			return nil, fmt.Errorf("apiVersion: a List is v1, got %q", tm.APIVersion)
		}
		// A List holds items and nothing else worth reading; its own
		// metadata (resourceVersion from kubectl) is ignored.
		return tm.Items, nil
	}
	return []json.RawMessage{doc}, nil
}

func strictDecode(data []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	return nil
}

// checkSecrets checks the key material of every Secret in the set, so that
// a file whose client certificate cannot be used is refused when it is
// read rather than failing each request forwarded with it. An error names
// where the Secret is, the clusters whose policies use it, and the field.
func (s *Set) checkSecrets(where map[string]string) []string {
	users := map[string][]string{} // namespace/name → cluster names
	for ns, ps := range s.policies {
		for _, p := range ps {
			if p.Connection.SecretName != "" && !p.Connection.IsLocal() {
				k := ns + "/" + p.Connection.SecretName
				users[k] = append(users[k], p.Connection.ClusterName)
			}
		}
	}
	keys := make([]string, 0, len(s.secrets))
	for k := range s.secrets {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var errs []string
	for _, k := range keys {
		err := CheckSecret(s.secrets[k])
		if err == nil {
			continue
		}
		what := "Secret " + k
		if cs := users[k]; len(cs) > 0 {
			sort.Strings(cs)
			what += ", for cluster " + strings.Join(slices.Compact(cs), ", ")
		}
		errs = append(errs, fmt.Sprintf("%s (%s): %v", where[k], what, err))
	}
	return errs
}

// CheckSecret reports what in a connection Secret's key material cannot be
// used, naming the field: tls.crt and tls.key must be a PEM certificate
// and the PEM private key that goes with it, and ca.crt, when given, must
// hold PEM certificates.
func CheckSecret(sec Secret) error {
	var errs []string
	field := func(k string) string { return fmt.Sprintf("data[%q]", k) }
	crt, key := sec.Data[SecretCertKey], sec.Data[SecretKeyKey]
	pairOK := true
	if msg := pemProblem(crt, "CERTIFICATE", "a PEM certificate (the client certificate)"); msg != "" {
		errs = append(errs, field(SecretCertKey)+": "+msg)
		pairOK = false
	}
	if msg := pemProblem(key, "PRIVATE KEY", "a PEM private key (the client certificate's key)"); msg != "" {
		errs = append(errs, field(SecretKeyKey)+": "+msg)
		pairOK = false
	}
	if pairOK {
		if _, err := tls.X509KeyPair(crt, key); err != nil {
			errs = append(errs, field(SecretCertKey)+" and "+field(SecretKeyKey)+": "+err.Error())
		}
	}
	if ca, ok := sec.Data[SecretCAKey]; ok && !x509.NewCertPool().AppendCertsFromPEM(ca) {
		errs = append(errs, field(SecretCAKey)+": holds no PEM certificate")
	}
	if len(errs) > 0 {
		return errors.New(strings.Join(errs, ", "))
	}
	return nil
}

// pemProblem says why data does not hold a PEM block whose type ends in
// kind, or "" when it does.
func pemProblem(data []byte, kind, want string) string {
	if len(bytes.TrimSpace(data)) == 0 {
		return "missing: want " + want
	}
	var types []string
	for rest := data; ; {
		var b *pem.Block
		b, rest = pem.Decode(rest)
		if b == nil {
			break
		}
		if strings.HasSuffix(b.Type, kind) {
			return ""
		}
		types = append(types, b.Type)
	}
	if len(types) == 0 {
		return "not PEM: want " + want
	}
	return fmt.Sprintf("holds %s, want %s", strings.Join(types, ", "), want)
}

func (s *Set) add(obj json.RawMessage, where string, seen, secretAt map[string]string) error {
	var tm typeMeta
	if err := json.Unmarshal(obj, &tm); err != nil {
		return fmt.Errorf("%s: not an object: %v", where, err)
	}
	switch {
	case tm.Kind == PolicyKind && tm.APIVersion == PolicyAPIVersion:
		var po policyObject
		if err := strictDecode(obj, &po); err != nil {
			return fmt.Errorf("%s (%s %q): %v", where, PolicyKind, tm.nameOf(obj), err)
		}
		ns := po.Metadata.Namespace
		if ns == "" {
			ns = core.DefaultNamespace
		}
		what := fmt.Sprintf("%s (%s %s/%s)", where, PolicyKind, ns, po.Metadata.Name)
		p, err := policyOf(po)
		var errs []string
		if err != nil {
			errs = append(errs, err.Error())
		}
		if err := checkName(po.Metadata.Name); err != "" {
			errs = append(errs, "metadata.name: "+err)
		}
		if err := checkName(ns); err != "" {
			errs = append(errs, "metadata.namespace: "+err)
		}
		if err := CheckPolicy(p); err != nil {
			errs = append(errs, err.Error())
		}
		if len(errs) > 0 {
			return fmt.Errorf("%s: %s", what, strings.Join(errs, ", "))
		}
		key := ns + "/" + p.Name
		if prev, dup := seen[key]; dup {
			return fmt.Errorf("%s: a policy of that name is already defined at %s", what, prev)
		}
		seen[key] = where
		s.policies[ns] = append(s.policies[ns], p)
		return nil
	case tm.Kind == SecretKind && tm.APIVersion == SecretAPIVersion:
		var so secretObject
		if err := strictDecode(obj, &so); err != nil {
			return fmt.Errorf("%s (Secret %q): %v", where, tm.nameOf(obj), err)
		}
		ns := so.Metadata.Namespace
		if ns == "" {
			ns = core.DefaultNamespace
		}
		what := fmt.Sprintf("%s (Secret %s/%s)", where, ns, so.Metadata.Name)
		if err := checkName(so.Metadata.Name); err != "" {
			return fmt.Errorf("%s: metadata.name: %s", what, err)
		}
		if err := checkName(ns); err != "" {
			return fmt.Errorf("%s: metadata.namespace: %s", what, err)
		}
		// stringData wins over data, as the API server merges them.
		data := map[string][]byte{}
		for k, v := range so.Data {
			data[k] = v
		}
		for k, v := range so.StringData {
			data[k] = []byte(v)
		}
		key := ns + "/" + so.Metadata.Name
		if _, dup := s.secrets[key]; dup {
			return fmt.Errorf("%s: a Secret of that name is already defined", what)
		}
		s.secrets[key] = Secret{Namespace: ns, Name: so.Metadata.Name, Data: data, Version: SecretVersion(data)}
		secretAt[key] = where
		return nil
	}
	return fmt.Errorf("%s: apiVersion %q kind %q: want apiVersion %s kind %s, or apiVersion %s kind %s",
		where, tm.APIVersion, tm.Kind, PolicyAPIVersion, PolicyKind, SecretAPIVersion, SecretKind)
}

// nameOf digs the metadata.name out of an object that failed to decode,
// for the error message.
func (typeMeta) nameOf(obj json.RawMessage) string {
	var m struct {
		Metadata struct {
			Name string `json:"name"`
		} `json:"metadata"`
	}
	_ = json.Unmarshal(obj, &m)
	return m.Metadata.Name
}

// checkName reports why s is not a Kubernetes object name (a DNS-1123
// subdomain), or "" when it is one.
func checkName(s string) string {
	if s == "" {
		return "must not be empty"
	}
	if len(s) > 253 {
		return "longer than 253 characters"
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		ok := c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '.'
		if !ok {
			return fmt.Sprintf("%q: only lower-case letters, digits, '-' and '.' are allowed", s)
		}
	}
	if s[0] == '-' || s[0] == '.' || s[len(s)-1] == '-' || s[len(s)-1] == '.' {
		return fmt.Sprintf("%q: must start and end with a letter or digit", s)
	}
	return ""
}

// ValidatePolicy checks what a policy needs to be used: core's checks,
// a cluster name (clusters are told apart by it), endpoints of the form
// host[:port], and a Secret for a remote entry. The error names the field.
func ValidatePolicy(p core.Policy) error {
	var errs []string
	if err := core.ValidatePolicy(p); err != nil {
		errs = append(errs, err.Error())
	}
	if p.Connection.ClusterName == "" {
		errs = append(errs, "spec.connectionInfo.clusterName: must not be empty (clusters are told apart by it)")
	}
	for i, e := range p.Connection.Endpoints {
		if e == "" {
			continue // core's check said so
		}
		if _, err := Endpoint(e); err != nil {
			errs = append(errs, fmt.Sprintf("spec.connectionInfo.allocationEndpoints[%d]: %v", i, err))
		}
	}
	if !p.Connection.IsLocal() && p.Connection.SecretName == "" {
		errs = append(errs, "spec.connectionInfo.secretName: a remote cluster needs the Secret with the client certificate (tls.crt, tls.key)")
	}
	if p.Connection.Namespace != "" {
		if err := checkName(p.Connection.Namespace); err != "" {
			errs = append(errs, "spec.connectionInfo.namespace: "+err)
		}
	}
	if len(errs) > 0 {
		return errors.New(strings.Join(errs, ", "))
	}
	return nil
}

// CheckPolicy is ValidatePolicy plus the serverCa, which must be PEM
// certificates when given: everything a policy read from a cluster can be
// wrong about once the API server's schema has accepted it.
func CheckPolicy(p core.Policy) error {
	err := ValidatePolicy(p)
	if len(p.Connection.ServerCA) > 0 {
		if _, perr := certPool(p.Connection.ServerCA, nil); perr != nil {
			perr = errors.New("spec.connectionInfo.serverCa: " + perr.Error())
			if err == nil {
				return perr
			}
			return fmt.Errorf("%v, %v", err, perr)
		}
	}
	return err
}

// PolicyFromJSON decodes a GameServerAllocationPolicy as the API server
// sends it (JSON, any metadata) and returns its namespace and the policy.
// Unlike a policies file it is not decoded strictly: the API server has
// checked the object against the CRD's schema, and a newer Agones may add
// fields this allocator does not use. It does not validate the policy
// (CheckPolicy does), so that a policy with a bad endpoint still takes its
// place in the order and fails there with its own error. A malformed
// window annotation is an error, though: no one can tell when such a
// policy was meant to be in force, so it must not be used at all.
func PolicyFromJSON(data []byte) (namespace string, p core.Policy, err error) {
	var po policyObject
	if err := json.Unmarshal(data, &po); err != nil {
		return "", core.Policy{}, fmt.Errorf("%s: %v", PolicyKind, err)
	}
	if po.APIVersion != PolicyAPIVersion || po.Kind != PolicyKind {
		return "", core.Policy{}, fmt.Errorf("apiVersion %q kind %q: want %s %s", po.APIVersion, po.Kind, PolicyAPIVersion, PolicyKind)
	}
	ns := po.Metadata.Namespace
	if ns == "" {
		ns = core.DefaultNamespace
	}
	p, werr := policyOf(po)
	return ns, p, werr
}

// policyOf converts a decoded object; the error is its window's.
func policyOf(po policyObject) (core.Policy, error) {
	w, err := WindowFromAnnotations(po.Metadata.Annotations)
	return core.Policy{
		Name:     po.Metadata.Name,
		Priority: po.Spec.Priority,
		Weight:   po.Spec.Weight,
		Labels:   po.Metadata.Labels,
		Connection: core.ConnectionInfo{
			ClusterName: po.Spec.ConnectionInfo.ClusterName,
			Endpoints:   po.Spec.ConnectionInfo.AllocationEndpoints,
			SecretName:  po.Spec.ConnectionInfo.SecretName,
			Namespace:   po.Spec.ConnectionInfo.Namespace,
			ServerCA:    po.Spec.ConnectionInfo.ServerCA,
		},
		Window: windowOrNil(w),
	}, err
}

// Endpoint returns an allocation endpoint as host:port, with Agones'
// default port 443 when it has none, or an error saying why e is not
// host[:port]. An IPv6 address takes brackets ([::1]:8443).
func Endpoint(e string) (string, error) {
	if strings.Contains(e, "://") || strings.ContainsAny(e, "/?# \t") {
		return "", fmt.Errorf("%q is not host[:port] (no scheme, path or spaces)", e)
	}
	host, port := e, DefaultPort
	if strings.Contains(e, ":") {
		h, p, err := net.SplitHostPort(e)
		if err != nil {
			return "", fmt.Errorf("%q is not host[:port] (an IPv6 address needs brackets)", e)
		}
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 || n > 65535 {
			return "", fmt.Errorf("%q: port %q is not a number from 1 to 65535", e, p)
		}
		host, port = h, p
	}
	if host == "" {
		return "", fmt.Errorf("%q has no host", e)
	}
	if net.ParseIP(host) == nil {
		for _, label := range strings.Split(strings.TrimSuffix(host, "."), ".") {
			if label == "" || len(label) > 63 {
				return "", fmt.Errorf("%q: host %q is not a DNS name", e, host)
			}
			for i := 0; i < len(label); i++ {
				c := label[i]
				if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_') {
					return "", fmt.Errorf("%q: host %q is not a DNS name", e, host)
				}
			}
		}
	}
	return net.JoinHostPort(host, port), nil
}

// PoliciesFile is a policies file (or directory) and what was last read
// from it.
type PoliciesFile struct {
	path string
	last [sha256.Size]byte
	// Set is what the file held when last read successfully.
	Set *Set
}

// OpenPoliciesFile reads and validates a policies file or directory.
func OpenPoliciesFile(path string) (*PoliciesFile, error) {
	files, err := readPolicyFiles(path)
	if err != nil {
		return nil, err
	}
	set, err := parseFiles(files)
	if err != nil {
		return nil, err
	}
	return &PoliciesFile{path: path, last: digestFiles(files), Set: set}, nil
}

func digestFiles(files []namedFile) [sha256.Size]byte {
	h := sha256.New()
	for _, f := range files {
		fmt.Fprintf(h, "%d:%s%d:", len(f.name), f.name, len(f.data))
		h.Write(f.data)
	}
	var d [sha256.Size]byte
	copy(d[:], h.Sum(nil))
	return d
}

// Watch re-reads the file (or directory) every interval until ctx ends,
// and calls apply with the new Set each time the content changes and
// validates. Content that does not validate is logged, naming what is
// wrong, and the policies in force stay: a typo never empties the routing.
func (f *PoliciesFile) Watch(ctx context.Context, interval time.Duration, log *slog.Logger, apply func(*Set)) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		f.Reload(log, apply)
	}
}

// Reload reads the file once, as one tick of Watch does, and reports
// whether it applied a new Set.
func (f *PoliciesFile) Reload(log *slog.Logger, apply func(*Set)) bool {
	files, err := readPolicyFiles(f.path)
	if err != nil {
		log.Error("policies unreadable; keeping the policies in force", "path", f.path, "err", err)
		return false
	}
	d := digestFiles(files)
	if d == f.last {
		return false
	}
	f.last = d
	set, err := parseFiles(files)
	if err != nil {
		log.Error("policies invalid; keeping the policies in force", "path", f.path, "err", err)
		return false
	}
	f.Set = set
	apply(set)
	np, ns := set.Counts()
	log.Info("policies reloaded", "path", f.path, "policies", np, "secrets", ns)
	return true
}
