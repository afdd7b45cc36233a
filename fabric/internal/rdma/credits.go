//go:build linux

package rdma

import (
	"sync/atomic"

	"github.com/rivet-hpc/rivet/verbs"
)

// Eager frames land in one pool of receive buffers, posted to a shared
// receive queue (SRQ) whatever the number of peers: vPool buffers, so a
// process's receive memory does not grow with its connections. No frame
// may find the pool empty — a receiver-not-ready NAK stalls the sender's
// queue pair, and the heartbeat reads queued behind it, for as long as
// the receiver does not post (a live process could be declared failed) —
// so the receiver grants every peer credits, a buffer each, and never
// grants more than the pool holds:
//
//	committed = Σ over peers (granted − taken − burned) + buffers awaiting repost ≤ vPool
//
// Counts are running counts modulo 2³², per peer. granted: credits this
// process gave the peer (it may send that many frames in all); taken:
// its frames delivered; burned: credits it gave back unused. A peer holds
// at most its window: to start with, the pool's share of each peer of the
// job (4 to 64 credits: a job of 4 over verbs gets 64, one of 64 or more
// 4), which it gets in the handshake if the pool has them; doubled each
// time it runs out, up to vWindow (its receive CQ's size: a frame landed
// is a completion there); halved when asked to give credits back.
// As its frames are delivered and their buffers posted again, the
// receiver grants it credits again up to its window — once half of it is
// used, or a batch of buffers waits — and tells it in the header of any
// frame going back, or, when the sender may be down to a quarter of its
// window, by an RDMA write of granted into the sender's control word 0
// (which consumes no receive buffer).
//
// A sender out of credits asks: it writes its count of frames sent into
// the receiver's request word and rings the receiver's doorbell (an RDMA
// fetch-and-add on one word the receiver's poll loads). The receiver
// posts its waiting buffers and grants from the pool; when the pool is
// committed, it queues the asker and asks the holders — those idle since
// the last such round, or all if none is — to give their unused credits
// back (a revoke count in the holder's word 0 and a ring
// of its doorbell). A holder burns its unused credits — counts them as
// sent — and writes its burned count into the receiver's word 2. So a
// peer that talks to many others holds credits for those it talks to
// now, and one that is out of them waits at most until the holders next
// poll.

// Control words, per world rank w, in this process's control memory:
// what w wrote about the frames between us.
const (
	ctlCredit  = iota // w's granted count for our frames (low half) and its revoke count (high half)
	ctlGoodbye        // 1 once w said goodbye
	ctlBurned         // how many of our credits w burned
	ctlRequest        // w's request for credits: its count of requests (high half), of frames sent (low half)
	vCtlWords
)

const (
	vPool    = 256 // receive buffers, shared by every peer
	vWindow  = 64  // most credits a peer holds: its receive CQ's size
	vInitial = 4   // the least window: a pool's worth for 64 peers
)

// outstanding is how many of p's credits may still need a buffer: unused
// or on a frame not yet delivered.
func (p *link) outstanding() int { return int(int32(p.granted - p.taken - p.burnSeen)) }

// grant gives p credits up to its window, as far as the pool allows, and
// returns how many it gave.
func (v *Provider) grant(p *link) int {
	n := min(vPool-v.committed, p.window-p.outstanding())
	if n <= 0 || p.dead {
		return 0
	}
	p.granted += uint32(n)
	v.committed += n
	p.revoked = false
	return n
}

// take records that buffer k holds a frame from p, delivered; it is
// posted again with the next batch, or as soon as p has used half its
// window.
func (v *Provider) take(p *link, k int) {
	p.taken++
	p.active = true
	v.owner[k] = p
	v.toPost = append(v.toPost, k)
	if p.outstanding() <= p.window/2 {
		v.regrant = true
	}
}

// repostDue posts the delivered buffers again once a batch of them waits
// or a peer runs low on credits.
func (v *Provider) repostDue() {
	if len(v.toPost) >= vRepostBatch || v.regrant {
		v.repost()
	}
}

