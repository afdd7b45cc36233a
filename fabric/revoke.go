//go:build linux

package fabric

import (
	"fmt"

	"github.com/rivet-hpc/rivet/fabric/internal/wire"
)

// Revoke revokes the communicator at every live member (MPI_Comm_revoke).
// Here it takes effect at once: every operation on c in progress — sends
// and receives not yet under way, collectives — ends with an error
// matching ErrRevoked, and every later one raises it, except what package
// ft's agreement and shrink do on c. Messages of c that arrive from now on,
// and those that arrived but were never received, are dropped. The other
// members learn of it through the same reliable broadcast as failure
// notices: every member that learns sends it on to its neighbours, so it
// reaches every live member even when members, the caller included, die
// meanwhile. Revoke is local: it does not wait for the others, and
// revoking a revoked communicator does nothing.
//
// A receive whose message is already being read, or a send whose message
// is, completes normally.
func (c *Comm) Revoke() error {
	if c == nil || c.freed.Load() {
		return c.invalid()
	}
	if c.ep.closed.Load() {
		return ErrClosed
	}
	e := c.e
	e.mu.Lock()
	e.revoke(c, 0)
	e.mu.Unlock()
	return nil
}

// IsRevoked reports whether c is revoked at this process
// (MPI_Comm_is_revoked): by Revoke here, by a notice from another member,
// or because an operation on it raised ErrRevoked.
func (c *Comm) IsRevoked() bool { return c != nil && c.revoked.Load() }

// revocable reports whether traffic on matching context ctx stops when
// its communicator is revoked: all but the fault-tolerance context's.
func revocable(ctx uint32) bool { return ctx&3 != ctxFT }

// revokedCtx reports whether matching context ctx belongs to a revoked
// communicator and is not exempt; with e.mu held.
func (e *engine) revokedCtx(ctx uint32) bool {
	id := ctxCommID(ctx)
	return revocable(ctx) && id < maxContextIDs && e.revokedIDs[id/64]&(1<<(id%64)) != 0
}

// errRevoked is the error operations on revoked c end with.
func (c *Comm) errRevoked() error {
	return fmt.Errorf("%w: communicator %d", ErrRevoked, c.id)
}

// revoke revokes c at this process, having heard of it hops hops away
// from where it started (0: here; -1: from an operation), and tells its
// neighbours; it reports false if c already was. With e.mu held.
func (e *engine) revoke(c *Comm, hops int) bool {
	if c.revoked.Load() || c.freed.Load() {
		return false
	}
	c.revoked.Store(true)
	c.revokeHops = hops
	e.revokedIDs[c.id/64] |= 1 << (c.id % 64)
	// The notice first: a neighbour then hears of the revoke before any
	// refusal of its messages (dropRevoked).
	if c.inter == nil && c.Size() > 1 && !e.closed {
		e.spreadRevoke(c, hops+1) // (an intercommunicator's bridge spreads its revoke)
	}
	err := c.errRevoked()
	for r := e.posted.head; r != nil; {
		next := r.next
		if r.comm == c && revocable(r.h.Ctx) {
			e.posted.remove(r)
			e.finish(r, err)
		}
		r = next
	}
	for w := range e.pending {
		l := &e.pending[w]
		for r := l.head; r != nil; {
			next := r.next
			if r.kind != reqCtl && r.comm == c && revocable(r.h.Ctx) {
				l.remove(r)
				e.npend--
				if r.h.Kind == wire.RTS {
					delete(e.rdv, r.h.ID)
					if u, ok := e.route[r.peer].(interface{ unstage(id uint64) }); ok {
						u.unstage(r.h.ID)
					}
				}
				e.finish(r, err)
			}
			r = next
		}
	}
	// A rendezvous send whose request went out stays until the receiver
	// answers: with a FIN once it read the message, or with a refusal
	// (dropRevoked) — it may be reading it now.
	for u := e.unexp.head; u != nil; {
		next := u.next
		if u.h.Ctx&^3 == c.ctxBase && revocable(u.h.Ctx) {
			e.unexp.remove(u)
			e.dropRevoked(u.peer, &u.h)
			u.next, e.freeU = e.freeU, u
		}
		u = next
	}
	for i := 0; i < len(e.scheds); {
		if s := e.scheds[i]; s.c == c {
			e.abort(s, err)
			continue
		}
		i++
	}
	for _, l := range c.links {
		e.revoke(l, hops)
	}
	return true
}

// dropRevoked drops a message of a revoked communicator from world rank
// peer; the sender of a rendezvous message waits for an answer, and gets
// a refusal. With e.mu held.
func (e *engine) dropRevoked(peer int, h *wire.Header) {
	if h.Kind == wire.RTS {
		e.fin = wire.Header{Kind: wire.FIN, ID: h.ID, Tag: wire.FINRevoked}
		e.sendCtl(peer, &e.fin)
	}
}

