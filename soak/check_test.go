package soak

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 2, 3, 0, 0, 0, time.UTC)

// at is t0 plus s seconds.
func at(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }

// ok is an OK session sent to cluster, answered at answered seconds,
// released at released seconds (negative: held to the end).
func ok(id uint64, caller, cluster, source, server string, answered, released float64) Session {
	s := Session{Request: Request{
		ID: id, Caller: caller, Cluster: cluster, Source: source, Server: server,
		Sent: at(answered - 0.01), Answered: at(answered), Code: CodeOK,
	}}
	if released >= 0 {
		s.Release = &Release{ID: id, At: at(released), Result: CodeOK}
	}
	return s
}

func withRelease(s Session, result string, retried bool) Session {
	s.Release.Result = result
	s.Release.Retried = retried
	return s
}

func withKey(s Session, key string) Session {
	s.Key = key
	return s
}

func withAttempt(s Session, attempt int, resolve bool) Session {
	s.Attempt, s.Resolve = attempt, resolve
	return s
}

func withAnnotation(g GameServer, k, v string) GameServer {
	g.Annotations = map[string]string{k: v}
	return g
}

func withForwardedFor(g GameServer, caller string) GameServer {
	g.Annotations[ForwardedForAnnotation] = caller
	return g
}

func allocatedAt(g GameServer, sec float64) GameServer {
	g.LastAllocated = at(sec).Format(time.RFC3339Nano)
	return g
}

func failed(id uint64, caller, cluster string, sent float64, code string) Session {
	return Session{Request: Request{ID: id, Caller: caller, Cluster: cluster, Sent: at(sent), Answered: at(sent + 0.01), Code: code}}
}

func gs(cluster, name, state, owner string) GameServer {
	return GameServer{Cluster: cluster, Namespace: "default", Name: name, State: state, Owner: owner}
}

func snap(servers ...GameServer) *Snapshot {
	return &Snapshot{Taken: at(200), Clusters: []ClusterRead{{Name: "a"}, {Name: "b"}}, GameServers: servers}
}

func hist(sessions ...Session) *History {
	return &History{Run: Run{Start: t0, End: at(100)}, Sessions: sessions}
}

