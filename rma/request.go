//go:build linux

package rma

import (
	"context"
	"errors"
	"fmt"

	"github.com/rivet-hpc/rivet/fabric"
	"github.com/rivet-hpc/rivet/op"
)

// Request is a request-based operation (Rput, Rget, Raccumulate,
// RgetAccumulate): Wait returns once it is complete at this process —
// Rivet completes it at the target too. Only passive-target epochs
// (Lock, LockAll) take request-based operations.
//
// A request may complete while its epoch fails (§16.2.5): if the target
// failed, or the window was revoked, an Rput's Wait still returns nil —
// its buffer is free — and the target memory it wrote is reported by
// Undefined; an Rget's raises, as its buffer does not hold the data. The
// accumulate family is complete when the call returns.
type Request struct {
	w    *Window
	r    int
	read bool // an Rget: its buffer is what completes
	done bool // complete when issued (the accumulate family)
}

// Wait waits until the operation is complete (MPI_Wait).
func (q *Request) Wait(ctx context.Context) error {
	if q.done {
		return nil
	}
	w := q.w
	if err := w.enter(); err != nil {
		return err
	}
	defer w.mu.Unlock()
	err := w.revoked()
	if err == nil {
		err = w.flushOne(ctx, q.r)
	}
	if err != nil && !q.read && ctx.Err() == nil && (errors.Is(err, fabric.ErrProcFailed) || errors.Is(err, fabric.ErrRevoked)) {
		return nil // the origin buffer is free; the target's memory is undefined
	}
	return err
}

func passive(w *Window, r int) error {
	if err := w.begin(); err != nil {
		return err
	}
	defer w.mu.Unlock()
	if r >= 0 && r < w.n && !w.st.lockAll && w.st.locks[r] == 0 {
		return fmt.Errorf("%w: request-based operations need a passive-target epoch (Lock or LockAll)", ErrEpoch)
	}
	return nil
}

// Rput is Put with a request (MPI_Rput).
func Rput[T any](ctx context.Context, w *Window, origin []T, r, disp int) (*Request, error) {
	if err := passive(w, r); err != nil {
		return nil, err
	}
	return &Request{w: w, r: r}, Put(ctx, w, origin, r, disp)
}

// Rget is Get with a request (MPI_Rget): result holds the data once Wait
// returns.
func Rget[T any](ctx context.Context, w *Window, result []T, r, disp int) (*Request, error) {
	if err := passive(w, r); err != nil {
		return nil, err
	}
	return &Request{w: w, r: r, read: true}, Get(ctx, w, result, r, disp)
}

// Raccumulate is Accumulate with a request (MPI_Raccumulate).
func Raccumulate[T any](ctx context.Context, w *Window, origin []T, r, disp int, o op.Op[T]) (*Request, error) {
	if err := passive(w, r); err != nil {
		return nil, err
	}
	return &Request{w: w, r: r, done: true}, Accumulate(ctx, w, origin, r, disp, o)
}

// RgetAccumulate is GetAccumulate with a request (MPI_Rget_accumulate).
func RgetAccumulate[T any](ctx context.Context, w *Window, origin, result []T, r, disp int, o op.Op[T]) (*Request, error) {
	if err := passive(w, r); err != nil {
		return nil, err
	}
	return &Request{w: w, r: r, done: true}, GetAccumulate(ctx, w, origin, result, r, disp, o)
}
