//go:build linux

package fabric

import (
	"slices"

	"github.com/rivet-hpc/rivet/fabric/internal/wire"
)

// What one process learns of a failure, from any source — its pidfds, the
// launcher, the NIC, a detector's verdict — every other learns from it:
// the process sends a notice to its neighbours in ulfm's binomial graph,
// and each process that learns from a notice sends it on to its own
// neighbours, once; a neighbour it has next to it only now that it knows
// of a failure gets every failure it knows (ulfm.Notices). A notice is a
// frame of its own kind, outside message matching, so nothing waits on a
// receive for it.

// spread tells this process's neighbours that world rank w failed; with
// e.mu held. The graph is over the processes this one reaches — the job's
// and those spawns joined to it — in world rank order.
func (e *engine) spread(w int) {
	joined := e.joined()
	me := slices.Index(joined, e.me)
	e.notices.Spread(me, len(joined), w, func(i int) bool { return e.failed[joined[i]] != nil }, func(i, v int) {
		t := joined[i]
		e.nh = wire.Header{Kind: wire.Notice, Tag: wire.NoticeFailed, Src: int32(v)}
		e.sendCtl(t, &e.nh)
		if testHookNoticeSent != nil {
			testHookNoticeSent(t)
		}
	})
}

// joined lists the world ranks this process reaches, itself included,
// in order; with e.mu held.
func (e *engine) joined() []int {
	if e.all != nil {
		return e.all
	}
	for w, p := range e.route {
		if p != nil {
			e.all = append(e.all, w)
		}
	}
	return e.all
}

// testHookNoticeSent lets tests kill a process in the middle of a
// broadcast, after its notice went to neighbour t.
var testHookNoticeSent func(t int)

// notice takes a notice from world rank from; with e.mu held, inside a
// poll.
func (e *engine) notice(from int, h *wire.Header) {
	switch h.Tag {
	case wire.NoticeFailed:
		w := int(h.Src)
		switch {
		case w < 0 || w >= len(e.failed):
		case w == e.me:
			// The job declared this process failed: it is fenced out, and
			// its heartbeat ends it (ExitDeclaredFailed).
			e.fenceSelf()
		case e.failed[w] == nil || upgrade(e.failed[w], ErrProcFailed):
			// Applied once what w sent before it died is delivered.
			e.learn(w, procFailed("world rank %d (world rank %d told this process)", w, from))
		}
	case wire.NoticeRevoked:
		e.revokeNotice(h)
	}
}

// A fencer carries out a verdict on a peer at a provider: it sets the
// peer's fence word there and stops all traffic with it; fenceSelf sets
// this process's own.
type fencer interface {
	fence(w int)
	fenceSelf()
}

// fence carries out the verdict on world rank w at every provider, and
// tells the launcher, which makes it final if w cannot end itself.
func (e *engine) fence(w int) {
	for _, p := range e.provs {
		if f, ok := p.(fencer); ok {
			f.fence(w)
		}
	}
	if e.verdicts != nil {
		select {
		case e.verdicts <- w:
		default: // room for every rank once; a rank is fenced once
		}
	}
}

func (e *engine) fenceSelf() {
	for _, p := range e.provs {
		if f, ok := p.(fencer); ok {
			f.fenceSelf()
		}
	}
}
