package forward

import (
	"context"
	"fmt"
	"log/slog"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
)

// pollEvery is how often the prober reads a Clock that cannot wake it
// (not an AfterClock): a test's fake clock, moved by hand.
const pollEvery = 5 * time.Millisecond

// startProber runs the background prober of endpoint's breaker, which
// has just opened. Called under the breaker's lock: it only starts the
// goroutine.
func (f *Forwarder) startProber(endpoint string, b *breaker) {
	if f.probeCtx.Err() != nil {
		return // closed
	}
	f.probers.Add(1)
	go func() {
		defer f.probers.Done()
		f.probeLoop(endpoint, b)
	}()
}

// probeLoop probes an open breaker's endpoint each time its open period
// ends, until a probe finds it answering (the breaker closes; the loop
// ends) or the forwarder closes. A failed probe reopens the breaker for
// twice as long (breaker.failure), so a remote that stays down is asked
// less and less often. Requests skip the endpoint all along: none of them
// pays for finding out.
func (f *Forwarder) probeLoop(endpoint string, b *breaker) {
	for {
		until, open := b.next()
		if !open {
			return
		}
		if !f.waitUntil(until) {
			return
		}
		creds, due := b.beginProbe(f.clock.Now())
		if !due {
			continue // closed meanwhile by a late answer, or not yet due
		}
		err := f.probe(endpoint, creds)
		if f.probeCtx.Err() != nil {
			return // shutting down: the outcome says nothing
		}
		if err != nil {
			f.m.probes.WithLabelValues(endpoint, "down").Inc()
			f.log.LogAttrs(f.probeCtx, slog.LevelDebug, "forwarding probe failed",
				slog.String("endpoint", endpoint), slog.String("error", err.Error()))
			b.failure(f.clock.Now(), probeCreds{})
			continue
		}
		f.m.probes.WithLabelValues(endpoint, "up").Inc()
		b.success()
		return
	}
}

// waitUntil waits until the clock reads at, and reports false if the
// forwarder closed first.
func (f *Forwarder) waitUntil(at time.Time) bool {
	if ac, ok := f.clock.(AfterClock); ok {
		select {
		case <-f.probeCtx.Done():
			return false
		case <-ac.After(at.Sub(ac.Now())):
			return true
		}
	}
	t := time.NewTicker(pollEvery)
	defer t.Stop()
	for f.clock.Now().Before(at) {
		select {
		case <-f.probeCtx.Done():
			return false
		case <-t.C:
		}
	}
	return true
}

// probe asks the endpoint's gRPC health service, over the cached
// connection the requests use, whether it answers: the cheapest call an
// allocator serves, with no allocation made. Any answer from the server
// but NOT_SERVING counts as up (Unimplemented included: an allocator
// without the health service, as Agones' may be, still answered over
// mTLS); no answer, or NOT_SERVING (a draining allocator), is down.
func (f *Forwarder) probe(endpoint string, c probeCreds) error {
	cl, err := f.clients.get(endpoint, c.sec, c.serverCA, false)
	if err != nil {
		return err
	}
	if cl.cc.GetState() == connectivity.TransientFailure {
		// The cached connection sits in grpc's reconnect backoff after
		// the failures that opened the breaker: a call on it fails at
		// once, without trying the endpoint. A new one replaces it (for
		// the requests too) and tries now.
		f.clients.put(cl)
		if cl, err = f.clients.get(endpoint, c.sec, c.serverCA, true); err != nil {
			return err
		}
	}
	defer f.clients.put(cl)
	ctx, cancel := context.WithTimeout(f.probeCtx, f.tryTimeout)
	defer cancel()
	resp, err := healthpb.NewHealthClient(cl.cc).Check(ctx, &healthpb.HealthCheckRequest{})
	switch code := status.Code(err); code {
	case codes.OK:
		if st := resp.GetStatus(); st != healthpb.HealthCheckResponse_SERVING {
			return fmt.Errorf("health: %s", st)
		}
		return nil
	case codes.DeadlineExceeded:
		if f.probeCtx.Err() == nil {
			// A connection that said nothing for a whole try may be
			// stuck behind a remote that stopped reading, or a path that
			// went dark without a reset: grpc-go would keep it for as
			// long as TCP retries. A new one replaces it for the next
			// probe and the requests.
			if fresh, ferr := f.clients.get(endpoint, c.sec, c.serverCA, true); ferr == nil {
				f.clients.put(fresh)
			}
		}
		return err
	case codes.Unavailable, codes.Canceled:
		return err
	}
	return nil
}
