//go:build linux

package rma

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"runtime"

	"github.com/rivet-hpc/rivet/fabric"
)

// Lock words. Rank r's bit is r mod 62 in word r / 62 of the target's
// control memory, and bit 63 of every word marks an exclusive lock, so
// that the holders of a lock can be read from target memory:
//
//   - shared: fetch-and-add of this rank's bit into its word; if the
//     word showed the exclusive mark, add it back out and retry.
//   - exclusive: compare-and-swap this rank's own word from 0 to the mark
//     and its bit, then every other word, in order, from 0 to the mark;
//     on a word that is not 0, undo the words taken and retry.
//
// Releases subtract what was added, the own word last, so a word never
// shows the exclusive mark unless the holder's own word names it. Every
// step is one atomic in the window's domain, issued by the origin; the
// target takes no part.
//
// A process that failed while it held a lock, or while it was taking
// one, leaves its bit in the words: the lock can never be taken again
// (MPI's rule), and every process that tries, or releases its own hold
// on it, raises that failure rather than waiting (deadHolder).
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
// growing pauses while it is held against us, and raising instead when
// r failed, a holder failed, or the window was revoked.
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
		if err != nil {
			return w.targetErr(r, err)
		}
		if got {
			if l == Shared && w.ep.KnownFailed() > 0 {
				// Shared holders do not exclude each other: a failed
				// one shows only in the words.
				if err := w.deadHolder(ctx, r); err != nil {
					w.unlockTarget(context.WithoutCancel(ctx), r, l)
					return err
				}
			}
			return nil
		}
		if attempt%16 == 15 {
			w.ep.Poll() // learn of failures and revokes while waiting
		}
		if err := w.interrupted(func() error { return w.failed(r) }); err != nil {
			return err
		}
		if err := w.deadHolder(ctx, r); err != nil {
			return err
		}
		if err := backoff(ctx, attempt); err != nil {
			return err
		}
	}
}

// deadHolder reads the lock words of window rank r and returns the
// failure of a process they name that is known failed: a holder of the
// lock, or a process that died taking or releasing it. It is nil at once
// while no failure is known.
func (w *Window) deadHolder(ctx context.Context, r int) error {
	if w.ep.KnownFailed() == 0 || w.failed(r) != nil {
		return nil
	}
	t := &w.targets[r]
	for i := range lockWords(w.n) {
		v, err := w.casWord(ctx, t, regionCtl, uint64(8*i), 0, 0) // a read
		if err != nil {
			return w.targetErr(r, err)
		}
		for b := 0; b < lockBits && v&^lockExcl != 0; b++ {
			if v&(1<<b) == 0 {
				continue
			}
			v &^= 1 << b
			q := i*lockBits + b
			if q == w.me || q >= w.n {
				continue
			}
			if err := w.failed(q); err != nil {
				var pe *fabric.PeerError
				if errors.As(err, &pe) {
					pe.Err = fmt.Errorf("%w (it held the lock of window rank %d, or was taking it: that lock can never be taken again)", pe.Err, r)
				}
				return err
			}
		}
	}
	return nil
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

// exclOrder is the order an exclusive lock takes the words in: this
// rank's own word k first, then the others.
func exclOrder(k, i int) int {
	switch {
	case i == 0:
		return k
	case i <= k:
		return i - 1
	}
	return i
}

func (w *Window) tryExclusive(ctx context.Context, t *target, k int, bit uint64) (bool, error) {
	nw := lockWords(w.n)
	for i := range nw {
		j := exclOrder(k, i)
		v := lockExcl
		if j == k {
			v |= bit
		}
		old, err := w.casWord(ctx, t, regionCtl, uint64(8*j), 0, v)
		if err != nil {
			return false, err
		}
		if old != 0 {
			for i--; i >= 0; i-- {
				j := exclOrder(k, i)
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
	nw := lockWords(w.n)
	for i := nw - 1; i >= 0; i-- {
		j := exclOrder(k, i)
		u := lockExcl
		if j == k {
			u |= bit
		}
		if _, err := w.faddWord(ctx, t, regionCtl, uint64(8*j), -u); err != nil {
			return err
		}
	}
	return nil
}

// backoff pauses before a lock attempt is retried: a few yields, then
// sleeps growing to about 1 ms, with jitter, so that waiting origins leave
// the target's NIC (or cache line) to the holder and do not retry in
// step with each other.
func backoff(ctx context.Context, attempt int) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if attempt < 8 {
		runtime.Gosched()
		return nil
	}
	d := min(1<<min(attempt-8, 10), 1000)
	return sleepCtx(ctx, d/2+rand.IntN(d/2+1))
}
