package forward

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
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
	shared := newMemPlacements(time.Now)
	o := Options{Retries: -1, OwnKeys: true, Breaker: BreakerOptions{Failures: 100}, Placements: shared}
	r1, _ := keyedForwarder(t, o, pki.secret(t, "entry"), link.addr(), secondAddr)
	r2, _ := keyedForwarder(t, o, pki.secret(t, "entry"), link.addr(), secondAddr)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, r := range []*Forwarder{r1, r2} { // connections open, as in service
		if _, err := r.AllocateFor(ctx, "caller", to("keyed", nil), nil, 1, nil); err != nil {
			t.Fatal(err)
		}
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
	_, err = r2.AllocateFor(ctx, "caller", to("keyed", keyed), nil, 2, nil)
	mustRetry(t, "the retry through the other replica, the first cluster unreachable", err)
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
	shared := newMemPlacements(time.Now)
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
	m := newMemPlacements(func() time.Time { return now })
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
	if _, _, ok, _ := m.Place(ctx, "k", "c", ""); !ok {
		t.Error("a record a window old is not forgotten")
	}
}
