package core

import (
	"sort"
	"strconv"
	"strings"
)

// DefaultNamespace is the namespace a request without one allocates in.
const DefaultNamespace = "default"

// MaxListCapacity is the largest capacity a list may be given (Agones' limit).
const MaxListCapacity = 1000

// FieldError is one problem with a request: which field, and why.
// Field uses the wire names of the Agones API (gameServerSelectors[0].counters["rooms"].minCount)
// so that a caller can find the field in what it sent.
type FieldError struct {
	Field  string
	Reason string
}

func (e FieldError) String() string { return e.Field + ": " + e.Reason }

// InvalidRequestError lists everything wrong with a request. The allocator
// maps it to InvalidArgument / HTTP 400.
type InvalidRequestError struct {
	Errors []FieldError
}

func (e *InvalidRequestError) Error() string {
	var b strings.Builder
	b.WriteString("invalid request: ")
	for i, fe := range e.Errors {
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(fe.String())
	}
	return b.String()
}

// validator collects field errors while walking a request.
type validator struct {
	errs []FieldError
}

func (v *validator) add(field, reason string) {
	v.errs = append(v.errs, FieldError{field, reason})
}

func (v *validator) err() error {
	if len(v.errs) == 0 {
		return nil
	}
	// Map iteration order is random; sort so the same request always gets
	// the same message.
	sort.SliceStable(v.errs, func(i, j int) bool { return v.errs[i].Field < v.errs[j].Field })
	return &InvalidRequestError{Errors: v.errs}
}

// Normalize validates r and returns a copy ready for allocation: namespace
// defaulted, every selector's state defaulted to Ready, and the deprecated
// required/preferred selectors turned into the ordered Selectors list
// (preferred first, then required, which matches every Ready server when it
// is absent). r itself is not modified, and the result must not be: it
// carries a compiled form of its selectors. On failure the error is an
// *InvalidRequestError naming every bad field.
func Normalize(r *Request) (*Request, error) {
	v := &validator{}
	if r == nil {
		v.add("request", "is missing")
		return nil, v.err()
	}
	// The usual request has one selector: the copy, that selector and its
	// compiled form come in one allocation instead of three.
	one := &normalized{req: *r}
	n := &one.req
	if n.Namespace == "" {
		n.Namespace = DefaultNamespace
	} else if reason := checkDNSLabel(n.Namespace); reason != "" {
		v.add("namespace", reason)
	}
	// Bounds first: a request far over them is refused before any of its
	// parts costs anything to check.
	checkBounds(v, r)
	if len(v.errs) > 0 {
		return nil, v.err()
	}
	normalizeSelectors(v, r, one)
	if n.Scheduling != Packed && n.Scheduling != Distributed {
		v.add("scheduling", "unknown strategy "+strconv.Itoa(int(n.Scheduling))+" (want Packed or Distributed)")
	}
	validateMetadata(v, n.Metadata)
	validatePriorities(v, n.Priorities)
	validateCounterActions(v, n.Counters)
	validateListActions(v, n.Lists)
	validateLabels(v, func() string { return "multiClusterSetting.policySelector.matchLabels" }, n.MultiCluster.PolicySelector)
	if err := v.err(); err != nil {
		return nil, err
	}
	return n, nil
}

// checkBounds reports the parts of r over their limits. Too many selectors
// stops it at once: nothing else is worth reporting beside that.
func checkBounds(v *validator, r *Request) {
	if len(r.Selectors) > MaxSelectors {
		v.add("gameServerSelectors", tooMany("selectors", MaxSelectors, len(r.Selectors)))
		return
	}
	if len(r.Selectors) == 0 && len(r.Preferred)+1 > MaxSelectors {
		v.add("preferredGameServerSelectors", tooMany("selectors with the required one", MaxSelectors, len(r.Preferred)+1))
		return
	}
	if len(r.Priorities) > MaxPriorities {
		v.add("priorities", tooMany("priorities", MaxPriorities, len(r.Priorities)))
	}
	if len(r.Counters) > MaxActions {
		v.add("counters", tooMany("counter actions", MaxActions, len(r.Counters)))
	}
	if len(r.Lists) > MaxActions {
		v.add("lists", tooMany("list actions", MaxActions, len(r.Lists)))
	}
	if len(r.Metadata.Labels) > MaxMetadataEntries {
		v.add("metadata.labels", tooMany("labels", MaxMetadataEntries, len(r.Metadata.Labels)))
	}
	if len(r.Metadata.Annotations) > MaxMetadataEntries {
		v.add("metadata.annotations", tooMany("annotations", MaxMetadataEntries, len(r.Metadata.Annotations)))
	}
	if len(r.MultiCluster.PolicySelector) > MaxSelectorTerms {
		v.add("multiClusterSetting.policySelector.matchLabels", tooMany("labels", MaxSelectorTerms, len(r.MultiCluster.PolicySelector)))
	}
}

