package ulfm

import (
	"fmt"
	"slices"
)

// Shrink is one shrink at one process: the survivors agree, in one
// agreement, on the failed group and on the new communicator's context
// id and generation. Each contributes the failures it knows as the ones
// it acknowledges, the first Window words of its free context-id mask
// (combined by AND) and its latest generation (by MAX). An agreement that
// raises — a survivor knew of another failure, or the groups differed —
// teaches every survivor the union of the failures (the driver learns the
// decision's failed set), and they agree again, until every survivor came
// with the same group; a failure cannot make them diverge. When no id in
// the window is free everywhere, one more agreement on the whole mask
// follows (the group is settled by then: its failed set is acknowledged
// everywhere, so a failure meanwhile changes nothing).
//
// The driver contributes what Contribution says to an agreement (an Era,
// or the node agreement, whose decision never raises), gives the
// decision to Decided, and repeats until Decided reports done.
type Shrink struct {
	n      int
	free   []uint64
	gen    uint64
	win    int
	round  int
	whole  bool   // agreeing on the whole mask
	dead   []int  // the settled failed group
	maxGen uint64 // the window round's generation
	ids    []uint64
	done   bool
}

// Window is how many words of the free context-id mask (64 ids each) a
// shrink agrees on first: a process rarely has hundreds of
// communicators, and the whole mask would make each message of the
// agreement half a kilobyte.
const Window = 4

// NewShrink starts a shrink of a communicator of n at a process whose
// free context ids are free (a mask) and whose latest generation is gen,
// agreeing on window words of the mask first.
func NewShrink(n int, free []uint64, gen uint64, window int) *Shrink {
	return &Shrink{n: n, free: slices.Clone(free), gen: gen, win: min(window, len(free))}
}

// Contribution is what this process contributes to the next agreement:
// its words, their operations, and the failures it acknowledges — those
// it knows (known), or in the whole mask's round the settled group.
func (s *Shrink) Contribution(known []int) (val []uint64, ops []Op, acked []int) {
	if s.whole {
		val = append(slices.Clone(s.free), s.gen)
		ops = make([]Op, len(val)) // And
		ops[len(s.free)] = Max
		return val, ops, s.dead
	}
	val = append(slices.Clone(s.free[:s.win]), s.gen)
	ops = make([]Op, len(val))
	ops[s.win] = Max
	return val, ops, known
}

// Decided takes the decision of the agreement entered with the last
// Contribution: its value, whether it raised, and its failed set. It
// reports whether the shrink is done; if not, the driver learns the
// failed set and contributes again. An error says the protocol broke
// (more raising rounds than members).
func (s *Shrink) Decided(val []uint64, raised bool, dead []int) (done bool, err error) {
	if s.done {
		return true, nil
	}
	if s.whole {
		s.ids = slices.Clone(val[:len(s.free)])
		s.maxGen = max(s.maxGen, val[len(s.free)])
		s.done = true
		return true, nil
	}
	if raised {
		// Learn what the others knew, and go again. Each raising round
		// has seen a new failure or made the groups equal.
		if s.round++; s.round > s.n+1 {
			return false, fmt.Errorf("ulfm: shrink: the failed group did not settle after %d agreements", s.round)
		}
		return false, nil
	}
	// Every contributor came with the same group and knew of no other
	// failure: the group is agreed, and so is the id.
	s.dead = slices.Clone(dead)
	s.maxGen = val[s.win]
	s.ids = make([]uint64, len(s.free))
	copy(s.ids, val[:s.win])
	if slices.ContainsFunc(s.ids, func(w uint64) bool { return w != 0 }) {
		s.done = true
		return true, nil
	}
	s.whole = true // no id in the window is free everywhere
	return false, nil
}

// Result is the agreed shrink: the survivors (ranks not in the failed
// group, in order), the context ids free at every one of them (a mask as
// long as this process's), and the latest generation among them.
func (s *Shrink) Result() (survivors []int, ids []uint64, gen uint64) {
	failed, ids, gen := s.Agreed()
	for r := range s.n {
		if _, out := slices.BinarySearch(failed, r); !out {
			survivors = append(survivors, r)
		}
	}
	return survivors, ids, gen
}

// Agreed is Result with the failed group (in rank order) in place of the
// survivors: what a shrink decides, in the space of its failures.
func (s *Shrink) Agreed() (failed []int, ids []uint64, gen uint64) {
	return s.dead, s.ids, s.maxGen
}
