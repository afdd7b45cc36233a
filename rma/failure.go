//go:build linux

package rma

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/rivet-hpc/rivet/fabric"
)

// Failures (MPI's §16.2.5 and §16.3.2). What this process knows of
// failed processes is the fabric's; a window consults it where it would
// otherwise wait on a peer — a control word a dead process will never
// write, a lock word a dead process will never release — and at every
// synchronization with a target. Nothing is asked while the fabric knows
// of no failure (Endpoint.KnownFailed, one atomic load), so failure-free
// runs pay nothing for it.

// failed returns the error an epoch involving window rank r raises: a
// *fabric.PeerError matching fabric.ErrProcFailed once r is known
// failed, nil otherwise.
func (w *Window) failed(r int) error {
	if w.ep.KnownFailed() == 0 || r < 0 || r >= w.n {
		return nil
	}
	if err := w.ep.Failure(w.targets[r].world); err != nil {
		var pe *fabric.PeerError
		if errors.As(err, &pe) {
			return &fabric.PeerError{Rank: r, WorldRank: pe.WorldRank, Err: pe.Err}
		}
		return err
	}
	return nil
}

// anyFailed returns failed's error for the first window rank known
// failed, nil if none is: what collective synchronization (Fence) and
// passive target's lock protocol raise (§16.2.5's rationale).
func (w *Window) anyFailed() error {
	if w.ep.KnownFailed() == 0 {
		return nil
	}
	for r := range w.n {
		if err := w.failed(r); err != nil {
			return err
		}
	}
	return nil
}

// interrupted reports why a wait must end without what it waits for:
// the window was revoked, or gone (one of failed, anyFailed) says a
// process it waits on failed.
func (w *Window) interrupted(gone func() error) error {
	if w.revokedHere() {
		return w.errRevoked()
	}
	if gone != nil {
		return gone()
	}
	return nil
}

func (w *Window) errRevoked() error {
	return fmt.Errorf("%w: rma: the window is revoked", fabric.ErrRevoked)
}

// Revoke revokes the window at every live member (MPI_Win_revoke). It is
// local and does not wait: the others learn of it through the fabric's
// reliable broadcast, the one that carries failure notices and
// communicator revokes, so every live member learns even if members,
// this one included, die meanwhile. At each member, once it knows,
// every synchronization on the window raises an error matching
// fabric.ErrRevoked, every operation does too without communicating, the
// open epochs are closed (locks held are abandoned, not released), and
// the operations in flight end with undefined outputs, which Undefined
// reports. A revoked window can only be freed.
func (w *Window) Revoke() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.freed {
		return ErrFreed
	}
	w.abandon()
	return nil
}

// IsRevoked reports whether the window is revoked at this process
// (MPI_Win_is_revoked): by Revoke here or at another member (once its
// notice arrived), or because a call raised fabric.ErrRevoked.
func (w *Window) IsRevoked() bool { return w.comm.IsRevoked() || w.rev != nil && w.revokedHere() }

// GetFailed returns the group of the window's members this process knows
// to have failed (MPI_Win_get_failed), in world ranks like Group, in the
// order it learned of them: a later call's group extends an earlier
// one's (prefix-stable). It is local; Revoke is the way to make every
// member know.
func (w *Window) GetFailed() fabric.Group { return w.comm.GetFailed() }

// revoked checks, with w.mu held, whether the window has been revoked
// since the last call — a notice through the fabric, or the word a
// member that knew wrote into this process's control memory — closing
// its epochs if so.
func (w *Window) revoked() error {
	if !w.revokedHere() {
		return nil
	}
	w.abandon()
	return w.errRevoked()
}

// revokedHere reports whether this process knows the window is revoked,
// without the mutex: what the fast paths ask.
func (w *Window) revokedHere() bool {
	return atomic.LoadUint64(w.rev) != 0 || w.comm.IsRevoked()
}

// abandon closes every epoch of a revoked window at this process: what
// its operations may have changed at their targets, and the local
// buffers its gets had not completed, become undefined. The first time,
// it also revokes the window's communicator, if no notice did yet, and
// writes the revoked word into every live member's control memory: a
// member whose calls all take the fast paths (a put and a flush on
// shared memory poll nothing) sees the word at its next flush. With
// w.mu held.
func (w *Window) abandon() {
	if w.st.locks == nil {
		w.st.init(w.n)
	}
	if !w.abandoned {
		w.abandoned = true
		w.comm.Revoke()
		ctx := context.Background()
		for r := range w.n {
			if r != w.me && w.failed(r) == nil {
				w.storeCtl(ctx, r, revWord(w.n), 1) // best effort: the notice is the reliable way
			}
		}
		atomic.StoreUint64(w.rev, 1)
	}
	for r := range w.n {
		w.lost(r)
	}
	e := &w.st
	e.fence, e.accessOn, e.exposeOn, e.lockAll, e.lockAllNoCheck = false, false, false, false, false
	clear(e.locks)
	e.nlocks = 0
	w.publish()
}
