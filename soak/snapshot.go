package soak

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"time"
)

// Annotations the checker reads from a GameServer object. The owner
// annotation is the one Quartermaster's allocator writes on every server
// it allocates (the identity that holds it); an allocator that does not
// write it (Agones') leaves Owner empty and the checker skips the owner
// comparison.
// The key annotation is the idempotency key the server was allocated
// with, which names the request a dangling server was made for; on a
// server a forwarder allocated, the forwarded-for annotation names the
// caller it was allocated for, and the key is the forwarder's
// (ForwardedKey).
const (
	OwnerAnnotation         = "quartermaster.dev/owner"
	LastAllocatedAnnotation = "agones.dev/last-allocated"
	KeyAnnotation           = "quartermaster.dev/allocation-key"
	ForwardedForAnnotation  = "quartermaster.dev/forwarded-for"
)

// ForwardedKey is the key Quartermaster's forwarder sends for a caller's
// keyed request: "qmk-" and the hex of the first 16 bytes of the SHA-256
// of the caller's identity, a zero byte and the key, so that two callers'
// keys never meet at the remote. The checker reads it back to name the
// request a forwarded server was allocated for.
func ForwardedKey(identity, key string) string {
	h := sha256.New()
	h.Write([]byte(identity))
	h.Write([]byte{0})
	h.Write([]byte(key))
	return "qmk-" + hex.EncodeToString(h.Sum(nil)[:16])
}

// StateAllocated is the GameServer state of a held server.
const StateAllocated = "Allocated"

// Snapshot is every GameServer object read from every API server once a
// run has settled.
type Snapshot struct {
	Taken time.Time `json:"taken"`
	// Clusters are the clusters read; a cluster that could not be read
	// carries the error and no servers, and the checker says so rather
	// than take its absence as evidence.
	Clusters    []ClusterRead `json:"clusters"`
	GameServers []GameServer  `json:"gameServers"`
}

// ClusterRead is one cluster's read.
type ClusterRead struct {
	Name  string `json:"name"`
	Error string `json:"error,omitempty"`
}

// GameServer is what the checker needs of one GameServer object.
type GameServer struct {
	Cluster   string `json:"cluster"`
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	State     string `json:"state"`
	// Owner is the OwnerAnnotation's value; LastAllocated the
	// LastAllocatedAnnotation's. Annotations holds the object's others
	// that a report may want (allocation metadata the caller sent).
	Owner         string            `json:"owner,omitempty"`
	LastAllocated string            `json:"lastAllocated,omitempty"`
	Annotations   map[string]string `json:"annotations,omitempty"`
}

// FromObject fills a GameServer from an object's fields as the API server
// returns them: the annotations map is split into Owner, LastAllocated
// and the rest.
func FromObject(cluster, namespace, name, state string, annotations map[string]string) GameServer {
	gs := GameServer{Cluster: cluster, Namespace: namespace, Name: name, State: state}
	for k, v := range annotations {
		switch k {
		case OwnerAnnotation:
			gs.Owner = v
		case LastAllocatedAnnotation:
			gs.LastAllocated = v
		default:
			if gs.Annotations == nil {
				gs.Annotations = map[string]string{}
			}
			gs.Annotations[k] = v
		}
	}
	return gs
}

// WriteSnapshot writes s as one JSON document.
func WriteSnapshot(w io.Writer, s *Snapshot) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(s)
}

// ReadSnapshot reads and checks a snapshot; an error names the field.
func ReadSnapshot(r io.Reader) (*Snapshot, error) {
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	var s Snapshot
	if err := dec.Decode(&s); err != nil {
		return nil, fmt.Errorf("snapshot: %s", fieldError(err))
	}
	if dec.More() {
		return nil, fmt.Errorf("snapshot: one JSON document expected; found more")
	}
	if len(s.Clusters) == 0 {
		return nil, fmt.Errorf("snapshot: field clusters is empty: a snapshot names the clusters it read")
	}
	read := map[string]bool{}
	for i, c := range s.Clusters {
		if c.Name == "" {
			return nil, fmt.Errorf("snapshot: clusters[%d]: field name is missing", i)
		}
		if _, dup := read[c.Name]; dup {
			return nil, fmt.Errorf("snapshot: clusters[%d]: cluster %q is listed twice", i, c.Name)
		}
		read[c.Name] = c.Error == ""
	}
	seen := map[serverKey]bool{}
	for i, gs := range s.GameServers {
		ok, listed := read[gs.Cluster]
		switch {
		case gs.Cluster == "":
			return nil, fmt.Errorf("snapshot: gameServers[%d]: field cluster is missing", i)
		case !listed:
			return nil, fmt.Errorf("snapshot: gameServers[%d]: field cluster: %q is not in clusters", i, gs.Cluster)
		case !ok:
			return nil, fmt.Errorf("snapshot: gameServers[%d]: field cluster: %q could not be read, yet has servers", i, gs.Cluster)
		case gs.Name == "":
			return nil, fmt.Errorf("snapshot: gameServers[%d]: field name is missing", i)
		case gs.State == "":
			return nil, fmt.Errorf("snapshot: gameServers[%d] (%s): field state is missing", i, gs.Name)
		}
		k := serverKey{gs.Cluster, gs.Namespace, gs.Name}
		if seen[k] {
			return nil, fmt.Errorf("snapshot: gameServers[%d]: %s is listed twice", i, k)
		}
		seen[k] = true
	}
	return &s, nil
}

// serverKey names one server across clusters.
type serverKey struct{ Cluster, Namespace, Name string }

func (k serverKey) String() string {
	if k.Namespace == "" {
		return k.Cluster + "/" + k.Name
	}
	return k.Cluster + "/" + k.Namespace + "/" + k.Name
}
