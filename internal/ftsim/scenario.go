package ftsim

import (
	"fmt"
	"math/bits"
	"slices"
	"time"

	"github.com/rivet-hpc/rivet/internal/ulfm"
)

// FaultKind is how a process fails, or seems to.
type FaultKind uint8

// The faults.
const (
	Kill      FaultKind = iota // the process dies
	Node                       // its node fails: every process of it stops at once, and the node answers nothing (a crash and a hang look alike from other nodes)
	Slow                       // it is not run for a while (For), heartbeat thread and all, but lives
	Partition                  // the network is cut between Nodes nodes from Rank's and the others, from At for For
)

var faultNames = [...]string{"kill", "node", "slow", "partition"}

func (k FaultKind) String() string {
	if int(k) < len(faultNames) {
		return faultNames[k]
	}
	return fmt.Sprintf("FaultKind(%d)", int(k))
}

// Fault is one fault of a scenario: at a time, or — a kill with a Tag —
// when the process is about to send its After+1-th message with that
// tag (ulfm.TagUp, TagDown, TagReq), which it then does not send.
type Fault struct {
	Rank  int
	Kind  FaultKind
	At    Time
	For   Time // Slow's and Partition's
	Nodes int  // Partition's
	Tag   int
	After int
}

func (f Fault) String() string {
	switch {
	case f.Kind == Slow:
		return fmt.Sprintf("slow %d at %v for %v", f.Rank, f.At, f.For)
	case f.Kind == Partition:
		return fmt.Sprintf("partition of %d nodes from rank %d's at %v for %v", f.Nodes, f.Rank, f.At, f.For)
	case f.Tag != 0:
		return fmt.Sprintf("kill %d at its message %d of tag %d", f.Rank, f.After+1, f.Tag)
	}
	return fmt.Sprintf("%v %d at %v", f.Kind, f.Rank, f.At)
}

// Protocol is what a scenario's processes do.
type Protocol uint8

// The protocols: the fault-tolerance ones simulated with ulfm's
// machines, and the reference collectives they are measured against.
const (
	Agree     Protocol = iota // every process enters an agreement (ERA)
	Revoke                    // one process revokes the communicator
	Shrink                    // every process shrinks the communicator
	NodeAgree                 // every process of a one-node job agrees through shared memory, falling back to ERA
	Barrier                   // a dissemination barrier
	Allreduce                 // a recursive-doubling allreduce of a word
)

var protocolNames = [...]string{"agree", "revoke", "shrink", "node-agree", "barrier", "allreduce"}

func (p Protocol) String() string {
	if int(p) < len(protocolNames) {
		return protocolNames[p]
	}
	return fmt.Sprintf("Protocol(%d)", int(p))
}

// Scenario is one simulated run: N processes under Model run Protocol,
// starting within Skew of each other (a revoke: one process, at Skew),
// with Faults.
type Scenario struct {
	Protocol Protocol
	N        int
	Model    Model
	Skew     Time
	Faults   []Fault
	// NoQuorum turns the quorum rule off (fabric.WithQuorum(false)):
	// both sides of a partition go on.
	NoQuorum bool
	// NoNodeProbe leaves out the node's question (ulfm.NodeProbe), to
	// show what it is for.
	NoNodeProbe bool
	// Busy makes each context id (but the world's, in use everywhere)
	// in use at a process with probability 1/Busy, for a shrink; 0: free.
	Busy int
}

func (sc Scenario) String() string {
	return fmt.Sprintf("%v n=%d ppn=%d skew=%v faults=%v", sc.Protocol, sc.N, sc.Model.PPN, sc.Skew, sc.Faults)
}

// Result is what a run measured, and what it found broken.
type Result struct {
	Seed uint64
	// Done is when the last survivor finished (decided, was revoked,
	// left the collective), from the run's start.
	Done Time
	// Detected is when every survivor knew every failed process, from
	// the first fault (0 without faults).
	Detected Time
	// Msgs is the protocol's messages per process (ERA's, the revoke's
	// or the collective's).
	Msgs float64
	// Violations are the promises broken (the first 20), empty if none.
	Violations []string
}