// spreadRevoke sends the notice that c is revoked to c's neighbours in
// the binomial graph over its members (as spread does over the world),
// hops hops from where it started.
func (e *engine) spreadRevoke(c *Comm, hops int) {
	c.revokeN.Spread(c.rank, c.Size(), 0, func(r int) bool { return e.failed[c.ranks[r]] != nil },
		func(t, _ int) { e.sendRevoke(c, t, hops) })
}

// recheckRevokes sends the revoke of each revoked communicator with
// world rank w among its members to a neighbour that w's failure made
// new (ulfm.Notices.Recheck): the notice may have gone to w, dead
// already, and with it the only way to the members beyond. With e.mu
// held.
func (e *engine) recheckRevokes(w int) {
	for _, c := range e.comms {
		if !c.revoked.Load() || c.freed.Load() || c.inter != nil || c.Size() < 2 || c.fromWorld(w) < 0 {
			continue
		}
		hops := max(c.revokeHops, 0) + 1
		c.revokeN.Recheck(c.rank, c.Size(), func(r int) bool { return e.failed[c.ranks[r]] != nil },
			func(t, _ int) { e.sendRevoke(c, t, hops) })
	}
}

// sendRevoke sends the notice that c is revoked to its member t.
func (e *engine) sendRevoke(c *Comm, t, hops int) {
	e.nh = wire.Header{Kind: wire.Notice, Tag: wire.NoticeRevoked, Ctx: c.id, ID: c.gen, Size: uint64(hops)}
	e.sendCtl(c.ranks[t], &e.nh)
	if testHookNoticeSent != nil {
		testHookNoticeSent(c.ranks[t])
	}
}

// commKey names one communicator over the life of the job: a context id
// is reused once freed, a generation never.
type commKey struct {
	id  uint32
	gen uint64
}

// revokeNotice takes a revoke notice; with e.mu held, inside a poll. A
// notice for a communicator this process has not made yet (its creation
// still under way here) is kept for when it does; one for a communicator
// freed since, or older than the one with its id now, is stale.
func (e *engine) revokeNotice(h *wire.Header) {
	k := commKey{h.Ctx, h.ID}
	hops := int(h.Size)
	if c := e.comms[k.id]; c != nil && c.gen == k.gen {
		if !e.revoke(c, hops) && c.revokeHops != 0 && (c.revokeHops < 0 || hops < c.revokeHops) {
			c.revokeHops = hops // a shorter way in the graph, come later
		}
		return
	} else if c != nil && c.gen > k.gen {
		return
	}
	if gen, ok := e.gens[k.id]; !ok || k.gen > gen {
		if e.early == nil {
			e.early = map[commKey]int{}
		}
		if _, ok := e.early[k]; !ok {
			e.early[k] = hops
		}
	}
}

// register makes c known to the engine, for notices; with e.mu held. A
// revoke that arrived before c was made here applies now.
func (e *engine) register(c *Comm) {
	e.dropUnexpected(func(ctx uint32) bool { return ctxCommID(ctx) == c.id && ctx&^3 != c.ctxBase })
	e.comms[c.id] = c
	e.gens[c.id] = max(e.gens[c.id], c.gen)
	e.revokedIDs[c.id/64] &^= 1 << (c.id % 64)
	e.ftRegister(c)
	for k, hops := range e.early {
		if k.id == c.id && k.gen <= c.gen {
			delete(e.early, k)
			if k.gen == c.gen {
				e.revoke(c, hops)
			}
		}
	}
}

// unregister forgets freed c; with e.mu held. Its fault-tolerance
// channel, if package ft used it, stays (see retire).
func (e *engine) unregister(c *Comm) {
	if e.comms[c.id] == c {
		delete(e.comms, c.id)
	}
	e.dropUnexpected(func(ctx uint32) bool { return ctx&^3 == c.ctxBase })
	e.revokedIDs[c.id/64] &^= 1 << (c.id % 64)
	if c.ft.h != nil {
		e.retire(c)
	}
}

// dropUnexpected drops the unexpected messages whose context stale
// reports can never be received: those of a communicator freed here, or
// left over from an earlier communicator with a new one's context id
// (their sender's operation failed, or was abandoned). A rendezvous
// sender is refused, as for a revoked communicator, so that its request
// ends. Fault-tolerance messages are kept (ftDeliver sorts them by
// generation). With e.mu held.
func (e *engine) dropUnexpected(stale func(ctx uint32) bool) {
	for u := e.unexp.head; u != nil; {
		next := u.next
		if u.h.Ctx&3 != ctxFT && stale(u.h.Ctx) {
			e.unexp.remove(u)
			e.dropRevoked(u.peer, &u.h)
			u.next, e.freeU = e.freeU, u
		}
		u = next
	}
}
