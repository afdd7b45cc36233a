//go:build linux

package rma

import (
	"context"
	"fmt"
	"runtime"
	"sync/atomic"
	"syscall"
	"unsafe"

	"github.com/rivet-hpc/rivet/fabric"
)

// Control words, in every process's control memory (AllocMem, mapped by
// the processes of its node and registered for the others):
//
//	lock   [ceil(n/62)]  lock words (locks.go)
//	post   [n]           post[i]: how many exposure epochs rank i opened to this process
//	done   [n]           done[j]: how many access epochs rank j completed here
//	bar    [barRounds]   bar[k]: the fence barrier round k's epoch, from (me - 2^k) mod n
//	rev                  not 0 once the window is revoked (failure.go)
//	free   [n]           free[j]: rank j is in Free (Window.Free)
//	rec    [n]           rec[o]: the ranges origin o is writing here (ranges.go)
//
// Every word but the lock words has one writer, which stores a count
// that only grows; the reader polls its own memory. The scratch memory
// (registered) holds the values a NIC write sends: the same layout
// without the lock words (its rec[t] is this process's block for target t).
const barRounds = 32

func lockWords(n int) int       { return (n + lockBits - 1) / lockBits }
func ctlSize(n int) int         { return 8*(lockWords(n)+3*n+barRounds+1) + n*recSize }
func scratchSize(n int) int     { return 8*(3*n+barRounds+1) + n*recSize }
func revWord(n int) int         { return lockWords(n) + 2*n + barRounds }
func freeWord(n, j int) int     { return revWord(n) + 1 + j }
func postWord(n, i int) int     { return lockWords(n) + i }
func doneWord(n, j int) int     { return lockWords(n) + n + j }
func barWord(n, k int) int      { return lockWords(n) + 2*n + k }
func scratchOf(n, word int) int { return word - lockWords(n) }

// region names one of a target's two memories.
type region uint8

const (
	regionData region = iota
	regionCtl
)

func word(b []byte, off uint64) *uint64 { return (*uint64)(unsafe.Pointer(&b[off])) }

func (t *target) mem(r region) ([]byte, fabric.RemoteMem) {
	if r == regionCtl {
		return t.ctl, t.rcl
	}
	return t.data, t.rdata
}

// casWord is an atomic compare-and-swap of the 8-byte word at off of
// t's region, in the window's atomicity domain: it returns the word's
// previous value (equal to old when the swap happened).
func (w *Window) casWord(ctx context.Context, t *target, r region, off, old, new uint64) (uint64, error) {
	if !w.nic {
		b, _ := t.mem(r)
		p := word(b, off)
		for {
			if cur := atomic.LoadUint64(p); cur != old {
				return cur, nil
			}
			if atomic.CompareAndSwapUint64(p, old, new) {
				return old, nil
			}
		}
	}
	_, m := t.mem(r)
	w.res = grow(w.res, 1)
	if err := w.ep.CompareAndSwap(ctx, t.nicRank, m, off, old, new, &w.res[0]); err != nil {
		return 0, err
	}
	if err := w.ep.Flush(ctx, t.nicRank); err != nil {
		return 0, err
	}
	return w.res[0], nil
}

// faddWord atomically adds delta to the word at off of t's region and
// returns its previous value.
func (w *Window) faddWord(ctx context.Context, t *target, r region, off, delta uint64) (uint64, error) {
	if !w.nic {
		b, _ := t.mem(r)
		return atomic.AddUint64(word(b, off), delta) - delta, nil
	}
	_, m := t.mem(r)
	w.res = grow(w.res, 1)
	if err := w.ep.FetchAndAdd(ctx, t.nicRank, m, off, delta, &w.res[0]); err != nil {
		return 0, err
	}
	if err := w.ep.Flush(ctx, t.nicRank); err != nil {
		return 0, err
	}
	return w.res[0], nil
}

