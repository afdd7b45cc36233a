//go:build linux

package fabric

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"github.com/rivet-hpc/rivet/fabric/internal/wire"
	"github.com/rivet-hpc/rivet/internal/ulfm"
)

// The engine is one process's matching and progress engine: MPI's posted
// and unexpected queues over the providers' ordered frames. Everything in
// it runs under mu, inside the calls of whichever goroutine is waiting;
// there is no hidden progress thread.
type engine struct {
	mu    sync.Mutex
	me    int // world rank
	route []provider
	provs []provider
	self  *selfProvider

	posted  reqList // receives waiting for a match, in order
	unexp   reqList // messages that arrived before their receive (reqUnexp)
	freeU   *op     // spent unexpected messages, keeping their buffers
	freeR   *op
	rdv     map[uint64]*op
	nextID  uint64
	pending []reqList // per world rank: sends waiting for room, in order
	npend   int

	// comms are the communicators this process has, by context id, for
	// notices that name one; gens the latest generation made of each id;
	// revokedIDs has a bit set for each revoked one; early holds revoke
	// notices for communicators not made here yet (revokeNotice).
	comms      map[uint32]*Comm
	gens       map[uint32]uint64
	revokedIDs idMask
	early      map[commKey]int
	// ftOut says a communicator has fault-tolerance messages to send
	// (SendFT); earlyFT keeps those that came for communicators not made
	// here yet.
	ftOut   atomic.Bool
	earlyFT map[commKey][]ftMsg
	// retired: freed communicators whose fault-tolerance channel still
	// answers (see retire), oldest first.
	retired []*Comm

	scheds []*Schedule // schedules in progress
	freeS  []*Schedule // finished ones, for reuse

	failed  []error // per world rank: why it is gone; nil while alive
	nfailed int
	// declared counts the ranks known failed (len(order)), for readers
	// that do not take e.mu (Endpoint.KnownFailed).
	declared atomic.Int32
	health   *health
	lastScan time.Time
	closed   bool
	spin     int // idle polls before a wait yields the CPU
	// idler, if set, is the provider an idle wait sleeps on until
	// something arrives, instead of yielding (waitmode.go); idling is set
	// while a goroutine sleeps on it.
	idler  idler
	idling atomic.Bool
	// waits counts what idle waits did past their spin (waitmode.go).
	waits idleCounts
	// direct is the world rank whose frames a blocking receive is
	// reading itself (recvDirect), -1 if none: polls leave them to it.
	direct  int
	fin     wire.Header  // a FIN being sent; here so that it does not escape to the heap
	nh      wire.Header  // a notice being sent, likewise
	notices ulfm.Notices // the failure notices' broadcast, this process's part
	order   []int        // world ranks known failed, in the order this process learned it
	sh      wire.Header  // a short message's, sent by sendNow; likewise
	pl      wire.Payload // an unexpected message being received, likewise
	// verdicts carries the ranks this process declared failed to the
	// launcher (rivetrun -ft), which kills them if they do not exit; nil
	// without a launcher, closed at Close.
	verdicts chan int
	// nodeOf is the node of every world rank when quorum is on (a job
	// across nodes, WithQuorum): see checkQuorum.
	nodeOf []int
	// all caches joined(): the world ranks with a route, reset when one
	// joins.
	all []int
	// later holds failures learned inside a poll (learn), applied at the
	// end of the round (applyLater), once what the failed processes sent
	// before dying is delivered; applying guards its own rounds.
	later    []lateFailure
	applying bool
}

// A lateFailure is a failure learned inside a poll, not yet applied.
type lateFailure struct {
	w     int
	cause error
}

func newEngine(me, size int) *engine {
	e := &engine{
		comms:   map[uint32]*Comm{},
		gens:    map[uint32]uint64{},
		me:      me,
		route:   make([]provider, size),
		rdv:     map[uint64]*op{},
		pending: make([]reqList, size),
		failed:  make([]error, size),
		spin:    4096,
		direct:  -1,
	}
	e.self = &selfProvider{}
	e.route[me] = e.self
	e.provs = append(e.provs, e.self)
	return e
}

