package fleetagent

import (
	"fmt"
	"strconv"
	"strings"
	"sync"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// Ports the simulated nodes hand out, as Agones' default port range.
const (
	minPort = 7000
	maxPort = 8000
)

// nodeLoad is the simulated node pool as one pass sees it: how many
// servers each node runs and which ports they hold.
type nodeLoad struct {
	mu    sync.Mutex
	names []string
	n     map[string]int
	ports map[string]map[int64]bool
}

func nodeName(i int) string { return fmt.Sprintf("node-%03d", i) }

// nodeAddress gives each simulated node a stable private address.
func nodeAddress(node string) string {
	i, err := strconv.Atoi(strings.TrimPrefix(node, "node-"))
	if err != nil || i < 0 {
		return "10.1.255.254"
	}
	return fmt.Sprintf("10.1.%d.%d", i/250, i%250+1)
}

func newNodeLoad(nodes int) *nodeLoad {
	l := &nodeLoad{n: map[string]int{}, ports: map[string]map[int64]bool{}}
	for i := range nodes {
		l.names = append(l.names, nodeName(i))
	}
	return l
}

// add records an existing server.
func (l *nodeLoad) add(gs *unstructured.Unstructured) {
	node, _, _ := unstructured.NestedString(gs.Object, "status", "nodeName")
	if node == "" {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.n[node]++
	ps, _, _ := unstructured.NestedSlice(gs.Object, "status", "ports")
	for _, p := range ps {
		m, _ := p.(map[string]any)
		if v, ok := m["port"].(int64); ok {
			l.usePort(node, v)
		}
	}
}

func (l *nodeLoad) usePort(node string, p int64) {
	if l.ports[node] == nil {
		l.ports[node] = map[int64]bool{}
	}
	l.ports[node][p] = true
}

func (l *nodeLoad) count(node string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.n[node]
}

// pick chooses a node: the least loaded for Distributed fleets; for Packed
// ones the fullest node that still has room under maxPerNode (as Agones'
// Packed scheduling fills nodes before starting new ones), else the least
// loaded. Ties go to the lowest-numbered node, so placement is stable.
func (l *nodeLoad) pick(distributed bool, maxPerNode int) string {
	l.mu.Lock()
	defer l.mu.Unlock()
	best, bestN := "", -1
	if !distributed {
		for _, name := range l.names {
			if n := l.n[name]; n < maxPerNode && n > bestN {
				best, bestN = name, n
			}
		}
		if best != "" {
			return best
		}
	}
	for _, name := range l.names {
		if n := l.n[name]; bestN < 0 || n < bestN {
			best, bestN = name, n
		}
	}
	return best
}

// place counts one more server on node.
func (l *nodeLoad) place(node string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.n[node]++
}

// port takes the lowest free port on node (wrapping to minPort if a node
// somehow holds the whole range: ports are labels here, nothing binds them).
func (l *nodeLoad) port(node string) int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	for p := int64(minPort); p < maxPort; p++ {
		if !l.ports[node][p] {
			l.usePort(node, p)
			return p
		}
	}
	return minPort
}
