package allocator_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"

	"github.com/quartermaster-dev/quartermaster/allocator"
	"github.com/quartermaster-dev/quartermaster/allocator/memory"
	"github.com/quartermaster-dev/quartermaster/allocator/pb/allocation"
	qmv1 "github.com/quartermaster-dev/quartermaster/allocator/pb/quartermaster/v1"
	"github.com/quartermaster-dev/quartermaster/core"
)

const createLimits = `
apiVersion: quartermaster.dev/v1alpha1
kind: AllocatorLimits
default:
  maxAllocations: 1
  templates: [private-match, slow, lobby]
identities:
  bob: {maxAllocations: 3, templates: ["*"]}
  mallory: {namespaces: ["*"]}
  ops: {admin: true}
`

const createTemplates = `
apiVersion: quartermaster.dev/v1alpha1
kind: GameServerTemplates
templates:
- name: private-match
  template:
    metadata: {labels: {mode: private}}
    spec:
      ports: [{name: game, containerPort: 7654}]
      template: {spec: {containers: [{name: g, image: example/game, args: ["--admins={{.AccessList}}"]}]}}
- name: slow
  startupDuration: 1h
  template: {spec: {}}
- name: warmup
  startupDuration: 5s
  template: {spec: {}}
- name: lobby
  fleet: rooms
- name: ghost
  fleet: no-such-fleet
`

func startCreateHarness(t *testing.T) *harness {
	t.Helper()
	h := startHarness(t, harnessOpts{limits: createLimits})
	tc, err := allocator.ParseTemplates([]byte(createTemplates))
	if err != nil {
		t.Fatal(err)
	}
	h.svc.SetTemplates(tc)
	return h
}