// deliver takes one arrived frame from world rank peer.
func (e *engine) deliver(peer int, h *wire.Header, p *wire.Payload) {
	if e.failed[peer] != nil {
		// Fenced out: once a peer is known failed (a detector's verdict
		// included), nothing it sends counts. What it sent before was
		// delivered first (markFailed).
		return
	}
	if h.Kind == wire.Notice {
		e.notice(peer, h)
		return
	}
	if h.Kind == wire.FIN {
		if r := e.rdv[h.ID]; r != nil {
			delete(e.rdv, h.ID)
			var err error
			if h.Tag == wire.FINRevoked && r.comm != nil {
				// The receiver dropped it, its communicator revoked: so is
				// it here now (an operation raised ErrRevoked).
				e.revoke(r.comm, -1)
				err = r.comm.errRevoked()
			}
			e.finish(r, err)
		}
		return
	}
	if e.revokedCtx(h.Ctx) {
		e.dropRevoked(peer, h)
		return
	}
	if h.Ctx&3 == ctxFT && h.Kind == wire.Eager {
		e.ftDeliver(h, p)
		return
	}
	for r := e.posted.head; r != nil; r = r.next {
		if h.Matches(r.h.Ctx, r.peer, r.tag) {
			e.posted.remove(r)
			e.receive(r, peer, h, p)
			return
		}
	}
	u := e.freeU
	if u != nil {
		e.freeU, u.next = u.next, nil
	} else {
		u = &op{e: e, kind: reqUnexp}
	}
	u.h, u.peer = *h, peer
	u.buf = p.AppendTo(u.buf[:0])
	e.unexp.push(u)
}

// receive completes receive r with a matched message.
func (e *engine) receive(r *op, peer int, h *wire.Header, p *wire.Payload) {
	n := int(h.Size)
	var err error
	if n > len(r.buf) {
		n = len(r.buf)
		err = fmt.Errorf("%w: %d-byte message from rank %d, tag %d, into a %d-byte buffer", ErrTruncated, h.Size, h.Src, h.Tag, len(r.buf))
	}
	switch h.Kind {
	case wire.Eager:
		p.CopyTo(r.buf[:n])
	case wire.RTS:
		r.status = Status{Source: int(h.Src), Tag: int(h.Tag), Count: n}
		r.err = err
		if n == 0 {
			e.readDone(r, peer, h.ID, nil)
			return
		}
		if done, rerr := e.readRemote(peer, r, r.buf[:n], h.ID, h.Addr, h.Key); done {
			e.readDone(r, peer, h.ID, rerr)
		} else {
			r.state = stRdv // until the provider's readDone
		}
		return
	}
	r.status = Status{Source: int(h.Src), Tag: int(h.Tag), Count: n}
	e.finish(r, err)
}

func (e *engine) readRemote(peer int, r *op, dst []byte, id, addr uint64, key uint32) (bool, error) {
	if peer == e.me {
		s := e.rdv[id]
		if s == nil {
			return true, fmt.Errorf("fabric: internal: no rendezvous send %d", id)
		}
		copy(dst, s.buf)
		return true, nil
	}
	return e.route[peer].read(peer, r, dst, id, addr, key)
}

// readDone ends rendezvous receive r of the message id from world rank
// peer: it tells the sender (FIN) unless the read failed. r.err holds a
// truncation error from the match, if any.
func (e *engine) readDone(r *op, peer int, id uint64, rerr error) {
	err := r.err
	if rerr != nil {
		if errors.Is(rerr, errPeerGone) {
			// This runs inside a poll (or a schedule's post): the frames
			// the peer sent after this message are delivered first.
			rerr = procFailed("world rank %d: %v", peer, rerr)
			e.learn(peer, rerr)
		}
		r.status.Count = 0
		err = e.peerError(r.comm, peer, rerr)
	} else {
		e.fin = wire.Header{Kind: wire.FIN, ID: id}
		e.sendCtl(peer, &e.fin)
	}
	e.finish(r, err)
}

