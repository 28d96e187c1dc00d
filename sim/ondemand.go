package sim

import (
	"fmt"
	"strconv"

	"github.com/quartermaster-dev/quartermaster/core"
)

// On-demand servers: a stream with Create set asks each cluster it tries to
// make a server for the request (as the allocator's Create does) rather
// than to allocate one a fleet keeps Ready. The server takes a fleet's
// template but is not the fleet's: the fleet's size, its buffer and its
// replacements never count it, and the session's end deletes it instead of
// returning it to a buffer. Its node time is charged like any server's.
//
// The sequence, in the cluster: the create write (API-server latency),
// placement on a node as the fleet would place it, the template's start-up
// delay, then the allocation write; the answer then travels back to the
// router. When that answer would come after the request's deadline, the
// allocator gives up at the deadline, deletes what it made and the request
// ends as DeadlineExceeded. A cluster with no free slot or no such
// template answers no match, so a multi-cluster request tries the next.

// OnDemandResult are a cluster's figures for on-demand requests; results
// carry them for every cluster of a run with a Create stream.
type OnDemandResult struct {
	// Tries is the Create requests that reached the cluster.
	Tries uint64 `json:"tries"`
	// Created is the servers made for them (a try finding no free slot or
	// no template makes none).
	Created uint64 `json:"created"`
	// Allocated is the servers that became Ready in time and went to
	// their caller.
	Allocated uint64 `json:"allocated"`
	// DeadlineExceeded is the servers deleted again because they would
	// not have been Ready and allocated within the request's deadline.
	DeadlineExceeded uint64 `json:"deadlineExceeded"`
	// NoRoom is the tries answered with no match: no node had a free slot,
	// or the cluster has no fleet to take the template from.
	NoRoom uint64 `json:"noRoom"`
	// SuccessRate is Allocated over Tries.
	SuccessRate float64 `json:"successRate"`
}

type onDemandCounters struct {
	reachable bool // the run has a Create stream

	tries, created, allocated, deadline, noRoom uint64
}

func (c *onDemandCounters) result() *OnDemandResult {
	if !c.reachable {
		return nil
	}
	return &OnDemandResult{
		Tries:            c.tries,
		Created:          c.created,
		Allocated:        c.allocated,
		DeadlineExceeded: c.deadline,
		NoRoom:           c.noRoom,
		SuccessRate:      ratio(float64(c.allocated), float64(c.tries)),
	}
}

// templateFleet is the index of the fleet of cl that a Create request of s
// takes its template from, or -1.
func templateFleet(cl *ClusterConfig, s *StreamConfig) int {
	for i := range cl.Fleets {
		f := &cl.Fleets[i]
		if s.Template != "" {
			if f.Name == s.Template {
				return i
			}
			continue
		}
		if len(s.Request.Selectors) == 0 {
			return i
		}
		for _, sel := range s.Request.Selectors {
			if labelsMatch(f, sel.MatchLabels) {
				return i
			}
		}
	}
	return -1
}

// labelsMatch reports whether a fleet's servers carry every label of want
// (the fleet label included, as a live server would).
func labelsMatch(f *FleetConfig, want map[string]string) bool {
	for k, v := range want {
		got, ok := f.Labels[k]
		if k == core.FleetLabel {
			got, ok = f.Name, true
		}
		if !ok || got != v {
			return false
		}
	}
	return true
}

// checkTemplate refuses a Create stream that could never find its
// template: a single-cluster stream needs it in its cluster, a
// multi-cluster one in at least one cluster.
func (c *Config) checkTemplate(s *StreamConfig) error {
	if !s.Create {
		if s.Template != "" {
			return fmt.Errorf("template %q is set without create", s.Template)
		}
		return nil
	}
	what := "fleet matching the request's selectors"
	if s.Template != "" {
		what = fmt.Sprintf("fleet named %q", s.Template)
	}
	if !s.Request.MultiCluster.Enabled {
		for i := range c.Clusters {
			if c.Clusters[i].Name == s.Cluster && templateFleet(&c.Clusters[i], s) < 0 {
				return fmt.Errorf("create: cluster %s has no %s to take the template from", s.Cluster, what)
			}
		}
		return nil
	}
	for i := range c.Clusters {
		if templateFleet(&c.Clusters[i], s) >= 0 {
			return nil
		}
	}
	return fmt.Errorf("create: no cluster has %s to take the template from", what)
}

