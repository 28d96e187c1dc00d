package forward

import (
	"testing"
	"time"

	"github.com/quartermaster-dev/quartermaster/core"
)

// BenchmarkPolicySelection is what windows add to each multi-cluster
// request: the policies of the request's namespace that its selector
// matches, as the forwarder chose them before windows ("plain": the
// source's list, then the selector) and now ("snapshot": the clock, the
// snapshot of the policies in force, then the selector). Eight policies,
// two of them windowed (one open, one closed). The two run in alternate
// slices, so that a busy machine slows both alike:
//
//	go test -run '^$' -bench PolicySelection -benchtime 2000000x -count 5 ./allocator/forward/
func BenchmarkPolicySelection(b *testing.B) {
	now := time.Now()
	var ps []core.Policy
	for i := range 8 {
		p := core.Policy{Name: string(rune('a' + i)), Priority: int32(i % 3), Weight: 1,
			Labels: map[string]string{"set": "w"}, Connection: core.ConnectionInfo{ClusterName: string(rune('a' + i))}}
		switch i {
		case 3:
			p.Window = &core.Window{From: now.Add(-time.Hour)}
		case 5:
			p.Window = &core.Window{From: now.Add(24 * time.Hour)}
		}
		ps = append(ps, p)
	}
	store := NewStore(NewSet(map[string][]core.Policy{"default": ps}, nil))
	f, err := New(Options{Source: store, Self: "bench"})
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	sel := map[string]string{"set": "w"}
	plain := func() {
		if len(core.SelectPolicies(store.Policies("default"), sel)) != 8 {
			b.Fatal("wrong selection")
		}
	}
	snapshot := func() {
		if got, err := f.policiesInForce("default", sel); err != nil || len(got) != 7 {
			b.Fatal("wrong selection", err)
		}
	}
	// Twenty rounds, each a slice of one then of the other, in turn.
	const rounds = 20
	per := max(b.N/rounds, 1)
	var tPlain, tSnap time.Duration
	b.ResetTimer()
	for r := range rounds {
		first, second, t1, t2 := plain, snapshot, &tPlain, &tSnap
		if r%2 == 1 {
			first, second, t1, t2 = snapshot, plain, &tSnap, &tPlain
		}
		start := time.Now()
		for range per {
			first()
		}
		*t1 += time.Since(start)
		start = time.Now()
		for range per {
			second()
		}
		*t2 += time.Since(start)
	}
	n := float64(per * rounds)
	b.ReportMetric(float64(tPlain.Nanoseconds())/n, "plain-ns/op")
	b.ReportMetric(float64(tSnap.Nanoseconds())/n, "snapshot-ns/op")
	b.ReportMetric(float64(tSnap)/float64(tPlain), "snapshot/plain")
}