// peerError describes a failure involving world rank peer for an
// operation on comm.
func (e *engine) peerError(comm *Comm, peer int, cause error) error {
	rank := -1
	if comm != nil {
		rank = comm.fromWorld(peer)
	}
	return &PeerError{Rank: rank, WorldRank: peer, Err: cause}
}

func (e *engine) finish(r *op, err error) {
	r.err = err
	r.state = stDone
	if r.contrib != nil {
		r.contrib.Contribute(flagOf(err))
	}
	if r.orphan {
		e.release(r)
	}
}

// sendCtl sends a control frame now or queues it behind earlier frames.
func (e *engine) sendCtl(peer int, h *wire.Header) {
	if e.closed || e.failed[peer] != nil || e.route[peer] == nil {
		return
	}
	if e.pending[peer].empty() && e.route[peer].send(peer, h, nil) {
		return
	}
	r := e.get()
	r.kind, r.h, r.peer, r.state = reqCtl, *h, peer, stPending
	r.orphan = true
	e.pending[peer].push(r)
	e.npend++
}

// startSend starts send r (kind, buf, peer, h.ctx/src/tag set).
func (e *engine) startSend(r *op) {
	dest := r.peer
	if e.closed {
		e.finish(r, ErrClosed)
		return
	}
	if e.revokedCtx(r.h.Ctx) {
		e.finish(r, r.comm.errRevoked())
		return
	}
	if err := e.failed[dest]; err != nil {
		e.finish(r, e.peerError(r.comm, dest, err))
		return
	}
	p := e.route[dest]
	if p == nil {
		e.finish(r, e.peerError(r.comm, dest, ErrNoRoute))
		return
	}
	r.h.Size = uint64(len(r.buf))
	if len(r.buf) <= p.eagerMax() {
		r.h.Kind = wire.Eager
	} else {
		e.nextID++
		r.h.Kind, r.h.ID = wire.RTS, e.nextID
		r.h.Addr = uint64(uintptr(unsafe.Pointer(&r.buf[0])))
		e.rdv[r.h.ID] = r
	}
	if e.pending[dest].empty() && p.send(dest, &r.h, r.payload()) {
		e.sent(r)
		return
	}
	r.state = stPending
	e.pending[dest].push(r)
	e.npend++
}

// payload is what a send hands its provider: the message (an RTS's
// provider may need it to expose or stage it), or nothing for control
// frames.
func (r *op) payload() []byte {
	if r.kind == reqCtl {
		return nil
	}
	return r.buf
}

// sent records that send r's frame is with the provider.
func (e *engine) sent(r *op) {
	switch {
	case r.kind == reqCtl:
		r.state = stDone
		e.release(r)
	case r.h.Kind == wire.Eager:
		r.status = Status{Count: len(r.buf)}
		e.finish(r, nil)
	default:
		r.status = Status{Count: len(r.buf)}
		r.state = stRdv
	}
}

// progress polls every provider and pushes queued sends; it returns how
// much happened.
func (e *engine) progress() int {
	if e.closed {
		return 0
	}
	// The self provider is first; most rounds it has nothing, and a
	// look at its queue is cheaper than a call through the interface.
	n := 0
	if s := e.self; s.head < len(s.q) {
		n += s.poll(e, 64)
	}
	for _, p := range e.provs[1:] {
		n += p.poll(e, 64)
	}
	if len(e.scheds) > 0 {
		n += e.advanceAll()
	}
	if e.ftOut.Load() {
		n += e.ftFlush()
	}
	if len(e.later) > 0 && !e.applying {
		n += e.applyLater()
	}
	if e.npend > 0 {
		for dest := range e.pending {
			l := &e.pending[dest]
			for r := l.head; r != nil; r = l.head {
				if !e.route[dest].send(dest, &r.h, r.payload()) {
					if f, ok := e.route[dest].(sendFailer); ok {
						if err := f.sendErr(dest); err != nil {
							e.dropPending(dest, func(*op) error { return err })
						}
					}
					break
				}
				l.remove(r)
				e.npend--
				n++
				e.sent(r)
			}
		}
	}
	return n
}

