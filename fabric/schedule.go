//go:build linux

package fabric

import (
	"errors"
	"fmt"
	"slices"

	"github.com/rivet-hpc/rivet/fabric/internal/shmseg"
)

// A Schedule is a nonblocking operation built from rounds: in each round,
// point-to-point messages on the communicator's collective context, then
// local steps once they have all completed. Collectives are schedules
// (libNBC's model): a blocking collective starts one and waits, a
// nonblocking one returns its Request, and either way it advances inside
// the fabric's progress — any wait, test or the progress goroutine —
// with no goroutine of its own.
//
// Every member of the communicator must start the schedules of its
// collectives in the same order: each takes the next sequence number as
// its tag, which keeps concurrent collectives on one communicator apart.
// A schedule fails as soon as a member of its communicator is known to
// have failed, with a PeerError naming it: every rank then returns, with
// an error, rather than wait for a message that will not come.
type Schedule struct {
	c       *Comm
	tag     int
	rounds  []schedRound
	nrounds int   // rounds in use; rounds beyond are kept for reuse
	cur     int   // the round in progress
	ops     []*op // its messages
	o       *op   // the operation users wait on

	scratch  [][]byte // buffers handed out by Scratch, kept for reuse
	nscratch int
	tainted  bool // aborted with messages still moving: never reused
}

type schedRound struct {
	msgs     []schedMsg
	local    []schedStep
	await    uint64 // the value every node peer's segment word must reach first
	awaitOff int    // that word
}

// A local step: a function, or one of the steps collectives take most,
// kept as data so that building a schedule allocates nothing.
type schedStep struct {
	kind    uint8
	f       func() error
	fn      func(in, inout []byte)
	a, b, c []byte
	shm     *shmProvider // stepPublish
	off     int
	val     uint64
}

const (
	stepFunc    uint8 = iota
	stepReduce        // fn(a, b): b = a ⊕ b
	stepLeft          // b = b ⊕ a, for fn not commutative: c is scratch
	stepCopy          // copy(a, b)
	stepPublish       // store val at this process's segment word off
)

// onNode reports whether c is the world communicator with every process
// on this node, where node collectives can use shared memory directly.
func (c *Comm) onNode() bool {
	ep := c.ep
	return c == ep.world && ep.shm != nil && len(ep.local) == ep.jobSize && ep.jobSize > 1
}

// nodeBarrier reports whether c can synchronize through shared memory
// flags — it is the world communicator and every process is on this node
// — and if so adds a round that does: each process publishes its barrier
// epoch in its own segment and the round ends once every peer's epoch has
// caught up. That is two cache-line transfers per process, where a
// message exchange is three or more. Every member must call it at the
// same points, like any collective.
func (s *Schedule) nodeBarrier() bool {
	c := s.c
	if !c.onNode() {
		return false
	}
	c.epoch++
	s.Next()
	s.publish(shmseg.WordEpoch, c.epoch)
	s.Next()
	s.await(shmseg.WordEpoch, c.epoch)
	s.Next()
	return true
}

// publish adds a step storing v in this process's shared segment word at
// off, for the node's peers to see.
func (s *Schedule) publish(off int, v uint64) {
	s.last().local = append(s.last().local, schedStep{kind: stepPublish, off: off, val: v, shm: s.c.ep.shm})
}

// await makes the current round wait, before its messages and steps count
// as done, until every process on the node, this one included, shows at
// least v in its segment word at off.
func (s *Schedule) await(off int, v uint64) {
	r := s.last()
	r.awaitOff, r.await = off, v
}

func (st *schedStep) run() error {
	switch st.kind {
	case stepReduce:
		st.fn(st.a, st.b)
	case stepLeft:
		copy(st.c, st.a)
		st.fn(st.b, st.c)
		copy(st.b, st.c)
	case stepCopy:
		copy(st.a, st.b)
	case stepPublish:
		st.shm.Publish(st.off, st.val)
	default:
		return st.f()
	}
	return nil
}

type schedMsg struct {
	send bool
	buf  []byte
	peer int // rank in the communicator
}