// Err is nil, or the violations with what replays them.
func (r *Result) Err(sc Scenario) error {
	if len(r.Violations) == 0 {
		return nil
	}
	return fmt.Errorf("seed %d (%v): %d violations (20 at most are kept), the first: %s", r.Seed, sc, len(r.Violations), r.Violations[0])
}

// Run plays sc from seed.
func Run(sc Scenario, seed uint64) *Result {
	s := newSim(sc.Model, sc.N, seed)
	s.busy = sc.Busy
	s.noProbe = sc.NoNodeProbe
	switch sc.Protocol {
	case Barrier:
		s.coll = collBarrier
	case Allreduce:
		s.coll = collAllreduce
	}
	s.vals = make([]uint64, sc.N)
	for i := range s.vals {
		s.vals[i] = ^uint64(0) &^ (1 << s.rng.IntN(64))
	}
	for _, p := range s.procs {
		if sc.Protocol == Agree || sc.Protocol == Shrink || sc.Protocol == NodeAgree {
			p.era = ulfm.NewEra(sc.N, p.rank, ulfm.Arity, func(dest, tag int, b []byte) error {
				s.send(p, dest, tag, b)
				return nil
			})
		}
		p.obs = s.nextObserved(p)
		p.sil = ulfm.NewSilence(sc.Model.Detector, epoch)
	}
	for _, f := range sc.Faults {
		s.applyFault(sc, f)
	}
	switch {
	case sc.Protocol == Revoke:
		s.push(event{at: sc.Skew, kind: evRevoke, to: int32(s.rng.IntN(sc.N))})
	default:
		kind := evEnter
		switch {
		case s.coll != collNone:
			kind = evColl
		case sc.Protocol == Shrink:
			kind = evShrink
		case sc.Protocol == NodeAgree:
			kind = evNodeEnter
			s.words = make(nodeWords, sc.N)
			s.slots = make([]uint64, sc.N)
		}
		for _, p := range s.procs {
			at := Time(0)
			if sc.Skew > 0 {
				at = Time(s.rng.Int64N(int64(sc.Skew) + 1))
			}
			s.push(event{at: at, kind: kind, to: int32(p.rank)})
		}
	}
	if sc.Protocol == NodeAgree {
		s.pidfds()
	}
	s.run()
	return s.check(sc)
}

// applyFault schedules f.
func (s *Sim) applyFault(sc Scenario, f Fault) {
	p := s.procs[f.Rank]
	switch {
	case f.Kind == Slow:
		p.slowFrom, p.slowTo = f.At, f.At+f.For
		s.push(event{at: f.At, kind: evFault, to: int32(f.Rank)})
	case f.Kind == Partition:
		lo := s.m.node(f.Rank)
		s.cuts = append(s.cuts, partition{lo: lo, hi: lo + f.Nodes, at: f.At, until: f.At + f.For})
		if s.nodeOf == nil && !sc.NoQuorum {
			s.nodeOf = make([]int, s.n)
			for r := range s.nodeOf {
				s.nodeOf[r] = s.m.node(r)
			}
		}
		s.push(event{at: f.At, kind: evCut})
	case f.Kind == Node:
		node := s.m.node(f.Rank)
		s.downAt[node] = min(s.downAt[node], f.At)
		for r := node * s.m.PPN; r < min(s.n, (node+1)*s.m.PPN); r++ {
			s.die(s.procs[r], f.At)
		}
	case f.Tag != 0:
		p.killTag, p.killAfter = f.Tag, f.After
	default:
		s.die(p, f.At)
	}
}

// contribution is rank r's value: all ones but one bit, chosen by the
// seed.
func (s *Sim) contribution(r int) uint64 { return s.vals[r] }

func (s *Sim) enter(p *proc) {
	p.entered = true
	p.agr = p.era.Enter([]uint64{s.contribution(p.rank)}, []ulfm.Op{ulfm.And}, nil)
}

