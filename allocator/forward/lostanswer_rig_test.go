package forward_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/quartermaster-dev/quartermaster/allocator"
	"github.com/quartermaster-dev/quartermaster/allocator/forward"
	"github.com/quartermaster-dev/quartermaster/allocator/pb/allocation"
	"github.com/quartermaster-dev/quartermaster/core"
)

// Three allocators on loopback mTLS: an entry forwarding first to a, over
// a link that loses answers now and then (as the rig's FaultAnswerLost
// does; the rig itself stays out of this package's test binary, whose
// benchmarks its globals would weigh on), and then to b. After the run,
// and the entry's reconciliation, every server Allocated at a is one that
// a answered for: none stays Allocated there for a request b served. The
// callers' requests carry keys of their own, or none and the entry gives
// them its own (OwnKeys). A request with the caller's key is not served by
// b while a may hold its allocation: it is answered Unavailable, and the
// caller's retry, once a is back, gets a's server.
func TestLostAnswersLeaveNothingAllocated(t *testing.T) {
	t.Run("caller keys", func(t *testing.T) { lostAnswersLeaveNothing(t, false) })
	t.Run("own keys", func(t *testing.T) { lostAnswersLeaveNothing(t, true) })
}

func lostAnswersLeaveNothing(t *testing.T, ownKeys bool) {
	p := newRigPKI(t)
	entry := startAllocator(t, p, "entry", rigOptions{fleets: fleetsA, reconcileBackoff: 50 * time.Millisecond, ownKeys: ownKeys,
		breaker: forward.BreakerOptions{Failures: 2, OpenFor: 50 * time.Millisecond, MaxOpenFor: 200 * time.Millisecond}})
	a := startAllocator(t, p, "a", rigOptions{fleets: fleetsC})
	b := startAllocator(t, p, "b", rigOptions{fleets: fleetsC})
	link := forward.NewLossyLinkForTest(t, a.addr)
	entry.store.Replace(forward.NewSet(map[string][]core.Policy{"default": {
		policy("to-a", "ab", 0, 1, "a", "", "fwd", link.Addr()),
		policy("to-b", "ab", 1, 1, "b", "", "fwd", b.addr),
	}}, []forward.Secret{p.secret(t, "fwd", "fwd-1")}))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	dev := dial(t, p, entry.addr, "dev")

	servedBy := map[string]map[string]bool{link.Addr(): {}, b.addr: {}}
	const requests = 40
	for i := range requests {
		lose := i%5 == 2
		if lose {
			link.LoseAnswers(true)
		}
		req := multiRequest("ab", nil)
		if !ownKeys {
			req.Metadata = &allocation.MetaPatch{Annotations: map[string]string{allocator.AllocationKeyAnnotation: fmt.Sprintf("match-%d", i)}}
		}
		resp, err := dev.Allocate(ctx, req)
		if lose {
			link.LoseAnswers(false)
			// a back in service before the next fault, so that each
			// fault meets a request on an open connection to it.
			for entry.fwd.BreakerState(link.Addr()) != forward.Closed && ctx.Err() == nil {
				time.Sleep(10 * time.Millisecond)
			}
			if !ownKeys {
				if status.Code(err) != codes.Unavailable || !strings.Contains(status.Convert(err).Message(), "send it again with the same key") {
					t.Fatalf("request %d, its answer lost at a: %v; want Unavailable asking for a retry with the key", i, err)
				}
				// The caller's retry.
				if resp, err = dev.Allocate(ctx, req); err == nil && resp.GetSource() != link.Addr() {
					t.Fatalf("request %d, retried: served by %q, not by a, which may hold its allocation", i, resp.GetSource())
				}
			}
		}
		if err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
		served, ok := servedBy[resp.GetSource()]
		if !ok {
			t.Fatalf("request %d served by %q", i, resp.GetSource())
		}
		served[resp.GetGameServerName()] = true
	}
	lost := counter(t, entry.reg, "qm_forward_answers_lost_total", map[string]string{"cluster": "a"})
	if lost == 0 || ownKeys && len(servedBy[b.addr]) == 0 {
		t.Fatalf("%v answers lost, %d requests served by b: the fault did nothing", lost, len(servedBy[b.addr]))
	}

	deadline := time.Now().Add(30 * time.Second)
	for counter(t, entry.reg, "qm_forward_reconciliations_pending", nil) > 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	for _, c := range []struct {
		r      *rigAllocator
		served map[string]bool
	}{{a, servedBy[link.Addr()]}, {b, servedBy[b.addr]}} {
		held := c.r.backend.Allocated()
		for _, gs := range held {
			if !c.served[gs.Name] {
				t.Errorf("%s: %s stays Allocated (key %q) for a request it did not answer", c.r.name, gs.Name, gs.Annotations[forward.AllocationKeyAnnotationForTest])
			}
		}
		if len(held) != len(c.served) {
			t.Errorf("%s: %d servers Allocated, %d requests answered by it", c.r.name, len(held), len(c.served))
		}
	}
	released := counter(t, entry.reg, "qm_forward_reconciliations_total", map[string]string{"outcome": "released"})
	queued := counter(t, entry.reg, "qm_forward_reconciliations_total", map[string]string{"outcome": "queued"})
	switch {
	case ownKeys && (released == 0 || released > queued):
		t.Errorf("reconciliations: %v queued, %v released", queued, released)
	case !ownKeys && queued != 0:
		t.Errorf("%v releases queued for requests with the caller's keys: none may be", queued)
	}
	t.Logf("%d requests: %d answered by a, %d by b; %v answers lost; reconciliations %v queued, %v released, %v nothing there",
		requests, len(servedBy[link.Addr()]), len(servedBy[b.addr]), lost, queued, released,
		counter(t, entry.reg, "qm_forward_reconciliations_total", map[string]string{"outcome": "nothing_there"}))
}
