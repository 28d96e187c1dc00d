package rig

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/rs/zerolog"
)

// This machine's kernels have no netem, so links are TCP proxies in this
// process, built on Shopify's toxiproxy used as a library: every connection
// from the callers to an allocator, and from an allocator to another
// cluster's, goes through one, and latency and faults are its "toxics",
// switched while load runs.

// Fault is something a link can be made to do wrong.
type Fault string

// The faults a link knows.
const (
	// FaultDown closes the link's listener and its connections: new
	// connections are refused, as from a cluster that is gone.
	FaultDown Fault = "down"
	// FaultReset accepts connections and resets them at once.
	FaultReset Fault = "reset"
	// FaultSlow adds a second of latency each way.
	FaultSlow Fault = "slow"
	// FaultAnswerLost lets what the caller sends through and resets a
	// connection at the first bytes coming back: a request on a connection
	// open when the fault began reaches the allocator, which acts on it,
	// and its answer never arrives. A new connection is reset at the
	// server's first handshake bytes, so nothing sent on it reaches the
	// allocator.
	FaultAnswerLost Fault = "answer-lost"
)

// faults lists the faults a link knows, in the order Faults reports them.
var faults = []Fault{FaultDown, FaultReset, FaultSlow, FaultAnswerLost}

// Proxy is one proxied connection path from an end to an allocator replica.
type Proxy struct {
	From, To string // "callers" or a cluster; a cluster
	Replica  int

	mu      sync.Mutex
	proxy   *toxiproxy.Proxy
	addr    string // where it listens, kept across down and up
	dial    string // what the other end dials, when not addr (AddAt)
	latency Link
	faults  map[Fault]bool
	toxics  map[string]string // in force, by name: what apply last made
}

// Proxies is the set of a rig's links, sharing one toxiproxy server.
type Proxies struct {
	server *toxiproxy.ApiServer
	mu     sync.Mutex
	all    []*Proxy
}

// NewProxies returns an empty set of links.
func NewProxies() *Proxies {
	return &Proxies{server: toxiproxy.NewServer(toxiproxy.NewMetricsContainer(nil), zerolog.Nop())}
}

// Add starts a link listening on a free loopback port and forwarding to
// upstream, with the given latency each way.
func (ls *Proxies) Add(from, to string, replica int, upstream string, l Link) (*Proxy, error) {
	return ls.AddAt("127.0.0.1:0", "", from, to, replica, upstream, l)
}

// AddAt starts a link listening on listen (host:port; port 0 picks one)
// and forwarding to upstream. dial, when not empty, is the address the
// other end reaches the listener by, if that differs from where it
// listens: a kind cluster's pods reach a link on this host by its Docker
// network's gateway address, whatever interface it listens on. Addr
// returns dial then, since that is what policies name and responses
// report as their source.
func (ls *Proxies) AddAt(listen, dial, from, to string, replica int, upstream string, l Link) (*Proxy, error) {
	name := fmt.Sprintf("%s->%s/%d", from, to, replica)
	p := toxiproxy.NewProxy(ls.server, name, listen, upstream)
	if err := p.Start(); err != nil {
		return nil, fmt.Errorf("link %s: listen on %s: %w", name, listen, err)
	}
	lk := &Proxy{From: from, To: to, Replica: replica, proxy: p, addr: p.Listen, dial: dial, faults: map[Fault]bool{}}
	if err := lk.SetLatency(l); err != nil {
		p.Stop()
		return nil, err
	}
	ls.mu.Lock()
	ls.all = append(ls.all, lk)
	ls.mu.Unlock()
	return lk, nil
}

// All returns every link, in the order they were added.
func (ls *Proxies) All() []*Proxy {
	ls.mu.Lock()
	defer ls.mu.Unlock()
	return append([]*Proxy(nil), ls.all...)
}

