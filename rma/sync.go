//go:build linux

package rma

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync/atomic"
	"time"

	"github.com/rivet-hpc/rivet/fabric"
)

// Assert is a bit mask of the assertions a synchronization call may be
// given (MPI_MODE_*): promises by the caller, which Rivet may use to do
// less and never fails for.
type Assert uint8

const (
	NoCheck   Assert = 1 << iota // MPI_MODE_NOCHECK: no conflicting lock / the matching post already happened
	NoStore                      // MPI_MODE_NOSTORE: no local stores since the last synchronization
	NoPut                        // MPI_MODE_NOPUT: no puts or accumulates to this process until the next synchronization
	NoPrecede                    // MPI_MODE_NOPRECEDE: the fence ends no epoch with operations
	NoSucceed                    // MPI_MODE_NOSUCCEED: no operations follow the fence
)

const assertAll = NoCheck | NoStore | NoPut | NoPrecede | NoSucceed

func (a Assert) check(allowed Assert, call string) error {
	if a&^allowed != 0 {
		return fmt.Errorf("%w: %s does not take assertion bits %#x", fabric.ErrInvalid, call, uint8(a&^allowed))
	}
	return nil
}

// epochs is a window's synchronization state at this process.
type epochs struct {
	fence          bool  // a fence opened an epoch (no NoSucceed)
	access         []int // Start's group, while an access epoch is open
	accessOn       bool
	exposure       []int // Post's group, while an exposure epoch is open
	exposeOn       bool
	locks          []LockType // per target, while Lock holds it
	nlocks         int
	lockAll        bool
	lockAllNoCheck bool
	// Running counts, per window rank, of PSCW epochs: posts sent to it
	// and posts from it awaited by Start; completes sent to it and
	// completes from it awaited by Wait.
	posted, started, completed, waited []uint64
	bar                                uint64 // fence barriers entered
	ok                                 []bool // which targets an epoch's end completed
	ranks                              []int  // a PSCW call's group as window ranks (ranksOf)
	group                              fabric.Group
	groupSet                           bool // group is the window's group
}

// okBuf is e.ok, cleared, for n targets.
func (e *epochs) okBuf(n int) []bool {
	if cap(e.ok) < n {
		e.ok = make([]bool, n)
	}
	e.ok = e.ok[:n]
	clear(e.ok)
	return e.ok
}

func (e *epochs) init(n int) {
	if e.locks == nil {
		e.locks = make([]LockType, n)
		e.posted, e.started = make([]uint64, n), make([]uint64, n)
		e.completed, e.waited = make([]uint64, n), make([]uint64, n)
	}
}

// idle says which epoch is open, if any but a fence's.
func (e *epochs) idle() error {
	switch {
	case e.accessOn:
		return fmt.Errorf("an access epoch (Start) open")
	case e.exposeOn:
		return fmt.Errorf("an exposure epoch (Post) open")
	case e.lockAll:
		return fmt.Errorf("LockAll held")
	case e.nlocks > 0:
		return fmt.Errorf("%d locks held", e.nlocks)
	}
	return nil
}

// canAccess reports whether an operation to window rank r is inside an
// access epoch.
func (e *epochs) canAccess(r int) bool {
	return e.fence || e.lockAll || (e.locks != nil && e.locks[r] != 0) || (e.accessOn && slices.Contains(e.access, r))
}

// enter locks the window for a call and checks it is not freed.
func (w *Window) enter() error {
	w.mu.Lock()
	if w.freed {
		w.mu.Unlock()
		return ErrFreed
	}
	w.st.init(w.n)
	return nil
}

// begin is enter for the operations and synchronizations, which a
// revoked window refuses (closing its epochs the first time). Every 8th
// call, at most once a millisecond, it polls the fabric, so that a
// process that only makes one-sided calls — which never wait in the
// fabric on shared memory — still learns of failures and revokes. (The
// clock read costs more than the rest of begin: hence not every call.)
func (w *Window) begin() error {
	if err := w.enter(); err != nil {
		return err
	}
	if w.calls++; w.calls&7 == 0 {
		// time.Since of a time with a monotonic reading is one clock
		// read, where time.Now is two.
		if now := time.Since(clockBase); now-w.polled >= time.Millisecond {
			w.polled = now
			w.ep.Poll()
		}
	}
	if err := w.revoked(); err != nil {
		w.publish()
		w.mu.Unlock()
		return err
	}
	return nil
}

// clockBase is what begin measures time from.
var clockBase = time.Now()