// normalizeSelectors validates r's selectors into one.req.Selectors: the
// ordered list as given, or else the deprecated preferred ones followed by
// the required one. The first selector and its compiled form use one's
// room for them; the deprecated fields are cleared.
func normalizeSelectors(v *validator, r *Request, one *normalized) {
	n := &one.req
	// into is where the first selector's compiled form goes (the others
	// get their own).
	into := &one.compiled
	if len(r.Selectors) > 0 {
		n.Selectors = one.sel[:]
		if len(r.Selectors) > 1 {
			n.Selectors = make([]Selector, len(r.Selectors))
		}
		for i, s := range r.Selectors {
			n.Selectors[i] = validateSelector(v, func() string { return "gameServerSelectors[" + strconv.Itoa(i) + "]" }, s, into)
			into = nil
		}
	} else {
		n.Selectors = one.sel[:0]
		if len(r.Preferred) > 0 {
			n.Selectors = make([]Selector, 0, len(r.Preferred)+1)
		}
		for i, s := range r.Preferred {
			n.Selectors = append(n.Selectors, validateSelector(v, func() string { return "preferredGameServerSelectors[" + strconv.Itoa(i) + "]" }, s, into))
			into = nil
		}
		var req Selector
		if r.Required != nil {
			req = *r.Required
		}
		n.Selectors = append(n.Selectors, validateSelector(v, func() string { return "requiredGameServerSelector" }, req, into))
	}
	n.Required, n.Preferred = nil, nil
}

// validateMetadata checks the labels and annotations an allocation sets.
func validateMetadata(v *validator, m MetaPatch) {
	validateLabels(v, func() string { return "metadata.labels" }, m.Labels)
	for k := range m.Labels {
		// agones.dev/ labels belong to the system: rewriting the fleet
		// label, say, would hide a server from its own fleet's count.
		if strings.HasPrefix(k, SystemLabelPrefix) {
			v.add("metadata.labels["+strconv.Quote(k)+"]", "labels under "+SystemLabelPrefix+" are managed by the system and cannot be set by an allocation")
		}
	}
	for k := range m.Annotations {
		if reason := checkQualifiedName(k); reason != "" {
			v.add("metadata.annotations["+strconv.Quote(k)+"]", "key "+reason)
		}
	}
}

func validatePriorities(v *validator, ps []Priority) {
	for i, p := range ps {
		f := "priorities[" + strconv.Itoa(i) + "]"
		if p.Type != PriorityCounter && p.Type != PriorityList {
			v.add(f+".type", "unknown type "+strconv.Itoa(int(p.Type))+" (want Counter or List)")
		}
		if p.Key == "" {
			v.add(f+".key", "must not be empty")
		}
		if p.Order != Ascending && p.Order != Descending {
			v.add(f+".order", "unknown order "+strconv.Itoa(int(p.Order))+" (want Ascending or Descending)")
		}
	}
}

func validateCounterActions(v *validator, actions map[string]CounterAction) {
	for k, a := range actions {
		f := "counters[" + strconv.Quote(k) + "]"
		if k == "" {
			v.add(f, "counter name must not be empty")
		}
		switch a.Action {
		case ActionIncrement, ActionDecrement:
		case "":
			if a.Amount != nil {
				v.add(f+".action", "is required when amount is set (want Increment or Decrement)")
			}
		default:
			v.add(f+".action", "unknown action "+strconv.Quote(a.Action)+" (want Increment or Decrement)")
		}
		if a.Amount != nil && *a.Amount < 0 {
			v.add(f+".amount", "must not be negative, got "+strconv.FormatInt(*a.Amount, 10))
		}
		if a.Capacity != nil && *a.Capacity < 0 {
			v.add(f+".capacity", "must not be negative, got "+strconv.FormatInt(*a.Capacity, 10))
		}
	}
}

