package memory

import (
	"container/heap"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/quartermaster-dev/quartermaster/core"
)

// agent plays Agones' fleet controller and node scheduler for the memory
// backend. It is driven by Backend.Step, one call at a time.
type agent struct {
	b  *Backend
	mu sync.Mutex

	fleets []*fleet
	byKey  map[core.Key]*fleet
	nodes  []*node

	expiries timeHeap // allocations whose session ends
	starting timeHeap // servers that become Ready

	rnd    uint64
	events []event
}

type fleet struct {
	spec     FleetSpec
	count    int // servers that exist, in any state
	labels   map[string]string
	annots   map[string]string
	counters map[string]core.Counter
	lists    map[string]core.List
}

type node struct {
	name      string
	addresses []core.Address
	servers   int
	ports     map[int32]bool
	nextPort  int32
}

// Ports handed out on each simulated node.
const (
	firstPort = 7000
	lastPort  = 65000
)

func newAgent(b *Backend, cfg *Config, seed uint64) *agent {
	a := &agent{b: b, byKey: map[core.Key]*fleet{}, rnd: seed ^ 0x51ed}
	for i := range max(cfg.Nodes, 1) {
		ip := fmt.Sprintf("10.0.%d.%d", (i+1)/250, (i+1)%250+1)
		name := "node-" + strconv.Itoa(i+1)
		a.nodes = append(a.nodes, &node{
			name:      name,
			addresses: []core.Address{{Type: "InternalIP", Address: ip}, {Type: "Hostname", Address: name}},
			ports:     map[int32]bool{},
			nextPort:  firstPort,
		})
	}
	for _, spec := range cfg.Fleets {
		f := &fleet{spec: spec}
		// Servers share these maps: GameServers are immutable once in the
		// index, and the core copies before it changes anything.
		f.labels = map[string]string{core.FleetLabel: spec.Name}
		for k, v := range spec.Labels {
			f.labels[k] = v
		}
		if len(spec.Annotations) > 0 {
			f.annots = spec.Annotations
		}
		if len(spec.Counters) > 0 {
			f.counters = map[string]core.Counter{}
			for k, c := range spec.Counters {
				f.counters[k] = core.Counter{Count: c.Count, Capacity: c.Capacity}
			}
		}
		if len(spec.Lists) > 0 {
			f.lists = map[string]core.List{}
			for k, l := range spec.Lists {
				f.lists[k] = core.List{Values: l.Values, Capacity: l.Capacity}
			}
		}
		a.fleets = append(a.fleets, f)
		a.byKey[core.Key{Namespace: spec.Namespace, Name: spec.Name}] = f
	}
	return a
}

func (a *agent) step(now time.Time) time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()

	a.events = a.b.takeEvents(a.events)
	for i := range a.events {
		e := &a.events[i]
		switch e.kind {
		case evAllocated:
			heap.Push(&a.expiries, timed{at: e.end, key: e.gs.Key(), stamp: e.stamp})
		case evRemoved:
			a.forget(e.gs)
		}
		a.events[i] = event{}
	}

	for len(a.expiries) > 0 && !a.expiries[0].at.After(now) {
		x := heap.Pop(&a.expiries).(timed)
		// A server allocated again since has a newer stamp and a later
		// expiry of its own; removeIf leaves it alone.
		if gs, ok := a.b.removeIf(x.key, x.stamp); ok {
			a.forget(gs)
		}
	}

	for len(a.starting) > 0 && !a.starting[0].at.After(now) {
		x := heap.Pop(&a.starting).(timed)
		if gs, ok := a.b.ix.Get(x.key); ok && gs.State == core.StateScheduled {
			ready := *gs
			ready.State = core.StateReady
			a.b.ix.Upsert(&ready)
		}
	}

	a.fill(now, false)

	var next time.Time
	for _, h := range []timeHeap{a.expiries, a.starting} {
		if len(h) > 0 && (next.IsZero() || h[0].at.Before(next)) {
			next = h[0].at
		}
	}
	return next
}

// fill brings every fleet up to its replicas. The first fill (initial)
// makes Ready servers at once, so a fresh backend can allocate
// immediately; later ones honour the fleet's start-up time.
func (a *agent) fill(now time.Time, initial bool) {
	for _, f := range a.fleets {
		for f.count < f.spec.Replicas {
			a.create(f, now, initial)
		}
	}
}

func (a *agent) create(f *fleet, now time.Time, initial bool) {
	n := a.nodes[0]
	for _, x := range a.nodes[1:] {
		if x.servers < n.servers {
			n = x
		}
	}
	var name string
	for {
		name = f.spec.Name + "-" + a.suffix()
		if _, taken := a.b.ix.Get(core.Key{Namespace: f.spec.Namespace, Name: name}); !taken {
			break
		}
	}
	ports := make([]core.Port, len(f.spec.Ports))
	for i, p := range f.spec.Ports {
		ports[i] = core.Port{Name: p, Port: n.takePort()}
	}
	gs := &core.GameServer{
		Namespace:   f.spec.Namespace,
		Name:        name,
		Labels:      f.labels,
		Annotations: f.annots,
		State:       core.StateReady,
		NodeName:    n.name,
		Address:     n.addresses[0].Address,
		Addresses:   n.addresses,
		Ports:       ports,
		Counters:    f.counters,
		Lists:       f.lists,
	}
	if d := f.spec.StartupDuration.Duration; d > 0 && !initial {
		gs.State = core.StateScheduled
		heap.Push(&a.starting, timed{at: now.Add(d), key: gs.Key()})
	}
	n.servers++
	f.count++
	a.b.ix.Upsert(gs)
}

// forget accounts for a server that is gone.
func (a *agent) forget(gs *core.GameServer) {
	if f := a.byKey[core.Key{Namespace: gs.Namespace, Name: gs.Labels[core.FleetLabel]}]; f != nil {
		f.count--
	}
	for _, n := range a.nodes {
		if n.name == gs.NodeName {
			n.servers--
			for _, p := range gs.Ports {
				delete(n.ports, p.Port)
			}
			break
		}
	}
}

func (n *node) takePort() int32 {
	for {
		p := n.nextPort
		n.nextPort++
		if n.nextPort > lastPort {
			n.nextPort = firstPort
		}
		if !n.ports[p] {
			n.ports[p] = true
			return p
		}
	}
}

// suffix returns five characters as Kubernetes' generateName would, from the
// agent's own seeded generator so names repeat for the same seed.
func (a *agent) suffix() string {
	const alphabet = "bcdfghjklmnpqrstvwxz2456789"
	a.rnd += 0x9e3779b97f4a7c15
	z := a.rnd
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	z ^= z >> 31
	var b [5]byte
	for i := range b {
		b[i] = alphabet[z%uint64(len(alphabet))]
		z /= uint64(len(alphabet))
	}
	return string(b[:])
}

type timed struct {
	at    time.Time
	key   core.Key
	stamp string
}

type timeHeap []timed

func (h timeHeap) Len() int           { return len(h) }
func (h timeHeap) Less(i, j int) bool { return h[i].at.Before(h[j].at) }
func (h timeHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *timeHeap) Push(x any)        { *h = append(*h, x.(timed)) }
func (h *timeHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
