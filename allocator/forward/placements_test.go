package forward

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/quartermaster-dev/quartermaster/allocator/pb/allocation"
	"github.com/quartermaster-dev/quartermaster/core"
)

// Two replicas of an entry (two forwarders sharing their Placements, as
// the kubernetes backend's replicas share theirs on the API server) and
// two clusters; the caller's tries of one key go to either replica.

// A keyed request whose answer was lost at the first cluster is not
// served by the second, neither then nor on the caller's retry through
// the other replica while the first cannot be reached: the first may hold
// its allocation. Once the first answers again, the retry gets that
// allocation, and the second cluster allocated nothing for the key.
func TestKeyStaysWhereItMayBeHeld(t *testing.T) {
	pki := newTestPKI(t)
	first, second := newKeyedRemote("first"), newKeyedRemote("second")
	link := newLossyLink(t, serveKeyed(t, pki, first))
	secondAddr := serveKeyed(t, pki, second)
	shared := newMemPlacements(0, 0, time.Now)
	o := Options{Retries: -1, OwnKeys: true, Breaker: BreakerOptions{Failures: 100}, Placements: shared}
	r1, _ := keyedForwarder(t, o, pki.secret(t, "entry"), link.addr(), secondAddr)
	r2, _ := keyedForwarder(t, o, pki.secret(t, "entry"), link.addr(), secondAddr)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// r1's connection to first is open; r2 has none, so its retry below
	// cannot reach first at all (nothing sent: only the record says first
	// may hold the key's allocation).
	if _, err := r1.AllocateFor(ctx, "caller", to("keyed", nil), nil, 1, nil); err != nil {
		t.Fatal(err)
	}
	atSecond := second.allocated.Load()

	keyed := map[string]string{allocationKeyAnnotation: "match-7"}
	link.lose.Store(true) // every answer from first lost, every new connection cut
	_, err := r1.AllocateFor(ctx, "caller", to("keyed", keyed), nil, 1, nil)
	mustRetry(t, "the answer lost at the first cluster", err)
	lost := first.seen()[len(first.seen())-1]
	held := first.serverOf(lost)
	if held == "" {
		t.Fatal("the first cluster holds nothing for the key: the test tested nothing")
	}
	seen := len(first.seen())
	_, err = r2.AllocateFor(ctx, "caller", to("keyed", keyed), nil, 2, nil)
	mustRetry(t, "the retry through the other replica, the first cluster unreachable", err)
	if n := len(first.seen()) - seen; n != 0 {
		t.Fatalf("the other replica's retry reached the first cluster (%d requests): the test tested nothing", n)
	}
	if n := second.allocated.Load() - atSecond; n != 0 {
		t.Fatalf("the second cluster allocated %d servers for a key the first may hold", n)
	}

	link.lose.Store(false)
	waitReady(t, r2, link.addr())
	resp, err := r2.AllocateFor(ctx, "caller", to("keyed", keyed), nil, 3, nil)
	if err != nil || resp.GetGameServerName() != held {
		t.Fatalf("the retry once the first cluster answers: %v, %v; want %s, the allocation its lost answer held", resp, err, held)
	}
	if n := second.allocated.Load() - atSecond; n != 0 {
		t.Errorf("the second cluster allocated %d servers for the key", n)
	}
}

// A keyed request the first cluster could not serve, served by the
// second, whose answer the caller never got: the retry, through the
// other replica, once the first cluster has servers again, gets the
// second's server, and the first allocates nothing for the key.
func TestKeyFollowsItsRecordNotItsOrder(t *testing.T) {
	pki := newTestPKI(t)
	first, second := newKeyedRemote("first"), newKeyedRemote("second")
	firstAddr, secondAddr := serveKeyed(t, pki, first), serveKeyed(t, pki, second)
	shared := newMemPlacements(0, 0, time.Now)
	o := Options{Retries: -1, Placements: shared}
	r1, _ := keyedForwarder(t, o, pki.secret(t, "entry"), firstAddr, secondAddr)
	r2, _ := keyedForwarder(t, o, pki.secret(t, "entry"), firstAddr, secondAddr)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	keyed := map[string]string{allocationKeyAnnotation: "match-8"}
	first.full.Store(true)
	resp, err := r1.AllocateFor(ctx, "caller", to("keyed", keyed), nil, 1, nil)
	if err != nil || !strings.HasPrefix(resp.GetGameServerName(), "second-") {
		t.Fatalf("the first cluster full: %v, %v; want the second's server", resp, err)
	}
	first.full.Store(false)
	again, err := r2.AllocateFor(ctx, "caller", to("keyed", keyed), nil, 2, nil)
	if err != nil || again.GetGameServerName() != resp.GetGameServerName() {
		t.Fatalf("the retry through the other replica: %v, %v; want %s again", again, err, resp.GetGameServerName())
	}
	if n := first.allocated.Load(); n != 0 {
		t.Errorf("the first cluster, first in the order, allocated %d servers for a key the second holds", n)
	}

	// A key every cluster refused is cleared: its retry takes the order
	// afresh, and the first cluster serves it.
	other := map[string]string{allocationKeyAnnotation: "match-9"}
	first.full.Store(true)
	second.full.Store(true)
	if _, err := r1.AllocateFor(ctx, "caller", to("keyed", other), nil, 1, nil); status.Code(err) != codes.ResourceExhausted {
		t.Fatalf("every cluster full: %v; want ResourceExhausted", err)
	}
	first.full.Store(false)
	second.full.Store(false)
	resp, err = r2.AllocateFor(ctx, "caller", to("keyed", other), nil, 2, nil)
	if err != nil || !strings.HasPrefix(resp.GetGameServerName(), "first-") {
		t.Fatalf("a refused key sent again: %v, %v; want the first cluster's server", resp, err)
	}
}

