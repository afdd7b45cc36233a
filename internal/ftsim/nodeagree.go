package ftsim

import (
	"time"

	"github.com/rivet-hpc/rivet/internal/ulfm"
)

// The node agreement, as package ft makes one on a job of one node:
// ulfm.NodeAgreement over the node's state words (here plain words: the
// simulation runs one step at a time), falling back to the Era with the
// same agreement number when the attempt is abandoned. Processes spin on
// the words between polls (nodeSpin apart for the first 64, then nodeWait:
// the fabric yields its CPU, and the simulation needs fewer events), and
// look at what they know of failures every 16th poll; on a node a killed
// process is known through its pidfd within pidfdMin to pidfdMax, as
// measured (docs/ft.md#how-fast).
const (
	nodeSpin = 200 * time.Nanosecond
	nodeWait = 20 * time.Microsecond
	pidfdMin = 500 * time.Microsecond
	pidfdMax = 3 * time.Millisecond
)

// nodeWords are the simulated node's state words.
type nodeWords []uint64

func (w nodeWords) Load(i int) uint64 { return w[i] }

func (w nodeWords) CAS(i int, old, new uint64) bool {
	if w[i] != old {
		return false
	}
	w[i] = new
	return true
}

// nodeState is a process's node agreement.
type nodeState struct {
	a     *ulfm.NodeAgreement
	seq   uint64
	polls int
	path  ulfm.NodeStatus // NodeDone or NodeFell once it ended here
	val   uint64          // folded, on the node path
}

// nodeEnter publishes p's contribution and starts polling.
func (s *Sim) nodeEnter(p *proc) {
	p.entered = true
	ns := &nodeState{seq: p.era.Reserve(), a: ulfm.NewNodeAgreement(s.words, p.rank, s.n, 1)}
	p.node = ns
	if ns.a.Publish(func() { s.slots[p.rank] = s.contribution(p.rank) }) == ulfm.NodeFell {
		s.nodeFall(p)
		return
	}
	s.nodePoll(p)
}

// nodePoll is one poll of p's attempt; another follows a spin later
// while it waits.
func (s *Sim) nodePoll(p *proc) {
	ns := p.node
	if ns.path != ulfm.NodeWaiting {
		return
	}
	ns.polls++
	failed := func(int) bool { return false }
	if ns.polls%16 == 0 {
		failed = p.knows
	}
	switch ns.a.Poll(failed) {
	case ulfm.NodeFell:
		s.nodeFall(p)
	case ulfm.NodeDone:
		ns.path = ulfm.NodeDone
		ns.val = ^uint64(0)
		for _, v := range s.slots {
			ns.val &= v
		}
		p.era.DecidedHere(ns.seq)
		p.decidedAt = p.clock
	default:
		wait := nodeSpin
		if ns.polls > 64 {
			wait = nodeWait
		}
		s.push(event{at: p.clock + wait, kind: evNodePoll, to: int32(p.rank)})
	}
}

// nodeFall makes p agree over messages instead, on the same number.
func (s *Sim) nodeFall(p *proc) {
	p.node.path = ulfm.NodeFell
	p.agr = p.era.EnterAt(p.node.seq, []uint64{s.contribution(p.rank)}, []ulfm.Op{ulfm.And}, nil)
}

// pidfds make every process of the node learn of each killed one, as
// their pidfds fire.
func (s *Sim) pidfds() {
	for _, x := range s.procs {
		if x.dieAt == never {
			continue
		}
		for _, p := range s.procs {
			if p != x {
				at := x.dieAt + pidfdMin + Time(s.rng.Int64N(int64(pidfdMax-pidfdMin)))
				s.push(event{at: at, kind: evPidfd, to: int32(p.rank), src: int32(x.rank)})
			}
		}
	}
}

// checkNode verifies the node agreement's promise: every survivor took
// the same path; on the node's, with the AND of every member's words.
// (On the fallback's, checkAgree checks the Era.)
func (s *Sim) checkNode(live []*proc) {
	ref := live[0].node
	for _, p := range live {
		ns := p.node
		if ns == nil || ns.path == ulfm.NodeWaiting {
			s.violate("survivor %d never finished its node agreement", p.rank)
			return
		}
		if ns.path != ref.path {
			s.violate("rank %d's node agreement ended %v, rank %d's %v: not alike", live[0].rank, ref.path, p.rank, ns.path)
			return
		}
		if ns.path == ulfm.NodeDone && ns.val != ref.val {
			s.violate("rank %d folded %x, rank %d %x", live[0].rank, ref.val, p.rank, ns.val)
		}
	}
}