// afterAgreement records p's decision when it comes, and learns from it
// the failures its contributors knew, as ft's outcome does; a shrink
// goes on from there.
func (s *Sim) afterAgreement(p *proc) {
	for p.agr != nil && p.decidedAt < 0 && p.agr.State() == ulfm.Decided {
		a := p.agr
		for _, r := range a.Dead() {
			s.learn(p, r)
		}
		if p.shrink == nil {
			p.decidedAt = p.clock
			return
		}
		s.shrinkDecided(p)
		if p.agr == a {
			return // (a violation)
		}
	}
}

// check verifies what the protocols promise, and measures.
func (s *Sim) check(sc Scenario) *Result {
	res := &Result{Seed: s.seed}
	var live, dead []*proc
	firstFault := never
	for _, p := range s.procs {
		if p.dieAt == never {
			live = append(live, p)
		} else {
			dead = append(dead, p)
			firstFault = min(firstFault, p.dieAt)
		}
		if p.slowFrom != never {
			firstFault = min(firstFault, p.slowFrom)
		}
	}
	for _, c := range s.cuts {
		firstFault = min(firstFault, c.at)
	}
	if len(live) == 0 {
		res.Violations = s.violations
		return res
	}
	// Every survivor learns of every failure; none of a survivor.
	known := Time(0)
	for _, x := range dead {
		if n := s.learned[x.rank]; n < len(live) {
			for _, p := range live {
				if !p.knows(x.rank) {
					s.violate("rank %d never learned that rank %d failed", p.rank, x.rank)
					break
				}
			}
		}
		known = max(known, s.learnedAt[x.rank])
	}
	if len(dead) > 0 {
		res.Detected = known - firstFault
	}
	// A verdict on a live process (across a partition) comes true — the
	// process ends itself, fenced or without a quorum — or the process
	// that made it ends: two sides that both go on would be two jobs.
	for _, v := range s.convictedLive {
		if s.procs[v[0]].dieAt == never && s.procs[v[1]].dieAt == never {
			s.violate("rank %d declared rank %d failed while it lived, and both live on", v[0], v[1])
		}
	}
	var proto int
	switch {
	case sc.Protocol == Revoke:
		// Once a survivor is revoked, every survivor is. (A revoker
		// that dies before its first notice leaves nobody revoked.)
		if slices.ContainsFunc(live, func(p *proc) bool { return p.revokedAt >= 0 }) {
			for _, p := range live {
				if p.revokedAt < 0 {
					s.violate("survivor %d was never revoked", p.rank)
				}
				res.Done = max(res.Done, p.revokedAt)
			}
		}
		proto = s.msgs[tagRevoke]
	case s.coll != collNone:
		for _, p := range live {
			if p.coll.doneAt < 0 {
				s.violate("rank %d did not finish the collective", p.rank)
			}
			res.Done = max(res.Done, p.coll.doneAt)
			if s.coll == collAllreduce && p.coll.val != live[0].coll.val {
				s.violate("allreduce: rank %d has %x, rank %d %x", p.rank, p.coll.val, live[0].rank, live[0].coll.val)
			}
		}
		proto = s.msgs[tagColl]
	case sc.Protocol == NodeAgree:
		s.checkNode(live)
		if live[0].node != nil && live[0].node.path == ulfm.NodeFell {
			s.checkAgree(sc, live, dead, known)
		}
		for _, p := range live {
			res.Done = max(res.Done, p.decidedAt)
		}
		proto = s.msgs[0]
	case sc.Protocol == Shrink:
		s.checkShrink(live)
		s.checkBound(sc, live, len(dead), known, 3)
		for _, p := range live {
			res.Done = max(res.Done, p.decidedAt)
		}
		proto = s.msgs[0]
	default:
		s.checkAgree(sc, live, dead, known)
		for _, p := range live {
			res.Done = max(res.Done, p.decidedAt)
		}
		proto = s.msgs[0]
	}
	res.Msgs = float64(proto) / float64(s.n)
	res.Violations = s.violations
	return res
}

