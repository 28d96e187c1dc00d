package kube

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	watchapi "k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
)

// Defaults for the wait on the first list.
const (
	// DefaultProgressInterval is how often WaitForSync logs that it is
	// still waiting, and why.
	DefaultProgressInterval = 5 * time.Second
)

// Reasons a list or watch of GameServers failed, as WaitForSync reports
// them: the first thing an operator needs to know is which of these it is.
const (
	ReasonUnreachable  = "unreachable"   // no connection to the API server
	ReasonTLS          = "tls"           // the API server's certificate is not trusted
	ReasonUnauthorized = "unauthorized"  // the API server refused our credentials
	ReasonForbidden    = "forbidden"     // RBAC: we may not list or watch GameServers
	ReasonCRDMissing   = "crd-missing"   // the API server does not serve agones.dev/v1 GameServers
	ReasonOther        = "error"         // anything else the API server answered
	ReasonListing      = "still-listing" // no error: the first list is just taking long
)

// SyncError is WaitForSync's answer when the cache did not sync in time:
// how long it waited, the reason of the last failure and that failure.
type SyncError struct {
	Waited time.Duration
	Reason string
	Err    error // nil when the list was still running without an error
}

func (e *SyncError) Error() string {
	msg := fmt.Sprintf("the GameServer cache did not sync within %s", e.Waited.Round(time.Millisecond))
	if e.Err == nil {
		return msg + ": the first list of GameServers was still running (raise --sync-timeout for very large clusters)"
	}
	return fmt.Sprintf("%s: %s: %s", msg, e.Reason, explain(e.Reason, e.Err))
}

func (e *SyncError) Unwrap() error { return e.Err }

// listErrors keeps the newest failure of the informer's list or watch, so
// the wait for the first list can say why it is waiting.
type listErrors struct {
	mu     sync.Mutex
	last   error
	reason string
	count  int
}

// set records err and says whether its reason differs from the previous
// failure's (worth a log line of its own).
func (l *listErrors) set(err error) (reason string, changed bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	reason = Reason(err)
	changed = reason != l.reason
	l.last, l.reason = err, reason
	l.count++
	return reason, changed
}

// get returns how many failures there were and the last one.
func (l *listErrors) get() (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.count, l.last
}

// recorded wraps the informer's list and watch calls so that every failure
// to reach, or be answered by, the API server is remembered and logged. The
// reflector's own error handler is not enough: a refused connection during
// a streaming list is retried inside client-go and never reaches it.
func (b *Backend) recorded(lw *cache.ListWatch) *cache.ListWatch {
	list, watch := lw.ListWithContextFunc, lw.WatchFuncWithContext
	lw.ListWithContextFunc = func(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
		obj, err := list(ctx, opts)
		b.listFailed(ctx, err)
		return obj, err
	}
	lw.WatchFuncWithContext = func(ctx context.Context, opts metav1.ListOptions) (watchapi.Interface, error) {
		w, err := watch(ctx, opts)
		b.listFailed(ctx, err)
		return w, err
	}
	return lw
}

func (b *Backend) listFailed(ctx context.Context, err error) {
	if err == nil || ctx.Err() != nil {
		return
	}
	reason, changed := b.listErrs.set(err)
	switch {
	case b.synced.Load():
		b.log.Warn("gameserver list or watch failed; the informer retries", "reason", reason, "err", err)
	case changed:
		// Before the first sync WaitForSync repeats it at its own pace;
		// a new reason is worth saying at once.
		b.log.Warn("gameserver list failed; retrying", "reason", reason, "err", explain(reason, err))
	}
}

// onWatchError replaces client-go's default handler, which prints through
// klog. The failures of list and watch calls are logged already (recorded);
// what is left is routine (a watch that ends or expires, after which the
// reflector lists again) or a broken watch stream.
func (b *Backend) onWatchError(_ context.Context, _ *cache.Reflector, err error) {
	if _, last := b.listErrs.get(); err == nil || (last != nil && errors.Is(err, last)) {
		return
	}
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
		b.log.Debug("gameserver watch ended; listing again", "err", err)
		return
	}
	b.log.Warn("gameserver watch failed; the informer lists again", "err", err)
}