// synced notes a synchronization call: a dynamic window reads its
// targets' tables of attached memory again after one.
func (w *Window) synced() { w.dyn.syncs++ }

// Fence closes the current fence epoch, completing every operation this
// process issued on the window, and opens the next one (MPI_Win_fence).
// It is collective. With NoSucceed no epoch follows; with NoPrecede none
// ends here, and nothing is flushed.
//
// Once a member of the window is known failed, Fence raises an error
// matching fabric.ErrProcFailed (at some members, perhaps not all, as
// collectives do): the operations to live targets are complete, those to
// the failed one are not (Undefined), and the epochs open and close as
// if it had succeeded.
func (w *Window) Fence(ctx context.Context, a Assert) error {
	if err := a.check(assertAll, "Fence"); err != nil {
		return err
	}
	if err := w.begin(); err != nil {
		return err
	}
	defer w.endSync()
	w.synced()
	if err := w.st.idle(); err != nil {
		return fmt.Errorf("%w: Fence with %v (fence does not mix with PSCW or passive target)", ErrEpoch, err)
	}
	var err error
	if a&NoPrecede == 0 {
		for r := range w.n {
			if e := w.endTarget(ctx, r); e != nil && err == nil {
				err = e
			}
		}
	}
	w.st.fence = a&NoSucceed == 0
	if err != nil {
		return err
	}
	if err := w.anyFailed(); err != nil {
		return err
	}
	return w.barrier(ctx)
}

// endTarget ends this process's epoch at window rank r: it completes the
// operations to r (flushOne), and clears the ranges it recorded there.
func (w *Window) endTarget(ctx context.Context, r int) error {
	if err := w.flushOne(ctx, r); err != nil {
		return err
	}
	return w.targetErr(r, w.clearRecords(ctx, r))
}

// targetErr names window rank r in an error of an operation to it that
// the fabric reported by world rank.
func (w *Window) targetErr(r int, err error) error {
	if err == nil {
		return nil
	}
	var pe *fabric.PeerError
	if errors.As(err, &pe) && pe.Rank < 0 {
		return &fabric.PeerError{Rank: r, WorldRank: pe.WorldRank, Err: pe.Err}
	}
	return err
}

// ranksOf is g, a group of the window's processes, as window ranks in
// e.ranks — without allocating once the window's group is known.
func (w *Window) ranksOf(g fabric.Group, call string) ([]int, error) {
	e := &w.st
	if !e.groupSet {
		e.group, e.groupSet = w.comm.Group(), true
	}
	e.ranks = e.ranks[:0]
	for i := range g.Size() {
		wr, _ := g.WorldRank(i)
		r := e.group.RankOf(wr)
		if r == fabric.Undefined {
			return nil, fmt.Errorf("%w: %s: world rank %d is not in the window's group", fabric.ErrGroup, call, wr)
		}
		e.ranks = append(e.ranks, r)
	}
	return e.ranks, w.checkGroup(e.ranks, call)
}

func (w *Window) checkGroup(g []int, call string) error {
	for i, r := range g {
		if r < 0 || r >= w.n {
			return fmt.Errorf("%w: %s: rank %d of a %d-process window", fabric.ErrRank, call, r, w.n)
		}
		if slices.Contains(g[:i], r) {
			return fmt.Errorf("%w: %s: rank %d twice", fabric.ErrGroup, call, r)
		}
	}
	return nil
}

// Post opens an exposure epoch for the processes of g (MPI_Win_post), a
// group of the window's processes — the window's Group, or one made from
// it (Incl, Excl, the failed group's Difference), as communicator
// creation takes: each of them may access this process's memory once it
// has seen the post in its Start. It does not wait. A member of g known
// failed is told nothing, and Post raises its failure once it has told
// the others; the epoch is open, and Wait ends it.
func (w *Window) Post(ctx context.Context, g fabric.Group, a Assert) error {
	if err := a.check(NoCheck|NoStore|NoPut, "Post"); err != nil {
		return err
	}
	if err := w.begin(); err != nil {
		return err
	}
	defer w.mu.Unlock()
	group, err := w.ranksOf(g, "Post")
	if err != nil {
		return err
	}
	e := &w.st
	if e.exposeOn || e.fence {
		return fmt.Errorf("%w: Post while an exposure or fence epoch is open", ErrEpoch)
	}
	e.exposure, e.exposeOn = append(e.exposure[:0], group...), true
	for _, r := range group {
		e.posted[r]++
		f := w.failed(r)
		if f == nil {
			f = w.storeCtl(ctx, r, postWord(w.n, w.me), e.posted[r])
		}
		if f != nil && err == nil {
			err = w.targetErr(r, f)
		}
	}
	return err
}

