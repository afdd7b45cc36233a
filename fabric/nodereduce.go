package fabric

import (
	"encoding/binary"
	"fmt"
	"sync/atomic"
)

// Node allreduce: small vectors meet in shared memory. Each process has
// two slots in its segment's header page, used by turns (the parity of
// the allreduce's sequence number). A slot starts with the sequence
// number of the allreduce it holds, stored last, then the vector's length
// and the vector itself: a reader polls the line that also brings it the
// first 48 bytes.
const (
	segSlots    = 1024 // the two slots
	slotData    = 16   // a slot's vector, after its sequence and length words
	segSlotSize = (slotData + NodeAllreduceMax + 63) &^ 63

	// NodeAllreduceMax is the longest vector (in bytes) that
	// Schedule.NodeAllreduce carries.
	NodeAllreduceMax = 1024
)

// The slots fit in the segment's header page.
var _ [shmHeader - segSlots - 2*segSlotSize]struct{}

// NodeAllreduce reports whether c can reduce acc through shared memory —
// c is the world communicator, every process is on this node, and acc is
// at most NodeAllreduceMax bytes — and if so adds rounds that do: each
// process puts acc in a slot of its own segment and publishes it, and once
// every peer has, each folds all the slots in rank order into acc, reading
// its peers' straight from their segments. Every process computes the
// same folds in the same order, so all get the same bits, and fn need not
// be commutative (it is used as Reduce's: fn(in, inout), in holding the
// lower ranks' operand). That is one cache-line hand-off per peer where
// recursive doubling exchanges log₂ p messages.
//
// It is for blocking allreduces: a process must not start the next one
// until this one has completed there. Then a slot is never refilled while
// a peer may still read it — refilling it is two allreduces later, and the
// one between cannot complete before every peer has finished this one.
// Every member must call it at the same points, like any collective.
func (s *Schedule) NodeAllreduce(acc []byte, fn func(in, inout []byte)) bool {
	c := s.c
	if !c.onNode() || len(acc) > NodeAllreduceMax || fn == nil {
		return false
	}
	c.slotEpoch++
	d, shm := c.slotEpoch, c.ep.shm
	s.Next()
	s.last().local = append(s.last().local, schedStep{kind: stepSlotWrite, shm: shm, a: acc, val: d})
	s.Next()
	s.await(slotOff(d), d)
	s.last().local = append(s.last().local, schedStep{kind: stepSlotReduce, shm: shm, b: acc, fn: fn, val: d})
	s.Next()
	return true
}

// slotOff is the offset in a segment of the slot allreduce d uses.
func slotOff(d uint64) int { return segSlots + int(d&1)*segSlotSize }

// slot is the slot of seg that allreduce d uses.
func slot(seg []byte, d uint64) []byte {
	off := slotOff(d)
	return seg[off : off+segSlotSize : off+segSlotSize]
}

// segOf is the segment of the node's process with local index ix.
func (s *shmProvider) segOf(ix int) []byte {
	if ix == s.selfIx {
		return s.seg
	}
	return s.outs[ix].seg
}

// slotWrite contributes v to node allreduce d.
func (s *shmProvider) slotWrite(v []byte, d uint64) {
	sl := slot(s.seg, d)
	binary.LittleEndian.PutUint64(sl[8:], uint64(len(v)))
	copy(sl[slotData:], v)
	atomic.StoreUint64(word(sl, 0), d) // last: a peer that loads d sees the vector
}

// slotReduce folds every process's contribution to node allreduce d into
// acc, from the highest rank down: acc = x₀ ⊕ (x₁ ⊕ (… ⊕ xₙ₋₁)).
func (s *shmProvider) slotReduce(acc []byte, fn func(in, inout []byte), d uint64) error {
	n := len(s.local)
	for ix := 0; ix < n; ix++ {
		if l := binary.LittleEndian.Uint64(slot(s.segOf(ix), d)[8:]); l != uint64(len(acc)) {
			return fmt.Errorf("%w: rank %d contributed %d bytes to an allreduce, this process %d", ErrMismatch, s.local[ix], l, len(acc))
		}
	}
	copy(acc, slot(s.segOf(n-1), d)[slotData:])
	for ix := n - 2; ix >= 0; ix-- {
		fn(slot(s.segOf(ix), d)[slotData:slotData+len(acc)], acc)
	}
	return nil
}
