package main

import (
	"io"
	"log/slog"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"testing"
	"time"
)

func TestFloorPercent(t *testing.T) {
	const mi = 1 << 20
	for _, c := range []struct {
		live, roots, floor uint64
		want               int
	}{
		{live: 2 * mi, floor: 64 * mi, want: 3100},                // the next collection at 64 MiB
		{live: 2 * mi, roots: 2 * mi, floor: 64 * mi, want: 1550}, // stacks and globals count towards the goal
		{live: 16 * mi, floor: 64 * mi, want: 300},                // 16 × 4 = 64
		{live: 40 * mi, floor: 64 * mi, want: 100},                // 60% would come sooner than the base
		{live: 64 * mi, floor: 64 * mi, want: 100},                // at the floor
		{live: 900 * mi, floor: 64 * mi, want: 100},               // past it
		{live: 100, floor: 64 * mi, want: 10000},                  // capped
		{live: 0, floor: 64 * mi, want: 10000},                    // nothing live yet
		{live: 1 << 40, floor: 1 << 41, want: 100},                // large values do not overflow
		{live: 1 << 30, floor: 1 << 40, want: 10000},
	} {
		if got := floorPercent(c.live, c.roots, c.floor, 100); got != c.want {
			t.Errorf("floorPercent(live %d, roots %d, floor %d) = %d, want %d", c.live, c.roots, c.floor, got, c.want)
		}
	}
}

func TestParseByteSize(t *testing.T) {
	for in, want := range map[string]uint64{"0": 0, "1048576": 1 << 20, "64Mi": 64 << 20, "64MiB": 64 << 20, "512Ki": 512 << 10, "2Gi": 2 << 30} {
		got, err := parseByteSize(in)
		if err != nil || got != want {
			t.Errorf("parseByteSize(%q) = %d, %v; want %d", in, got, err, want)
		}
	}
	for _, in := range []string{"", "64M", "-1", "1.5Gi", "Mi", "64 Mi", "99999999999999999999Gi"} {
		if _, err := parseByteSize(in); err == nil {
			t.Errorf("parseByteSize(%q) took it", in)
		}
	}
}

// The floor acts on the running process: after a collection with little
// live, GOGC is what puts the next one at the floor, and stopping restores
// the base.
func TestHeapFloorSetsGOGC(t *testing.T) {
	t.Setenv("GOGC", "") // the floor stands aside for a GOGC the user set
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	gogc := func() uint64 {
		s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
		metrics.Read(s)
		return s[0].Value.Uint64()
	}
	stop := startHeapFloor(8<<30, slog.New(slog.NewTextHandler(io.Discard, nil)))
	deadline := time.Now().Add(10 * time.Second)
	for gogc() <= 100 {
		if time.Now().After(deadline) {
			t.Fatalf("GOGC still %d after collections with an 8 GiB floor", gogc())
		}
		runtime.GC()
		time.Sleep(10 * time.Millisecond) // the cleanup runs on its own goroutine
	}
	if got := gogc(); got != maxFloorPercent && got < 1000 {
		t.Errorf("GOGC %d with a test binary's heap under an 8 GiB floor", got)
	}
	stop()
	if got := gogc(); got != 100 {
		t.Errorf("GOGC %d after stop, want 100", got)
	}
	runtime.GC()
	time.Sleep(20 * time.Millisecond)
	if got := gogc(); got != 100 {
		t.Errorf("GOGC %d after a collection past stop, want 100", got)
	}
}

func TestHeapFloorStandsAsideForGOGC(t *testing.T) {
	t.Setenv("GOGC", "150")
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	stop := startHeapFloor(8<<30, slog.New(slog.NewTextHandler(io.Discard, nil)))
	defer stop()
	for range 3 {
		runtime.GC()
		time.Sleep(10 * time.Millisecond)
	}
	s := []metrics.Sample{{Name: "/gc/gogc:percent"}}
	metrics.Read(s)
	if got := s[0].Value.Uint64(); got != 100 {
		t.Errorf("GOGC %d: the floor changed it although GOGC was set", got)
	}
}
