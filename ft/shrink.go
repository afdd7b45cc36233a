//go:build linux

package ft

import (
	"context"
	"fmt"
	"slices"

	"github.com/rivet-hpc/rivet/fabric"
)

// Shrink makes a communicator of the members of c that are not known
// failed (MPI_COMM_SHRINK), in their order in c, identical at every one of
// them: the same members and the same context id.
//
// The survivors first agree on the failed group — an agreement that
// passes each one's known failures as acknowledged, repeated until every
// survivor came with the same group and no new failure — then on the
// context id and generation, by an agreement too, so that a failure
// during either cannot make them diverge (Open MPI's design; ft's doc
// has the details). Shrink works on a revoked c and never returns
// fabric.ErrProcFailed or fabric.ErrRevoked; a member that fails after
// the failed group was agreed is a member of the result, known failed
// there. It is collective over c's survivors.
func Shrink(ctx context.Context, c *fabric.Comm) (*fabric.Comm, error) {
	h, err := handlerOf(c)
	if err != nil {
		return nil, err
	}
	dead, err := h.agreeFailed(ctx)
	if err != nil {
		return nil, err
	}
	var survivors []int
	for r := 0; r < c.Size(); r++ {
		if !slices.Contains(dead, r) {
			survivors = append(survivors, r)
		}
	}
	return c.CreateAgreed(ctx, survivors, func(ctx context.Context, free []uint64, gen uint64) ([]uint64, uint64, error) {
		val := append(slices.Clone(free), gen)
		ops := make([]combOp, len(val))
		ops[len(free)] = opMax // the rest: opAnd
		a := h.enter(val, ops, dead)
		out, err := h.wait(ctx, a)
		if err != nil {
			return nil, 0, err
		}
		// (A failure during this agreement changes nothing: the decided
		// id is the same at every survivor.)
		return out[:len(free)], out[len(free)], nil
	})
}

// agreeFailed agrees on c's failed group: it returns the comm ranks that
// every survivor holds failed.
func (h *handler) agreeFailed(ctx context.Context) ([]int, error) {
	for round := 0; ; round++ {
		h.mu.Lock()
		var known []int
		for r, f := range h.e.failed {
			if f {
				known = append(known, r)
			}
		}
		a := h.e.enter([]uint64{0}, []combOp{opAnd}, known)
		h.mu.Unlock()
		if _, err := h.wait(ctx, a); err != nil {
			return nil, err
		}
		if !a.failed {
			// Every contributor came with the same group and knew of no
			// other failure: the group is agreed.
			var dead []int
			for r, d := range a.dead {
				if d {
					dead = append(dead, r)
				}
			}
			return dead, nil
		}
		// Learn what the others knew, and go again.
		h.outcome(a)
		if round > h.e.n+1 {
			// Each round that raises has seen a new failure or made the
			// groups equal; more rounds than members is a bug.
			return nil, fmt.Errorf("ft: shrink: the failed group did not settle after %d agreements", round)
		}
	}
}

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
