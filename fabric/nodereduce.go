//go:build linux

package fabric

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync/atomic"

	"github.com/rivet-hpc/rivet/fabric/internal/shmseg"
	"github.com/rivet-hpc/rivet/internal/nodecoll"
)

// Node collectives: a barrier and small allreduces meet in shared memory.
// For allreduces each process has two slots in its segment's header,
// used by turns (the parity of the allreduce's sequence number). A slot
// starts with the sequence number of the allreduce it holds, stored last,
// then the vector's length and the vector itself: a reader polls the line
// that also brings it the first 48 bytes.
const (
	segSlots    = 1024 // the two slots
	slotData    = 16   // a slot's vector, after its sequence and length words
	segSlotSize = (slotData + nodecoll.AllreduceMax + 63) &^ 63
)

// The collectives reach the node-level operations through nodecoll.
func init() {
	nodecoll.Sync = func(ctx context.Context, c any) (bool, error) { return c.(*Comm).nodeSync(ctx) }
	nodecoll.Barrier = func(s any) bool { return s.(*Schedule).nodeBarrier() }
	nodecoll.Allreduce = func(ctx context.Context, c any, acc []byte, fn func(in, inout []byte)) (bool, error) {
		return c.(*Comm).nodeAllreduce(ctx, acc, fn)
	}
	nodecoll.AllreduceChunks = func(ctx context.Context, c any, send, acc []byte, elem int, fn func(in, inout []byte)) (bool, error) {
		return c.(*Comm).nodeAllreduceChunks(ctx, send, acc, elem, fn)
	}
}

// The slots fit in the segment's header.
var _ [shmseg.HeaderSize - segSlots - 2*segSlotSize]struct{}

// nodeAllreduce is a blocking allreduce through shared memory. It reports
// false, doing nothing, unless c is the world communicator, every process
// is on this node, and acc is at most nodecoll.AllreduceMax bytes. Otherwise
// each process puts acc in a slot of its own segment and publishes it,
// and once every peer has, each folds all the slots in rank order into
// acc, reading its peers' straight from their segments. Every process
// computes the same folds in the same order, so all get the same bits,
// and fn need not be commutative (it is used as Reduce's: fn(in, inout),
// in holding the lower ranks' operand). That is one cache-line hand-off
// per peer where recursive doubling exchanges log₂ p messages, and no
// schedule: the call waits on the slots' sequence words directly.
//
// A process does not start the next one until this one has completed
// there, so a slot is never refilled while a peer may still read it —
// refilling it is two allreduces later, and the one between cannot
// complete before every peer has finished this one. Nonblocking
// allreduces must not use it. Every member must call it at the same
// points, like any collective; a member that contributes a vector of
// another length makes it fail with ErrMismatch at every process.
func (c *Comm) nodeAllreduce(ctx context.Context, acc []byte, fn func(in, inout []byte)) (bool, error) {
	if c == nil || !c.onNode() || len(acc) > nodecoll.AllreduceMax || fn == nil {
		return false, nil
	}
	if err := c.enterNode(); err != nil {
		return true, err
	}
	c.slotEpoch++
	d, sp := c.slotEpoch, c.ep.shm
	sp.slotWrite(acc, d)
	if err := c.nodeWait(ctx, slotOff(d), d); err != nil {
		return true, err
	}
	return true, sp.slotReduce(acc, fn, d)
}

// nodeSync is a blocking barrier through shared memory. It reports false,
// doing nothing, unless c is the world communicator and every process is
// on this node; otherwise it publishes this process's next barrier epoch
// and waits until every peer's has caught up — what Schedule.nodeBarrier
// does, without a schedule. The two share the epochs, so blocking and
// nonblocking barriers may be mixed.
func (c *Comm) nodeSync(ctx context.Context) (bool, error) {
	if c == nil || !c.onNode() {
		return false, nil
	}
	if err := c.enterNode(); err != nil {
		return true, err
	}
	c.epoch++
	c.ep.shm.Publish(shmseg.WordEpoch, c.epoch)
	return true, c.nodeWait(ctx, shmseg.WordEpoch, c.epoch)
}

// enterNode starts a node collective as NewSchedule and Start start a
// schedule: it fails on a communicator that is not usable or has a failed
// member, and it takes a collective sequence number, so that the tags of
// later schedules are the same at every process whichever way each
// collective went.
func (c *Comm) enterNode() error {
	if err := c.valid(); err != nil {
		return err
	}
	c.collSeq.Add(1)
	e := c.e
	e.mu.Lock()
	defer e.mu.Unlock()
	if c.revoked.Load() {
		return c.errRevoked()
	}
	if e.nfailed > 0 {
		return c.failedMember()
	}
	return nil
}

// nodeWait waits until every process on the node shows at least v in its
// segment word at off, a member of c fails, or ctx ends. It reads the
// words without the engine's lock; every few rounds it takes it to make
// progress on other operations and look for failures.
func (c *Comm) nodeWait(ctx context.Context, off int, v uint64) error {
	e, sp := c.e, c.ep.shm
	done := ctx.Done()
	for i := 0; ; i++ {
		if sp.Reached(off, v) {
			return nil
		}
		if i&15 == 15 || i >= e.spin {
			e.mu.Lock()
			e.progress()
			err := c.failedMember()
			if c.revoked.Load() {
				err = c.errRevoked()
			}
			if e.closed {
				err = ErrClosed
			}
			if err == nil && i&127 == 127 {
				e.scan(nil)
			}
			e.mu.Unlock()
			if err != nil {
				return err
			}
			select {
			case <-done:
				return ctx.Err()
			default:
			}
		}
		e.backoff(i)
	}
}

// slotOff is the offset in a segment of the slot allreduce d uses.
func slotOff(d uint64) int { return segSlots + int(d&1)*segSlotSize }

// slot is the slot of seg that allreduce d uses.
func slot(seg []byte, d uint64) []byte {
	off := slotOff(d)
	return seg[off : off+segSlotSize : off+segSlotSize]
}

// slotWrite contributes v to node allreduce d.
func (s *shmProvider) slotWrite(v []byte, d uint64) {
	sl := slot(s.Seg(), d)
	binary.LittleEndian.PutUint64(sl[8:], uint64(len(v)))
	copy(sl[slotData:], v)
	atomic.StoreUint64(shmseg.Word(sl, 0), d) // last: a peer that loads d sees the vector
}

// slotReduce folds every process's contribution to node allreduce d into
// acc, from the highest rank down: acc = x₀ ⊕ (x₁ ⊕ (… ⊕ xₙ₋₁)).
func (s *shmProvider) slotReduce(acc []byte, fn func(in, inout []byte), d uint64) error {
	n := len(s.Local())
	for ix := 0; ix < n; ix++ {
		if l := binary.LittleEndian.Uint64(slot(s.SegOf(ix), d)[8:]); l != uint64(len(acc)) {
			return fmt.Errorf("%w: rank %d contributed %d bytes to an allreduce, this process %d", ErrMismatch, s.Local()[ix], l, len(acc))
		}
	}
	if s.SelfIx() != n-1 { // the highest rank's acc is its own contribution
		copy(acc, slot(s.SegOf(n-1), d)[slotData:])
	}
	for ix := n - 2; ix >= 0; ix-- {
		fn(slot(s.SegOf(ix), d)[slotData:slotData+len(acc)], acc)
	}
	return nil
}