// repost posts every delivered buffer again, with one call, and grants
// the credits they free: first to the peers waiting for any, then to
// those whose frames they held.
func (v *Provider) repost() {
	n := len(v.toPost)
	if n == 0 {
		return
	}
	for i, k := range v.toPost {
		v.postWR[i] = v.rwr[k]
	}
	if err := v.srq.PostRecv(v.postWR[:n]...); err != nil {
		// The SRQ has room for every buffer: the device is gone.
		v.DeviceFatal(err)
		return
	}
	v.toPost, v.regrant = v.toPost[:0], false
	v.committed -= n
	v.feedStarving()
	for _, wr := range v.postWR[:n] {
		p := v.owner[wr.ID&^wrKindMask]
		if p.dead || p.starving {
			continue
		}
		v.grant(p)
		// Told by the next frame going back, unless the peer may be
		// about to run out (what it was told, less what arrived, is what
		// it has left and has in flight).
		if p.granted != p.told && int(int32(p.told-p.taken-p.burnSeen)) <= p.window/4 {
			v.writeCredits(p)
		}
	}
}

// credit takes a granted count c for our frames to p, from a frame's
// header or p's control word.
func (p *link) credit(c uint32) {
	if int32(c-p.limit) > 0 {
		p.limit = c
	}
}

// canSend reports whether p granted a credit for one more frame, reading
// its control word when the last count heard is spent; when it has not,
// it asks p for more (once per frame count).
func (v *Provider) canSend(p *link) bool {
	if int32(p.limit-p.sent) > 0 {
		return true
	}
	p.credit(uint32(atomic.LoadUint64(v.ctlWord(p.world, ctlCredit))))
	if int32(p.limit-p.sent) > 0 {
		return true
	}
	if !p.asked || p.askedAt != p.sent {
		p.requests++
		if v.ring(p, ctlRequest, uint64(p.requests)<<32|uint64(p.sent)) == nil {
			p.asked, p.askedAt = true, p.sent
		}
	}
	return false
}

// ring writes val into our control word k at p and rings p's doorbell
// after it (the queue pair delivers them in that order).
func (v *Provider) ring(p *link, k int, val uint64) error {
	src := ctlOff(len(v.peers), ctlSrc)
	bell := ctlOff(len(v.peers), ctlBellOut)
	putWord(v.ctl, src, val)
	v.sge[0] = verbs.SGE{MR: v.ctl, Offset: src, Length: 8}
	v.bellSGE[0] = verbs.SGE{MR: v.ctl, Offset: bell, Length: 8}
	v.wr2[0] = verbs.SendWR{ID: wrCtl, Op: verbs.OpRDMAWrite, Flags: verbs.Inline, Local: v.sge[:],
		Remote: p.ctl.At(uint64((v.me*vCtlWords + k) * 8))}
	v.wr2[1] = verbs.SendWR{ID: wrCtl, Op: verbs.OpFetchAdd, Local: v.bellSGE[:], CompareAdd: 1,
		Remote: p.ctl.At(ctlOff(len(v.peers), ctlBell))}
	return p.qp.PostSend(v.wr2[:]...)
}

// doorbell answers what peers rang for since the last look: grants and
// revokes from the peers we send to, burned credits and requests from
// those that send to us.
func (v *Provider) doorbell() {
	if v.owed {
		v.payDebts()
	}
	bell := atomic.LoadUint64(v.ctlAt(ctlOff(len(v.peers), ctlBell)))
	if bell == v.bellSeen {
		return
	}
	v.bellSeen = bell
	for _, p := range v.byIx {
		if p.dead || !p.connected {
			continue
		}
		w0 := atomic.LoadUint64(v.ctlWord(p.world, ctlCredit))
		p.credit(uint32(w0))
		if r := uint32(w0 >> 32); r != p.revokeSeen {
			p.revokeSeen = r
			v.burn(p)
		}
		if b := uint32(atomic.LoadUint64(v.ctlWord(p.world, ctlBurned))); b != p.burnSeen {
			v.committed -= int(int32(b - p.burnSeen))
			p.burnSeen = b
		}
		if r := atomic.LoadUint64(v.ctlWord(p.world, ctlRequest)); r != p.requestSeen {
			p.requestSeen = r
			v.asked(p, uint32(r))
		}
	}
	v.feedStarving()
}

// burn gives back p's credits we have not used, at p's request.
func (v *Provider) burn(p *link) {
	if n := p.limit - p.sent; int32(n) > 0 {
		p.sent, p.burned = p.limit, p.burned+n
		p.burnOwed = true
		v.tellBurned(p)
	}
}

// tellBurned tells p our burned count; a send queue too full for it now
// leaves it owed, and a later poll tells it (owed): credits burned and
// untold would be lost to p's pool for good.
func (v *Provider) tellBurned(p *link) {
	if v.ring(p, ctlBurned, uint64(p.burned)) == nil {
		p.burnOwed = false
	} else {
		v.owed = true
	}
}

