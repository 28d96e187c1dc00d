package kube

import (
	"errors"
	"net"
	"syscall"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/quartermaster-dev/quartermaster/allocator"
	"github.com/quartermaster-dev/quartermaster/core"
)

// TestStoreError: an API server that cannot be reached, or says it is
// overloaded, is ErrStoreUnavailable (Unavailable to callers, who may
// retry); its other answers are not.
func TestStoreError(t *testing.T) {
	gr := schema.GroupResource{Group: "agones.dev", Resource: "gameservers"}
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	for _, c := range []struct {
		name        string
		err         error
		unavailable bool
	}{
		{"connection refused", refused, true},
		{"service unavailable", apierrors.NewServiceUnavailable("etcd is down"), true},
		{"too many requests", apierrors.NewTooManyRequests("slow down", 1), true},
		{"server timeout", apierrors.NewServerTimeout(gr, "update", 1), true},
		{"forbidden", apierrors.NewForbidden(gr, "gs-1", errors.New("no RBAC")), false},
		{"invalid", apierrors.NewBadRequest("bad object"), false},
	} {
		got := storeError("updating", core.Key{Namespace: "default", Name: "gs-1"}, c.err)
		if errors.Is(got, allocator.ErrStoreUnavailable) != c.unavailable {
			t.Errorf("%s: %v: unavailable %v, want %v", c.name, got, !c.unavailable, c.unavailable)
		}
		if !errors.Is(got, c.err) {
			t.Errorf("%s: the cause is lost: %v", c.name, got)
		}
	}
}