// failingPlacements cannot record anything.
type failingPlacements struct{}

func (failingPlacements) Place(context.Context, string, string, string) (string, string, bool, error) {
	return "", "", false, errors.New("the API server is restarting")
}

// A keyed request whose cluster cannot be recorded is sent nowhere, and
// answered Unavailable naming why.
func TestKeyNotSentUnrecorded(t *testing.T) {
	pki := newTestPKI(t)
	r := newKeyedRemote("only")
	f, _ := keyedForwarder(t, Options{Retries: -1, Placements: failingPlacements{}}, pki.secret(t, "entry"), serveKeyed(t, pki, r))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := f.AllocateFor(ctx, "caller", to("keyed", map[string]string{allocationKeyAnnotation: "k"}), nil, 1, nil)
	if status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "the API server is restarting") {
		t.Fatalf("unrecorded: %v; want Unavailable with the record's error", err)
	}
	if n := len(r.seen()); n != 0 {
		t.Errorf("the cluster was sent %d requests whose key was not recorded", n)
	}
	// A request without the caller's key needs no record.
	if _, err := f.AllocateFor(ctx, "caller", to("keyed", nil), nil, 1, nil); err != nil {
		t.Errorf("without a key: %v", err)
	}
}

func mustRetry(t *testing.T, what string, err error) {
	t.Helper()
	if status.Code(err) != codes.Unavailable || !strings.Contains(status.Convert(err).Message(), "send it again with the same key") {
		t.Fatalf("%s: %v; want Unavailable asking for the request again with its key", what, err)
	}
}

// Place moves a record only from the version its caller saw, and says
// where the record is when it does not.
func TestMemPlacements(t *testing.T) {
	now := time.Unix(1000, 0)
	m := newMemPlacements(0, 0, func() time.Time { return now })
	ctx := context.Background()
	_, v1, ok, err := m.Place(ctx, "k", "a", "")
	if !ok || err != nil {
		t.Fatalf("a new record: %v %v", ok, err)
	}
	if cur, v, ok, _ := m.Place(ctx, "k", "b", ""); ok || cur != "a" || v != v1 {
		t.Fatalf("create over an existing record: ok %v, at %q version %q; want refused, at a, version %s", ok, cur, v, v1)
	}
	_, v2, ok, _ := m.Place(ctx, "k", "a", v1)
	if !ok || v2 == v1 {
		t.Fatalf("the same cluster again: ok %v, version %q after %q; want a new version", ok, v2, v1)
	}
	if cur, _, ok, _ := m.Place(ctx, "k", "b", v1); ok || cur != "a" {
		t.Fatalf("a move from a stale version: ok %v, at %q; want refused, at a", ok, cur)
	}
	if _, _, ok, _ := m.Place(ctx, "k", "b", v2); !ok {
		t.Fatal("a move from the current version was refused")
	}
	now = now.Add(defaultPlacementWindow)
	if cur, _, ok, _ := m.Place(ctx, "k", "c", ""); !ok || cur != "c" {
		t.Errorf("a record a window old: placed %v at %q; want it forgotten, and placed anew", ok, cur)
	}

	// Past max records, the oldest change goes first.
	m = newMemPlacements(time.Hour, 3, func() time.Time { return now })
	versions := map[string]string{}
	for _, k := range []string{"a", "b", "c"} {
		_, versions[k], _, _ = m.Place(ctx, k, "x", "")
		now = now.Add(time.Second)
	}
	_, _, _, _ = m.Place(ctx, "a", "y", versions["a"]) // a changed last now
	_, _, _, _ = m.Place(ctx, "d", "x", "")
	for k, kept := range map[string]bool{"a": true, "b": false, "c": true, "d": true} {
		cur, _, _, _ := m.Place(ctx, k, "probe", "bad-version")
		if (cur != "") != kept {
			t.Errorf("record %s after a fourth record past max 3: at %q; want kept %v (the oldest change, b, forgotten)", k, cur, kept)
		}
	}
}