// ctlSent reports whether no control frame waits for room at a peer not
// known failed (Close waits for it).
func (e *engine) ctlSent() bool {
	if e.npend == 0 {
		return true
	}
	for w := range e.pending {
		if e.failed[w] != nil {
			continue
		}
		for r := e.pending[w].head; r != nil; r = r.next {
			if r.kind == reqCtl {
				return false
			}
		}
	}
	return true
}

// dropPending ends the frames queued for peer: sends fail with errFor's
// error, control frames are dropped.
func (e *engine) dropPending(peer int, errFor func(*op) error) {
	l := &e.pending[peer]
	for r := l.head; r != nil; r = l.head {
		l.remove(r)
		e.npend--
		if r.kind == reqCtl {
			r.state = stDone
			e.release(r)
			continue
		}
		if r.h.Kind == wire.RTS {
			delete(e.rdv, r.h.ID)
		}
		e.finish(r, errFor(r))
	}
}

// cancel cancels r if no data of it has moved yet, and aborts a schedule.
func (e *engine) cancel(r *op) bool {
	switch r.state {
	case stPosted:
		e.posted.remove(r)
	case stPending:
		if r.kind == reqCtl {
			return false
		}
		e.pending[r.peer].remove(r)
		e.npend--
		if r.h.Kind == wire.RTS {
			delete(e.rdv, r.h.ID)
			// Never sent: a copy the provider staged will not be read.
			if u, ok := e.route[r.peer].(interface{ unstage(id uint64) }); ok {
				u.unstage(r.h.ID)
			}
		}
	case stActive:
		e.abort(r.sched, ErrAborted)
		r.status.Cancelled = true
		return true
	default:
		return false
	}
	r.status = Status{Cancelled: true}
	e.finish(r, nil)
	return true
}

// get takes an operation from the engine's pool.
func (e *engine) get() *op {
	r := e.freeR
	if r != nil {
		e.freeR = r.next
		r.next = nil
	} else {
		r = &op{e: e}
	}
	return r
}

// release returns r to the pool; its generation moves on, so handles
// that still point at it see that their operation is over.
func (e *engine) release(r *op) {
	*r = op{e: e, next: e.freeR, gen: r.gen + 1}
	e.freeR = r
}

// waiter is the skeleton of every waiting call: under the lock, make
// progress and count idle rounds; every 128 rounds look for failures;
// between rounds, without the lock, notice ctx ending (every 16 rounds)
// and back off.
type waiter struct {
	e    *engine
	ctx  context.Context
	done <-chan struct{} // ctx.Done(), asked for at the first look
	i    int
	idle int
}

// round makes progress once; call with e.mu held.
func (w *waiter) round() {
	if w.e.progress() > 0 {
		w.idle = 0
	} else {
		w.idle++
	}
}

// note counts a round that made progress on n things some other way
// than round.
func (w *waiter) note(n int) {
	if n > 0 {
		w.idle = 0
	} else {
		w.idle++
	}
}

// scanDue reports whether this round should look for failures.
func (w *waiter) scanDue() bool { return w.i&127 == 127 }

// pause ends a round, without the lock; it reports whether ctx ended.
func (w *waiter) pause() bool {
	w.i++
	if w.i&15 == 0 {
		if w.i == 16 {
			// Not sooner: most waits for a small message end before
			// this, and asking a context costs calls.
			w.done = w.ctx.Done()
		}
		if w.done != nil {
			select {
			case <-w.done:
				return true
			default:
			}
		}
	}
	w.e.backoff(w.idle)
	return false
}

// wait makes progress until r completes, ctx ends, or a failure makes r
// unable to complete. It allocates nothing.
func (e *engine) wait(ctx context.Context, r *op) error {
	e.mu.Lock()
	err := e.waitLocked(ctx, r)
	e.mu.Unlock()
	return err
}

