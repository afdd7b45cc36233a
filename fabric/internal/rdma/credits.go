//go:build linux

package rdma

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
// posts its waiting buffers and grants from the pool. An asker it cannot
// grant now — the pool committed, or the asker's window still full of
// its own frames in flight or of credits it burned that we have not yet
// seen — asks nothing more, so it waits in a queue until we can grant it
// beyond the frames it had sent, and is told then. When the pool is
// committed, the receiver also asks the holders — those idle since the
// last such round, or all if none is — to give their unused credits back
// (a revoke count in the holder's word 0 and a ring of its doorbell). A
// holder burns its unused credits — counts them as sent — and writes its
// burned count into the receiver's word 2. So a peer that talks to many
// others holds credits for those it talks to now, and one that is out of
// them waits at most until the holders next poll.

// Control words, per world rank w, in this process's control memory:
// what w wrote about the frames between us.
const (
	ctlCredit  = iota // w's granted count for our frames (low half) and its revoke count (high half)
	ctlGoodbye        // 1 once w said goodbye
	ctlBurned         // how many of our credits w burned
	ctlRequest        // w's request for credits: its count of requests (high half), of frames sent (low half)
	vCtlWords
)

// credits is this process's flow control of eager frames: its receive
// pool, what it granted each peer, and the credits each peer granted it.
// It moves nothing itself but through io, so that one implementation runs
// on queue pairs (Provider) and in a model that reorders whatever RC does
// not keep in order (credits_test.go).
type credits struct {
	io creditIO
	// Peers with a queue pair, in the order they got it; the owner of
	// each buffer's frame, and the buffers delivered and waiting to be
	// posted again (repost); credits granted and not yet back, with those
	// buffers; the peers queued for credits; the doorbell's count as last
	// seen; buffers lost with a failed peer's queue pair (release).
	byIx      []*link
	owner     [vPool]*link
	toPost    []int
	committed int
	regrant   bool // a peer has used half its window: repost now
	owed      bool // some peer's burnOwed or creditOwed is set (payDebts)
	initial   int  // credits a peer gets in the handshake (Config.Initial)
	starving  []*link
	bellSeen  uint64
	lost      int
}

// creditIO is what credits moves and reads through.
type creditIO interface {
	// word loads the control word k that world rank w writes here, and
	// bell the doorbell.
	word(w, k int) uint64
	bell() uint64
	// writeCtl writes val into our control word k at p; ring writes it
	// and then rings p's doorbell (p's queue pair delivers them in that
	// order). An error (a full send queue) means nothing was posted.
	writeCtl(p *link, k int, val uint64) error
	ring(p *link, k int, val uint64) error
	// post posts receive buffers bufs (indices into the pool) again.
	post(bufs []int) error
	// Closed reports whether world rank w said goodbye.
	Closed(w int) bool
	// DeviceFatal fails every peer: the device is gone.
	DeviceFatal(err error)
}

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
func (c *credits) grant(p *link) int {
	n := min(vPool-c.committed, p.window-p.outstanding())
	if n <= 0 || p.dead {
		return 0
	}
	p.granted += uint32(n)
	c.committed += n
	p.revoked = false
	return n
}

// take records that buffer k holds a frame from p, delivered; it is
// posted again with the next batch, or as soon as p has used half its
// window.
func (c *credits) take(p *link, k int) {
	p.taken++
	p.active = true
	c.owner[k] = p
	c.toPost = append(c.toPost, k)
	if p.outstanding() <= p.window/2 {
		c.regrant = true
	}
}

// repostDue posts the delivered buffers again once a batch of them waits,
// a peer runs low on credits, or one waits for them.
func (c *credits) repostDue() {
	if len(c.toPost) >= vRepostBatch || c.regrant || len(c.starving) > 0 && len(c.toPost) > 0 {
		c.repost()
	}
}

