package core

import (
	"strconv"
	"time"
)

// State is a GameServer's lifecycle state, as Agones names it. Only Ready and
// Allocated servers are candidates for allocation.
type State string

// The states Agones defines. The index only offers StateReady and
// StateAllocated servers to allocations; the others are tracked so a server
// that becomes Ready again is picked up.
const (
	StatePortAllocation State = "PortAllocation"
	StateCreating       State = "Creating"
	StateStarting       State = "Starting"
	StateScheduled      State = "Scheduled"
	StateRequestReady   State = "RequestReady"
	StateReady          State = "Ready"
	StateReserved       State = "Reserved"
	StateAllocated      State = "Allocated"
	StateShutdown       State = "Shutdown"
	StateError          State = "Error"
	StateUnhealthy      State = "Unhealthy"
)

// Well-known label and annotation keys.
const (
	// SystemLabelPrefix marks labels the system manages (Agones'); an
	// allocation's metadata may not set them.
	SystemLabelPrefix = "agones.dev/"
	// FleetLabel names the Fleet a GameServer belongs to.
	FleetLabel = "agones.dev/fleet"
	// LastAllocatedAnnotation records when a server was last allocated
	// (RFC 3339 with nanoseconds).
	LastAllocatedAnnotation = "agones.dev/last-allocated"
)

// Counter is a GameServer's named integer counter (Agones Counts).
type Counter struct {
	Count    int64
	Capacity int64
}

// Available is the room left in the counter: Capacity - Count. It is
// negative only for an inconsistent counter (count above capacity), which
// then fails any minAvailable filter, as in Agones.
func (c Counter) Available() int64 { return c.Capacity - c.Count }

// List is a GameServer's named list of values (Agones Lists).
type List struct {
	Values   []string
	Capacity int64
}

// Available is the room left in the list: Capacity - len(Values).
func (l List) Available() int64 { return l.Capacity - int64(len(l.Values)) }

// Contains reports whether v is one of the list's values.
func (l List) Contains(v string) bool {
	for _, x := range l.Values {
		if x == v {
			return true
		}
	}
	return false
}

// Port is a named port a GameServer listens on.
type Port struct {
	Name string
	Port int32
}

// Address is one network address of a GameServer's node (type as in
// Kubernetes' NodeAddress: InternalIP, ExternalIP, Hostname, ...).
type Address struct {
	Type    string
	Address string
}

// GameServer is the engine's view of one game server.
//
// A GameServer handed to or returned by the core is treated as immutable:
// the core never modifies one it did not create, and Apply returns a new
// value. Callers that want to change a server build a new one (Clone helps)
// and hand it to Index.Upsert.
type GameServer struct {
	Namespace   string
	Name        string
	Labels      map[string]string
	Annotations map[string]string
	State       State
	NodeName    string
	Address     string
	Addresses   []Address
	Ports       []Port
	Counters    map[string]Counter
	Lists       map[string]List
	// Version is opaque to the core: the backend's optimistic-concurrency
	// token (a Kubernetes resourceVersion). The core copies it, never reads it.
	Version string
	// AllocatedAt is when Apply last allocated the server, in Unix
	// nanoseconds; 0 when it has not since the server came into the core.
	// It stands for the agones.dev/last-allocated annotation, which Apply
	// does not write into Annotations: a map of its own per allocation
	// would be most of what an allocated server keeps in memory, and leave
	// the collector that much more to mark. Where it is set it wins over any
	// stamp in Annotations. Read annotations as Agones has them with
	// Annotation, LastAllocated and AllAnnotations.
	AllocatedAt int64
}

// Annotation returns the value of annotation k as Agones has it: the
// last-allocated stamp from AllocatedAt, any other from Annotations.
func (gs *GameServer) Annotation(k string) (string, bool) {
	if k == LastAllocatedAnnotation && gs.AllocatedAt != 0 {
		return gs.LastAllocated(), true
	}
	v, ok := gs.Annotations[k]
	return v, ok
}