// Start opens an access epoch to the processes of g (MPI_Win_start), a
// group of the window's processes as Post takes, waiting until each has
// posted an exposure epoch to this process. If a member of g failed first, Start raises its
// failure once the others have posted; the epoch is open all the same
// (operations to the failed one fail), and Complete ends it.
func (w *Window) Start(ctx context.Context, g fabric.Group, a Assert) error {
	if err := a.check(NoCheck, "Start"); err != nil {
		return err
	}
	if err := w.begin(); err != nil {
		return err
	}
	defer w.endSync()
	w.synced()
	group, err := w.ranksOf(g, "Start")
	if err != nil {
		return err
	}
	e := &w.st
	if e.accessOn || e.fence || e.lockAll || e.nlocks > 0 {
		return fmt.Errorf("%w: Start while another access epoch is open", ErrEpoch)
	}
	for _, r := range group {
		e.started[r]++
		f := w.awaitCtl(ctx, postWord(w.n, r), e.started[r], func() error { return w.failed(r) })
		if f != nil && (ctx.Err() != nil || errors.Is(f, fabric.ErrRevoked)) {
			e.started[r]--
			return f
		}
		if f != nil && err == nil {
			err = f
		}
	}
	e.access, e.accessOn = append(e.access[:0], group...), true
	return err
}

// Complete ends the access epoch Start opened (MPI_Win_complete): every
// operation of it is complete at its target, and each target's Wait
// learns so. If a target failed, Complete raises its failure; the epoch
// is over all the same, with every operation to the other targets
// complete, and those to the failed one undefined (Undefined).
func (w *Window) Complete(ctx context.Context) error {
	if err := w.begin(); err != nil {
		return err
	}
	defer w.endSync()
	e := &w.st
	if !e.accessOn {
		return fmt.Errorf("%w: Complete without Start", ErrEpoch)
	}
	var err error
	ok := e.okBuf(len(e.access))
	for i, r := range e.access {
		f := w.endTarget(ctx, r)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		ok[i] = f == nil
		if f != nil && err == nil {
			err = f
		}
	}
	for i, r := range e.access {
		e.completed[r]++
		if !ok[i] {
			continue
		}
		if f := w.storeCtl(ctx, r, doneWord(w.n, w.me), e.completed[r]); f != nil && err == nil {
			err = w.targetErr(r, f)
		}
	}
	e.accessOn = false
	return err
}

// Wait ends the exposure epoch Post opened (MPI_Win_wait), once every
// origin of it has called Complete. If an origin failed first, Wait
// raises its failure once the others have completed: the epoch is over,
// and what the failed origin may have written is in Undefined.
func (w *Window) Wait(ctx context.Context) error {
	if err := w.begin(); err != nil {
		return err
	}
	defer w.mu.Unlock()
	e := &w.st
	if !e.exposeOn {
		return fmt.Errorf("%w: Wait without Post", ErrEpoch)
	}
	var err error
	for _, r := range e.exposure {
		f := w.awaitCtl(ctx, doneWord(w.n, r), e.waited[r]+1, func() error { return w.failed(r) })
		if f != nil && (ctx.Err() != nil || errors.Is(f, fabric.ErrRevoked)) {
			return f
		}
		if f != nil && err == nil {
			err = f
		}
	}
	for _, r := range e.exposure {
		e.waited[r]++
	}
	e.exposeOn = false
	return err
}

// Test is Wait that does not block (MPI_Win_test): it reports whether
// the exposure epoch has ended, ending it if so. An origin known failed
// counts as done, and Test then raises its failure with true.
func (w *Window) Test() (bool, error) {
	if err := w.begin(); err != nil {
		return false, err
	}
	defer w.mu.Unlock()
	e := &w.st
	if !e.exposeOn {
		return false, fmt.Errorf("%w: Test without Post", ErrEpoch)
	}
	var err error
	for _, r := range e.exposure {
		if w.ctlAt(doneWord(w.n, r)) < e.waited[r]+1 {
			f := w.failed(r)
			if f == nil {
				return false, nil
			}
			if err == nil {
				err = f
			}
		}
	}
	for _, r := range e.exposure {
		e.waited[r]++
	}
	e.exposeOn = false
	return true, err
}