// create handles a Create request that reached its cluster's allocator.
// It does not queue for one of the replica's workers: the live allocator
// waits for the server's start-up outside its allocation path.
func (w *world) create(id int32) {
	r := &w.reqs[id]
	cl := w.clusters[r.cluster]
	s := w.streams[r.stream]
	cl.od.tries++
	fi := s.tmpl[r.cluster]
	var slot int32
	ok := fi >= 0
	if ok {
		slot, ok = w.placeOnDemand(cl, cl.fleets[fi])
	}
	if !ok {
		cl.od.noRoom++
		r.outcome = outNoMatch
		w.q.push(event{at: w.now + r.back, kind: evBack, id: id})
		return
	}
	cl.od.created++
	r.slot = slot
	// Create write, start-up, allocation write: all drawn now, so the
	// answer's time is known and a late one is cut at the deadline.
	wr := s.odWrite[r.cluster]
	done := w.now + wr.next() + s.odStartup[r.cluster].next() + wr.next()
	if dl := r.start + int64(w.cfg.Deadline); w.cfg.Deadline > 0 && done+r.back > dl {
		w.q.push(event{at: max(dl, w.now), kind: evCreateExpired, id: id})
		return
	}
	w.q.push(event{at: done, kind: evCreateDone, id: id})
}

// placeOnDemand puts a Starting server of f's template on a node, outside
// the fleet's counts.
func (w *world) placeOnDemand(cl *cluster, f *fleet) (int32, bool) {
	n := cl.place(f.cfg.Placement)
	if n < 0 {
		return 0, false
	}
	w.account(cl)
	nd := &cl.nodes[n]
	if nd.used == 0 {
		cl.nodesInUse++
	}
	cl.setUsed(n, nd.used+1)
	slot := int32(len(cl.servers))
	cl.servers = append(cl.servers, server{node: n, fleet: int16(f.idx), state: stStarting, pos: -1, onDemand: true})
	for _, rp := range cl.replicas {
		rp.seen = append(rp.seen, cached{})
	}
	return slot, true
}

// createDone: the server is Ready and the allocation write is confirmed;
// the caller has it. Every replica's cache learns of it (an Allocated
// server still counts on its node for Packed choices).
func (w *world) createDone(id int32) {
	r := &w.reqs[id]
	cl := w.clusters[r.cluster]
	sv := &cl.servers[r.slot]
	f := cl.fleets[sv.fleet]
	w.account(cl)
	cl.allocated++
	n := &cl.nodes[sv.node]
	if n.alloc == 0 {
		cl.nodesWithAlloc++
	}
	n.alloc++
	cl.rev++
	if f.odLabels == nil {
		// The template's labels, without the fleet's own label: the
		// server is made from the template, not owned by the fleet.
		f.odLabels = map[string]string{}
		for k, v := range f.cfg.Labels {
			f.odLabels[k] = v
		}
	}
	sv.gs = &core.GameServer{
		Namespace: core.DefaultNamespace,
		Name:      f.cfg.Name + "-od-" + strconv.Itoa(int(r.slot)),
		Labels:    f.odLabels,
		State:     core.StateAllocated,
		NodeName:  n.name,
		Version:   strconv.FormatUint(cl.rev, 10),
	}
	sv.rev, sv.state = cl.rev, stAllocated
	w.propagate(cl, r.slot, sv.gs, false, -1)
	if w.loss != nil && w.loss.answer(id, r.slot) {
		cl.m.Allocated++
		cl.od.allocated++
		return
	}
	s := w.streams[r.stream]
	w.q.push(event{at: w.now + w.sessionFor(s, r), kind: evSessionEnd, c: r.cluster, id: r.slot})
	cl.m.Allocated++
	cl.od.allocated++
	w.finish(id, outOK, r.back)
}

// createExpired: the request's deadline passed before its server could be
// Ready and allocated; the allocator deletes the Starting server (no cache
// ever saw it) and the caller gets DeadlineExceeded.
func (w *world) createExpired(id int32) {
	r := &w.reqs[id]
	cl := w.clusters[r.cluster]
	sv := &cl.servers[r.slot]
	w.account(cl)
	cl.rev++
	sv.rev, sv.state = cl.rev, stGone
	cl.setUsed(sv.node, cl.nodes[sv.node].used-1)
	if cl.nodes[sv.node].used == 0 {
		cl.nodesInUse--
	}
	cl.od.deadline++
	w.finish(id, outDeadline, 0)
}

// endOnDemand ends an on-demand server's session: it is deleted, and no
// fleet replaces it.
func (w *world) endOnDemand(cl *cluster, slot int32) {
	sv := &cl.servers[slot]
	w.account(cl)
	cl.allocated--
	n := &cl.nodes[sv.node]
	n.alloc--
	if n.alloc == 0 {
		cl.nodesWithAlloc--
	}
	w.deleteServer(cl, slot)
}