// repost posts every delivered buffer again, with one call, and grants
// the credits they free: first to the peers waiting for any, then to
// those whose frames they held.
func (c *credits) repost() {
	n := len(c.toPost)
	if n == 0 {
		return
	}
	if err := c.io.post(c.toPost); err != nil {
		// The SRQ has room for every buffer: the device is gone.
		c.io.DeviceFatal(err)
		return
	}
	bufs := c.toPost
	c.toPost, c.regrant = c.toPost[:0], false
	c.committed -= n
	c.feedStarving()
	for _, k := range bufs {
		p := c.owner[k]
		if p.dead || p.starving {
			continue
		}
		c.grant(p)
		// Told by the next frame going back, unless the peer may be
		// about to run out (what it was told, less what arrived, is what
		// it has left and has in flight).
		if p.granted != p.told && int(int32(p.told-p.taken-p.burnSeen)) <= p.window/4 {
			c.writeCredits(p)
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
func (c *credits) canSend(p *link) bool {
	if int32(p.limit-p.sent) > 0 {
		return true
	}
	p.credit(uint32(c.io.word(p.world, ctlCredit)))
	if int32(p.limit-p.sent) > 0 {
		return true
	}
	if !p.asked || p.askedAt != p.sent {
		p.requests++
		if c.io.ring(p, ctlRequest, uint64(p.requests)<<32|uint64(p.sent)) == nil {
			p.asked, p.askedAt = true, p.sent
		}
	}
	return false
}

// doorbell answers what peers rang for since the last look: grants and
// revokes from the peers we send to, burned credits and requests from
// those that send to us.
func (c *credits) doorbell() {
	if c.owed {
		c.payDebts()
	}
	bell := c.io.bell()
	if bell == c.bellSeen {
		return
	}
	c.bellSeen = bell
	for _, p := range c.byIx {
		if p.dead || !p.connected {
			continue
		}
		w0 := c.io.word(p.world, ctlCredit)
		p.credit(uint32(w0))
		if r := uint32(w0 >> 32); r != p.revokeSeen {
			p.revokeSeen = r
			c.burn(p)
		}
		if b := uint32(c.io.word(p.world, ctlBurned)); b != p.burnSeen {
			c.committed -= int(int32(b - p.burnSeen))
			p.burnSeen = b
		}
		if r := c.io.word(p.world, ctlRequest); r != p.requestSeen {
			p.requestSeen = r
			c.asked(p, uint32(r))
		}
	}
	c.feedStarving()
}

// burn gives back p's credits we have not used, at p's request.
func (c *credits) burn(p *link) {
	if n := p.limit - p.sent; int32(n) > 0 {
		p.sent, p.burned = p.limit, p.burned+n
		p.burnOwed = true
		c.tellBurned(p)
	}
}

// tellBurned tells p our burned count; a send queue too full for it now
// leaves it owed, and a later poll tells it (owed): credits burned and
// untold would be lost to p's pool for good.
func (c *credits) tellBurned(p *link) {
	if c.io.ring(p, ctlBurned, uint64(p.burned)) == nil {
		p.burnOwed = false
	} else {
		c.owed = true
	}
}

// payDebts tells the peers what a full send queue kept from them:
// burned counts and grants.
func (c *credits) payDebts() {
	c.owed = false
	for _, p := range c.byIx {
		if p.dead {
			continue
		}
		if p.burnOwed {
			c.tellBurned(p)
		}
		if p.creditOwed {
			c.writeCredits(p)
		}
	}
}

// asked answers p's request for credits, made when p had sent sent
// frames and held no credit: its window was too small, so it doubles. A
// peer we cannot grant now waits in the queue (feedStarving) until we
// can; it asks nothing more till then. Only a full pool makes us ask the
// holders for credits back: a peer whose own frames still fill its
// window gets credits as they are delivered.
func (c *credits) asked(p *link, sent uint32) {
	if int32(p.told-sent) > 0 {
		return // a grant is on its way
	}
	p.window = min(2*p.window, vWindow)
	c.repost() // the credits may only wait for their buffers to go back
	c.grant(p)
	if int32(p.granted-sent) > 0 {
		c.writeCredits(p)
		return
	}
	p.waitAt = sent
	if !p.starving {
		p.starving = true
		c.starving = append(c.starving, p)
	}
	if p.outstanding() < p.window {
		c.reclaim()
	}
}

// feedStarving grants the peers that asked and got nothing what the pool
// has free, in the order they asked. Each stays queued until it is told
// a grant beyond the frames it had sent when it asked: until its frames
// in flight are delivered, or we see the credits it burned, its window
// may have no room.
func (c *credits) feedStarving() {
	if len(c.starving) == 0 {
		return
	}
	kept := c.starving[:0]
	for _, p := range c.starving {
		if !p.dead {
			c.grant(p)
			if int32(p.granted-p.waitAt) <= 0 {
				kept = append(kept, p)
				continue
			}
			c.writeCredits(p)
		}
		p.starving = false
	}
	clear(c.starving[len(kept):])
	c.starving = kept
}

// reclaim asks the peers that hold credits and sent nothing since the
// last reclaim — or, if none is idle, every one — to give back the
// credits they have not used, once until they are granted more; their
// windows halve.
func (c *credits) reclaim() {
	idle := false
	for _, p := range c.byIx {
		if c.holds(p) && !p.active {
			idle = true
			break
		}
	}
	for _, p := range c.byIx {
		if c.holds(p) && (!idle || !p.active) {
			p.revoked, p.window = true, max(vInitial, p.window/2)
			p.revokes++
			c.writeCredits(p)
		}
		p.active = false
	}
}

// holds reports whether p holds credits reclaim may ask back.
func (c *credits) holds(p *link) bool {
	return !p.dead && !p.revoked && !p.starving && p.connected && p.outstanding() > 0
}

// writeCredits tells p its granted count (and our revoke count), without
// a frame: an RDMA write into its control word, and a ring of its
// doorbell when the revoke count is news. A send queue too full for it
// now leaves it owed to a later poll (payDebts): p may wait for nothing
// else.
func (c *credits) writeCredits(p *link) {
	val := uint64(p.revokes)<<32 | uint64(p.granted)
	var err error
	if p.revokes != p.revokesTold {
		err = c.io.ring(p, ctlCredit, val)
	} else {
		err = c.io.writeCtl(p, ctlCredit, val)
	}
	if err != nil {
		p.creditOwed, c.owed = true, true
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
func (c *credits) release(p *link) {
	if p.released {
		return
	}
	p.released = true
	if n := p.outstanding(); n > 0 {
		if c.io.Closed(p.world) {
			c.committed -= n
		} else {
			c.committed -= n - 1
			c.lost++
		}
	}
	c.feedStarving()
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

// stats reports how the receive pool stands, but for its memory.
func (c *credits) stats() PoolStats {
	s := PoolStats{Buffers: vPool, Committed: c.committed, Lost: c.lost}
	for _, p := range c.byIx {
		s.Revokes += int(p.revokes)
		s.Burned += int(p.burned)
	}
	return s
}

// LinkStats is how the frames between this process and one peer stand,
// in the running counts of the credit protocol (modulo 2³²).
type LinkStats struct {
	// Our frames to the peer: those sent (with the credits burned), the
	// peer's granted count as last heard, the credits burned, the
	// requests for more made and the sent count at the last of them.
	Sent, Limit, Burned, Requests, AskedAt uint32
	// Its frames to us: the credits granted it, the count last told it,
	// its frames delivered, the credits it burned (as seen); its window,
	// and whether it waits for credits.
	Granted, Told, Taken, BurnSeen uint32
	Window                         int
	Waiting                        bool
	// SendQueued is how many send requests on its queue pair the device
	// has not completed.
	SendQueued int
	Dead       bool // its queue pair failed
}
