package ftsim

import (
	"slices"

	"github.com/rivet-hpc/rivet/internal/ulfm"
)

// A shrink, as package ft runs one: ulfm.Shrink's contributions entered
// in successive agreements of the process's Era, each decision's failed
// set learned before the next contribution.

// maskWords is the simulated free context-id mask's length: 512 ids, a
// window of ulfm.Window words agreed on first.
const maskWords = 8

// shrinkState is a process's shrink.
type shrinkState struct {
	m    *ulfm.Shrink
	free []uint64 // its free context ids
	gen  uint64
	done bool
	dead []int // the agreed failed group: the group is the others
	ids  []uint64
	out  uint64 // the generation agreed
}

// startShrink draws p's free ids and its generation, and enters the
// first agreement. Ids 0 and 1 are in use everywhere (the world's); with
// Scenario.Busy each other id is in use with probability 1/Busy, so that
// at tens of processes no id of the window may be free everywhere and
// the whole mask's round runs.
func (s *Sim) startShrink(p *proc) {
	sh := &shrinkState{gen: uint64(s.rng.IntN(4))}
	for i := range maskWords {
		w := ^uint64(0)
		if i == 0 {
			w &^= 3
		}
		for b := range 64 {
			if s.busy > 0 && s.rng.IntN(s.busy) == 0 {
				w &^= 1 << b
			}
		}
		sh.free = append(sh.free, w)
	}
	sh.m = ulfm.NewShrink(s.n, sh.free, sh.gen, ulfm.Window)
	p.shrink = sh
	p.entered = true
	s.shrinkContribute(p)
}

func (s *Sim) shrinkContribute(p *proc) {
	val, ops, acked := p.shrink.m.Contribution(p.known.ints())
	p.agr = p.era.Enter(val, ops, acked)
}

// shrinkDecided moves p's shrink on after its agreement decided (and p
// learned the decision's failures).
func (s *Sim) shrinkDecided(p *proc) {
	sh := p.shrink
	done, err := sh.m.Decided(p.agr.Value(), p.agr.Raised(), p.agr.Dead())
	if err != nil {
		s.violate("rank %d: %v", p.rank, err)
		return
	}
	if !done {
		s.shrinkContribute(p)
		return
	}
	sh.done = true
	sh.dead, sh.ids, sh.out = sh.m.Agreed()
	p.decidedAt = p.clock
}

// checkShrink verifies the shrink's promises at the survivors: it ends
// everywhere, with the same group, ids and generation; the group holds
// every survivor and only processes that failed are left out; every
// agreed id is free at every survivor, and the generation is the
// newest.
func (s *Sim) checkShrink(live []*proc) {
	ref := live[0].shrink
	for _, p := range live {
		sh := p.shrink
		if sh == nil || !sh.done {
			s.violate("survivor %d never finished its shrink", p.rank)
			return
		}
		if !slices.Equal(sh.dead, ref.dead) || !slices.Equal(sh.ids, ref.ids) || sh.out != ref.out {
			s.violate("rank %d shrank without %v (ids %x, generation %d), rank %d without %v (%x, %d)", live[0].rank, ref.dead, ref.ids, ref.out, p.rank, sh.dead, sh.ids, sh.out)
		}
	}
	for _, p := range live {
		if slices.Contains(ref.dead, p.rank) {
			s.violate("survivor %d is left out of the shrunk group (without %v)", p.rank, ref.dead)
		}
		for i, w := range ref.ids {
			if w&^p.shrink.free[i] != 0 {
				s.violate("agreed id word %d %x is not free at survivor %d (%x)", i, w, p.rank, p.shrink.free[i])
			}
		}
		if ref.out < p.shrink.gen {
			s.violate("agreed generation %d is older than survivor %d's %d", ref.out, p.rank, p.shrink.gen)
		}
	}
	for _, r := range ref.dead {
		if s.procs[r].dieAt == never {
			s.violate("the shrunk group leaves out rank %d, which lives", r)
		}
	}
}