func validateListActions(v *validator, actions map[string]ListAction) {
	for k, a := range actions {
		f := "lists[" + strconv.Quote(k) + "]"
		if k == "" {
			v.add(f, "list name must not be empty")
		}
		if a.Capacity != nil && (*a.Capacity < 0 || *a.Capacity > MaxListCapacity) {
			v.add(f+".capacity", "must be between 0 and "+strconv.Itoa(MaxListCapacity)+", got "+strconv.FormatInt(*a.Capacity, 10))
		}
		// A list never holds more than MaxListCapacity values, so longer
		// actions are mistakes; bounding them also bounds the work done
		// while the index is locked.
		if len(a.AddValues) > MaxListCapacity {
			v.add(f+".addValues", "at most "+strconv.Itoa(MaxListCapacity)+" values, got "+strconv.Itoa(len(a.AddValues)))
		}
		if len(a.DeleteValues) > MaxListCapacity {
			v.add(f+".deleteValues", "at most "+strconv.Itoa(MaxListCapacity)+" values, got "+strconv.Itoa(len(a.DeleteValues)))
		}
	}
}

// validateSelector checks s and returns it with defaults and its compiled
// form. name gives the selector's field name; it is called only to report
// an error, so that a valid selector costs no strings.
func validateSelector(v *validator, name func() string, s Selector, into *compiledSelector) Selector {
	terms := []struct {
		field string
		n     int
	}{
		{".matchLabels", len(s.MatchLabels)},
		{".matchAnnotations", len(s.MatchAnnotations)},
		{".matchExpressions", len(s.MatchExpressions)},
		{".counters", len(s.Counters)},
		{".lists", len(s.Lists)},
	}
	over := false
	for _, t := range terms {
		if t.n > MaxSelectorTerms {
			v.add(name()+t.field, tooMany("entries", MaxSelectorTerms, t.n))
			over = true
		}
	}
	for i, e := range s.MatchExpressions {
		if len(e.Values) > MaxExpressionValues {
			v.add(name()+".matchExpressions["+strconv.Itoa(i)+"].values", tooMany("values", MaxExpressionValues, len(e.Values)))
			over = true
		}
	}
	if over {
		return s
	}
	validateLabels(v, func() string { return name() + ".matchLabels" }, s.MatchLabels)
	for k := range s.MatchAnnotations {
		if reason := checkQualifiedName(k); reason != "" {
			v.add(name()+".matchAnnotations["+strconv.Quote(k)+"]", "key "+reason)
		}
	}
	for i, e := range s.MatchExpressions {
		ef := func() string { return name() + ".matchExpressions[" + strconv.Itoa(i) + "]" }
		if reason := checkQualifiedName(e.Key); reason != "" {
			v.add(ef()+".key", reason)
		}
		switch e.Operator {
		case OpIn, OpNotIn:
			if len(e.Values) == 0 {
				v.add(ef()+".values", "must not be empty for operator "+string(e.Operator))
			}
			for j, val := range e.Values {
				if reason := checkLabelValue(val); reason != "" {
					v.add(ef()+".values["+strconv.Itoa(j)+"]", reason)
				}
			}
		case OpExists, OpDoesNotExist:
			if len(e.Values) != 0 {
				v.add(ef()+".values", "must be empty for operator "+string(e.Operator))
			}
		default:
			v.add(ef()+".operator", "unknown operator "+strconv.Quote(string(e.Operator))+" (want In, NotIn, Exists or DoesNotExist)")
		}
	}
	switch s.State {
	case "":
		s.State = StateReady
	case StateReady, StateAllocated:
	default:
		v.add(name()+".gameServerState", "state "+strconv.Quote(string(s.State))+" cannot be allocated from (want Ready or Allocated)")
	}
	for k, c := range s.Counters {
		cf := func() string { return name() + ".counters[" + strconv.Quote(k) + "]" }
		if k == "" {
			v.add(cf(), "counter name must not be empty")
		}
		checkRange(v, cf, "Count", c.MinCount, c.MaxCount)
		checkRange(v, cf, "Available", c.MinAvailable, c.MaxAvailable)
	}
	for k, l := range s.Lists {
		lf := func() string { return name() + ".lists[" + strconv.Quote(k) + "]" }
		if k == "" {
			v.add(lf(), "list name must not be empty")
		}
		checkRange(v, lf, "Available", l.MinAvailable, l.MaxAvailable)
	}
	if into == nil {
		into = new(compiledSelector)
	}
	compileInto(into, &s)
	s.compiled = into
	return s
}

