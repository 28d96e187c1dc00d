package core

import (
	"slices"
	"strings"
)

// Matches reports whether gs satisfies every part of s. The state compared is
// s.State, with "" meaning Ready (as after Normalize).
func (s *Selector) Matches(gs *GameServer) bool {
	want := s.State
	if want == "" {
		want = StateReady
	}
	return gs.State == want && s.matchesWithin(gs, "")
}

// matchesWithin is the selector's test once the index has already narrowed
// candidates to the right namespace and state, and to servers carrying the
// label known (whose matchLabels entry needs no second look; "" for none).
func (s *Selector) matchesWithin(gs *GameServer, known string) bool {
	if c := s.compiled; c != nil {
		return c.matches(gs, known)
	}
	for k, v := range s.MatchLabels {
		if k == known {
			continue
		}
		got, ok := gs.Labels[k]
		if !ok || got != v {
			return false
		}
	}
	for i := range s.MatchExpressions {
		if !s.MatchExpressions[i].matches(gs.Labels) {
			return false
		}
	}
	for k, c := range s.Counters {
		ctr, ok := gs.Counters[k]
		if !ok || !c.matches(ctr) {
			return false
		}
	}
	for k, l := range s.Lists {
		lst, ok := gs.Lists[k]
		if !ok || !l.matches(lst) {
			return false
		}
	}
	for k, v := range s.MatchAnnotations {
		if got, ok := gs.Annotation(k); !ok || got != v {
			return false
		}
	}
	return true
}

// compiledSelector is a Selector's maps as sorted slices. Normalize builds
// it so that testing a candidate ranges over slices: ranging over a Go map
// draws a random starting point each time, which on the allocation hot path
// costs more than the test itself.
type compiledSelector struct {
	few         [2]labelPair // labels' storage when there are at most two
	labels      []labelPair
	annotations []labelPair
	exprs       []LabelExpression
	counters    []counterTest
	lists       []listTest
}

type labelPair struct{ key, value string }

type counterTest struct {
	key string
	sel CounterSelector
}

type listTest struct {
	key string
	sel ListSelector
}

func compileSelector(s *Selector) *compiledSelector {
	c := &compiledSelector{}
	compileInto(c, s)
	return c
}

// compileInto fills c, which must be zero, with s compiled.
func compileInto(c *compiledSelector, s *Selector) {
	// A selector rarely names more than a couple of labels: those live in
	// the compiled selector itself, one allocation for both.
	c.labels = sortedPairs(c.few[:0], s.MatchLabels)
	c.exprs = s.MatchExpressions
	c.annotations = sortedPairs(nil, s.MatchAnnotations)
	for k, v := range s.Counters {
		c.counters = append(c.counters, counterTest{k, v})
	}
	slices.SortFunc(c.counters, func(a, b counterTest) int { return strings.Compare(a.key, b.key) })
	for k, v := range s.Lists {
		c.lists = append(c.lists, listTest{k, v})
	}
	slices.SortFunc(c.lists, func(a, b listTest) int { return strings.Compare(a.key, b.key) })
}

// sortedPairs appends m's entries to dst, sorted by key.
func sortedPairs(dst []labelPair, m map[string]string) []labelPair {
	for k, v := range m {
		dst = append(dst, labelPair{k, v})
	}
	slices.SortFunc(dst, func(a, b labelPair) int { return strings.Compare(a.key, b.key) })
	return dst
}

func (c *compiledSelector) matches(gs *GameServer, known string) bool {
	for i := range c.labels {
		p := &c.labels[i]
		if p.key == known {
			continue
		}
		got, ok := gs.Labels[p.key]
		if !ok || got != p.value {
			return false
		}
	}
	for i := range c.exprs {
		if !c.exprs[i].matches(gs.Labels) {
			return false
		}
	}
	for i := range c.counters {
		t := &c.counters[i]
		ctr, ok := gs.Counters[t.key]
		if !ok || !t.sel.matches(ctr) {
			return false
		}
	}
	for i := range c.lists {
		t := &c.lists[i]
		lst, ok := gs.Lists[t.key]
		if !ok || !t.sel.matches(lst) {
			return false
		}
	}
	for i := range c.annotations {
		p := &c.annotations[i]
		if got, ok := gs.Annotation(p.key); !ok || got != p.value {
			return false
		}
	}
	return true
}

func (e *LabelExpression) matches(labels map[string]string) bool {
	v, ok := labels[e.Key]
	switch e.Operator {
	case OpExists:
		return ok
	case OpDoesNotExist:
		return !ok
	case OpIn:
		return ok && contains(e.Values, v)
	case OpNotIn:
		// As in Kubernetes, a server without the label is "not in" any set.
		return !ok || !contains(e.Values, v)
	}
	return false
}

func (c CounterSelector) matches(ctr Counter) bool {
	if ctr.Count < c.MinCount || (c.MaxCount != 0 && ctr.Count > c.MaxCount) {
		return false
	}
	avail := ctr.Available()
	return avail >= c.MinAvailable && (c.MaxAvailable == 0 || avail <= c.MaxAvailable)
}

func (l ListSelector) matches(lst List) bool {
	if l.ContainsValue != "" && !lst.Contains(l.ContainsValue) {
		return false
	}
	avail := lst.Available()
	return avail >= l.MinAvailable && (l.MaxAvailable == 0 || avail <= l.MaxAvailable)
}

func contains(xs []string, v string) bool {
	for _, x := range xs {
		if x == v {
			return true
		}
	}
	return false
}

// comparePriorities orders a and b by the request's priorities: -1 when a
// comes first, 1 when b does, 0 when the priorities do not separate them.
// For each priority the value compared is the available capacity of the named
// counter or list; a server without the key comes after one with it whatever
// the order; Ascending puts less available capacity first.
func comparePriorities(ps []Priority, a, b *GameServer) int {
	for i := range ps {
		p := &ps[i]
		av, aok := priorityValue(p, a)
		bv, bok := priorityValue(p, b)
		switch {
		case aok && !bok:
			return -1
		case !aok && bok:
			return 1
		case !aok && !bok, av == bv:
			continue
		}
		less := av < bv
		if p.Order == Descending {
			less = !less
		}
		if less {
			return -1
		}
		return 1
	}
	return 0
}

func priorityValue(p *Priority, gs *GameServer) (int64, bool) {
	if p.Type == PriorityList {
		l, ok := gs.Lists[p.Key]
		return l.Available(), ok
	}
	c, ok := gs.Counters[p.Key]
	return c.Available(), ok
}

// labelPairs returns the selector's matchLabels in key order, without
// allocating when the selector is compiled.
func (s *Selector) labelPairs() []labelPair {
	if s.compiled != nil {
		return s.compiled.labels
	}
	return compileSelector(s).labels
}
