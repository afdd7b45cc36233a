//go:build linux

package fabric

import (
	"slices"

	"github.com/rivet-hpc/rivet/fabric/internal/wire"
)

// What one process learns of a failure, from any source — its pidfds, the
// launcher, the NIC, a detector's verdict — every other learns from it:
// the process sends a notice to its neighbours in a binomial graph over
// the world (the ranks at distances ±1, ±2, ±4, … up to half the world),
// and each process that learns from a notice sends it on to its own
// neighbours, once. A notice is a frame of its own kind, outside message
// matching, so nothing waits on a receive for it. With ⌈log2 n⌉ hops from
// any process to any other, and about 2·log2 n edges into each, it reaches
// every survivor even when processes — the first sender included — die
// while it spreads: the distance-1 edges skip processes known failed, so
// each process always has a live neighbour on either side.

// neighbours lists the world ranks process me of n sends notices to:
// me±2^k for 2^k ≤ n/2, where ±1 step past processes known failed
// (failed reports which) to the nearest that is not. Each rank once.
func neighbours(me, n int, failed func(int) bool) []int {
	var out []int
	add := func(w int) {
		if w == me || failed(w) {
			return
		}
		for _, x := range out {
			if x == w {
				return
			}
		}
		out = append(out, w)
	}
	for d := 1; d <= n/2; d *= 2 {
		for _, dir := range []int{1, -1} {
			w := ((me+dir*d)%n + n) % n
			if d == 1 {
				for k := 1; k < n && failed(w); k++ {
					w = ((w+dir)%n + n) % n
				}
			}
			add(w)
		}
	}
	return out
}

// spread tells this process's neighbours that world rank w failed; with
// e.mu held. The graph is over the processes this one reaches — the job's
// and those spawns joined to it — in world rank order.
func (e *engine) spread(w int) {
	joined := e.joined()
	me := slices.Index(joined, e.me)
	for _, i := range neighbours(me, len(joined), func(i int) bool { return e.failed[joined[i]] != nil }) {
		t := joined[i]
		e.nh = wire.Header{Kind: wire.Notice, Tag: wire.NoticeFailed, Src: int32(w)}
		e.sendCtl(t, &e.nh)
		if testHookNoticeSent != nil {
			testHookNoticeSent(t)
		}
	}
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