// Reason classifies a list or watch failure (one of the Reason constants).
func Reason(err error) string {
	var certErr *tls.CertificateVerificationError
	var unknownAuth x509.UnknownAuthorityError
	var hostErr x509.HostnameError
	var netErr net.Error
	switch {
	case err == nil:
		return ReasonListing
	case apierrors.IsForbidden(err):
		return ReasonForbidden
	case apierrors.IsUnauthorized(err):
		return ReasonUnauthorized
	case apierrors.IsNotFound(err):
		// A list of a resource type the API server does not serve is
		// answered 404: without the CRD there is no such path. (A
		// missing namespace lists as empty, not 404.)
		return ReasonCRDMissing
	case errors.As(err, &certErr), errors.As(err, &unknownAuth), errors.As(err, &hostErr):
		return ReasonTLS
	case errors.As(err, &netErr):
		// Refused, no route, DNS, dial or TLS handshake timeouts.
		return ReasonUnreachable
	}
	var status apierrors.APIStatus
	if errors.As(err, &status) {
		return ReasonOther
	}
	// Errors that are neither an API status nor a net.Error come from
	// the transport (a proxy, a reset), so the server was not reached.
	return ReasonUnreachable
}

// explain puts what to check beside the failure.
func explain(reason string, err error) string {
	hint := ""
	switch reason {
	case ReasonUnreachable:
		hint = "check the kubeconfig's server address and that the API server is up"
	case ReasonTLS:
		hint = "the kubeconfig's certificate authority does not match the API server"
	case ReasonUnauthorized:
		hint = "the API server does not accept the credentials (expired token or wrong kubeconfig user)"
	case ReasonForbidden:
		hint = "grant get, list, watch and update on gameservers.agones.dev (deploy/allocator.yaml's ClusterRole)"
	case ReasonCRDMissing:
		hint = "the API server does not serve agones.dev/v1 gameservers: install Agones, or deploy/crds/"
	}
	if hint == "" {
		return err.Error()
	}
	return fmt.Sprintf("%v (%s)", err, hint)
}

// Run starts the informer (and the collection of expired idempotency key
// records) until ctx ends and returns at once; WaitForSync
// waits for its first list. Start does both.
func (b *Backend) Run(ctx context.Context) {
	b.runOnce.Do(func() {
		go b.informer.RunWithContext(ctx)
		go b.collectKeys(ctx, min(b.cfg.KeyWindow, keyCollectEvery))
	})
}

// Start runs the informer until ctx ends and waits for its first list
// (bounded by Config.SyncTimeout).
func (b *Backend) Start(ctx context.Context) error {
	b.Run(ctx)
	return b.WaitForSync(ctx, b.cfg.SyncTimeout)
}

// WaitForSync waits until the index holds the informer's first list. It
// gives up when ctx ends (returning ctx's error, so a signal stops it) or
// after timeout, if positive (returning a *SyncError naming the reason);
// every Config.ProgressInterval meanwhile it logs how long it has waited
// and why. The informer keeps running either way: it retries with back-off,
// so a caller that waits again may still see it sync.
func (b *Backend) WaitForSync(ctx context.Context, timeout time.Duration) error {
	start := time.Now()
	var deadline <-chan time.Time
	if timeout > 0 {
		t := time.NewTimer(timeout)
		defer t.Stop()
		deadline = t.C
	}
	progress := time.NewTicker(b.cfg.ProgressInterval)
	defer progress.Stop()
	// HasSynced is a flag behind a lock: polling it is cheap, and 50 ms
	// is well below anything a readiness probe notices.
	poll := time.NewTicker(50 * time.Millisecond)
	defer poll.Stop()
	b.log.Info("waiting for the GameServer cache to sync", "namespace", b.cfg.Namespace, "timeout", timeout)
	for {
		if b.handler.HasSynced() {
			b.synced.Store(true)
			b.log.Info("gameserver cache synced", "servers", b.ix.Len(), "namespace", b.cfg.Namespace, "waited", time.Since(start).Round(time.Millisecond))
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("kube: stopped waiting for the GameServer cache after %s: %w", time.Since(start).Round(time.Millisecond), ctx.Err())
		case <-deadline:
			_, err := b.listErrs.get()
			return &SyncError{Waited: timeout, Reason: Reason(err), Err: err}
		case <-progress.C:
			n, err := b.listErrs.get()
			reason := Reason(err)
			args := []any{"waited", time.Since(start).Round(time.Second), "reason", reason, "servers", b.ix.Len()}
			if err != nil {
				args = append(args, "failures", n, "err", explain(reason, err))
				b.log.Warn("still waiting for the GameServer cache to sync", args...)
			} else {
				b.log.Info("still waiting for the GameServer cache to sync", args...)
			}
		case <-poll.C:
		}
	}
}