func callCtx(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// created lists the servers in the backend made by Create.
func created(b *memory.Backend) []*core.GameServer {
	var out []*core.GameServer
	for _, gs := range b.Index().List() {
		if gs.Labels[allocator.TemplateLabel] != "" {
			out = append(out, gs)
		}
	}
	return out
}

// Create, List, Destroy over real mTLS with gRPC: the server is made from
// the template, allocated to its creator only, counts against its
// maxAllocations, and only its owner (or an admin) can destroy it.
func TestCreateListDestroyGRPC(t *testing.T) {
	h := startCreateHarness(t)
	alice := h.admin(h.dial(h.pki.client(t, "alice", nil, nil)))
	bobConn := h.dial(h.pki.client(t, "bob", nil, nil))
	bob := h.admin(bobConn)

	resp, err := alice.Create(callCtx(t, 5*time.Second), &qmv1.CreateRequest{Template: "private-match"})
	if err != nil {
		t.Fatal(err)
	}
	a := resp.GetAllocation()
	if !strings.HasPrefix(a.GetGameServerName(), "private-match-") || a.GetNamespace() != "default" || a.GetOwner() != "alice" ||
		a.GetTemplate() != "private-match" || a.GetNodeName() == "" || a.GetAddress() == "" ||
		len(a.GetPorts()) != 1 || a.GetPorts()[0].GetName() != "game" || a.GetPorts()[0].GetPort() == 0 || a.GetAllocatedAt() == nil {
		t.Fatalf("create answered %v", a)
	}
	key := keyOf("default", a.GetGameServerName())
	gs, ok := h.backend.Get(key)
	if !ok || gs.State != core.StateAllocated || gs.Annotations[allocator.OwnerAnnotation] != "alice" ||
		gs.Annotations[allocator.CreatingAnnotation] != "" || gs.Annotations[allocator.AccessListAnnotation] != `["alice"]` ||
		gs.Labels["mode"] != "private" {
		t.Fatalf("backend holds %+v", gs)
	}

	// One per user: a second Create, and an allocation from a fleet, are
	// refused naming the instance held.
	_, err = alice.Create(callCtx(t, 5*time.Second), &qmv1.CreateRequest{Template: "private-match"})
	wantCode(t, err, codes.ResourceExhausted)
	if !strings.Contains(err.Error(), "default/"+a.GetGameServerName()) {
		t.Errorf("refusal %q does not name the instance held", err)
	}
	_, err = h.grpcAllocate(h.dial(h.pki.client(t, "alice", nil, nil)), &allocation.AllocationRequest{})
	wantCode(t, err, codes.ResourceExhausted)

	// List shows both kinds: bob's fleet allocation and his created server.
	if _, err := h.grpcAllocate(bobConn, &allocation.AllocationRequest{}); err != nil {
		t.Fatal(err)
	}
	if _, err := bob.Create(callCtx(t, 5*time.Second), &qmv1.CreateRequest{Template: "private-match", Name: "bobs-match"}); err != nil {
		t.Fatal(err)
	}
	list, err := bob.List(callCtx(t, 5*time.Second), &qmv1.ListRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var templates []string
	for _, r := range list.GetAllocations() {
		templates = append(templates, r.GetGameServerName()+":"+r.GetTemplate())
	}
	if len(templates) != 2 || !strings.HasSuffix(templates[0], ":") || templates[1] != "bobs-match:private-match" {
		t.Fatalf("bob's list %v, want a fleet server then bobs-match", templates)
	}
	aliceList, err := alice.List(callCtx(t, 5*time.Second), &qmv1.ListRequest{})
	if err != nil || len(aliceList.GetAllocations()) != 1 || aliceList.GetAllocations()[0].GetGameServerName() != a.GetGameServerName() {
		t.Fatalf("alice's list %v (%v)", aliceList, err)
	}

	// The name is taken now, whoever asks.
	_, err = h.admin(h.dial(h.pki.client(t, "carol", nil, nil))).Create(callCtx(t, 5*time.Second), &qmv1.CreateRequest{Template: "private-match", Name: "bobs-match"})
	wantCode(t, err, codes.AlreadyExists)

	// Bob cannot destroy alice's server, and cannot tell it exists.
	_, err = bob.Destroy(callCtx(t, 5*time.Second), &qmv1.DestroyRequest{GameServerName: a.GetGameServerName()})
	wantCode(t, err, codes.NotFound)
	_, err = bob.Destroy(callCtx(t, 5*time.Second), &qmv1.DestroyRequest{GameServerName: "no-such-server"})
	wantCode(t, err, codes.NotFound)
	if _, ok := h.backend.Get(key); !ok {
		t.Fatal("bob's Destroy removed alice's server")
	}

	// Alice can; the server is gone for good and her place is free again.
	out, err := alice.Destroy(callCtx(t, 5*time.Second), &qmv1.DestroyRequest{GameServerName: a.GetGameServerName()})
	if err != nil {
		t.Fatal(err)
	}
	if out.GetAllocation().GetGameServerName() != a.GetGameServerName() || out.GetAllocation().GetOwner() != "alice" {
		t.Errorf("destroy answered %v", out)
	}
	if _, ok := h.backend.Get(key); ok {
		t.Fatal("destroyed server still exists")
	}
	if _, err := alice.Create(callCtx(t, 5*time.Second), &qmv1.CreateRequest{Template: "private-match"}); err != nil {
		t.Fatalf("create after destroy: %v", err)
	}

	// An admin may destroy anyone's.
	if _, err := h.admin(h.dial(h.pki.client(t, "ops", nil, nil))).Destroy(callCtx(t, 5*time.Second), &qmv1.DestroyRequest{GameServerName: "bobs-match"}); err != nil {
		t.Fatalf("admin destroy: %v", err)
	}
}

func TestCreateRefusals(t *testing.T) {
	h := startCreateHarness(t)
	cases := []struct {
		identity string
		in       *qmv1.CreateRequest
		code     codes.Code
		msg      string
	}{
		{"alice", &qmv1.CreateRequest{}, codes.InvalidArgument, "template: must not be empty"},
		{"alice", &qmv1.CreateRequest{Template: "private-match", Name: "Not_A_Name"}, codes.InvalidArgument, "name:"},
		{"alice", &qmv1.CreateRequest{Template: "nope"}, codes.NotFound, `no template "nope" (have: private-match, slow, warmup, lobby, ghost)`},
		{"alice", &qmv1.CreateRequest{Template: "warmup"}, codes.PermissionDenied, `may not create from template "warmup" (its limits allow: private-match, slow, lobby)`},
		{"mallory", &qmv1.CreateRequest{Template: "private-match"}, codes.PermissionDenied, "(its limits allow: none)"},
		{"bob", &qmv1.CreateRequest{Template: "ghost"}, codes.FailedPrecondition, "names fleet default/no-such-fleet, which does not exist"},
	}
	for _, c := range cases {
		_, err := h.admin(h.dial(h.pki.client(t, c.identity, nil, nil))).Create(callCtx(t, 5*time.Second), c.in)
		wantCode(t, err, c.code)
		if !strings.Contains(err.Error(), c.msg) {
			t.Errorf("%s %v: %q does not contain %q", c.identity, c.in, err, c.msg)
		}
	}
	if n := len(created(h.backend)); n != 0 {
		t.Fatalf("refused creates left %d servers", n)
	}
}

// A server that does not become Ready within the caller's deadline is
// deleted, the caller is told so, and its place under the limit is free.
func TestCreateDeadlineCleansUp(t *testing.T) {
	h := startCreateHarness(t)
	alice := h.admin(h.dial(h.pki.client(t, "alice", nil, nil)))
	before := len(h.backend.Index().List())
	// Create keeps a tenth of the caller's deadline (at most 1s) back for
	// deleting the server and answering: 2s leaves 200ms, which a 2-core
	// machine busy with other tests under -race still makes; much less, and
	// the client's own deadline may fire first, with no message from the
	// server.
	_, err := alice.Create(callCtx(t, 2*time.Second), &qmv1.CreateRequest{Template: "slow"})
	wantCode(t, err, codes.DeadlineExceeded)
	if !strings.Contains(err.Error(), "did not become Ready within the caller's deadline; it was deleted, nothing is left behind") {
		t.Errorf("message %q", err)
	}
	// The handler may still be cleaning up when the client's deadline
	// fires; it has a moment.
	deadline := time.Now().Add(2 * time.Second)
	for len(h.backend.Index().List()) != before && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if n := len(created(h.backend)); n != 0 {
		t.Fatalf("%d created servers left behind", n)
	}
	if _, err := alice.Create(callCtx(t, 5*time.Second), &qmv1.CreateRequest{Template: "private-match"}); err != nil {
		t.Fatalf("create after a failed one: %v", err)
	}
}

// Until it is Ready (after its start-up time on the backend's clock), a
// created server is nobody's to allocate; then it is its creator's.
func TestCreateWaitsForStartup(t *testing.T) {
	h := startCreateHarness(t)
	bob := h.admin(h.dial(h.pki.client(t, "bob", nil, nil)))
	type result struct {
		resp *qmv1.CreateResponse
		err  error
	}
	done := make(chan result, 1)
	go func() {
		r, err := bob.Create(callCtx(t, 10*time.Second), &qmv1.CreateRequest{Template: "warmup", Name: "warm"})
		done <- result{r, err}
	}()
	deadline := time.Now().Add(5 * time.Second)
	for {
		gs, ok := h.backend.Get(keyOf("default", "warm"))
		if ok {
			if gs.State != core.StateScheduled || gs.Annotations[allocator.CreatingAnnotation] == "" {
				t.Fatalf("starting server is %v", gs.State)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the server never appeared")
		}
		time.Sleep(5 * time.Millisecond)
	}
	select {
	case r := <-done:
		t.Fatalf("create answered before its server started: %v %v", r.resp, r.err)
	case <-time.After(50 * time.Millisecond):
	}
	h.backend.Clock().(*memory.FakeClock).Advance(5 * time.Second) // the harness's clock

	r := <-done
	if r.err != nil || r.resp.GetAllocation().GetGameServerName() != "warm" || r.resp.GetAllocation().GetOwner() != "bob" {
		t.Fatalf("create: %v %v", r.resp, r.err)
	}
}

// A template naming a fleet makes a server like the fleet's, which the
// fleet does not count as its own.
func TestCreateFromFleetTemplate(t *testing.T) {
	h := startCreateHarness(t)
	bob := h.admin(h.dial(h.pki.client(t, "bob", nil, nil)))
	resp, err := bob.Create(callCtx(t, 5*time.Second), &qmv1.CreateRequest{Template: "lobby"})
	if err != nil {
		t.Fatal(err)
	}
	gs, _ := h.backend.Get(keyOf("default", resp.GetAllocation().GetGameServerName()))
	if gs.Labels["mode"] != "lobby" || gs.Labels[core.FleetLabel] != "" || gs.Counters["rooms"].Capacity != 3 || gs.Lists["players"].Capacity != 2 {
		t.Fatalf("created from fleet rooms: %+v", gs)
	}
	// The fleet's own two servers are still both there for allocations.
	for range 2 {
		if _, err := h.grpcAllocate(h.dial(h.pki.client(t, "bob", nil, nil)), &allocation.AllocationRequest{GameServerSelectors: []*allocation.GameServerSelector{{MatchLabels: map[string]string{core.FleetLabel: "rooms"}}}}); err != nil {
			t.Fatal(err)
		}
	}
}

// Create and Destroy over REST answer the same JSON as gRPC.
func TestCreateDestroyREST(t *testing.T) {
	h := startHarness(t, harnessOpts{limits: createLimits, restAddr: "127.0.0.1:0"})
	tc, _ := allocator.ParseTemplates([]byte(createTemplates))
	h.svc.SetTemplates(tc)
	c := h.httpClient(h.pki.client(t, "alice", nil, nil), false)
	code, body, err := h.post(c, allocator.CreatePath, []byte(`{"template":"private-match","name":"rest-match"}`))
	if err != nil || code != 200 {
		t.Fatalf("create: %d %s %v", code, body, err)
	}
	var got struct {
		Allocation struct{ GameServerName, Owner, Template string }
	}
	if err := json.Unmarshal(body, &got); err != nil || got.Allocation.GameServerName != "rest-match" || got.Allocation.Owner != "alice" || got.Allocation.Template != "private-match" {
		t.Fatalf("create answered %s (%v)", body, err)
	}
	code, body, _ = h.post(c, allocator.CreatePath, []byte(`{"template":"private-match"}`))
	if code != 429 || !strings.Contains(string(body), "default/rest-match") {
		t.Fatalf("second create: %d %s", code, body)
	}
	code, body, _ = h.post(h.httpClient(h.pki.client(t, "bob", nil, nil), false), allocator.DestroyPath, []byte(`{"gameServerName":"rest-match"}`))
	if code != 404 {
		t.Fatalf("bob's destroy: %d %s", code, body)
	}
	code, body, _ = h.post(c, allocator.DestroyPath, []byte(`{"gameServerName":"rest-match"}`))
	if code != 200 || !strings.Contains(string(body), `"gameServerName":"rest-match"`) {
		t.Fatalf("destroy: %d %s", code, body)
	}
	if _, ok := h.backend.Get(keyOf("default", "rest-match")); ok {
		t.Fatal("destroyed over REST but still there")
	}
}
