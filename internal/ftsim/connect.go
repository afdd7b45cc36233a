package ftsim

import (
	"encoding/binary"
	"time"

	"github.com/rivet-hpc/rivet/internal/ulfm"
)

// Connections, and a node's answers, as the verbs provider and the
// detector meet them. An observer reads a heartbeat across nodes over a
// connection: to its first observed process, one made before the job
// goes on (ft.Start reads its first beat); to a later one, one begun
// when the ring reaches it — a handshake of a round trip, which a live
// node answers (refuses, if the process is gone: the observer knows it
// failed then) and a dead or cut-off node never does: no read is
// answered and none refused. On one node the heartbeat is a word in
// shared memory, read at once.
//
// An observer that convicted a process for unanswered reads, or whose
// watched process was not read within Timeout (ulfm.Unreached), asks
// the node (ulfm.NodeProbe): a knock every tick, answered by a live
// node a round trip later; no answer within Timeout, and every process
// of the node is convicted at once.

// handshakeTimeout is how long a connection is tried before it is given
// up (the verbs provider's).
const handshakeTimeout = 30 * time.Second

// rtt is a round trip from p to x and back, with both sides' costs.
func (s *Sim) rtt(p, x *proc) Time {
	lat := s.m.LNet
	if s.m.node(p.rank) == s.m.node(x.rank) {
		lat = s.m.LNode
	}
	return 2 * (lat + 2*s.m.O)
}

// answers reports whether x's node answers p at t: it is up, and not cut
// off from p.
func (s *Sim) answers(p, x *proc, t Time) bool {
	if t >= s.downAt[s.m.node(x.rank)] {
		return false
	}
	cut, _ := s.cutAt(p.rank, x.rank, t)
	return !cut
}

// connect is when p's connection to x, begun at p's clock, is ready to
// read from (never: it gets no answer); a handshake refused makes p
// learn that x failed.
func (s *Sim) connect(p, x *proc) Time {
	if s.m.node(p.rank) == s.m.node(x.rank) {
		return p.clock
	}
	rtt := s.rtt(p, x)
	start := p.clock
	if cut, c := s.cutAt(p.rank, x.rank, start); cut {
		// The dial's SYNs are sent again until the heal, if it comes
		// before the handshake is given up.
		if c.until-start > handshakeTimeout {
			return never
		}
		start = c.until
	}
	if start+rtt/2 >= s.downAt[s.m.node(x.rank)] {
		return never
	}
	if start+rtt/2 >= x.dieAt {
		s.push(event{at: start + rtt, kind: evRefused, to: int32(p.rank), src: int32(x.rank)})
		return never
	}
	ready := start + rtt
	if x.slowFrom < ready && x.slowTo > start {
		// Its side of the handshake runs when it runs.
		ready = max(ready, x.slowTo+rtt/2)
	}
	return ready
}

// askNode starts p's question to x's node at p's clock, unless one is
// open: the first knock the node answers is answered a round trip later;
// the question ends then, or at the timeout (nodeAnswer).
func (s *Sim) askNode(p, x *proc) {
	node := s.m.node(x.rank)
	if s.noProbe || node == s.m.node(p.rank) || p.asking[node] {
		return
	}
	if p.asking == nil {
		p.asking = map[int]bool{}
	}
	p.asking[node] = true
	start, timeout, tick := p.clock, s.m.Detector.Timeout, s.m.Detector.Tick
	end := start + timeout
	for k := start; k < start+timeout; k += tick {
		if s.answers(p, x, k) {
			end = min(end, k+s.rtt(p, x))
			break
		}
	}
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], uint64(start))
	s.push(event{at: end, kind: evAnswer, to: int32(p.rank), src: int32(x.rank), data: b[:]})
}

// nodeAnswer ends p's question to the node of x (begun at the time in
// m) at p's clock, with the production rule: an answer by now clears the
// node; none within the timeout convicts every process of it.
func (s *Sim) nodeAnswer(p *proc, x int, m []byte) {
	node := s.m.node(x)
	delete(p.asking, node)
	start := Time(binary.LittleEndian.Uint64(m))
	q := ulfm.NewNodeProbe(epoch.Add(start), s.m.Detector.Timeout)
	// The knocks' answers came by the event's time (askNode), which is
	// before p's clock if p ran late.
	for k := start; k < start+s.m.Detector.Timeout; k += s.m.Detector.Tick {
		if s.answers(p, s.procs[x], k) {
			q.Answer()
			break
		}
	}
	if v, _ := q.Look(epoch.Add(p.clock)); v != ulfm.Convicted {
		return
	}
	for r := node * s.m.PPN; r < min(s.n, (node+1)*s.m.PPN); r++ {
		s.learn(p, r)
	}
}