// normalized is Normalize's result with room for one selector.
type normalized struct {
	req      Request
	sel      [1]Selector
	compiled compiledSelector
}

// checkRange validates a min/max pair where a max of 0 means "no limit".
func checkRange(v *validator, f func() string, what string, lo, hi int64) {
	if lo < 0 {
		v.add(f()+".min"+what, "must not be negative, got "+strconv.FormatInt(lo, 10))
	}
	if hi < 0 {
		v.add(f()+".max"+what, "must not be negative, got "+strconv.FormatInt(hi, 10))
	}
	if hi > 0 && lo > hi {
		v.add(f()+".min"+what, "min"+what+" "+strconv.FormatInt(lo, 10)+" is greater than max"+what+" "+strconv.FormatInt(hi, 10))
	}
}

func validateLabels(v *validator, f func() string, m map[string]string) {
	for k, val := range m {
		if reason := checkQualifiedName(k); reason != "" {
			v.add(f()+"["+strconv.Quote(k)+"]", "key "+reason)
		}
		if reason := checkLabelValue(val); reason != "" {
			v.add(f()+"["+strconv.Quote(k)+"]", "value "+reason)
		}
	}
}

// checkQualifiedName applies Kubernetes' rule for label and annotation keys:
// an optional DNS subdomain prefix and "/", then a name of at most 63
// characters of alphanumerics, '-', '_' and '.', starting and ending with an
// alphanumeric. It returns "" when s is valid, else the reason.
func checkQualifiedName(s string) string {
	if s == "" {
		return "must not be empty"
	}
	name := s
	if i := strings.IndexByte(s, '/'); i >= 0 {
		prefix := s[:i]
		name = s[i+1:]
		if prefix == "" {
			return strconv.Quote(s) + " has an empty prefix before '/'"
		}
		if reason := checkDNSSubdomain(prefix); reason != "" {
			return strconv.Quote(s) + " has an invalid prefix: " + reason
		}
	}
	if name == "" {
		return strconv.Quote(s) + " has an empty name"
	}
	if reason := checkLabelValue(name); reason != "" {
		return strconv.Quote(s) + ": name " + reason
	}
	return ""
}

// checkLabelValue applies Kubernetes' rule for label values: empty, or at
// most 63 alphanumerics, '-', '_' and '.', starting and ending with an
// alphanumeric.
func checkLabelValue(s string) string {
	if s == "" {
		return ""
	}
	if len(s) > 63 {
		return "must be at most 63 characters, got " + strconv.Itoa(len(s))
	}
	if !isAlnum(s[0]) || !isAlnum(s[len(s)-1]) {
		return strconv.Quote(s) + " must start and end with a letter or digit"
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !isAlnum(c) && c != '-' && c != '_' && c != '.' {
			return strconv.Quote(s) + " may contain only letters, digits, '-', '_' and '.'"
		}
	}
	return ""
}

// checkDNSSubdomain applies RFC 1123 subdomain rules (lower case).
func checkDNSSubdomain(s string) string {
	if len(s) > 253 {
		return "must be at most 253 characters"
	}
	// strings.SplitSeq, not Split: every request's owner annotation
	// passes through here, and Split allocates the slice of parts.
	for part := range strings.SplitSeq(s, ".") {
		if reason := checkDNSLabel(part); reason != "" {
			return reason
		}
	}
	return ""
}

// checkDNSLabel applies RFC 1123 label rules (lower case), as for namespaces.
func checkDNSLabel(s string) string {
	if s == "" {
		return "must not be empty"
	}
	if len(s) > 63 {
		return "must be at most 63 characters, got " + strconv.Itoa(len(s))
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		lowerAlnum := (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9')
		if !lowerAlnum && c != '-' {
			return strconv.Quote(s) + " may contain only lower-case letters, digits and '-'"
		}
	}
	if s[0] == '-' || s[len(s)-1] == '-' {
		return strconv.Quote(s) + " must start and end with a letter or digit"
	}
	return ""
}

func isAlnum(c byte) bool {
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')
}