func TestCheckPromises(t *testing.T) {
	unreadB := snap(gs("a", "gs-1", "Ready", ""))
	unreadB.Clusters[1].Error = "connection refused"

	cases := []struct {
		name    string
		h       *History
		s       *Snapshot
		cfg     Config
		want    map[string]int    // violations per promise; the others must be 0
		example map[string]string // a substring of the promise's first example
		explain int               // no-dangling's explained count
	}{
		{
			name: "clean run",
			h: hist(
				ok(1, "alice", "a", "", "gs-1", 1, 5),
				ok(2, "bob", "a", "", "gs-1", 6, 8), // the same server again, after its release
				ok(3, "carol", "a", "b", "gs-2", 2, -1),
				failed(4, "erin", "a", 3, "Unavailable"),
				withKey(ok(5, "dave", "a", "", "gs-3", 4, -1), "k1"),
				withKey(ok(6, "dave", "a", "", "gs-3", 4.5, -1), "k1"), // a retry with the same key
			),
			s: snap(
				gs("a", "gs-1", "Ready", ""),
				gs("b", "gs-2", "Allocated", "carol"),
				gs("a", "gs-3", "Allocated", "dave"),
				gs("a", "gs-4", "Ready", ""),
			),
		},
		{
			name:    "two callers hold one server at once",
			h:       hist(ok(1, "alice", "a", "", "gs-1", 1, 5), ok(2, "bob", "a", "", "gs-1", 3, 6)),
			s:       snap(gs("a", "gs-1", "Ready", "")),
			want:    map[string]int{PromiseNoDoubleHold: 1},
			example: map[string]string{PromiseNoDoubleHold: "a/gs-1 held by request 1 (caller alice, answered +1s, released +5s) and request 2 (caller bob, answered +3s)"},
		},
		{
			name: "one key from two callers is two allocations",
			h: hist(
				withKey(ok(1, "alice", "a", "", "gs-1", 1, -1), "k1"),
				withKey(ok(2, "bob", "a", "", "gs-1", 2, -1), "k1"), // another caller's key of the same name
			),
			s:       snap(gs("a", "gs-1", "Allocated", "alice")),
			want:    map[string]int{PromiseNoDoubleHold: 1, PromiseHeldAsAnswered: 1},
			example: map[string]string{PromiseNoDoubleHold: "request 1 (caller alice", PromiseHeldAsAnswered: "request 2 (caller bob): a/gs-1 is Allocated to alice, not to bob"},
		},
		{
			name:    "held by someone else at the end",
			h:       hist(ok(1, "alice", "a", "", "gs-1", 1, -1)),
			s:       snap(gs("a", "gs-1", "Allocated", "mallory")),
			want:    map[string]int{PromiseHeldAsAnswered: 1},
			example: map[string]string{PromiseHeldAsAnswered: "a/gs-1 is Allocated to mallory, not to alice"},
		},
		{
			name: "forwarded: the owner is the forwarder",
			h: hist(func() Session {
				s := ok(1, "alice", "a", "b", "gs-1", 1, -1)
				s.Owner = "allocator-a"
				return s
			}()),
			s: snap(gs("b", "gs-1", "Allocated", "allocator-a")),
		},
		{
			name:    "source names the wrong cluster",
			h:       hist(ok(1, "alice", "a", "b", "gs-9", 1, -1)),
			s:       snap(gs("a", "gs-9", "Allocated", "alice")),
			want:    map[string]int{PromiseHeldAsAnswered: 1, PromiseNoDangling: 1},
			example: map[string]string{PromiseHeldAsAnswered: "answered gs-9 with source b, but the server is on a", PromiseNoDangling: "a/default/gs-9 is Allocated"},
		},
		{
			name:    "source names a cluster the run does not have",
			h:       hist(ok(1, "alice", "a", "c", "gs-1", 1, 2)),
			s:       snap(),
			want:    map[string]int{PromiseHeldAsAnswered: 1},
			example: map[string]string{PromiseHeldAsAnswered: "on cluster c, which the run does not have"},
		},
		{
			name:    "released but not held: the release found nothing",
			h:       hist(withRelease(ok(1, "alice", "a", "", "gs-1", 1, 4), "NotFound", false)),
			s:       snap(gs("a", "gs-1", "Ready", "")),
			want:    map[string]int{PromiseHeldAsAnswered: 1},
			example: map[string]string{PromiseHeldAsAnswered: "its release +4s answered NotFound"},
		},
		{
			name:    "a release refused for a server still held: NotFound, yet Allocated to the caller at the end",
			h:       hist(withRelease(ok(1, "alice", "a", "", "gs-1", 1, 4), "NotFound", false)),
			s:       snap(gs("a", "gs-1", "Allocated", "alice")),
			want:    map[string]int{PromiseHeldAsAnswered: 1},
			example: map[string]string{PromiseHeldAsAnswered: "its release +4s answered NotFound, yet the server is still Allocated to alice at the end and no later session holds it"},
		},
		{
			name: "a retried release's NotFound may be its first attempt's success",
			h:    hist(withRelease(ok(1, "alice", "a", "", "gs-1", 1, 4), "NotFound", true)),
			s:    snap(gs("a", "gs-1", "Ready", "")),
		},
		{
			name: "Allocated while a request whose outcome was unknown was in flight: explained",
			h:    hist(failed(1, "alice", "a", 5, "Unavailable")),
			s: snap(GameServer{Cluster: "b", Namespace: "default", Name: "gs-9", State: "Allocated", Owner: "fwd-a",
				LastAllocated: at(5.005).Format(time.RFC3339Nano)}),
			explain: 1,
		},
		{
			name: "the same, strict: dangling",
			h:    hist(failed(1, "alice", "a", 5, "Unavailable")),
			s: snap(GameServer{Cluster: "b", Namespace: "default", Name: "gs-9", State: "Allocated", Owner: "fwd-a",
				LastAllocated: at(5.005).Format(time.RFC3339Nano)}),
			cfg:  Config{Strict: true},
			want: map[string]int{PromiseNoDangling: 1},
		},
		{
			name: "Allocated when no request was in flight, or only ones answered for sure: dangling",
			h:    hist(failed(1, "alice", "a", 5, "Unavailable"), failed(2, "alice", "a", 30, "ResourceExhausted")),
			s: snap(GameServer{Cluster: "b", Namespace: "default", Name: "gs-9", State: "Allocated", Owner: "fwd-a",
				LastAllocated: at(30.005).Format(time.RFC3339Nano)}),
			want: map[string]int{PromiseNoDangling: 1},
		},
		{
			name:    "dangling: Allocated, never answered",
			h:       hist(ok(1, "alice", "a", "", "gs-1", 1, 3)),
			s:       snap(gs("a", "gs-1", "Ready", ""), gs("a", "gs-7", "Allocated", "x")),
			want:    map[string]int{PromiseNoDangling: 1},
			example: map[string]string{PromiseNoDangling: `a/default/gs-7 is Allocated (owner "x", last allocated "") and was never answered to a caller`},
		},
		{
			name:    "dangling: released, still Allocated",
			h:       hist(ok(1, "alice", "a", "", "gs-1", 1, 3)),
			s:       snap(gs("a", "gs-1", "Allocated", "alice")),
			want:    map[string]int{PromiseNoDangling: 1},
			example: map[string]string{PromiseNoDangling: "its last session, request 1 (caller alice), was released +3s with OK"},
		},
		{
			name:    "a failed release explains an Allocated server",
			h:       hist(withRelease(ok(1, "alice", "a", "", "gs-1", 1, 3), "Unavailable", false)),
			s:       snap(gs("a", "gs-1", "Allocated", "alice")),
			explain: 1,
		},
		{
			name:    "strict: a failed release explains nothing",
			h:       hist(withRelease(ok(1, "alice", "a", "", "gs-1", 1, 3), "Unavailable", false)),
			s:       snap(gs("a", "gs-1", "Allocated", "alice")),
			cfg:     Config{Strict: true},
			want:    map[string]int{PromiseNoDangling: 1},
			example: map[string]string{PromiseNoDangling: "released +3s with Unavailable"},
		},
		{
			name:    "answered OK, held, but no such server",
			h:       hist(ok(1, "alice", "a", "", "gs-5", 1, -1)),
			s:       snap(gs("a", "gs-1", "Ready", "")),
			want:    map[string]int{PromiseNoUnwrittenOK: 1},
			example: map[string]string{PromiseNoUnwrittenOK: "answered a/gs-5 +1s and still held at the end, but there is no such server"},
		},
		{
			name:    "answered OK, held, but the server is Ready",
			h:       hist(ok(1, "alice", "a", "", "gs-1", 1, -1)),
			s:       snap(gs("a", "gs-1", "Ready", "")),
			want:    map[string]int{PromiseNoUnwrittenOK: 1},
			example: map[string]string{PromiseNoUnwrittenOK: "but the server is Ready"},
		},
		{
			name: "a cluster that could not be read is not evidence",
			h:    hist(ok(1, "alice", "a", "b", "gs-1", 1, -1)),
			s:    unreadB,
		},
		{
			// Without keys a server allocated while a request's answer
			// was lost is explained; with keys nothing is: the caller
			// retries with the key and resolves what it gave up.
			name:    "unkeyed: a lost answer's server is explained",
			h:       hist(failed(1, "alice", "a", 3, "Unavailable")),
			s:       snap(allocatedAt(gs("a", "gs-1", "Allocated", "alice"), 3.005)),
			explain: 1,
		},
		{
			name:    "keyed: the same server dangles, strictly",
			h:       hist(withKey(failed(1, "alice", "a", 3, "Unavailable"), "k1")),
			s:       snap(allocatedAt(gs("a", "gs-1", "Allocated", "alice"), 3.005)),
			want:    map[string]int{PromiseNoDangling: 1},
			example: map[string]string{PromiseNoDangling: "a/default/gs-1 is Allocated"},
		},
		{
			name: "keyed: a lost answer retried with its key, one server",
			h: hist(withKey(failed(1, "alice", "a", 3, "Unavailable"), "k1"),
				withAttempt(withKey(ok(2, "alice", "a", "", "gs-1", 3.5, 9), "k1"), 1, false)),
			s: snap(gs("a", "gs-1", "Ready", "")),
		},
		{
			// A retry that ignored the key allocated a second server: the
			// first, whose answer was lost, is Allocated to no one's
			// knowledge.
			name: "keyed: a retry that allocated twice",
			h: hist(withKey(failed(1, "alice", "a", 3, "Unavailable"), "k1"),
				withAttempt(withKey(ok(2, "alice", "a", "b", "gs-2", 3.5, 9), "k1"), 1, false)),
			s:       snap(withAnnotation(allocatedAt(gs("a", "gs-1", "Allocated", "alice"), 3.005), KeyAnnotation, "k1"), gs("b", "gs-2", "Ready", "")),
			want:    map[string]int{PromiseNoDangling: 1},
			example: map[string]string{PromiseNoDangling: `gs-1 is Allocated (owner "alice", last allocated "2026-01-02T03:00:03.005Z") and was never answered to a caller; it carries key "k1", whose request 2 (caller alice) was answered with b/gs-2: one key, two servers`},
		},
		{
			// A forwarder's allocation carries its key for the caller's:
			// the caller's request, answered "no server", never retried.
			name: "keyed: a forwarded allocation whose request was answered ResourceExhausted",
			h:    hist(withKey(failed(1, "caller", "a", 3, "ResourceExhausted"), "load-4855b0c93c91-73")),
			s: snap(withForwardedFor(withAnnotation(allocatedAt(gs("b", "gs-1", "Allocated", "forwarder-a"), 3.005),
				KeyAnnotation, "qmk-ec9c266188e7979f93ba1f1e4b7d22c2"), "caller")),
			want: map[string]int{PromiseNoDangling: 1},
			example: map[string]string{PromiseNoDangling: `it carries the forwarder's key for caller's key "load-4855b0c93c91-73", ` +
				`whose request (caller caller) was never answered with a server: its last try, 1, was answered ResourceExhausted`},
		},
		{
			name: "keyed: a given-up request resolved and given back",
			h: hist(withKey(failed(1, "alice", "a", 3, "DeadlineExceeded"), "k1"),
				withAttempt(withKey(ok(2, "alice", "a", "", "gs-1", 20, 20.5), "k1"), 0, true)),
			s: snap(gs("a", "gs-1", "Ready", "")),
		},
		{
			name: "examples are capped, violations are not",
			h:    hist(),
			s: snap(gs("a", "gs-1", "Allocated", "x"), gs("a", "gs-2", "Allocated", "x"),
				gs("a", "gs-3", "Allocated", "x")),
			cfg:     Config{Examples: 2},
			want:    map[string]int{PromiseNoDangling: 3},
			example: map[string]string{PromiseNoDangling: "gs-1"},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := Check(tc.h, tc.s, tc.cfg)
			total := 0
			if len(r.Promises) != 4 {
				t.Fatalf("got %d promises, want 4", len(r.Promises))
			}
			for _, p := range r.Promises {
				want := tc.want[p.Name]
				total += want
				if p.Violations != want {
					t.Errorf("%s: %d violations, want %d; examples: %q", p.Name, p.Violations, want, p.Examples)
				}
				max := tc.cfg.Examples
				if max == 0 {
					max = DefaultExamples
				}
				if wantEx := min(want, max); len(p.Examples) != wantEx {
					t.Errorf("%s: %d examples, want %d", p.Name, len(p.Examples), wantEx)
				}
				if sub, ok := tc.example[p.Name]; ok && (len(p.Examples) == 0 || !strings.Contains(p.Examples[0], sub)) {
					t.Errorf("%s: first example %q, want it to contain %q", p.Name, p.Examples, sub)
				}
				if p.Name == PromiseNoDangling && p.Explained != tc.explain {
					t.Errorf("%s: explained %d, want %d", p.Name, p.Explained, tc.explain)
				}
			}
			if r.Violations() != total {
				t.Errorf("Violations() = %d, want %d", r.Violations(), total)
			}
		})
	}
}

