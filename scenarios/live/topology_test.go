package live

import (
	"strings"
	"testing"
	"time"

	"github.com/quartermaster-dev/quartermaster/kindcluster/rig"
)

// A scenario file describes a rig: its clusters, fleets and policies, the
// callers' link to each cluster from its rtt, and what the rig does not
// model named rather than dropped.
func TestScenarioDescribesARig(t *testing.T) {
	top, err := LoadTopology("../burst-to-cloud.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if len(top.Spec.Clusters) != 2 || len(top.Spec.Policies) != 2 {
		t.Fatalf("clusters %d policies %d, want 2 and 2", len(top.Spec.Clusters), len(top.Spec.Policies))
	}
	if top.Spec.Clusters[0].Allocator.Replicas == nil || len(top.Spec.Clusters[0].Fleets) == 0 {
		t.Errorf("cluster 0 came through without its allocator or fleets: %+v", top.Spec.Clusters[0])
	}
	// The on-prem cluster's rtt (constant 4ms) is its callers' link: 2ms
	// each way.
	if got := top.LinkBetween(rig.CallersName, "on-prem"); got.Latency.D() != 2*time.Millisecond {
		t.Errorf("callers -> on-prem: %v, want 2ms each way", got.Latency.D())
	}
	notes := strings.Join(top.NotModelled(), "\n")
	for _, want := range []string{"apiServer.writeLatency", "informerDelay", "buffer", "costPerNodeHour"} {
		if !strings.Contains(notes, want) {
			t.Errorf("NotModelled does not name %s:\n%s", want, notes)
		}
	}
	if strings.Contains(notes, "window") {
		t.Errorf("a scenario without windows is said to have one:\n%s", notes)
	}

	// A topology file loads as rig.Load reads it, with nothing unmodelled.
	plain, err := LoadTopology("../../kindcluster/rig/testdata/valid-burst-to-cloud.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if n := plain.NotModelled(); len(n) != 0 || plain.Metadata.Name != "burst-to-cloud" {
		t.Errorf("topology file: name %q, not modelled %v", plain.Metadata.Name, n)
	}
}

// A rig brings its policies up without windows, so a scenario whose
// policies have them must say so rather than lose them silently.
func TestWindowNamedNotModelled(t *testing.T) {
	top, err := LoadTopology("../evening-peak.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if notes := strings.Join(top.NotModelled(), "\n"); !strings.Contains(notes, ".window (") {
		t.Errorf("NotModelled does not name the policy window:\n%s", notes)
	}
}
