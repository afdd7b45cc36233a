package ftsim

import "github.com/rivet-hpc/rivet/internal/ulfm"

// The detector, as ft.Detector drives ulfm's rules: each process
// observes its nearest predecessor not known failed (ulfm.Predecessor)
// and looks at its heartbeat every Tick, judging with ulfm.Silence.
//
// Looks are simulated only while they can conclude something: from the
// moment the observed process's fault begins (it dies, its node hangs,
// it is not run) until a look sees it beat again. A look at a healthy
// heartbeat sees it move; the observer's silence measure is primed with
// the looks it would have made just before.

// nextObserved is p's nearest predecessor not known failed.
func (s *Sim) nextObserved(p *proc) int {
	return ulfm.Predecessor(s.ranks, p.rank, p.rank, func(w int) bool { return !p.knows(w) })
}

// watch makes p observe x (-1: nobody), afresh, from p's clock.
func (s *Sim) watch(p *proc, x int) {
	p.obs = x
	p.gen++
	p.looking = false
	p.asked = false
	if p.sil == nil {
		p.sil = ulfm.NewSilence(s.m.Detector, epoch.Add(p.clock))
	} else {
		p.sil.Restart(epoch.Add(p.clock))
	}
	if x >= 0 {
		p.connAt = s.connect(p, s.procs[x])
	}
	if x >= 0 && s.faulty(p, s.procs[x], p.clock) {
		s.startLooking(p)
	}
}

// faulty reports whether x's heartbeat stands still at t as p sees it:
// x is dead, or not run, or cut off from p.
func (s *Sim) faulty(p, x *proc, t Time) bool {
	if t >= x.dieAt || t >= x.slowFrom && t < x.slowTo {
		return true
	}
	cut, _ := s.cutAt(p.rank, x.rank, t)
	return cut
}

// fault starts the close looks of x's observers, as its fault begins.
func (s *Sim) fault(x *proc) {
	for _, p := range s.procs {
		if p.obs == x.rank && !p.looking && p.dieAt > s.now {
			s.startLooking(p)
		}
	}
}

// cut starts the close looks of every observer whose observed process
// a partition cuts off, as it begins.
func (s *Sim) cut() {
	for _, p := range s.procs {
		if p.obs >= 0 && !p.looking && p.dieAt > s.now {
			if cut, _ := s.cutAt(p.rank, p.obs, s.now); cut {
				s.startLooking(p)
			}
		}
	}
}

// tickAfter is p's first tick after t.
func (s *Sim) tickAfter(p *proc, t Time) Time {
	tick := s.m.Detector.Tick
	if t < p.phase {
		return p.phase
	}
	return p.phase + ((t-p.phase)/tick+1)*tick
}

// startLooking begins p's close looks at its observed process, with the
// looks p made just before now primed into its measure.
func (s *Sim) startLooking(p *proc) {
	p.looking = true
	tick := s.m.Detector.Tick
	next := s.tickAfter(p, s.now)
	watched := p.sil.Moved() // (the watch's start, or a beat seen since)
	for _, t := range []Time{next - 2*tick, next - tick} {
		if at := epoch.Add(t); t >= 0 && !at.Before(watched) && !(t >= p.slowFrom && t < p.slowTo) {
			r, rs := s.reading(p, s.procs[p.obs], t)
			p.sil.Look(at, r, func() ulfm.Runstate { return rs })
		}
	}
	s.push(event{at: next, kind: evLook, to: int32(p.rank), gen: p.gen})
}

// reading is what p reads of x's heartbeat at t, and what p's node's
// kernel says of x's heartbeat thread (RunUnknown on another node). A
// dead process's heartbeat stops; across nodes its memory stops
// answering (the reading keeps the last answer's time). A process not
// run does not beat either, and its node's kernel says it waits to run.
func (s *Sim) reading(p, x *proc, t Time) (ulfm.Reading, ulfm.Runstate) {
	if t < p.connAt {
		return ulfm.Reading{}, ulfm.RunUnknown // not connected yet: nothing read
	}
	if cut, c := s.cutAt(p.rank, x.rank, t); cut && t < x.dieAt {
		// Unanswered since the cut: the last answer's count and time.
		r, _ := s.reading(p, x, c.at-1)
		return r, ulfm.RunUnknown
	}
	period := s.m.Period
	var count uint64
	switch {
	case t >= x.slowFrom && t < x.slowTo:
		count = uint64(min(x.slowFrom, x.dieAt) / period)
	case t >= x.slowTo:
		count = uint64(min(t, x.dieAt)/period) + 1<<32 // (a beat when it ran again)
	default:
		count = uint64(min(t, x.dieAt) / period)
	}
	at := t
	rs := ulfm.RunUnknown
	if s.m.node(p.rank) == s.m.node(x.rank) {
		switch {
		case t >= x.dieAt:
			rs = ulfm.RunGone
		case t >= x.slowFrom && t < x.slowTo:
			rs = ulfm.RunWaiting
		default:
			rs = ulfm.RunAsleep
		}
	} else if t >= x.dieAt {
		at = x.dieAt
	}
	return ulfm.Reading{Count: count, At: epoch.Add(at)}, rs
}

// look is one look of p at the heartbeat it observes.
func (s *Sim) look(p *proc, e event) {
	if e.gen != p.gen || !p.looking || p.obs < 0 || !s.begin(p, e.at) {
		return
	}
	x := s.procs[p.obs]
	r, rs := s.reading(p, x, p.clock)
	v, left := p.sil.Look(epoch.Add(p.clock), r, func() ulfm.Runstate { return rs })
	switch {
	case v == ulfm.Convicted:
		deaf := p.sil.Unanswered()
		s.learn(p, x.rank)
		if deaf {
			s.askNode(p, x)
		}
	case v == ulfm.Beating && !s.faulty(p, x, p.clock):
		p.looking = false // it beats: nothing to see until its next fault
	default:
		if v == ulfm.Unreached && !p.asked {
			p.asked = true // (once a watch, as ft.Detector)
			s.askNode(p, x)
		}
		next := s.tickAfter(p, p.clock)
		if left > 0 {
			next = p.clock + left
		}
		s.push(event{at: next, kind: evLook, to: int32(p.rank), gen: p.gen})
	}
	s.end(p)
}