// The forwarder's key for a caller's key, as a real forwarder sent it in
// a soak (read from the GameServer it allocated).
func TestForwardedKey(t *testing.T) {
	if got, want := ForwardedKey("caller", "load-4855b0c93c91-73"), "qmk-ec9c266188e7979f93ba1f1e4b7d22c2"; got != want {
		t.Errorf("ForwardedKey = %s, want %s", got, want)
	}
}

func TestCheckCounts(t *testing.T) {
	r := Check(hist(ok(1, "a", "a", "", "gs-1", 1, 2), ok(2, "b", "a", "", "gs-2", 1, -1), failed(3, "c", "a", 1, "Unavailable")),
		snap(gs("a", "gs-1", "Ready", ""), gs("a", "gs-2", "Allocated", "b")), Config{})
	if r.Requests != 3 || r.OK != 2 || r.Released != 1 || r.Live != 1 {
		t.Errorf("requests %d ok %d released %d live %d, want 3 2 1 1", r.Requests, r.OK, r.Released, r.Live)
	}
	// A keyed request's tries are one request; a resolve is none.
	r = Check(hist(
		withKey(failed(1, "a", "a", 1, "Unavailable"), "k1"),
		withAttempt(withKey(failed(2, "a", "a", 1.2, "DeadlineExceeded"), "k1"), 1, false),
		withAttempt(withKey(ok(3, "a", "a", "", "gs-1", 1.5, 2), "k1"), 2, false),
		withKey(failed(4, "a", "a", 3, "Unavailable"), "k2"),
		withAttempt(withKey(ok(5, "a", "a", "", "gs-2", 9, 10), "k2"), 0, true),
		withKey(failed(6, "a", "a", 4, "Unavailable"), "k3"),
		withAttempt(withKey(failed(7, "a", "a", 8, "NotFound"), "k3"), 0, true),
	), snap(gs("a", "gs-1", "Ready", ""), gs("a", "gs-2", "Ready", "")), Config{})
	if r.Requests != 3 || r.OK != 1 || r.Retries != 2 || r.Resolves != 2 || r.ResolvedHeld != 1 || r.Released != 2 || !r.Strict {
		t.Errorf("keyed: requests %d ok %d retries %d resolves %d resolved held %d released %d strict %v, want 3 1 2 2 1 2 true",
			r.Requests, r.OK, r.Retries, r.Resolves, r.ResolvedHeld, r.Released, r.Strict)
	}
	s := snap()
	s.Clusters[0].Error = "timeout"
	if r := Check(hist(), s, Config{}); len(r.Unread) != 1 || r.Unread[0] != "a" {
		t.Errorf("Unread = %q, want [a]", r.Unread)
	}
}

