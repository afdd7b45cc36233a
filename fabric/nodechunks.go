//go:build linux

package fabric

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/rivet-hpc/rivet/fabric/internal/shmseg"
)

// Large node allreduces meet in shared memory too, a chunk at a time,
// through a staging area of two chunk buffers at the end of each
// process's segment, used by turns and mapped in by its owner before its
// first such allreduce. Every chunk has a number, counted per
// process across allreduces, and goes in four steps:
//
//  1. Each process copies its operand's chunk into its buffer — all but
//     its own share (a 1/p slice of the chunk), which only it reads — and
//     publishes the chunk's number in shmseg.WordChunkIn.
//  2. Once every peer has, each folds its own share across all the
//     operands in rank order, into its buffer's share, and copies the
//     result into its output. It publishes the number in shmseg.WordChunkOut.
//  3. Once every peer has, each copies the peers' results from their
//     buffers into its output.
//  4. A buffer is refilled two chunks later, once every peer has
//     published the chunk between in shmseg.WordChunkIn — so has finished
//     reading this one.
//
// Every process moves each byte about three times at memory speed: in,
// reduced, out. The message-based ring moves it with process_vm_readv,
// which pins pages and ran 3× slower than a copy here; see
// docs/performance.md.

// nodeAllreduceChunks is a blocking allreduce through the shared memory
// segments' staging areas, for vectors of any length. It reports false,
// doing nothing, unless c is the world communicator, every process is on
// this node, fn is set and an element fits in a chunk. Otherwise it
// combines every process's send (or acc, when send is nil) into every
// acc, as nodeAllreduce does: fn is used as Reduce's, fn(in, inout) with
// in holding the lower ranks' operand, folds go in rank order so fn need
// not be commutative, and every process gets the same bits. elem is the
// size of an element: fn is only ever given whole elements, at offsets
// that are multiples of elem.
//
// Like nodeAllreduce, every member must call it at the same points, and
// nonblocking allreduces must not use it. A member that contributes a
// vector of another length makes it fail with ErrMismatch at every
// process.
func (c *Comm) nodeAllreduceChunks(ctx context.Context, send, acc []byte, elem int, fn func(in, inout []byte)) (bool, error) {
	if c == nil || !c.onNode() || fn == nil || elem > shmseg.Chunk {
		return false, nil
	}
	if elem <= 0 || len(acc)%elem != 0 || (send != nil && len(send) != len(acc)) {
		return true, fmt.Errorf("%w: allreduce of %d bytes (send %d) in elements of %d", ErrInvalid, len(acc), len(send), elem)
	}
	if err := c.enterNode(); err != nil {
		return true, err
	}
	if send == nil {
		send = acc
	}
	sp := c.ep.shm
	span := shmseg.Chunk / elem * elem
	for o := 0; o < len(acc) || o == 0; o += span {
		n := min(span, len(acc)-o)
		c.chunkSeq++
		g := c.chunkSeq
		// The buffer was last used by chunk g-2; every peer is done with
		// it once it has staged chunk g-1.
		if err := c.nodeWait(ctx, shmseg.WordChunkIn, g-1); err != nil {
			return true, err
		}
		if o == 0 {
			if err := sp.Stage(); err != nil {
				// Said to the peers as a length none contributes, so
				// that every process fails this allreduce at once.
				sp.Publish(shmseg.WordChunkLen, noStage)
				sp.Publish(shmseg.WordChunkIn, g)
				return true, fmt.Errorf("fabric: allreduce: %w", err)
			}
			sp.Publish(shmseg.WordChunkLen, uint64(len(acc)))
		}
		sp.stageIn(send[o:o+n], g, elem)
		sp.Publish(shmseg.WordChunkIn, g)
		if err := c.nodeWait(ctx, shmseg.WordChunkIn, g); err != nil {
			return true, err
		}
		if o == 0 {
			if err := sp.sameLength(len(acc)); err != nil {
				return true, err
			}
		}
		sp.stageReduce(send[o:o+n], acc[o:o+n], g, elem, fn)
		sp.Publish(shmseg.WordChunkOut, g)
		if err := c.nodeWait(ctx, shmseg.WordChunkOut, g); err != nil {
			return true, err
		}
		sp.stageOut(acc[o:o+n], g, elem)
	}
	return true, nil
}

// noStage is the vector length a process publishes when it could not map
// in its staging area.
const noStage = ^uint64(0)

// share is the part of an n-byte chunk that local process ix reduces:
// whole elements, the shares differing by at most one.
func share(n, elem, ix, p int) (lo, hi int) {
	k := n / elem
	return ix * k / p * elem, (ix + 1) * k / p * elem
}

// stage is the buffer chunk g uses in the segment of local process ix.
func (s *shmProvider) stage(ix int, g uint64) []byte {
	off := s.StageOff() + int(g&1)*shmseg.Chunk
	return s.SegOf(ix)[off : off+shmseg.Chunk : off+shmseg.Chunk]
}

// stageIn copies the chunk v into this process's buffer for chunk g, all
// but its own share.
func (s *shmProvider) stageIn(v []byte, g uint64, elem int) {
	b := s.stage(s.SelfIx(), g)
	lo, hi := share(len(v), elem, s.SelfIx(), len(s.Local()))
	copy(b[:lo], v[:lo])
	copy(b[hi:len(v)], v[hi:])
}

// stageReduce folds this process's share of chunk g across every
// process's operand — its own read from v — into its buffer, from the
// highest rank down, and copies the result into out.
func (s *shmProvider) stageReduce(v, out []byte, g uint64, elem int, fn func(in, inout []byte)) {
	p, me := len(s.Local()), s.SelfIx()
	lo, hi := share(len(v), elem, me, p)
	if lo == hi {
		return
	}
	operand := func(ix int) []byte {
		if ix == me {
			return v[lo:hi]
		}
		return s.stage(ix, g)[lo:hi]
	}
	acc := s.stage(me, g)[lo:hi]
	copy(acc, operand(p-1))
	for ix := p - 2; ix >= 0; ix-- {
		fn(operand(ix), acc)
	}
	copy(out[lo:hi], acc)
}

// stageOut copies the peers' results for chunk g into out.
func (s *shmProvider) stageOut(out []byte, g uint64, elem int) {
	p := len(s.Local())
	for ix := 0; ix < p; ix++ {
		if ix == s.SelfIx() {
			continue
		}
		lo, hi := share(len(out), elem, ix, p)
		copy(out[lo:hi], s.stage(ix, g)[lo:hi])
	}
}

// sameLength checks every process's vector length against n.
func (s *shmProvider) sameLength(n int) error {
	for ix := range s.Local() {
		l := atomic.LoadUint64(shmseg.Word(s.SegOf(ix), shmseg.WordChunkLen))
		if l == noStage {
			return fmt.Errorf("fabric: allreduce: rank %d could not map in its staging area: %w", s.Local()[ix], shmseg.ErrNoSpace)
		}
		if l != uint64(n) {
			return fmt.Errorf("%w: rank %d contributed %d bytes to an allreduce, this process %d", ErrMismatch, s.Local()[ix], l, n)
		}
	}
	return nil
}