// waitLocked is wait with e.mu held; it returns with e.mu held, and
// releases it only between rounds.
func (e *engine) waitLocked(ctx context.Context, r *op) error {
	w := waiter{e: e, ctx: ctx}
	for {
		if !r.over() {
			w.round()
		}
		if r.over() {
			return nil
		}
		if e.closed {
			return ErrClosed
		}
		if w.scanDue() {
			if err := e.scan(r); err != nil {
				return err
			}
		}
		e.mu.Unlock()
		if w.pause() {
			e.mu.Lock()
			e.cancel(r)
			return ctx.Err()
		}
		e.mu.Lock()
	}
}

// waitUntil is wait for a condition, checked with e.mu held.
func (e *engine) waitUntil(ctx context.Context, cond func() bool) error {
	w := waiter{e: e, ctx: ctx}
	for {
		e.mu.Lock()
		if !cond() {
			w.round()
		}
		if cond() {
			e.mu.Unlock()
			return nil
		}
		if err := e.endRound(&w); err != nil {
			return err
		}
	}
}

// endRound ends a round of a wait that is not over, called with e.mu
// held and returning without it: it looks for failures when due and
// pauses. It returns ErrClosed once the engine is closed, or ctx's error
// once w's context ended.
func (e *engine) endRound(w *waiter) error {
	if e.closed {
		e.mu.Unlock()
		return ErrClosed
	}
	if w.scanDue() {
		e.scan(nil)
	}
	e.mu.Unlock()
	if w.pause() {
		return w.ctx.Err()
	}
	return nil
}

// backoff is what a waiting call does after idle polls in a row found
// nothing: it spins first, for latency, then yields the CPU to other
// processes, then sleeps briefly once nothing has happened for long, so
// an idle rank does not burn a core. With an idler it sleeps on that
// instead of yielding, until the next completion (waitmode.go). When
// this node has more processes of the job than CPUs (oversubscribed), it
// yields almost at once: a spinning rank would only keep the rank it
// waits for off the CPU — Open MPI's yield_when_idle, set the same way.
func (e *engine) backoff(i int) {
	switch {
	case i < e.spin:
	case e.idler != nil && e.idle():
	case i < 1<<17:
		e.waits.yields.Add(1)
		runtime.Gosched()
		syscall.RawSyscall(syscall.SYS_SCHED_YIELD, 0, 0, 0)
	default:
		e.waits.yields.Add(1)
		time.Sleep(50 * time.Microsecond)
	}
}

// scan looks for failed peers (at most every millisecond) and reports
// whether r can no longer complete for certain: a receive from any source
// while a member of its communicator has failed.
func (e *engine) scan(r *op) error {
	if now := time.Now(); now.Sub(e.lastScan) >= time.Millisecond {
		e.lastScan = now
		if e.health != nil {
			e.health.check(e)
		}
		for _, p := range e.provs {
			if pr, ok := p.(prober); ok {
				pr.probe(now, e)
			}
		}
	}
	if r == nil || r.kind != reqRecv || r.peer != AnySource || r.state != stPosted {
		return nil
	}
	// An unmatched receive from AnySource cannot be sure to complete once
	// a member failed: it raises ErrProcFailedPending and stays posted,
	// matchable, until the failure is acknowledged (§16.2.2).
	return e.anyBlocked(r.comm, ErrProcFailedPending)
}

// anyBlocked returns, while comm has a failed member whose failure it has
// not acknowledged (AckFailed), a PeerError for the first such member
// that wraps class (ErrProcFailed, or ErrProcFailedPending), and nil
// otherwise; with e.mu held.
func (e *engine) anyBlocked(c *Comm, class error) error {
	if e.nfailed == 0 {
		return nil
	}
	f := c
	if c.inter != nil {
		f = c.inter.bridge // an intercommunicator's failures are its bridge's
	}
	k := 0
	for _, w := range e.order {
		if f.index[w] < 0 {
			continue
		}
		if k++; k > f.acked {
			cause := e.failed[w]
			if class == ErrProcFailedPending {
				cause = fmt.Errorf("%w (%v)", ErrProcFailedPending, cause)
			}
			return e.peerError(c, w, cause)
		}
	}
	return nil
}