// payDebts tells the peers what a full send queue kept from them:
// burned counts and grants.
func (v *Provider) payDebts() {
	v.owed = false
	for _, p := range v.byIx {
		if p.dead {
			continue
		}
		if p.burnOwed {
			v.tellBurned(p)
		}
		if p.creditOwed {
			v.writeCredits(p)
		}
	}
}

// asked answers p's request for credits, made when p had sent sent
// frames and held no credit: its window was too small, so it doubles.
func (v *Provider) asked(p *link, sent uint32) {
	if int32(p.told-sent) > 0 {
		return // a grant is on its way
	}
	p.window = min(2*p.window, vWindow)
	v.repost() // the credits may only wait for their buffers to go back
	v.grant(p)
	if int32(p.granted-sent) > 0 {
		v.writeCredits(p)
		return
	}
	if !p.starving {
		p.starving = true
		v.starving = append(v.starving, p)
	}
	v.reclaim()
}

// feedStarving grants what the pool has free to the peers that asked and
// got nothing, in the order they asked.
func (v *Provider) feedStarving() {
	for len(v.starving) > 0 && v.committed < vPool {
		p := v.starving[0]
		v.starving = v.starving[1:]
		p.starving = false
		if v.grant(p) > 0 {
			v.writeCredits(p)
		}
	}
}

// reclaim asks the peers that hold credits and sent nothing since the
// last reclaim — or, if none is idle, every one — to give back the
// credits they have not used, once until they are granted more; their
// windows halve.
func (v *Provider) reclaim() {
	idle := false
	for _, p := range v.byIx {
		if v.holds(p) && !p.active {
			idle = true
			break
		}
	}
	for _, p := range v.byIx {
		if v.holds(p) && (!idle || !p.active) {
			p.revoked, p.window = true, max(vInitial, p.window/2)
			p.revokes++
			v.writeCredits(p)
		}
		p.active = false
	}
}

// holds reports whether p holds credits reclaim may ask back.
func (v *Provider) holds(p *link) bool {
	return !p.dead && !p.revoked && !p.starving && p.connected && p.outstanding() > 0
}

// writeCredits tells p its granted count (and our revoke count), without
// a frame: an RDMA write into its control word, and a ring of its
// doorbell when the revoke count is news. A send queue too full for it
// now leaves it owed to a later poll (payDebts): p may wait for nothing
// else.
func (v *Provider) writeCredits(p *link) {
	val := uint64(p.revokes)<<32 | uint64(p.granted)
	var err error
	if p.revokes != p.revokesTold {
		err = v.ring(p, ctlCredit, val)
	} else {
		err = v.writeCtl(p, ctlCredit, val)
	}
	if err != nil {
		p.creditOwed, v.owed = true, true
		return
	}
	p.told, p.revokesTold, p.creditOwed = p.granted, p.revokes, false
}

// release returns to the pool the credits of p, whose queue pair is in
// error, so that no more frames of its land. A peer that said goodbye
// sent its last frame whole before it (the queue pair keeps order); for
// one lost otherwise, one credit stays out: a message it was sending when
// its queue pair failed may hold a buffer the SRQ gave it, which no
// completion returns (rxe's, at least).
func (v *Provider) release(p *link) {
	if p.released {
		return
	}
	p.released = true
	if n := p.outstanding(); n > 0 {
		if v.Closed(p.world) {
			v.committed -= n
		} else {
			v.committed -= n - 1
			v.lost++
		}
	}
	v.feedStarving()
}

// PoolStats is how the receive pool stands.
type PoolStats struct {
	Buffers   int // receive buffers in the pool, shared by every peer
	Bytes     int // their memory
	Committed int // credits granted and not back, with buffers awaiting repost
	Revokes   int // requests this process sent to give unused credits back
	Burned    int // credits this process gave back, asked to
	Lost      int // buffers lost with failed peers' queue pairs (release)
}

// Pool reports how the receive pool stands; with the engine's lock held.
func (v *Provider) Pool() PoolStats {
	s := PoolStats{Buffers: vPool, Bytes: v.recv.Len(), Committed: v.committed, Lost: v.lost}
	for _, p := range v.byIx {
		s.Revokes += int(p.revokes)
		s.Burned += int(p.burned)
	}
	return s
}