// Find returns the links from one end to a cluster (every replica's).
func (ls *Proxies) Find(from, to string) []*Proxy {
	var out []*Proxy
	for _, l := range ls.All() {
		if l.From == from && l.To == to {
			out = append(out, l)
		}
	}
	return out
}

// Close stops every link.
func (ls *Proxies) Close() {
	for _, l := range ls.All() {
		l.mu.Lock()
		l.proxy.Stop()
		l.mu.Unlock()
	}
}

// Addr is the address to dial instead of the allocator's own: where the
// link listens, or the address given to AddAt for it.
func (l *Proxy) Addr() string {
	if l.dial != "" {
		return l.dial
	}
	return l.addr
}

// ListenAddr is where the link listens, which differs from Addr when
// AddAt was given the address the other end dials.
func (l *Proxy) ListenAddr() string { return l.addr }

func (l *Proxy) String() string {
	return fmt.Sprintf("%s -> %s/%d (%s)", l.From, l.To, l.Replica, l.addr)
}

// SetLatency sets the link's latency and jitter, each way.
func (l *Proxy) SetLatency(lat Link) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.latency = lat
	return l.apply()
}

// Set switches a fault on or off.
func (l *Proxy) Set(f Fault, on bool) error {
	if !slices.Contains(faults, f) {
		return fmt.Errorf("unknown fault %q (want %s, %s, %s or %s)", f, FaultDown, FaultReset, FaultSlow, FaultAnswerLost)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.faults[f] = on
	return l.apply()
}

// Faults lists the faults switched on.
func (l *Proxy) Faults() []Fault {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []Fault
	for _, f := range faults {
		if l.faults[f] {
			out = append(out, f)
		}
	}
	return out
}

// apply makes the proxy's state what l says: listening or not, and the
// toxics of its latency and faults. Called with l.mu held.
func (l *Proxy) apply() error {
	down := l.faults[FaultDown]
	if down && l.proxy.Enabled {
		l.proxy.Stop()
	}
	if !down && !l.proxy.Enabled {
		// Listen where it listened before: the policies point there.
		l.proxy.Listen = l.addr
		if err := l.proxy.Start(); err != nil {
			return fmt.Errorf("link %s: up again: %w", l, err)
		}
	}
	lat := l.latency
	if l.faults[FaultSlow] {
		lat.Latency += Duration(time.Second)
	}
	want := map[string]string{}
	for _, dir := range []string{"upstream", "downstream"} {
		if lat.Latency > 0 {
			want["latency_"+dir] = fmt.Sprintf(`{"name":"latency_%s","type":"latency","stream":"%s","attributes":{"latency":%d,"jitter":%d}}`,
				dir, dir, lat.Latency.D().Milliseconds(), lat.Jitter.D().Milliseconds())
		}
	}
	if l.faults[FaultReset] {
		want["reset_upstream"] = `{"name":"reset_upstream","type":"reset_peer","stream":"upstream","attributes":{"timeout":0}}`
	}
	if l.faults[FaultAnswerLost] {
		// reset_peer resets the connection at the first chunk that
		// reaches it, dropping the chunk.
		want["answer_lost"] = `{"name":"answer_lost","type":"reset_peer","stream":"downstream","attributes":{"timeout":0}}`
	}
	if maps.Equal(want, l.toxics) {
		// Nothing to change: a link going down or up keeps its toxics.
		// (Removing a toxic waits for every connection's stream through
		// it, which a reset_peer toxic can keep from ever finishing.)
		return nil
	}
	// Replace the toxics wholesale: few, and changed rarely.
	l.proxy.Toxics.ResetToxics(context.Background())
	l.toxics = nil
	for _, name := range sortedKeys(want) {
		if _, err := l.proxy.Toxics.AddToxicJson(strings.NewReader(want[name])); err != nil {
			return fmt.Errorf("link %s: toxic %s: %w", l, name, err)
		}
	}
	l.toxics = want
	return nil
}