// storeCtl writes v into control word i of window rank r: a store when
// r's memory is mapped here, an RDMA write otherwise (complete at r by
// the next flush to it). Control words other than the lock words are
// plain single-writer counters, outside the atomicity domain.
func (w *Window) storeCtl(ctx context.Context, r, i int, v uint64) error {
	t := &w.targets[r]
	if t.local {
		atomic.StoreUint64(word(t.ctl, uint64(8*i)), v)
		return nil
	}
	s := 8 * scratchOf(w.n, i)
	atomic.StoreUint64(word(w.scratch, uint64(s)), v)
	t.pending = true
	return w.ep.Put(ctx, t.nicRank, t.rcl, uint64(8*i), w.scratch[s:s+8])
}

// awaitCtl waits until this process's control word i reaches v (its
// writer is another process), honouring ctx. Now and then it polls the
// fabric, so that failures and revokes become known, and it gives up
// when the window is revoked or gone (if not nil) reports the failure of
// a process the wait needs.
func (w *Window) awaitCtl(ctx context.Context, i int, v uint64, gone func() error) error {
	p := word(w.ctl, uint64(8*i))
	for spins := 0; atomic.LoadUint64(p) < v; spins++ {
		if spins&255 == 255 {
			if err := ctx.Err(); err != nil {
				return err
			}
			if spins&4095 == 4095 {
				w.ep.Poll()
			}
			if err := w.interrupted(gone); err != nil {
				return err
			}
			runtime.Gosched()
			if spins >= 4096 {
				// The writer may be a process waiting for this CPU
				// (more ranks than CPUs): give it the CPU, not just
				// this process's other goroutines.
				syscall.RawSyscall(syscall.SYS_SCHED_YIELD, 0, 0, 0)
			}
		}
	}
	return nil
}

// ctlAt reads this process's control word i.
func (w *Window) ctlAt(i int) uint64 { return atomic.LoadUint64(word(w.ctl, uint64(8*i))) }

// flushTarget completes every operation issued to window rank r.
func (w *Window) flushTarget(ctx context.Context, r int) error {
	t := &w.targets[r]
	if t.nicRank < 0 || !w.nic || !t.pending {
		return nil
	}
	err := w.ep.Flush(ctx, t.nicRank)
	if err == nil {
		t.pending = false
	}
	return err
}

// flushAll completes every operation this process issued on the window;
// it flushes every live target even when one fails, and returns the
// first error.
func (w *Window) flushAll(ctx context.Context) error {
	if !w.nic {
		return nil
	}
	self := w.ep.World().Rank()
	selfDone := false
	var first error
	for r := range w.targets {
		t := &w.targets[r]
		if t.nicRank < 0 {
			continue
		}
		if t.nicRank == self {
			if selfDone {
				continue // the loopback pair serves every mapped target
			}
			selfDone = true
		}
		var err error
		if t.nicRank != self {
			err = w.failed(r) // (the loopback pair is this process's own)
		}
		if err == nil {
			err = w.ep.Flush(ctx, t.nicRank)
		}
		if err != nil && first == nil {
			first = w.targetErr(r, err)
		}
		if ctx.Err() != nil {
			return ctx.Err()
		}
	}
	return first
}

// barrier is a dissemination barrier over the bar words: in round k each
// process tells (me + 2^k) mod n and waits to hear from (me - 2^k) mod n.
// The process it waits for may wait for one that failed, so it gives up
// once any member is known failed.
func (w *Window) barrier(ctx context.Context) error {
	w.st.bar++
	e := w.st.bar
	for k := 0; 1<<k < w.n; k++ {
		if k >= barRounds {
			return fmt.Errorf("rma: %d processes exceed the barrier's rounds", w.n)
		}
		if err := w.storeCtl(ctx, (w.me+1<<k)%w.n, barWord(w.n, k), e); err != nil {
			return err
		}
		if err := w.awaitCtl(ctx, barWord(w.n, k), e, w.anyFailed); err != nil {
			return err
		}
	}
	return nil
}

func grow(s []uint64, n int) []uint64 {
	if cap(s) < n {
		return make([]uint64, n)
	}
	return s[:n]
}