// NewSchedule begins a schedule on c, taking c's next collective sequence
// number. Add rounds with Send, Recv, Then (and the other steps) and
// Next, then Start it. Schedules are reused once their Request completes:
// one built like an earlier one allocates nothing.
func (c *Comm) NewSchedule() (*Schedule, error) {
	if err := c.valid(); err != nil {
		return nil, err
	}
	e := c.e
	tag := int(c.collSeq.Add(1)-1) & MaxTag
	s := c.spare.Swap(nil) // the schedule this communicator finished last
	if s == nil {
		e.mu.Lock()
		if n := len(e.freeS); n > 0 {
			s, e.freeS = e.freeS[n-1], e.freeS[:n-1]
		} else {
			s = &Schedule{}
		}
		e.mu.Unlock()
	}
	s.c, s.tag, s.cur, s.o, s.nscratch = c, tag, 0, nil, 0
	s.nrounds = 0
	s.newRound()
	return s, nil
}

func (s *Schedule) newRound() {
	if s.nrounds < len(s.rounds) {
		r := &s.rounds[s.nrounds]
		r.msgs, r.local, r.await, r.awaitOff = r.msgs[:0], r.local[:0], 0, 0
	} else {
		s.rounds = append(s.rounds, schedRound{})
	}
	s.nrounds++
}

// recycle clears s (dropping its references to buffers) and keeps it for
// the next NewSchedule; with e.mu held.
func (e *engine) recycle(s *Schedule) {
	for i := range s.rounds[:s.nrounds] {
		r := &s.rounds[i]
		clear(r.msgs)
		clear(r.local)
	}
	c := s.c
	s.c, s.o = nil, nil
	if s.tainted {
		return // left to the garbage collector once its messages are done
	}
	if !c.spare.CompareAndSwap(nil, s) {
		e.freeS = append(e.freeS, s)
	}
}

func (s *Schedule) last() *schedRound { return &s.rounds[s.nrounds-1] }

// Scratch returns a buffer of n bytes that lives as long as the schedule;
// a reused schedule hands out the same buffers again.
func (s *Schedule) Scratch(n int) []byte {
	if s.nscratch == len(s.scratch) {
		s.scratch = append(s.scratch, nil)
	}
	b := s.scratch[s.nscratch]
	if cap(b) < n {
		b = make([]byte, n)
		s.scratch[s.nscratch] = b
	}
	s.nscratch++
	return b[:n]
}

// Send adds a message of buf to rank dest to the current round; buf must
// stay untouched until the round is over.
func (s *Schedule) Send(buf []byte, dest int) {
	s.last().msgs = append(s.last().msgs, schedMsg{send: true, buf: buf, peer: dest})
}

// Recv adds a receive into buf from rank src to the current round.
func (s *Schedule) Recv(buf []byte, src int) {
	s.last().msgs = append(s.last().msgs, schedMsg{buf: buf, peer: src})
}

// Then adds a local step, run once the current round's messages are all
// done (in the order added); an error fails the schedule.
func (s *Schedule) Then(fn func() error) {
	s.last().local = append(s.last().local, schedStep{kind: stepFunc, f: fn})
}

// Reduce adds a step computing inout = in ⊕ inout with fn (MPI's
// convention: in holds the lower ranks' operand).
func (s *Schedule) Reduce(fn func(in, inout []byte), in, inout []byte) {
	s.last().local = append(s.last().local, schedStep{kind: stepReduce, fn: fn, a: in, b: inout})
}

// ReduceLeft adds a step computing acc = acc ⊕ in, where acc holds the
// lower ranks' operand; scratch, as long as acc, serves operations that
// do not commute (nil means fn commutes).
func (s *Schedule) ReduceLeft(fn func(in, inout []byte), acc, in, scratch []byte) {
	if scratch == nil {
		s.Reduce(fn, in, acc)
		return
	}
	s.last().local = append(s.last().local, schedStep{kind: stepLeft, fn: fn, a: in, b: acc, c: scratch})
}

// Copy adds a step copying src to dst.
func (s *Schedule) Copy(dst, src []byte) {
	s.last().local = append(s.last().local, schedStep{kind: stepCopy, a: dst, b: src})
}

// Next ends the current round: what is added afterwards waits for it.
func (s *Schedule) Next() {
	if r := s.last(); len(r.msgs) > 0 || len(r.local) > 0 {
		s.newRound()
	}
}