// What a caller-keyed request does after a cluster's try: on to the next
// cluster only when nothing can have been allocated there.
func TestAfterKeyedTry(t *testing.T) {
	lost := &forwarding{held: []heldAt{{cluster: "ep1, ep2"}}}
	none := &forwarding{}
	cases := []struct {
		name      string
		t         try
		local     bool
		inherited bool
		fw        *forwarding
		want      keyedNext
	}{
		{"no game server", try{where: "ep1, ep2", out: outUnallocated, code: codes.ResourceExhausted}, false, true, lost, nextCluster},
		{"contention", try{where: "local", out: outRefused, code: codes.Aborted}, true, false, none, nextCluster},
		{"permission denied", try{where: "ep1, ep2", out: outRefused, code: codes.PermissionDenied}, false, false, none, nextCluster},
		{"local store unavailable (a write may have landed)", try{where: "local", out: outRefused, code: codes.Unavailable}, true, false, none, retryThere},
		{"remote internal error", try{where: "ep1, ep2", out: outRefused, code: codes.Internal}, false, false, none, retryThere},
		{"remote unknown error", try{where: "ep1, ep2", out: outRefused, code: codes.Unknown}, false, false, none, retryThere},
		{"key used with another request", try{where: "ep1, ep2", out: outRefused, code: codes.InvalidArgument}, false, false, none, answerIt},
		{"key released there", try{where: "local", out: outRefused, code: codes.FailedPrecondition}, true, false, none, answerIt},
		{"answer lost", try{where: "ep1, ep2", out: outUnavailable, code: codes.Unavailable}, false, false, lost, retryThere},
		{"recorded, unreachable", try{where: "ep1, ep2", out: outBreakerOpen, code: codes.Unavailable}, false, true, none, retryThere},
		{"recorded, misconfigured now", try{where: "ep1, ep2", out: outMisconfig, code: codes.FailedPrecondition}, false, true, none, retryThere},
		{"placed now, unreachable, never sent", try{where: "ep1, ep2", out: outUnavailable, code: codes.Unavailable}, false, false, none, nextCluster},
		{"deadline during a local allocation", try{where: "local", out: outDeadline, code: codes.DeadlineExceeded}, true, false, none, retryThere},
		{"deadline before a remote send", try{where: "ep1, ep2", out: outDeadline, code: codes.DeadlineExceeded}, false, false, none, nextCluster},
		{"deadline after a remote send", try{where: "ep1, ep2", out: outDeadline, code: codes.DeadlineExceeded}, false, false, lost, retryThere},
	}
	for _, c := range cases {
		if got := afterKeyedTry(c.t, c.local, c.inherited, c.fw); got != c.want {
			t.Errorf("%s: %d, want %d", c.name, got, c.want)
		}
	}
}

// The local cluster answers with an error that may follow a write (the
// kubernetes backend's store unavailable): the keyed request is not sent
// on to the remote, whose server would be the key's second.
func TestKeyStaysAfterLocalWriteError(t *testing.T) {
	pki := newTestPKI(t)
	remote := newKeyedRemote("remote")
	sec := pki.secret(t, "entry")
	policies := []core.Policy{
		{Name: "home", Priority: 1, Weight: 1, Labels: map[string]string{"to": "keyed"}, Connection: core.ConnectionInfo{ClusterName: "home"}},
		{Name: "remote", Priority: 2, Weight: 1, Labels: map[string]string{"to": "keyed"},
			Connection: core.ConnectionInfo{ClusterName: "remote", Endpoints: []string{serveKeyed(t, pki, remote)}, SecretName: sec.Name}},
	}
	f, err := New(Options{Source: NewStore(NewSet(map[string][]core.Policy{"default": policies}, []Secret{sec})), Self: "entry", Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var calls int
	local := func(context.Context, *allocation.AllocationRequest) (*allocation.AllocationResponse, error) {
		calls++
		return nil, status.Error(codes.Unavailable, "updating the GameServer: the API server is unavailable")
	}
	_, err = f.AllocateFor(ctx, "caller", to("keyed", map[string]string{allocationKeyAnnotation: "k"}), nil, 1, local)
	mustRetry(t, "the local write's outcome unknown", err)
	if calls != 1 || remote.allocated.Load() != 0 || len(remote.seen()) != 0 {
		t.Errorf("local tried %d times, the remote sent %d requests and allocated %d; want 1, 0, 0", calls, len(remote.seen()), remote.allocated.Load())
	}
	// Without the caller's key the request fails over as before.
	if resp, err := f.AllocateFor(ctx, "caller", to("keyed", nil), nil, 1, local); err != nil || !strings.HasPrefix(resp.GetGameServerName(), "remote-") {
		t.Errorf("without a key: %v, %v; want the remote's server", resp, err)
	}
}