// waitedOn sets in[w] for every world rank w some operation waits for: a
// receive's source (every member of its communicator for AnySource) or a
// rendezvous send's destination; with e.mu held.
func (e *engine) waitedOn(in []bool) {
	clear(in)
	for r := e.posted.head; r != nil; r = r.next {
		if r.peer == AnySource {
			for _, w := range r.comm.ranks {
				in[w] = true
			}
		} else {
			in[r.comm.ranks[r.peer]] = true
		}
	}
	for _, r := range e.rdv {
		in[r.peer] = true
	}
	if e.direct >= 0 {
		in[e.direct] = true
	}
}

// markFailed records that world rank peer is gone and fails every
// operation that depended on it. Frames it sent before dying are still
// delivered first.
func (e *engine) markFailed(peer int, cause error) {
	if e.failed[peer] != nil && !upgrade(e.failed[peer], cause) || peer == e.me {
		return
	}
	for i := 0; i < 1024 && e.progress() > 0; i++ {
	}
	e.markFailedNow(peer, cause)
}

// learn records, from inside a poll, that world rank w failed. Draining
// there would deliver the frame being delivered again, so the failure
// takes effect at the end of the progress round (applyLater), after what w
// sent before it died: a receive of it completes, whichever source — a
// notice from another process, a read of its memory — brought the news
// before its frames were read.
func (e *engine) learn(w int, cause error) {
	e.later = append(e.later, lateFailure{w, cause})
}

// applyLater applies the failures learned inside polls (learn): it delivers
// what has arrived, from every peer, then marks each failed. A blocking
// receive that reads one peer's frames itself (recvDirect) finds them in
// the unexpected queue afterwards. It returns how much it did.
func (e *engine) applyLater() int {
	e.applying = true
	direct := e.direct
	e.direct = -1
	n := 0
	for len(e.later) > 0 {
		for i := 0; i < 1024; i++ {
			k := e.progress()
			if k == 0 {
				break
			}
			n += k
		}
		f := e.later[0]
		e.later[0] = lateFailure{}
		e.later = e.later[1:]
		if e.failed[f.w] == nil || upgrade(e.failed[f.w], f.cause) {
			e.markFailedNow(f.w, f.cause)
			n++
		}
	}
	e.later = e.later[:0]
	e.direct = direct
	e.applying = false
	return n
}

// markFailedNow is markFailed without first delivering what the peer
// sent: for callers that have (a provider that drained the peer) or that
// cannot (learn).
func (e *engine) markFailedNow(peer int, cause error) {
	if peer == e.me {
		return
	}
	if old := e.failed[peer]; old != nil {
		if upgrade(old, cause) {
			// Unreachable so far; now a verdict: failed. Its operations
			// have ended already (with ErrNoRoute).
			e.failed[peer] = cause
			e.declare(peer)
		}
		return
	}
	e.failed[peer] = cause
	e.nfailed++
	switch {
	case errors.Is(cause, ErrProcFailed):
		e.declare(peer)
	case errors.Is(cause, ErrClosed) && !e.closed:
		// Stopped, not failed; but its part in package ft's protocols
		// is over as surely: an agreement must not wait for it.
		e.ftFailed(peer)
	}
	// After Close the knowledge is still recorded (a launcher notice may
	// arrive then), but the providers are released: nothing to tell them.
	if !e.closed {
		for _, p := range e.provs {
			if f, ok := p.(failureListener); ok {
				f.peerFailed(e, peer, cause)
			}
		}
	}
	e.dropPending(peer, func(r *op) error { return e.peerError(r.comm, peer, cause) })
	for id, r := range e.rdv {
		if r.peer == peer {
			delete(e.rdv, id)
			e.finish(r, e.peerError(r.comm, peer, cause))
		}
	}
	for r := e.posted.head; r != nil; {
		next := r.next
		if r.peer != AnySource && r.comm.ranks[r.peer] == peer {
			e.posted.remove(r)
			e.finish(r, e.peerError(r.comm, peer, cause))
		}
		r = next
	}
	// A collective needs every member: those over a communicator with
	// the failed process end now, at every rank that learns of it. (A
	// process that closed its endpoint did not fail: a collective that
	// still waits for it fails through the receive above.)
	if !errors.Is(cause, ErrProcFailed) {
		return
	}
	for i := 0; i < len(e.scheds); {
		s := e.scheds[i]
		if s.c.fromWorld(peer) >= 0 {
			e.abort(s, e.peerError(s.c, peer, cause))
			continue
		}
		i++
	}
}

