package ftsim

import (
	"encoding/binary"
	"math/bits"
)

// The reference collectives the protocols are measured against, in the
// same model: a dissemination barrier (⌈log2 n⌉ rounds, a message out
// and one in each) and a recursive-doubling allreduce of one word (with
// the usual fold of the ranks beyond the largest power of two into
// their neighbours, before and after). They are not product code: they
// are the textbook algorithms the papers compare agreement with.

// Which reference collective a run plays.
const (
	collNone = iota
	collBarrier
	collAllreduce
)

type collState struct {
	step   int    // the step it waits to complete
	recvd  uint64 // steps whose message arrived
	vals   [64]uint64
	val    uint64
	doneAt Time
}

func (s *Sim) collStart(p *proc) {
	p.coll.doneAt = -1
	p.coll.val = s.contribution(p.rank)
	s.collAdvance(p, true)
}

func (s *Sim) collMessage(p *proc, src int, m []byte) {
	step := int(m[0])
	p.coll.recvd |= 1 << step
	p.coll.vals[step] = binary.LittleEndian.Uint64(m[1:])
	s.collAdvance(p, false)
}

func (s *Sim) collSend(p *proc, dest, step int) {
	var b [9]byte
	b[0] = byte(step)
	binary.LittleEndian.PutUint64(b[1:], p.coll.val)
	s.send(p, dest, tagColl, b[:])
}

// collAdvance moves p's collective on as far as what arrived allows;
// start: it begins now (its first message goes out).
func (s *Sim) collAdvance(p *proc, start bool) {
	c := &p.coll
	if c.doneAt >= 0 {
		return
	}
	switch s.coll {
	case collBarrier:
		rounds := bits.Len(uint(s.n - 1))
		if start {
			if rounds == 0 {
				c.doneAt = p.clock
				return
			}
			s.collSend(p, (p.rank+1)%s.n, 0)
		}
		for c.step < rounds && c.recvd&(1<<c.step) != 0 {
			c.step++
			if c.step == rounds {
				c.doneAt = p.clock
				return
			}
			s.collSend(p, (p.rank+1<<c.step)%s.n, c.step)
		}
	case collAllreduce:
		s.allreduceAdvance(p, start)
	}
}

// allreduceAdvance is recursive doubling. Steps: 0, the fold (an even
// rank below 2·rem gives its word to the odd one above it); 1 to L, the
// exchanges over the largest power of two, 2^L; L+1, the unfold.
func (s *Sim) allreduceAdvance(p *proc, start bool) {
	c := &p.coll
	r, n := p.rank, s.n
	L := bits.Len(uint(n)) - 1
	p2 := 1 << L
	rem := n - p2
	real := func(nr int) int {
		if nr < rem {
			return 2*nr + 1
		}
		return nr + rem
	}
	folded := r < 2*rem && r%2 == 0 // gives its word away, gets the result back
	nr := r - rem
	if r < 2*rem {
		nr = r / 2
	}
	if start {
		switch {
		case folded:
			s.collSend(p, r+1, 0)
			c.step = L + 1
		case r < 2*rem:
			c.step = 0
		default:
			c.step = 1
			if L == 0 {
				c.doneAt = p.clock
				return
			}
			s.collSend(p, real(nr^1), 1)
		}
	}
	for c.recvd&(1<<c.step) != 0 {
		c.val &= c.vals[c.step]
		if folded || c.step == L {
			if !folded && r < 2*rem {
				s.collSend(p, r-1, L+1)
			}
			c.doneAt = p.clock
			return
		}
		c.step++
		s.collSend(p, real(nr^(1<<(c.step-1))), c.step)
	}
}
