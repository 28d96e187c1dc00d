package kube

import (
	"context"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

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
