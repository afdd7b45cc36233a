//go:build linux

package fabric

import (
	"context"
	"sync/atomic"

	"github.com/rivet-hpc/rivet/fabric/internal/shmseg"
	"github.com/rivet-hpc/rivet/internal/nodecoll"
)

// Node agreements: package ft's agreement on the world communicator of a
// job on one node, through shared memory (nodecoll.Agree). Each process
// has a state word — the last attempt it published, shifted left by one,
// with the low bit set when a peer marked that attempt abandoned instead
// — and two slots of words, used by turns. A process publishes attempt k
// by filling slot k%2 and then moving its state word from the attempt
// before to k with a compare-and-swap. A process that knows a peer
// failed without publishing k moves the peer's state word to k|abandoned,
// with a compare-and-swap too: exactly one of the two wins, so either
// every process sees every contribution to k, or every process sees k
// abandoned and the attempt falls back to the agreement over messages.
const (
	segAgree      = segSlots + 2*segSlotSize // the state word's line, then the slots
	agreeSlot     = 128                      // a slot: its word count, then the words
	agreeSlotData = 8
)

// The state word and the slots fit in the segment's header.
var _ [shmseg.HeaderSize - segAgree - 64 - 2*agreeSlot]struct{}

func init() {
	nodecoll.Agree = func(ctx context.Context, c any, k uint64, words []uint64, fold func(rank int, words []uint64)) (bool, bool, error) {
		return c.(*Comm).nodeAgree(ctx, k, words, fold)
	}
}

func agreeState(seg []byte) *uint64 { return shmseg.Word(seg, segAgree) }

func agreeSlotOf(seg []byte, k uint64) []byte {
	off := segAgree + 64 + int(k&1)*agreeSlot
	return seg[off : off+agreeSlot : off+agreeSlot]
}

// nodeAgree is attempt k of a node agreement on c (see nodecoll.Agree).
// Attempts are numbered from 1 alike at every member; a process makes
// attempt k+1 only after k has ended for it, so a slot is not refilled
// while a peer may still read it: refilling it is attempt k+2, and k+1
// cannot end before every member has published k+1, after k.
func (c *Comm) nodeAgree(ctx context.Context, k uint64, words []uint64, fold func(rank int, words []uint64)) (served, fell bool, err error) {
	if c == nil || !c.onNode() || k == 0 || len(words) > nodecoll.AgreeWords {
		return false, false, nil
	}
	if err := c.valid(); err != nil {
		return true, false, err
	}
	sp, e := c.ep.shm, c.e
	seg := sp.Seg()
	st := agreeState(seg)
	if old := atomic.LoadUint64(st); old>>1 < k { // (again after a ctx that ended: published)
		sl := agreeSlotOf(seg, k)
		for i, w := range words {
			atomic.StoreUint64(shmseg.Word(sl, agreeSlotData+8*i), w)
		}
		atomic.StoreUint64(shmseg.Word(sl, 0), uint64(len(words)))
		if !atomic.CompareAndSwapUint64(st, old, k<<1) {
			// A peer held this process failed and abandoned k for it: it
			// is fenced, and every member falls back.
			return true, true, nil
		}
	} else if old == k<<1|1 {
		return true, true, nil
	}
	local := sp.Local()
	done := ctx.Done()
	next := 0 // peers before next have published k
	for i := 0; ; i++ {
		for ; next < len(local); next++ {
			s := atomic.LoadUint64(agreeState(sp.SegOf(next)))
			if s == k<<1|1 {
				return true, true, nil
			}
			if s>>1 < k {
				break
			}
		}
		if next == len(local) {
			break
		}
		if i&15 == 15 || i >= e.spin {
			e.mu.Lock()
			e.progress()
			w := local[next]
			failed := e.failed[w] != nil
			closed := e.closed
			if !failed && i&127 == 127 {
				e.scan(nil)
			}
			e.mu.Unlock()
			if closed {
				return true, false, ErrClosed
			}
			if failed {
				ps := agreeState(sp.SegOf(next))
				if s := atomic.LoadUint64(ps); s>>1 < k && atomic.CompareAndSwapUint64(ps, s, k<<1|1) {
					return true, true, nil
				}
				continue // it published (or another abandoned k): look again
			}
			select {
			case <-done:
				return true, false, ctx.Err()
			default:
			}
		}
		e.backoff(i)
	}
	for ix, w := range local {
		sl := agreeSlotOf(sp.SegOf(ix), k)
		n := int(atomic.LoadUint64(shmseg.Word(sl, 0)))
		if n != len(words) {
			// Members that disagree on the shape of the value: not an
			// agreement this path can make; every member sees the same
			// counts, so every member falls back alike.
			return true, true, nil
		}
		var buf [nodecoll.AgreeWords]uint64
		for i := range n {
			buf[i] = atomic.LoadUint64(shmseg.Word(sl, agreeSlotData+8*i))
		}
		fold(w, buf[:n])
	}
	return true, false, nil
}