// declare records that world rank peer failed (ErrProcFailed) and acts
// on it; with e.mu held.
func (e *engine) declare(peer int) {
	// Known before any operation reports it (the Fortran "known failed
	// image" rule): the order is GetFailed's.
	e.order = append(e.order, peer)
	e.declared.Store(int32(len(e.order)))
	if e.closed {
		return
	}
	e.fence(peer)
	e.spread(peer)
	e.recheckRevokes(peer)
	for _, c := range e.comms {
		e.rangeRevoke(c, peer)
	}
	e.ftFailed(peer)
	e.checkQuorum()
}

// upgrade reports whether a failure with cause overrides what is known
// of a peer, old: only a process failure a peer merely unreachable
// (ErrNoRoute, a connection that could not be made), so that every
// survivor ends up knowing it failed.
func upgrade(old, cause error) bool {
	return errors.Is(cause, ErrProcFailed) && errors.Is(old, ErrNoRoute) && !errors.Is(old, ErrProcFailed)
}

// selfProvider carries a process's messages to itself.
type selfProvider struct {
	q    []selfFrame
	head int
	pl   wire.Payload
}

type selfFrame struct {
	h    wire.Header
	data []byte
}

func (s *selfProvider) name() string  { return "self" }
func (s *selfProvider) eagerMax() int { return 1 << 10 }
func (s *selfProvider) send(_ int, h *wire.Header, payload []byte) bool {
	if h.Kind != wire.Eager {
		payload = nil // the receive copies from the send's buffer
	}
	if len(s.q) < cap(s.q) {
		s.q = s.q[:len(s.q)+1]
	} else {
		s.q = append(s.q, selfFrame{})
	}
	f := &s.q[len(s.q)-1]
	f.h = *h
	f.data = append(f.data[:0], payload...)
	return true
}

func (s *selfProvider) poll(e *engine, budget int) int {
	n := 0
	for ; n < budget && s.head < len(s.q); n++ {
		// deliver may send to ourselves and grow the queue: work on copies.
		f := s.q[s.head]
		s.head++
		s.pl = wire.Payload{Flat: f.data}
		e.deliver(e.me, &f.h, &s.pl)
	}
	if s.head == len(s.q) {
		s.q, s.head = s.q[:0], 0
	}
	return n
}

func (s *selfProvider) read(int, *op, []byte, uint64, uint64, uint32) (bool, error) {
	return true, errors.New("fabric: internal: self read")
}
func (s *selfProvider) closed(int) bool { return false }
func (s *selfProvider) close() error    { return nil }

// Progress makes progress on this endpoint's communication until ctx
// ends: run it in a goroutine (go ep.Progress(ctx)) to let nonblocking
// operations and incoming traffic move while this process computes
// outside the fabric. It is optional — every call makes progress itself —
// and it backs off when idle: it spins briefly, then yields, then sleeps
// up to 50 µs between polls.
func (ep *Endpoint) Progress(ctx context.Context) error {
	e := ep.e
	w := waiter{e: e, ctx: ctx}
	for {
		e.mu.Lock()
		if e.closed {
			e.mu.Unlock()
			return ErrClosed
		}
		w.round()
		if w.scanDue() {
			e.scan(nil)
		}
		e.mu.Unlock()
		if w.pause() {
			return ctx.Err()
		}
	}
}