// LastAllocated is the agones.dev/last-allocated annotation's value: when
// the server was last allocated, RFC 3339 with nanoseconds in UTC ("" when
// it never was).
func (gs *GameServer) LastAllocated() string {
	if gs.AllocatedAt == 0 {
		return gs.Annotations[LastAllocatedAnnotation]
	}
	var buf [len(time.RFC3339Nano) + 8]byte
	return string(gs.AppendLastAllocated(buf[:0]))
}

// AppendLastAllocated appends LastAllocated to b: the encoders' way to it
// without a string of its own.
func (gs *GameServer) AppendLastAllocated(b []byte) []byte {
	if gs.AllocatedAt == 0 {
		return append(b, gs.Annotations[LastAllocatedAnnotation]...)
	}
	return time.Unix(0, gs.AllocatedAt).UTC().AppendFormat(b, time.RFC3339Nano)
}

// AllAnnotations returns the annotations as Agones has them: Annotations
// with the last-allocated stamp of AllocatedAt. Without one it is
// Annotations itself, shared: the caller must not modify it.
func (gs *GameServer) AllAnnotations() map[string]string {
	if gs.AllocatedAt == 0 {
		return gs.Annotations
	}
	out := make(map[string]string, len(gs.Annotations)+1)
	for k, v := range gs.Annotations {
		out[k] = v
	}
	out[LastAllocatedAnnotation] = gs.LastAllocated()
	return out
}

// Key identifies a GameServer within the index.
type Key struct {
	Namespace string
	Name      string
}

// Key returns the server's namespace/name key.
func (gs *GameServer) Key() Key { return Key{gs.Namespace, gs.Name} }

// Clone returns a deep copy of gs.
func (gs *GameServer) Clone() *GameServer {
	c := *gs
	c.Labels = cloneStrings(gs.Labels)
	c.Annotations = cloneStrings(gs.Annotations)
	if gs.Addresses != nil {
		c.Addresses = append([]Address(nil), gs.Addresses...)
	}
	if gs.Ports != nil {
		c.Ports = append([]Port(nil), gs.Ports...)
	}
	if gs.Counters != nil {
		c.Counters = make(map[string]Counter, len(gs.Counters))
		for k, v := range gs.Counters {
			c.Counters[k] = v
		}
	}
	if gs.Lists != nil {
		c.Lists = make(map[string]List, len(gs.Lists))
		for k, v := range gs.Lists {
			v.Values = append([]string(nil), v.Values...)
			c.Lists[k] = v
		}
	}
	return &c
}

