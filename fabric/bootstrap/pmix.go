//go:build linux

package bootstrap

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/rivet-hpc/rivet/internal/pmix"
)

// finalizeWait bounds Close's wait for the server's acknowledgement: a
// live server answers at once, a dead one hangs up, and only a server
// that is stuck makes Close wait this long before it hangs up itself.
const finalizeWait = 30 * time.Second

// pmixBootstrap meets over the job's PMIx server (Open MPI's mpirun,
// PRRTE, srun --mpi=pmix): puts are staged and committed at the fence,
// which collects every process's data at the server.
type pmixBootstrap struct {
	c *pmix.Client

	mu     sync.Mutex
	closed bool
}

func (b *pmixBootstrap) Rank() int        { return b.c.Rank() }
func (b *pmixBootstrap) Size() int        { return b.c.Size() }
func (b *pmixBootstrap) Launcher() string { return "pmix" }

// JobID is the server's namespace of the job.
func (b *pmixBootstrap) JobID() string { return b.c.Nspace() }

func (b *pmixBootstrap) Put(_ context.Context, key string, value []byte) error {
	if err := checkKey(key); err != nil {
		return err
	}
	b.c.Put(rankKey(b.Rank(), key), value)
	return nil
}

func (b *pmixBootstrap) Fence(ctx context.Context) error {
	if err := b.c.Commit(ctx); err != nil {
		return fmt.Errorf("bootstrap: %w", err)
	}
	if err := b.c.Fence(ctx); err != nil {
		if ctx.Err() != nil {
			return fmt.Errorf("bootstrap: not every rank reached the fence (one that died or never started does not arrive): %w", err)
		}
		return fmt.Errorf("bootstrap: %w", err)
	}
	return nil
}

func (b *pmixBootstrap) Get(ctx context.Context, rank int, key string) ([]byte, error) {
	if err := checkRankKey(rank, b.Size(), key); err != nil {
		return nil, err
	}
	v, err := b.c.Get(ctx, rank, rankKey(rank, key))
	switch {
	case errors.Is(err, pmix.ErrNotFound):
		return nil, fmt.Errorf("bootstrap: rank %d put nothing under %q: %w", rank, key, ErrNotFound)
	case err != nil:
		return nil, fmt.Errorf("bootstrap: %w", err)
	}
	return v, nil
}

// Nodes reads each rank's node from the job data the server sent at
// connect (PMIx's per-process node id).
func (b *pmixBootstrap) Nodes(context.Context) ([]int, error) {
	nodes := make([]int, b.Size())
	for r := range nodes {
		v, ok := b.c.Proc(r, pmix.KeyNodeID)
		if !ok {
			return nil, fmt.Errorf("bootstrap: the PMIx server gives no %s for rank %d: %w", pmix.KeyNodeID, r, ErrNotFound)
		}
		id, ok := v.Uint()
		if !ok || id > 1<<31 {
			return nil, fmt.Errorf("bootstrap: the PMIx server's %s for rank %d is %+v", pmix.KeyNodeID, r, v)
		}
		nodes[r] = int(id)
	}
	return nodes, nil
}

// Close finalizes, so that the server counts the process as ended well.
func (b *pmixBootstrap) Close() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return nil
	}
	b.closed = true
	ctx, cancel := context.WithTimeout(context.Background(), finalizeWait)
	defer cancel()
	if err := b.c.Finalize(ctx); err != nil {
		return fmt.Errorf("bootstrap: %w", err)
	}
	return nil
}
