package kindcluster

import (
	"context"
	"errors"
	"fmt"
	"sync"
)

// StartMany starts one cluster per Options, concurrently (each API server
// spends most of its start-up waiting on itself, so N start in well under N
// times one). Names must differ; ports and directories are picked apart
// automatically unless set. If any start fails, the others are stopped and
// the error names the failing cluster.
func StartMany(ctx context.Context, opts []Options) ([]*Cluster, error) {
	seen := map[string]bool{}
	for i := range opts {
		name := opts[i].Name
		if name == "" {
			name = fmt.Sprintf("qm-%d", i)
			opts[i].Name = name
		}
		if seen[name] {
			return nil, fmt.Errorf("cluster name %q used twice", name)
		}
		seen[name] = true
	}
	out := make([]*Cluster, len(opts))
	errs := make([]error, len(opts))
	var wg sync.WaitGroup
	for i := range opts {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c, err := Start(ctx, opts[i])
			if err != nil {
				errs[i] = fmt.Errorf("cluster %q: %w", opts[i].Name, err)
				return
			}
			out[i] = c
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		StopAll(out)
		return nil, err
	}
	return out, nil
}

// StopAll stops every cluster (nil entries are skipped), all of them even
// if some fail, and returns the errors joined.
func StopAll(cs []*Cluster) error {
	var errs []error
	for _, c := range cs {
		if c == nil {
			continue
		}
		if err := c.Stop(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