func cloneStrings(m map[string]string) map[string]string {
	if m == nil {
		return nil
	}
	c := make(map[string]string, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}

// Operator is a label match expression's operator.
type Operator string

// The label selector operators of Kubernetes' LabelSelectorRequirement.
const (
	OpIn           Operator = "In"
	OpNotIn        Operator = "NotIn"
	OpExists       Operator = "Exists"
	OpDoesNotExist Operator = "DoesNotExist"
)

// LabelExpression is one matchExpressions requirement.
type LabelExpression struct {
	Key      string
	Operator Operator
	Values   []string
}

// CounterSelector filters on a counter. A zero max means no limit.
type CounterSelector struct {
	MinCount     int64
	MaxCount     int64
	MinAvailable int64
	MaxAvailable int64
}

// ListSelector filters on a list. A zero max means no limit; an empty
// ContainsValue matches any list.
type ListSelector struct {
	ContainsValue string
	MinAvailable  int64
	MaxAvailable  int64
}

// Selector says which GameServers a request may take. All its parts must
// match (AND). A zero Selector matches every Ready server.
type Selector struct {
	MatchLabels      map[string]string
	MatchExpressions []LabelExpression
	// State is StateReady (the default when empty) or StateAllocated (to
	// re-allocate a live server).
	State    State
	Counters map[string]CounterSelector
	Lists    map[string]ListSelector
	// MatchAnnotations is not part of Agones' API: the service sets it, for
	// example so that a caller re-allocating a live server only matches
	// servers it owns.
	MatchAnnotations map[string]string

	// compiled is set by Normalize: the maps above as slices, for matching
	// without map iteration. A normalized request must not be modified.
	compiled *compiledSelector
}

// Strategy is how the allocator chooses among matching servers.
type Strategy int

const (
	// Packed fills nodes that are already busy first, so that emptied nodes
	// can be scaled down (the Agones default).
	Packed Strategy = iota
	// Distributed spreads allocations over the fleet.
	Distributed
)

func (s Strategy) String() string {
	switch s {
	case Packed:
		return "Packed"
	case Distributed:
		return "Distributed"
	}
	return "Strategy(" + strconv.Itoa(int(s)) + ")"
}

// PriorityType says whether a Priority names a counter or a list.
type PriorityType int

const (
	PriorityCounter PriorityType = iota
	PriorityList
)

func (t PriorityType) String() string {
	switch t {
	case PriorityCounter:
		return "Counter"
	case PriorityList:
		return "List"
	}
	return "PriorityType(" + strconv.Itoa(int(t)) + ")"
}

// Order is a Priority's sort direction.
type Order int

const (
	// Ascending prefers servers with less available capacity.
	Ascending Order = iota
	// Descending prefers servers with more available capacity.
	Descending
)

func (o Order) String() string {
	switch o {
	case Ascending:
		return "Ascending"
	case Descending:
		return "Descending"
	}
	return "Order(" + strconv.Itoa(int(o)) + ")"
}

// Priority orders candidates by the available capacity of a counter or list.
type Priority struct {
	Type  PriorityType
	Key   string
	Order Order
}

// Counter action names.
const (
	ActionIncrement = "Increment"
	ActionDecrement = "Decrement"
)

// CounterAction changes a counter on the allocated server. Nil fields are
// not set by the request.
type CounterAction struct {
	Action   string // ActionIncrement, ActionDecrement, or "" with no Amount
	Amount   *int64
	Capacity *int64
}

// ListAction changes a list on the allocated server.
type ListAction struct {
	AddValues    []string
	DeleteValues []string
	Capacity     *int64
}

// MetaPatch is merged into the allocated server's labels and annotations.
type MetaPatch struct {
	Labels      map[string]string
	Annotations map[string]string
}

// MultiClusterSetting asks for a multi-cluster allocation: policies in the
// request's namespace whose labels match PolicySelector decide where to go.
type MultiClusterSetting struct {
	Enabled        bool
	PolicySelector map[string]string
}

// Request is one allocation request. Run it through Normalize before use.
type Request struct {
	// Namespace to allocate in; "default" when empty.
	Namespace string
	// Selectors, tried in order: the first that any candidate matches wins.
	Selectors []Selector
	// Required and Preferred are the deprecated form. When Selectors is
	// empty, Normalize turns them into Preferred..., Required.
	Required  *Selector
	Preferred []Selector

	Scheduling   Strategy
	Metadata     MetaPatch
	Priorities   []Priority
	Counters     map[string]CounterAction
	Lists        map[string]ListAction
	MultiCluster MultiClusterSetting
}

// Result describes an allocation's outcome.
type Result struct {
	// GameServer is the allocated server as it is after the allocation.
	GameServer *GameServer
	// Previous is the server as it was when chosen; its Version is the
	// precondition for committing the allocation.
	Previous *GameServer
	// Selector is the index of the selector in the normalized request that
	// matched.
	Selector int

	hold  uint64 // identifies the index's hold on the server
	entry *entry // the held entry, so Commit and Abort need no lookup
}

// Policy is one GameServerAllocationPolicy: a cluster to try, with its
// priority (lower first) and weight (share within one priority).
type Policy struct {
	Name     string
	Priority int32
	Weight   int
	// Labels are matched by MultiClusterSetting.PolicySelector.
	Labels     map[string]string
	Connection ConnectionInfo
	// Window is when the policy is in force; nil: always. Agones has no
	// such field; allocators read it from annotations. A pointer, so that
	// the policies every multi-cluster request copies stay small.
	Window *Window
}

// ConnectionInfo says how to reach a cluster's allocator.
type ConnectionInfo struct {
	ClusterName string
	// Endpoints of the remote allocator; empty means this cluster.
	Endpoints  []string
	SecretName string
	// Namespace to allocate in on the remote cluster.
	Namespace string
	ServerCA  []byte
}

// IsLocal reports whether the connection points at this cluster.
func (c ConnectionInfo) IsLocal() bool { return len(c.Endpoints) == 0 }
