package kube

import (
	"strings"
	"testing"
	"time"
)

func TestSpreadWidensOnConflictsAndNarrowsInQuiet(t *testing.T) {
	var applied []int
	s := newSpreadControl(0, func(n int) { applied = append(applied, n) })
	t0 := time.Unix(1000, 0)
	if s.current() != 1 {
		t.Fatalf("a lone replica starts at exact Packed, got %d", s.current())
	}
	// A burst of conflicts from one race widens once.
	s.observe(1, t0)
	s.observe(2, t0.Add(time.Millisecond))
	if got := s.current(); got != 4 {
		t.Fatalf("after one burst: spread %d, want 4", got)
	}
	// Conflicts that go on keep widening, up to the bound.
	at := t0
	for range 20 {
		at = at.Add(widenEvery)
		s.observe(1, at)
	}
	if got := s.current(); got != DefaultMaxSpread {
		t.Fatalf("after lasting conflicts: spread %d, want %d", got, DefaultMaxSpread)
	}
	// Quiet allocations just after a conflict change nothing...
	s.observe(0, at.Add(time.Second))
	if got := s.current(); got != DefaultMaxSpread {
		t.Fatalf("1s after a conflict: spread %d, want it kept", got)
	}
	// ...then halve it once per DefaultNarrowAfter, down to the base.
	for i := 1; i <= 12; i++ {
		s.observe(0, at.Add(time.Duration(i)*DefaultNarrowAfter))
		s.observe(0, at.Add(time.Duration(i)*DefaultNarrowAfter+time.Millisecond))
	}
	if got := s.current(); got != 1 {
		t.Fatalf("after long quiet: spread %d, want the base 1", got)
	}
	if applied[0] != 1 || applied[len(applied)-1] != 1 {
		t.Fatalf("index saw %v", applied)
	}
}

func TestSpreadBaseFollowsReplicas(t *testing.T) {
	cur := 0
	s := newSpreadControl(0, func(n int) { cur = n })
	s.setReplicas(3)
	if cur != replicaSpread {
		t.Fatalf("with 3 replicas: spread %d, want %d", cur, replicaSpread)
	}
	t0 := time.Unix(1000, 0)
	s.observe(1, t0)
	if cur != 2*replicaSpread {
		t.Fatalf("conflict with 3 replicas: spread %d, want %d", cur, 2*replicaSpread)
	}
	// Back to one replica: the base drops, the spread narrows in quiet.
	s.setReplicas(1)
	for i := 1; i <= 10; i++ {
		s.observe(0, t0.Add(time.Duration(i)*DefaultNarrowAfter))
	}
	if cur != 1 {
		t.Fatalf("alone again after quiet: spread %d, want 1", cur)
	}
	// A configured spread is the base whatever the replica count.
	c := newSpreadControl(8, func(n int) { cur = n })
	c.setReplicas(5)
	if cur != 8 || c.current() != 8 {
		t.Fatalf("configured 8 with 5 replicas: spread %d", cur)
	}
}

func TestLeaseName(t *testing.T) {
	for _, tc := range []struct{ in, prefix string }{
		{"qm-allocator-7d9f8b-x2kq", "qm-allocator-7d9f8b-x2kq-"},
		{"Host.Example.COM", "host-example-com-"},
		{"", "qm-allocator-"},
		{"___", "qm-allocator-"},
		{strings.Repeat("a", 80), strings.Repeat("a", 48) + "-"},
	} {
		a, err := leaseName(tc.in)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := leaseName(tc.in)
		if !strings.HasPrefix(a, tc.prefix) || len(a) != len(tc.prefix)+8 || len(a) > 63 {
			t.Errorf("leaseName(%q) = %q, want %q + 8 hex digits", tc.in, a, tc.prefix)
		}
		if a == b {
			t.Errorf("leaseName(%q) twice gave %q: the suffix must differ", tc.in, a)
		}
	}
}

func TestValidLabelValue(t *testing.T) {
	for v, ok := range map[string]bool{
		"qm-allocator": true, "a": true, "A.b_c-1": true,
		"-a": false, "a-": false, "a b": false, "a/b": false, strings.Repeat("x", 64): false,
	} {
		if got := validLabelValue(v) == ""; got != ok {
			t.Errorf("validLabelValue(%q) ok=%v, want %v", v, got, ok)
		}
	}
}
