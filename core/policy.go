package core

import (
	"sort"
	"strconv"
)

// SelectPolicies returns the policies whose labels carry every key/value of
// selector (all policies when selector is empty), in their original order.
func SelectPolicies(policies []Policy, selector map[string]string) []Policy {
	out := make([]Policy, 0, len(policies))
next:
	for _, p := range policies {
		for k, v := range selector {
			if got, ok := p.Labels[k]; !ok || got != v {
				continue next
			}
		}
		out = append(out, p)
	}
	return out
}

// OrderClusters returns the order in which to try clusters for a
// multi-cluster allocation, one policy per cluster.
//
// Tiers of equal priority are tried in ascending priority. Within a tier the
// clusters are drawn without replacement, each with probability proportional
// to its weight, where a cluster's weight in the tier is the integer average
// of its policies' weights there (as Agones computes it). A cluster is tried
// at most once: only in the first tier it appears in. The policy returned for
// a cluster is its first policy (in input order) in that tier.
//
// Zero weights differ from Agones on purpose. Agones never tries a cluster
// whose weight is zero, and skips a tier whose clusters all weigh zero, so a
// "burst to cloud" setup that leaves the on-prem weight unset silently never
// uses on-prem. Here zero-weight clusters are tried after the weighted ones
// of their tier, in uniformly random order.
//
// The order depends only on the policies and the seed.
func OrderClusters(policies []Policy, seed uint64) []Policy {
	type cluster struct {
		name   string
		policy Policy
		sum    int
		n      int
	}
	byPriority := map[int32][]*cluster{}
	for _, p := range policies {
		tier := byPriority[p.Priority]
		var c *cluster
		for _, x := range tier {
			if x.name == p.Connection.ClusterName {
				c = x
				break
			}
		}
		if c == nil {
			c = &cluster{name: p.Connection.ClusterName, policy: p}
			byPriority[p.Priority] = append(tier, c)
		}
		c.sum += max(p.Weight, 0)
		c.n++
	}
	priorities := make([]int32, 0, len(byPriority))
	for p := range byPriority {
		priorities = append(priorities, p)
	}
	sort.Slice(priorities, func(i, j int) bool { return priorities[i] < priorities[j] })

	r := newRNG(seed)
	tried := map[string]bool{}
	out := make([]Policy, 0, len(policies))
	for _, prio := range priorities {
		var weighted, zero []*cluster
		var total uint64
		for _, c := range byPriority[prio] {
			if tried[c.name] {
				continue
			}
			tried[c.name] = true
			if w := c.sum / c.n; w > 0 {
				weighted = append(weighted, c)
				total += uint64(w)
			} else {
				zero = append(zero, c)
			}
		}
		for len(weighted) > 0 {
			x := r.intN(total)
			i := 0
			for ; i < len(weighted)-1; i++ {
				w := uint64(weighted[i].sum / weighted[i].n)
				if x < w {
					break
				}
				x -= w
			}
			c := weighted[i]
			out = append(out, c.policy)
			total -= uint64(c.sum / c.n)
			weighted = append(weighted[:i], weighted[i+1:]...)
		}
		for len(zero) > 0 {
			i := int(r.intN(uint64(len(zero))))
			out = append(out, zero[i].policy)
			zero = append(zero[:i], zero[i+1:]...)
		}
	}
	return out
}

// ValidatePolicy checks a policy's fields; the error names the field.
func ValidatePolicy(p Policy) error {
	v := &validator{}
	if p.Priority < 0 {
		v.add("spec.priority", "must not be negative")
	}
	if p.Weight < 0 {
		v.add("spec.weight", "must not be negative")
	}
	for i, e := range p.Connection.Endpoints {
		if e == "" {
			v.add("spec.connectionInfo.allocationEndpoints["+strconv.Itoa(i)+"]", "must not be empty")
		}
	}
	return v.err()
}
