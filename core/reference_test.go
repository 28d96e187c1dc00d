package core

import (
	"sort"
	"time"
)

// naive is the obviously-correct allocator the index is checked against: it
// keeps servers in a map and, per request, scans them all, sorts the
// candidates of each selector in the documented order and takes the first.
type naive struct {
	servers map[Key]*GameServer
	// held are the servers under a hold, by hold number: no candidates,
	// and counted as Allocated on their node while Ready.
	held  map[Key]int
	holds int
}

func newNaive() *naive { return &naive{servers: map[Key]*GameServer{}, held: map[Key]int{}} }

func (n *naive) upsert(gs *GameServer) { n.servers[gs.Key()] = gs }
func (n *naive) remove(k Key) {
	delete(n.servers, k)
	delete(n.held, k)
}

// hold takes k out of the running and returns the hold's number.
func (n *naive) hold(k Key) int {
	n.holds++
	n.held[k] = n.holds
	return n.holds
}

// commit stores gs if hold is still k's hold (not ended, k not removed);
// abort just ends it.
func (n *naive) commit(k Key, hold int, gs *GameServer) {
	if n.held[k] == hold {
		delete(n.held, k)
		n.upsert(gs)
	}
}

func (n *naive) abort(k Key, hold int) {
	if n.held[k] == hold {
		delete(n.held, k)
	}
}

type nodeCount struct{ ready, allocated int }

// candidates returns the matches of the first selector that has any, in
// allocation order, and that selector's index. For Distributed without
// priorities the order is by name: any of them is a correct answer.
func (n *naive) candidates(req *Request) ([]*GameServer, int) {
	counts := map[string]nodeCount{}
	for _, gs := range n.servers {
		c := counts[gs.NodeName]
		switch {
		case gs.State == StateReady && n.held[gs.Key()] != 0:
			c.allocated++
		case gs.State == StateReady:
			c.ready++
		case gs.State == StateAllocated:
			c.allocated++
		}
		counts[gs.NodeName] = c
	}
	for i := range req.Selectors {
		sel := &req.Selectors[i]
		var cands []*GameServer
		for _, gs := range n.servers {
			if gs.Namespace == req.Namespace && n.held[gs.Key()] == 0 && sel.Matches(gs) {
				cands = append(cands, gs)
			}
		}
		if len(cands) == 0 {
			continue
		}
		sort.Slice(cands, func(a, b int) bool {
			x, y := cands[a], cands[b]
			if req.Scheduling == Packed {
				cx, cy := counts[x.NodeName], counts[y.NodeName]
				if cx.allocated != cy.allocated {
					return cx.allocated > cy.allocated
				}
				if cx.ready != cy.ready {
					return cx.ready > cy.ready
				}
			}
			if c := comparePriorities(req.Priorities, x, y); c != 0 {
				return c < 0
			}
			return x.Name < y.Name
		})
		return cands, i
	}
	return nil, -1
}

// allocate picks like the index does for deterministic orders, applies and
// stores the result.
func (n *naive) allocate(req *Request, now time.Time) *GameServer {
	cands, _ := n.candidates(req)
	if len(cands) == 0 {
		return nil
	}
	out := Apply(cands[0], req, now)
	n.upsert(out)
	return out
}
