package ulfm

import "time"

// A process convicted because its node stopped answering reads may have
// died alone, or with its node. Its node-mates would each be convicted in
// turn — one timeout after another as the ring reaches them, and never
// those the observer had not connected to yet: no read of theirs is ever
// answered, and a connection to a dead node is not refused, it just
// gets no answer. So the observer asks the node itself, after such a
// conviction (Silence.Unanswered) or when a process it watches was not
// read within Timeout (Unreached): a NodeProbe
// weighs the answers of the node's kernel to connection attempts (made
// every tick; accepted or refused, either is an answer). None within
// Timeout — the time a live heartbeat is given — and every process of
// the node is convicted at once; any answer, and the node lives: its
// processes are watched one by one as before.
//
// The evidence is the node's as the heartbeat's is the process's: a
// kernel answers a connection in its interrupt handler, whatever its
// processes are doing, as a NIC answers reads. A partition silences the
// node as death does; the quorum rule decides which side goes on.

// NodeProbe is one probe of a node, started when a process of it was
// convicted for unanswered reads.
type NodeProbe struct {
	start    time.Time
	timeout  time.Duration
	answered bool
}

// NewNodeProbe starts a probe at now that gives the node timeout to
// answer.
func NewNodeProbe(now time.Time, timeout time.Duration) *NodeProbe {
	return &NodeProbe{start: now, timeout: timeout}
}

// Answer records that the node answered (a connection made or refused).
func (p *NodeProbe) Answer() { p.answered = true }

// Look is the probe's verdict at now: Beating once the node answered,
// Convicted when Timeout passed without an answer, Quiet before; and how
// long until the timeout (0 once decided).
func (p *NodeProbe) Look(now time.Time) (Verdict, time.Duration) {
	switch left := p.timeout - now.Sub(p.start); {
	case p.answered:
		return Beating, 0
	case left <= 0:
		return Convicted, 0
	default:
		return Quiet, left
	}
}