// Lock opens a passive-target access epoch to window rank r, taking its
// lock shared or exclusive (MPI_Win_lock). It returns once the lock is
// held; the target takes no part. With NoCheck no lock is taken (the
// caller promises no conflicting lock).
//
// Lock raises an error matching fabric.ErrProcFailed when r is known
// failed, and when a process that failed holds r's lock (or was taking
// it): such a lock can never be taken again (the lock words name their
// holders). No epoch is open then.
func (w *Window) Lock(ctx context.Context, l LockType, r int, a Assert) error {
	if err := a.check(NoCheck, "Lock"); err != nil {
		return err
	}
	if l != Shared && l != Exclusive {
		return fmt.Errorf("%w: lock type %v", fabric.ErrInvalid, l)
	}
	if err := w.begin(); err != nil {
		return err
	}
	defer w.endSyncTarget(r)
	w.synced()
	if r < 0 || r >= w.n {
		return fmt.Errorf("%w: Lock of rank %d of a %d-process window", fabric.ErrRank, r, w.n)
	}
	e := &w.st
	switch {
	case w.info.NoLocks:
		return fmt.Errorf("%w: Lock on a window made with the no_locks hint", ErrEpoch)
	case e.fence:
		return fmt.Errorf("%w: Lock while a fence epoch is open (end it with a NoSucceed fence)", ErrEpoch)
	case e.accessOn:
		return fmt.Errorf("%w: Lock inside a Start/Complete epoch", ErrEpoch)
	case e.lockAll:
		return fmt.Errorf("%w: Lock while LockAll holds the window", ErrEpoch)
	case e.locks[r] != 0:
		return fmt.Errorf("%w: rank %d is already locked by this process", ErrEpoch, r)
	}
	if err := w.failed(r); err != nil {
		return err
	}
	if a&NoCheck == 0 {
		if err := w.acquire(ctx, r, l); err != nil {
			return err
		}
		e.locks[r] = l
	} else {
		e.locks[r] = l | noCheckHeld
	}
	e.nlocks++
	return nil
}

// noCheckHeld marks a lock taken with NoCheck: nothing to release.
const noCheckHeld LockType = 0x80

// Unlock completes every operation to window rank r and releases the
// lock Lock took (MPI_Win_unlock). The epoch ends whatever happens. If r
// failed, Unlock raises its failure (what this process wrote there is in
// Undefined); if a process that failed holds r's lock too, Unlock raises
// that failure once it has released its own hold.
func (w *Window) Unlock(ctx context.Context, r int) error {
	if err := w.begin(); err != nil {
		return err
	}
	defer w.endSyncTarget(r)
	if r < 0 || r >= w.n {
		return fmt.Errorf("%w: Unlock of rank %d of a %d-process window", fabric.ErrRank, r, w.n)
	}
	e := &w.st
	l := e.locks[r]
	if l == 0 {
		return fmt.Errorf("%w: Unlock of rank %d, which this process has not locked", ErrEpoch, r)
	}
	if err := w.endTarget(ctx, r); err != nil {
		if ctx.Err() != nil {
			return err // the epoch stays: Unlock may be called again
		}
		e.locks[r] = 0
		e.nlocks--
		return err
	}
	e.locks[r] = 0
	e.nlocks--
	if l&noCheckHeld == 0 {
		if err := w.unlockTarget(ctx, r, l); err != nil {
			return w.targetErr(r, err)
		}
		return w.deadHolder(ctx, r)
	}
	return nil
}

// LockAll takes a shared lock at every window rank (MPI_Win_lock_all).
// It raises, holding nothing, if a window rank failed or a process that
// failed holds a lock LockAll needs; with NoCheck it takes no lock, and
// raises for neither.
func (w *Window) LockAll(ctx context.Context, a Assert) error {
	if err := a.check(NoCheck, "LockAll"); err != nil {
		return err
	}
	if err := w.begin(); err != nil {
		return err
	}
	defer w.endSync()
	w.synced()
	e := &w.st
	switch {
	case w.info.NoLocks:
		return fmt.Errorf("%w: LockAll on a window made with the no_locks hint", ErrEpoch)
	case e.fence || e.accessOn:
		return fmt.Errorf("%w: LockAll inside a fence or Start/Complete epoch", ErrEpoch)
	case e.lockAll || e.nlocks > 0:
		return fmt.Errorf("%w: LockAll while this process holds locks on the window", ErrEpoch)
	}
	if a&NoCheck == 0 {
		if err := w.anyFailed(); err != nil {
			return err
		}
		for r := range w.n {
			if err := w.acquire(ctx, r, Shared); err != nil {
				for q := r - 1; q >= 0; q-- {
					if w.failed(q) == nil {
						w.unlockTarget(context.WithoutCancel(ctx), q, Shared)
					}
				}
				return err
			}
		}
	}
	e.lockAll = true
	e.lockAllNoCheck = a&NoCheck != 0
	return nil
}