// Start validates the schedule and starts it; the Request completes when
// its last round is over, or with the first error.
func (s *Schedule) Start() (Request, error) {
	if s.o != nil {
		return Request{}, ErrScheduleStarted
	}
	n := len(s.c.ranks) // (an intercommunicator's schedule talks to its remote group)
	for _, r := range s.rounds[:s.nrounds] {
		for _, m := range r.msgs {
			if m.peer < 0 || m.peer >= n {
				return Request{}, fmt.Errorf("%w: schedule message with rank %d in a communicator of %d", ErrRank, m.peer, n)
			}
		}
	}
	e := s.c.e
	e.mu.Lock()
	defer e.mu.Unlock()
	o := e.get()
	o.kind, o.comm, o.sched, o.state = reqSched, s.c, s, stActive
	s.o = o
	h := e.handle(o)
	if s.c.revoked.Load() {
		e.finish(o, s.c.errRevoked())
		return h, nil
	}
	if e.nfailed > 0 {
		if err := s.c.failedMember(); err != nil {
			e.finish(o, err)
			return h, nil
		}
	}
	e.scheds = append(e.scheds, s)
	s.post()
	e.advance(s)
	return h, nil
}

// post starts the current round's messages; with e.mu held.
func (s *Schedule) post() {
	c, e := s.c, s.c.e
	s.ops = s.ops[:0]
	for _, m := range s.rounds[s.cur].msgs {
		r := e.get()
		s.ops = append(s.ops, r) // first, so that an abort meanwhile sees it
		if m.send {
			c.initSend(r, m.buf, m.peer, s.tag, c.ctxColl())
			e.startSend(r)
		} else {
			c.postRecv(r, m.buf, m.peer, s.tag, c.ctxColl())
		}
		if s.o.state == stDone {
			return // aborted: a peer failed while this round was posted
		}
	}
}

// advance moves s on as far as it can go now; it reports whether s
// finished. With e.mu held.
func (e *engine) advance(s *Schedule) bool {
	for {
		if s.o.state == stDone {
			return true // aborted
		}
		for _, r := range s.ops {
			if r.state != stDone {
				return false
			}
		}
		if r := &s.rounds[s.cur]; r.await != 0 && !s.c.ep.shm.Reached(r.awaitOff, r.await) {
			return false
		}
		var err error
		for _, r := range s.ops {
			switch {
			case err != nil:
			case r.err != nil:
				err = r.err
			case r.kind == reqRecv && r.status.Count != len(r.buf):
				err = fmt.Errorf("%w: rank %d sent %d bytes where %d were expected", ErrMismatch, r.status.Source, r.status.Count, len(r.buf))
			}
			e.release(r)
		}
		s.ops = s.ops[:0]
		if err == nil {
			local := s.rounds[s.cur].local
			for i := range local {
				if err = local[i].run(); err != nil {
					break
				}
			}
		}
		s.cur++
		if err != nil || s.cur == s.nrounds {
			e.endSchedule(s, err)
			return true
		}
		s.post()
	}
}

// endSchedule completes s's operation and drops it from the active list.
func (e *engine) endSchedule(s *Schedule, err error) {
	if i := slices.Index(e.scheds, s); i >= 0 {
		e.scheds = slices.Delete(e.scheds, i, i+1)
	}
	s.o.status = Status{}
	e.finish(s.o, err)
}

// abort ends s with err, withdrawing what of its current round it can;
// messages already moving finish on their own and are freed then.
func (e *engine) abort(s *Schedule, err error) {
	for _, r := range s.ops {
		if r.state == stDone || e.cancel(r) {
			e.release(r)
		} else {
			// A peer may still read this send's buffer — perhaps one of
			// s's scratch buffers — so s must not be handed out again.
			r.orphan = true
			s.tainted = true
		}
	}
	s.ops = s.ops[:0]
	e.endSchedule(s, err)
}

// advanceAll moves every active schedule on; with e.mu held.
func (e *engine) advanceAll() int {
	n := 0
	for i := 0; i < len(e.scheds); {
		if e.advance(e.scheds[i]) {
			n++ // it left the list: the same index holds the next one
			continue
		}
		i++
	}
	return n
}

// failedMember returns a PeerError for the first member of c known to
// have failed (not merely closed), or nil; with e.mu held.
func (c *Comm) failedMember() error {
	e := c.e
	if e.nfailed == 0 {
		return nil
	}
	for _, w := range c.ranks {
		if err := e.failed[w]; err != nil && errors.Is(err, ErrProcFailed) {
			return e.peerError(c, w, err)
		}
	}
	return nil
}