// steadyLoad sends one request a second from 0 to 99s; fail says which
// fail, slow which take 500ms instead of 10ms.
func steadyLoad(fail, slow func(sec int) bool) *History {
	h := hist()
	for i := 0; i < 100; i++ {
		lat := 10 * time.Millisecond
		if slow(i) {
			lat = 500 * time.Millisecond
		}
		s := Session{Request: Request{ID: uint64(i + 1), Caller: "c", Cluster: "a", Sent: at(float64(i)), Code: CodeOK, Server: "gs"}}
		s.Answered = s.Sent.Add(lat)
		if fail(i) {
			s.Code, s.Server = "Unavailable", ""
		}
		// Distinct servers, released at once: the promises stay clean.
		if s.Code == CodeOK {
			s.Server = "gs-" + string(rune('A'+i%26)) + string(rune('a'+i/26))
			s.Release = &Release{ID: s.ID, At: s.Answered, Result: CodeOK}
		}
		h.Sessions = append(h.Sessions, s)
	}
	return h
}

func near(got, want time.Duration) bool {
	d := got - want
	if d < 0 {
		d = -d
	}
	return d <= want/100
}

func TestCheckFaults(t *testing.T) {
	// A link cut from 20s to 30s: everything sent in it fails and is slow,
	// and the first five seconds after it fail too.
	h := steadyLoad(func(s int) bool { return s >= 20 && s < 35 }, func(s int) bool { return s >= 20 && s < 30 })
	h.Faults = []Fault{{Kind: FaultLinkCut, Target: "a-b", Start: at(20), End: at(30)}}
	r := Check(h, snap(), Config{Window: 10 * time.Second})
	if r.Violations() != 0 {
		t.Fatalf("violations %d, want 0: %+v", r.Violations(), r.Promises)
	}
	if len(r.Faults) != 1 {
		t.Fatalf("fault stats %+v, want one kind", r.Faults)
	}
	f := r.Faults[0]
	want := FaultStats{Kind: FaultLinkCut, Count: 1, During: 10, DuringFailed: 10, After: 10, AfterFailed: 5, MaxRecovery: 10 * time.Second}
	gotP99 := f.P99During
	f.P99During = 0
	if f != want {
		t.Errorf("stats %+v, want %+v", f, want)
	}
	if !near(gotP99, 500*time.Millisecond) {
		t.Errorf("p99 during %s, want 500ms", gotP99)
	}
	if !near(r.P99Outside, 10*time.Millisecond) {
		t.Errorf("p99 outside %s, want 10ms", r.P99Outside)
	}
	if r.ErrorRateOutside != 0 {
		t.Errorf("error rate outside %g, want 0", r.ErrorRateOutside)
	}

	// A fault after which nothing works again never recovers.
	h = steadyLoad(func(s int) bool { return s >= 50 }, func(int) bool { return false })
	h.Faults = []Fault{{Kind: FaultReplicaKill, Start: at(50), End: at(55)}, {Kind: FaultReplicaKill, Start: at(10), End: at(12)}}
	r = Check(h, snap(), Config{Window: 10 * time.Second})
	f = r.Faults[0]
	if f.Count != 2 || f.Unrecovered != 1 || f.MaxRecovery != 0 {
		t.Errorf("stats %+v, want 2 faults, one unrecovered, the other at once", f)
	}
}