// UnlockAll completes every operation and releases LockAll's locks
// (MPI_Win_unlock_all). The epoch ends whatever happens; it raises as
// Unlock does, for the first target that failed.
func (w *Window) UnlockAll(ctx context.Context) error {
	if err := w.begin(); err != nil {
		return err
	}
	defer w.endSync()
	e := &w.st
	if !e.lockAll {
		return fmt.Errorf("%w: UnlockAll without LockAll", ErrEpoch)
	}
	var err error
	ok := e.okBuf(w.n)
	for r := range w.n {
		f := w.endTarget(ctx, r)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		ok[r] = f == nil
		if f != nil && err == nil {
			err = f
		}
	}
	e.lockAll = false
	if !e.lockAllNoCheck {
		for r := range w.n {
			if !ok[r] {
				continue
			}
			if f := w.unlockTarget(ctx, r, Shared); f != nil && err == nil {
				err = w.targetErr(r, f)
			}
			if f := w.deadHolder(ctx, r); f != nil && err == nil {
				err = f
			}
		}
	}
	return err
}

// Flush completes, at window rank r, every operation this process issued
// to it (MPI_Win_flush); a Get's data is then in place. If r failed, or
// the operations to it could not complete, Flush raises an error
// matching fabric.ErrProcFailed and what they may have written is
// undefined (Undefined); the epoch stays open until Unlock.
func (w *Window) Flush(ctx context.Context, r int) error {
	if w.fastFlush(r) {
		return nil
	}
	return w.flushCall(ctx, r, "Flush")
}

// FlushLocal completes every operation to r at this process
// (MPI_Win_flush_local): origin buffers may be reused. Rivet completes
// them at the target too.
func (w *Window) FlushLocal(ctx context.Context, r int) error {
	if w.fastFlush(r) {
		return nil
	}
	return w.flushCall(ctx, r, "FlushLocal")
}

// FlushAll is Flush to every window rank (MPI_Win_flush_all).
func (w *Window) FlushAll(ctx context.Context) error { return w.flushCall(ctx, -1, "FlushAll") }

// FlushLocalAll is FlushLocal to every window rank (MPI_Win_flush_local_all).
func (w *Window) FlushLocalAll(ctx context.Context) error {
	return w.flushCall(ctx, -1, "FlushLocalAll")
}

func (w *Window) flushCall(ctx context.Context, r int, call string) error {
	if err := w.begin(); err != nil {
		return err
	}
	defer w.mu.Unlock()
	w.synced()
	e := &w.st
	if r >= w.n || r < -1 {
		return fmt.Errorf("%w: %s of rank %d of a %d-process window", fabric.ErrRank, call, r, w.n)
	}
	if !e.lockAll && e.nlocks == 0 || r >= 0 && !e.lockAll && e.locks[r] == 0 {
		return fmt.Errorf("%w: %s outside a passive-target epoch", ErrEpoch, call)
	}
	if r >= 0 {
		return w.flushOne(ctx, r)
	}
	var err error
	for q := range w.n {
		if e.lockAll || e.locks[q] != 0 {
			if f := w.flushOne(ctx, q); f != nil && err == nil {
				err = f
			}
		}
	}
	return err
}

// flushOne completes the operations to window rank r. If r failed, or
// the flush did, it raises, and what they may have written there is
// undefined.
func (w *Window) flushOne(ctx context.Context, r int) error {
	err := w.failed(r)
	if err == nil {
		err = w.flushTarget(ctx, r)
	}
	if err != nil {
		if ctx.Err() == nil {
			w.lost(r)
		}
		return w.targetErr(r, err)
	}
	w.flushed(r)
	return nil
}

// Sync makes this process's loads and stores on its window memory and
// the window's public copy agree (MPI_Win_sync). The memory model is
// unified, so it is a full memory barrier.
func (w *Window) Sync() error {
	if err := w.enter(); err != nil {
		return err
	}
	defer w.mu.Unlock()
	var x atomic.Uint64
	x.Add(1) // a locked instruction: a full barrier on every platform Go supports
	return nil
}

func sleepCtx(ctx context.Context, us int) error {
	t := time.NewTimer(time.Duration(us) * time.Microsecond)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
