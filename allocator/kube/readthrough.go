package kube

import (
	"context"
	"errors"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/quartermaster-dev/quartermaster/allocator"
	"github.com/quartermaster-dev/quartermaster/core"
)

var _ allocator.StoreReader = (*Backend)(nil)

// ReadThrough reads one GameServer from the API server, not the informer's
// cache: a release sent to a replica that has not yet seen another
// replica's allocation must find it.
func (b *Backend) ReadThrough(ctx context.Context, k core.Key) (*core.GameServer, error) {
	cur, err := b.get(ctx, k)
	if apierrors.IsNotFound(err) {
		return nil, allocator.ErrNotFound
	}
	if err != nil {
		return nil, storeError("reading", k, err)
	}
	return toCore(cur)
}

var _ allocator.KeyReader = (*Backend)(nil)

// ReadKeyed finds the server allocated to identity with key through the
// key's record on the API server and the server it names, read from the
// API server too: a replica asked to release by key what another replica
// allocated a moment ago has neither in its cache nor its table.
func (b *Backend) ReadKeyed(ctx context.Context, identity, key string) (*core.GameServer, error) {
	k := keyed{key: key, identity: identity, record: b.keyRecordName(allocator.KeyScope(identity, key))}
	rec, err := b.leases.Leases(b.cfg.KeyNamespace).Get(ctx, k.record, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, b.keyStoreError("reading", k, err)
	}
	server, ok := rec.Annotations[keyServerAnnotation]
	ns, name, named := strings.Cut(server, "/")
	if !ok || !named {
		return nil, nil // pending, or a record of no server
	}
	gs, err := b.ReadThrough(ctx, core.Key{Namespace: ns, Name: name})
	if errors.Is(err, allocator.ErrNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if !carries(gs, k, "") {
		return nil, nil
	}
	return gs, nil
}
