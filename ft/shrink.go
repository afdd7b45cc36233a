//go:build linux

package ft

import (
	"context"

	"github.com/rivet-hpc/rivet/fabric"
	"github.com/rivet-hpc/rivet/internal/ulfm"
)

// Shrink makes a communicator of the members of c that are not known
// failed (MPI_COMM_SHRINK), in their order in c, identical at every one of
// them: the same members and the same context id.
//
// The survivors agree, in one agreement, on the failed group and on the
// new context id and generation: each passes the failures it knows as
// the ones it acknowledges, with its free context ids (combined by AND)
// and its latest generation (by MAX). An agreement that raises — a
// survivor knew of another failure, or the groups differed — teaches
// every survivor the union of the failures, and they agree again, until
// every survivor came with the same group; a failure cannot make them
// diverge (Open MPI agrees on the group and then on the id, by the same
// kind of agreement). Shrink works on a revoked c and never returns
// fabric.ErrProcFailed or fabric.ErrRevoked; a member that fails after
// the decisive agreement is a member of the result, known failed there.
// It is collective over c's survivors.
func Shrink(ctx context.Context, c *fabric.Comm) (*fabric.Comm, error) {
	h, err := handlerOf(c)
	if err != nil {
		return nil, err
	}
	return c.CreateAgreed(ctx, func(ctx context.Context, free []uint64, gen uint64) ([]int, []uint64, uint64, error) {
		s := ulfm.NewShrink(h.e.Size(), free, gen, idWindow)
		for {
			h.mu.Lock()
			known := h.e.Known()
			h.mu.Unlock()
			val, ops, acked := s.Contribution(known)
			a, out, err := h.agree(ctx, val, ops, acked)
			if err != nil {
				return nil, nil, 0, err
			}
			// Through shared memory (a nil a) every member contributed:
			// nothing raised, nobody failed.
			raised, dead := false, []int(nil)
			if a != nil {
				raised, dead = a.Raised(), a.Dead()
			}
			done, err := s.Decided(out, raised, dead)
			if err != nil {
				return nil, nil, 0, err
			}
			if done {
				members, ids, gen := s.Result()
				return members, ids, gen, nil
			}
			if raised {
				h.outcome(a) // learn what the others knew
			}
		}
	})
}

// idWindow is ulfm.Window, a variable for the tests, which set it to 0
// to take the whole mask's path.
var idWindow = ulfm.Window

// ShrinkRequest is a shrink in progress (IShrink).
type ShrinkRequest struct {
	done chan struct{}
	c    *fabric.Comm
	err  error
}

// IShrink starts a shrink (MPI_COMM_ISHRINK): the request's Wait gives
// what Shrink returns. It runs in a goroutine of its own, which makes
// the progress it needs while the caller computes; it ends with the
// shrink, or when the endpoint closes.
func IShrink(c *fabric.Comm) (*ShrinkRequest, error) {
	if _, err := handlerOf(c); err != nil {
		return nil, err
	}
	r := &ShrinkRequest{done: make(chan struct{})}
	go func() {
		defer close(r.done)
		r.c, r.err = Shrink(context.Background(), c)
	}()
	return r, nil
}

// Wait waits until the shrink is done, or ctx ends (the shrink goes on).
func (r *ShrinkRequest) Wait(ctx context.Context) (*fabric.Comm, error) {
	select {
	case <-r.done:
		return r.c, r.err
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// Test reports whether the shrink is done, and if so what Shrink
// returned.
func (r *ShrinkRequest) Test() (bool, *fabric.Comm, error) {
	select {
	case <-r.done:
		return true, r.c, r.err
	default:
		return false, nil, nil
	}
}
