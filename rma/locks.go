//go:build linux

package rma

import (
	"context"
	"fmt"
	"runtime"
)

// Lock words. Rank r's bit is r mod 62 in word r / 62 of the target's
// control memory, and bit 63 of every word marks an exclusive lock, so
// that the holders of a lock can be read from target memory (the "rma
// under failure" work needs exactly that):
//
//   - shared: fetch-and-add of this rank's bit into its word; if the
//     word showed the exclusive mark, add it back out and retry.
//   - exclusive: compare-and-swap every word, in order, from 0 to the
//     exclusive mark (with this rank's bit in its own word); on a word
//     that is not 0, undo the words taken and retry.
//
// Releases subtract what was added. Every step is one atomic in the
// window's domain, issued by the origin; the target takes no part.
const (
	lockBits = 62
	lockExcl = uint64(1) << 63
)

// LockType is the kind of a passive-target lock.
type LockType uint8

const (
	Exclusive LockType = iota + 1 // MPI_LOCK_EXCLUSIVE
	Shared                        // MPI_LOCK_SHARED
)

func (l LockType) String() string {
	switch l {
	case Exclusive:
		return "exclusive"
	case Shared:
		return "shared"
	}
	return fmt.Sprintf("LockType(%d)", uint8(l))
}

func (w *Window) myBit() (int, uint64) { return w.me / lockBits, uint64(1) << (w.me % lockBits) }

// acquire takes lock kind l at target t (window rank r), retrying with
// growing pauses while it is held against us.
func (w *Window) acquire(ctx context.Context, r int, l LockType) error {
	t := &w.targets[r]
	k, bit := w.myBit()
	for attempt := 0; ; attempt++ {
		var got bool
		var err error
		if l == Shared {
			got, err = w.tryShared(ctx, t, k, bit)
		} else {
			got, err = w.tryExclusive(ctx, t, k, bit)
		}
		if err != nil || got {
			return err
		}
		if err := backoff(ctx, attempt); err != nil {
			return err
		}
	}
}

func (w *Window) tryShared(ctx context.Context, t *target, k int, bit uint64) (bool, error) {
	old, err := w.faddWord(ctx, t, regionCtl, uint64(8*k), bit)
	if err != nil {
		return false, err
	}
	if old&lockExcl == 0 {
		return true, nil
	}
	_, err = w.faddWord(ctx, t, regionCtl, uint64(8*k), -bit)
	return false, err
}

func (w *Window) tryExclusive(ctx context.Context, t *target, k int, bit uint64) (bool, error) {
	nw := lockWords(w.n)
	for i := range nw {
		v := lockExcl
		if i == k {
			v |= bit
		}
		old, err := w.casWord(ctx, t, regionCtl, uint64(8*i), 0, v)
		if err != nil {
			return false, err
		}
		if old != 0 {
			for j := i - 1; j >= 0; j-- {
				u := lockExcl
				if j == k {
					u |= bit
				}
				if _, err := w.faddWord(ctx, t, regionCtl, uint64(8*j), -u); err != nil {
					return false, err
				}
			}
			return false, nil
		}
	}
	return true, nil
}

// unlockTarget gives lock kind l at window rank r back.
func (w *Window) unlockTarget(ctx context.Context, r int, l LockType) error {
	t := &w.targets[r]
	k, bit := w.myBit()
	if l == Shared {
		_, err := w.faddWord(ctx, t, regionCtl, uint64(8*k), -bit)
		return err
	}
	for i := lockWords(w.n) - 1; i >= 0; i-- {
		u := lockExcl
		if i == k {
			u |= bit
		}
		if _, err := w.faddWord(ctx, t, regionCtl, uint64(8*i), -u); err != nil {
			return err
		}
	}
	return nil
}

// backoff pauses before a lock attempt is retried: a few yields, then
// growing sleeps of up to 1 ms, so that waiting origins leave the
// target's NIC (or cache line) to the holder.
func backoff(ctx context.Context, attempt int) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if attempt < 8 {
		runtime.Gosched()
		return nil
	}
	d := min(1<<min(attempt-8, 10), 1000)
	return sleepCtx(ctx, d)
}
