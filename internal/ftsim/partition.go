package ftsim

import (
	"time"

	"github.com/rivet-hpc/rivet/internal/ulfm"
)

// A partition cuts the network between the nodes in [lo, hi) and the
// others from at until until: messages sent across it wait for the heal
// if it comes within the transport's retries (rcRetry, as RC retransmits
// them), and are lost otherwise; reads across it go unanswered. Each
// side's observers convict the processes across the cut, one after
// another; a process that then sees no quorum of nodes (ulfm.Quorum)
// ends itself, as the fabric's does.
type partition struct {
	lo, hi    int // nodes
	at, until Time
}

// rcRetry is how long the verbs transport retransmits before it gives
// a message up (its timeout × retries: docs/performance.md).
const rcRetry = 1900 * time.Millisecond

// cutAt reports whether a and b (ranks) are cut from each other at t, and
// since when.
func (s *Sim) cutAt(a, b int, t Time) (bool, *partition) {
	na, nb := s.m.node(a), s.m.node(b)
	if na == nb {
		return false, nil
	}
	for i := range s.cuts {
		c := &s.cuts[i]
		if t >= c.at && t < c.until && (na >= c.lo && na < c.hi) != (nb >= c.lo && nb < c.hi) {
			return true, c
		}
	}
	return false, nil
}

// quorumLost ends p when it sees no quorum of nodes.
func (s *Sim) quorumLost(p *proc) {
	if _, _, ok := ulfm.Quorum(s.nodeOf, p.rank, p.knows); !ok {
		s.die(p, p.clock)
	}
}