func TestResultWriters(t *testing.T) {
	h := hist(ok(1, "alice", "a", "", "gs-1", 1, 5), ok(2, "bob", "a", "", "gs-1", 3, 6))
	h.Faults = []Fault{{Kind: FaultLinkSlow, Start: at(0), End: at(2)}}
	r := Check(h, snap(gs("a", "gs-1", "Ready", "")), Config{})
	var b bytes.Buffer
	if err := r.WriteTable(&b); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"violations: 1", "| no-double-hold | 1 | 0 |", "- a/gs-1 held by request 1", "| link-slow | 1 |"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, b.String())
		}
	}
	b.Reset()
	if err := r.WriteJSON(&b); err != nil {
		t.Fatal(err)
	}
	var back Result
	if err := json.Unmarshal(b.Bytes(), &back); err != nil {
		t.Fatal(err)
	}
	if back.Violations() != 1 || back.Faults[0].Kind != FaultLinkSlow {
		t.Errorf("JSON round trip: %+v", back)
	}
}

func TestTimelineBucketsBySecondSent(t *testing.T) {
	h := hist(
		ok(1, "alice", "a", "", "gs-1", 0.5, -1), // sent 0.49, 10ms
		failed(2, "alice", "a", 0.7, "Unavailable"),
		ok(3, "alice", "a", "", "gs-2", 2.5, -1),
	)
	h.Run.End = at(3.5)
	tl := Timeline(h)
	if len(tl) != 4 {
		t.Fatalf("%d seconds, want 4 (0 to 3)", len(tl))
	}
	want := []Second{
		{At: 0, Sent: 2, OK: 1, Failed: 1, P50: 10 * time.Millisecond, P99: 10 * time.Millisecond},
		{At: 1},
		{At: 2, Sent: 1, OK: 1, P50: 10 * time.Millisecond, P99: 10 * time.Millisecond},
		{At: 3},
	}
	for i := range want {
		g := tl[i]
		g.P50, g.P99 = g.P50.Round(time.Millisecond), g.P99.Round(time.Millisecond)
		if g != want[i] {
			t.Errorf("second %d: %+v, want %+v", i, g, want[i])
		}
	}
	res := Check(h, snap(gs("a", "gs-1", "Allocated", "alice"), gs("a", "gs-2", "Allocated", "alice")), Config{})
	var buf bytes.Buffer
	if err := res.WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	back, err := ReadResult(buf.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if back.Kind != ResultKind || len(back.Timeline) != 4 || back.Timeline[0].Failed != 1 || !back.Start.Equal(t0) {
		t.Fatalf("read back %+v", back)
	}
	if _, err := ReadResult([]byte(`{"kind":"LoadResult"}`)); err == nil || !strings.Contains(err.Error(), `kind "LoadResult", want "SoakResult"`) {
		t.Fatalf("another kind: %v", err)
	}
	if _, err := ReadResult([]byte(`{"kind":"SoakResult","bogus":1}`)); err == nil || !strings.Contains(err.Error(), "bogus") {
		t.Fatalf("an unknown field: %v", err)
	}
}
