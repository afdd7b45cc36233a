//go:build linux

package rma

import (
	"context"
	"fmt"

	"github.com/rivet-hpc/rivet/op"
)

// Request is a request-based operation (Rput, Rget, Raccumulate,
// RgetAccumulate): Wait returns once it is complete at this process —
// Rivet completes it at the target too. Only passive-target epochs
// (Lock, LockAll) take request-based operations.
type Request struct {
	w *Window
	r int
}

// Wait waits until the operation is complete (MPI_Wait).
func (q *Request) Wait(ctx context.Context) error {
	w := q.w
	if err := w.begin(); err != nil {
		return err
	}
	defer w.mu.Unlock()
	return w.flushTarget(ctx, q.r)
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
	return &Request{w, r}, Put(ctx, w, origin, r, disp)
}

// Rget is Get with a request (MPI_Rget): result holds the data once Wait
// returns.
func Rget[T any](ctx context.Context, w *Window, result []T, r, disp int) (*Request, error) {
	if err := passive(w, r); err != nil {
		return nil, err
	}
	return &Request{w, r}, Get(ctx, w, result, r, disp)
}

// Raccumulate is Accumulate with a request (MPI_Raccumulate).
func Raccumulate[T any](ctx context.Context, w *Window, origin []T, r, disp int, o op.Op[T]) (*Request, error) {
	if err := passive(w, r); err != nil {
		return nil, err
	}
	return &Request{w, r}, Accumulate(ctx, w, origin, r, disp, o)
}

// RgetAccumulate is GetAccumulate with a request (MPI_Rget_accumulate).
func RgetAccumulate[T any](ctx context.Context, w *Window, origin, result []T, r, disp int, o op.Op[T]) (*Request, error) {
	if err := passive(w, r); err != nil {
		return nil, err
	}
	return &Request{w, r}, GetAccumulate(ctx, w, origin, result, r, disp, o)
}