// checkAgree verifies the agreement's promises at the survivors.
func (s *Sim) checkAgree(sc Scenario, live, dead []*proc, known Time) {
	ref := live[0]
	for _, p := range live {
		if p.decidedAt < 0 {
			s.violate("survivor %d never decided (its agreement %v)", p.rank, p.agr.State())
			return
		}
	}
	val, raised, deadSet := ref.agr.Value()[0], ref.agr.Raised(), ref.agr.Dead()
	for _, p := range live[1:] {
		if v := p.agr.Value()[0]; v != val || p.agr.Raised() != raised {
			s.violate("rank %d decided %x (raised %v), rank %d %x (raised %v)", ref.rank, val, raised, p.rank, v, p.agr.Raised())
		}
		if d := p.agr.Dead(); !slices.Equal(d, deadSet) {
			s.violate("rank %d decided the failed set %v, rank %d %v", ref.rank, deadSet, p.rank, d)
		}
	}
	for _, p := range live {
		if slices.Contains(deadSet, p.rank) {
			s.violate("the decided failed set holds survivor %d", p.rank)
		}
		if s.contribution(p.rank)&val != val {
			s.violate("the decision %x lacks survivor %d's contribution %x", val, p.rank, s.contribution(p.rank))
		}
	}
	for b := ^val; b != 0; b &= b - 1 {
		bit := uint64(1) << bits.TrailingZeros64(b)
		if !slices.ContainsFunc(s.procs, func(p *proc) bool { return p.entered && s.contribution(p.rank)&bit == 0 }) {
			s.violate("the decision %x clears a bit no contributor cleared", val)
		}
	}
	for _, x := range dead {
		if !x.entered && !slices.Contains(deadSet, x.rank) {
			s.violate("rank %d failed before it contributed, and the decided failed set %v lacks it", x.rank, deadSet)
		}
		if !x.entered && !raised {
			s.violate("rank %d failed before it contributed, unacknowledged, and the agreement did not raise", x.rank)
		}
	}
	if len(dead) == 0 && (raised || len(deadSet) > 0) {
		s.violate("no process failed, and the agreement raised (%v) or named failures %v", raised, deadSet)
	}
	s.checkBound(sc, live, len(dead), known, 1)
	// Nothing un-fails: every failure a survivor learned is one its
	// agreement machine holds too.
	for _, p := range live {
		for _, r := range p.known {
			if !p.era.Failed(int(r)) {
				s.violate("rank %d knows %d failed and its agreement does not", p.rank, r)
			}
		}
	}
}

// checkBound checks that every survivor finished within agreements
// agreements' bound (agreeBound) of the moment every survivor knew every
// failure (and ran: one not run decides nothing) — once the tree is the
// same everywhere, an agreement ends within a few passes up and down it.
func (s *Sim) checkBound(sc Scenario, live []*proc, f int, known Time, agreements int) {
	bound := Time(agreements) * s.agreeBound(f)
	start := max(known, sc.Skew)
	for _, p := range live {
		if p.slowTo != never {
			start = max(start, p.slowTo)
		}
	}
	for _, c := range s.cuts {
		if c.until < s.limit {
			start = max(start, c.until) // (messages wait for the heal)
		}
	}
	for _, p := range live {
		if p.decidedAt > start+bound {
			s.violate("survivor %d finished at %v, %v after every failure was known everywhere (bound %v)", p.rank, p.decidedAt, p.decidedAt-start, bound)
			return
		}
	}
}

// agreeBound is how long an agreement may take once every failure is
// known everywhere: 2(f+2) passes up or down a tree of its depth, each
// hop the network's latency stretched by its jitter, a parent's turn at
// its children's messages, and a stall.
func (s *Sim) agreeBound(f int) Time {
	depth := 1
	for span := 1; span < s.n; span = span*ulfm.Arity + 1 {
		depth++
	}
	m := s.m
	hop := m.LNet + Time(m.Jitter*float64(m.LNet)) + Time(ulfm.Arity+2)*(m.O+m.G) + Time(m.Header+64+4*f)*m.ByteNet + m.StallMax
	return Time(2*(f+2)*depth)*hop + time.Millisecond
}
