//go:build linux

package fabric

import (
	"context"
	"sync/atomic"

	"github.com/rivet-hpc/rivet/fabric/internal/shmseg"
	"github.com/rivet-hpc/rivet/internal/nodecoll"
	"github.com/rivet-hpc/rivet/internal/ulfm"
)

// Node agreements: package ft's agreement on the world communicator of a
// job on one node, through shared memory (nodecoll.Agree), as
// ulfm.NodeAgreement decides it. Each process's segment holds its state
// word and two slots of words, used by turns (attempt k fills slot k%2).
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

// nodeWords are the node's processes' agreement state words, in their
// segments (ulfm.NodeWords).
type nodeWords struct{ sp *shmProvider }

func (w nodeWords) Load(ix int) uint64 { return atomic.LoadUint64(agreeState(w.sp.SegOf(ix))) }

func (w nodeWords) CAS(ix int, old, new uint64) bool {
	return atomic.CompareAndSwapUint64(agreeState(w.sp.SegOf(ix)), old, new)
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
	local := sp.Local()
	a := ulfm.NewNodeAgreement(nodeWords{sp}, sp.SelfIx(), len(local), k)
	if a.Publish(func() {
		sl := agreeSlotOf(sp.Seg(), k)
		for i, w := range words {
			atomic.StoreUint64(shmseg.Word(sl, agreeSlotData+8*i), w)
		}
		atomic.StoreUint64(shmseg.Word(sl, 0), uint64(len(words)))
	}) == ulfm.NodeFell {
		// A peer held this process failed and abandoned k for it: it is
		// fenced, and every member falls back.
		return true, true, nil
	}
	done := ctx.Done()
	for i := 0; ; i++ {
		st := a.Poll(noneFailed)
		if st == ulfm.NodeWaiting && (i&15 == 15 || i >= e.spin) {
			e.mu.Lock()
			e.progress()
			failed := e.failed[local[a.Waiting()]] != nil
			closed := e.closed
			if !failed && i&127 == 127 {
				e.scan(nil)
			}
			e.mu.Unlock()
			if closed {
				return true, false, ErrClosed
			}
			if failed {
				m := a.Waiting() // (only it: Poll moves on past members that published)
				st = a.Poll(func(ix int) bool { return ix == m })
			} else {
				select {
				case <-done:
					return true, false, ctx.Err()
				default:
				}
			}
		}
		switch st {
		case ulfm.NodeFell:
			return true, true, nil
		case ulfm.NodeDone:
			return true, c.nodeFold(sp, local, k, len(words), fold), nil
		}
		e.backoff(i)
	}
}

// noneFailed is a Poll that abandons nobody: the spins between looks at
// the failure records.
func noneFailed(int) bool { return false }

// nodeFold folds every member's words of attempt k, in rank order; it
// reports true, having folded nothing, when members published values of
// different shapes — not an agreement this path can make: every member
// sees the same counts, so every member falls back alike.
func (c *Comm) nodeFold(sp *shmProvider, local []int, k uint64, words int, fold func(rank int, words []uint64)) (fell bool) {
	for ix := range local {
		sl := agreeSlotOf(sp.SegOf(ix), k)
		if int(atomic.LoadUint64(shmseg.Word(sl, 0))) != words {
			return true
		}
	}
	for ix, w := range local {
		sl := agreeSlotOf(sp.SegOf(ix), k)
		var buf [nodecoll.AgreeWords]uint64
		for i := range words {
			buf[i] = atomic.LoadUint64(shmseg.Word(sl, agreeSlotData+8*i))
		}
		fold(w, buf[:words])
	}
	return false
}
