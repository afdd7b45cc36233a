//go:build linux

package fabric

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/rivet-hpc/rivet/fabric/internal/wire"
)

// The fault-tolerance channel of a communicator carries the messages of
// package ft's protocols (agreement, shrink). It is outside message
// matching, a revoke does not stop it, and what arrives is handed to the
// communicator's FTHandler as soon as any call makes progress — so a
// process that has left a protocol still answers for it, as an
// early-returning agreement needs.

// FTMax is the largest payload SendFT carries.
const FTMax = 1<<10 - 8

// An FTHandler takes a communicator's fault-tolerance traffic and its
// members' failures. Its methods are called during progress, with the
// engine locked, in the order things happened: they must not block, and
// may call no method of the fabric but SendFT. A message may come before
// the handler is set: it is kept until SetFTHandler, which then hands
// over, in order, every known failure of a member and every message kept.
type FTHandler interface {
	// FTMessage takes what comm rank src sent with SendFT. The payload is
	// valid during the call only.
	FTMessage(src, tag int, payload []byte)
	// FTFailed says comm rank r is known failed (ErrProcFailed), or
	// stopped — it closed its endpoint (State reports Stopped): either
	// way it will send nothing more, and a protocol must not wait for it.
	FTFailed(r int)
}

// ftState is a communicator's side of the channel.
type ftState struct {
	h     FTHandler // under e.mu
	early []ftMsg   // kept until h is set; under e.mu

	outMu sync.Mutex // order: e.mu, then the handler's locks, then outMu
	out   []ftMsg    // sent, to be handed to providers at the next progress
}

type ftMsg struct {
	peer, tag int // comm rank: the sender (early) or the destination (out)
	payload   []byte
}

// SetFTHandler sets the handler of c's fault-tolerance channel (package
// ft sets it; see FTHandler).
func (c *Comm) SetFTHandler(h FTHandler) error {
	if c == nil || c.freed.Load() {
		return c.invalid()
	}
	if h == nil {
		return fmt.Errorf("%w: nil FTHandler", ErrInvalid)
	}
	e := c.e
	e.mu.Lock()
	defer e.mu.Unlock()
	if c.ft.h != nil {
		return fmt.Errorf("%w: the communicator has an FTHandler already", ErrInvalid)
	}
	c.ft.h = h
	for _, w := range e.order {
		if r := c.fromWorld(w); r >= 0 {
			h.FTFailed(r)
		}
	}
	for w, cause := range e.failed { // and the members known stopped
		if r := c.fromWorld(w); r >= 0 && cause != nil && errors.Is(cause, ErrClosed) && !errors.Is(cause, ErrProcFailed) {
			h.FTFailed(r)
		}
	}
	for _, m := range c.ft.early {
		h.FTMessage(m.peer, m.tag, m.payload)
	}
	c.ft.early = nil
	return nil
}

// SendFT sends payload (at most FTMax bytes) on c's fault-tolerance
// channel to comm rank dest, with tag, for its FTHandler. It never
// blocks: the message leaves at the next progress (WaitFT, or any other
// call's). A message to a process that has failed, or fails, is dropped:
// the handler hears of the failure (FTFailed). It may be called from an
// FTHandler, and keeps working after Free (see Comm.Free).
func (c *Comm) SendFT(dest, tag int, payload []byte) error {
	if c == nil {
		// (A freed communicator's channel still sends: see retire.)
		return c.invalid()
	}
	if dest < 0 || dest >= c.Size() {
		return fmt.Errorf("%w: %d of %d", ErrRank, dest, c.Size())
	}
	if tag < 0 || tag > MaxTag {
		return fmt.Errorf("%w: %d", ErrTag, tag)
	}
	if len(payload) > FTMax {
		return fmt.Errorf("%w: a %d-byte fault-tolerance message (at most %d)", ErrInvalid, len(payload), FTMax)
	}
	m := ftMsg{peer: dest, tag: tag, payload: make([]byte, 8+len(payload))}
	binary.LittleEndian.PutUint64(m.payload, c.gen)
	copy(m.payload[8:], payload)
	c.ft.outMu.Lock()
	c.ft.out = append(c.ft.out, m)
	c.ft.outMu.Unlock()
	c.e.ftOut.Store(true)
	return nil
}

// WaitFT makes progress until done reports true, ctx ends, or the
// endpoint closes. done is called with the engine locked, as FTHandler's
// methods are, and under the same rules. What the handler sent on the
// way leaves before WaitFT returns — a decision made as the condition
// came true must not wait for some later call's progress.
func (c *Comm) WaitFT(ctx context.Context, done func() bool) error {
	if c == nil || c.freed.Load() {
		return c.invalid()
	}
	err := c.e.waitUntil(ctx, done)
	c.e.flushFT()
	return err
}

// flushFT hands the fault-tolerance messages sent so far to the
// providers.
func (e *engine) flushFT() {
	if !e.ftOut.Load() {
		return
	}
	e.mu.Lock()
	if !e.closed {
		e.ftFlush()
	}
	e.mu.Unlock()
}

// ftFlush hands every communicator's sent fault-tolerance messages to the
// providers; with e.mu held, in progress.
func (e *engine) ftFlush() int {
	if !e.ftOut.Swap(false) {
		return 0
	}
	n := 0
	for _, c := range e.comms {
		n += e.ftFlushComm(c)
	}
	for _, c := range e.retired {
		n += e.ftFlushComm(c)
	}
	return n
}

func (e *engine) ftFlushComm(c *Comm) int {
	c.ft.outMu.Lock()
	out := c.ft.out
	c.ft.out = nil
	c.ft.outMu.Unlock()
	n := 0
	for _, m := range out {
		w := c.ranks[m.peer]
		if e.failed[w] != nil || e.route[w] == nil {
			continue
		}
		r := e.get()
		c.initSend(r, m.payload, m.peer, m.tag, c.ctxBase+ctxFT)
		r.orphan = true // released when sent
		e.startSend(r)
		n++
	}
	return n
}

// ftDeliver takes a message of a fault-tolerance context: for the
// communicator's handler, or kept until there is one (or until this
// process has made the communicator). With e.mu held.
func (e *engine) ftDeliver(h *wire.Header, p *wire.Payload) {
	b := p.AppendTo(nil)
	if len(b) < 8 {
		return
	}
	gen, id := binary.LittleEndian.Uint64(b), ctxCommID(h.Ctx)
	m := ftMsg{peer: int(h.Src), tag: int(h.Tag), payload: b[8:]}
	c := e.comms[id]
	if c == nil || c.gen != gen {
		for _, r := range e.retired {
			if r.id == id && r.gen == gen {
				c = r
			}
		}
	}
	switch {
	case c != nil && c.gen == gen && c.ft.h != nil:
		c.ft.h.FTMessage(m.peer, m.tag, m.payload)
	case c != nil && c.gen == gen:
		c.ft.early = append(c.ft.early, m)
	case c != nil && c.gen > gen:
		// For a communicator freed since: stale.
	default:
		if g, ok := e.gens[id]; !ok || gen > g {
			k := commKey{id, gen}
			if e.earlyFT == nil {
				e.earlyFT = map[commKey][]ftMsg{}
			}
			e.earlyFT[k] = append(e.earlyFT[k], m)
		}
	}
}

// ftFailed tells the handlers of the communicators with world rank w of
// its failure; with e.mu held.
func (e *engine) ftFailed(w int) {
	for _, c := range e.comms {
		if r := c.fromWorld(w); r >= 0 && c.ft.h != nil {
			c.ft.h.FTFailed(r)
		}
	}
	for _, c := range e.retired {
		if r := c.fromWorld(w); r >= 0 {
			c.ft.h.FTFailed(r)
		}
	}
}

// maxRetired bounds the freed communicators whose channels still answer.
const maxRetired = 256

// retire keeps freed c's fault-tolerance channel answering: an agreement
// this process has decided and returned from may still be asked for by
// members that have not (the early-returning agreement serves them), and
// what its handler last sent must still leave. Freeing a communicator is
// local, so the last such request may come at any time; the newest
// maxRetired channels are kept (Open MPI keeps them all until finalize).
// With e.mu held.
func (e *engine) retire(c *Comm) {
	if len(e.retired) == maxRetired {
		e.retired = slices.Delete(e.retired, 0, 1)
	}
	e.retired = append(e.retired, c)
}

// ftRegister takes over the messages kept for c before it was made here;
// with e.mu held.
func (e *engine) ftRegister(c *Comm) {
	for k, ms := range e.earlyFT {
		if k.id == c.id && k.gen <= c.gen {
			delete(e.earlyFT, k)
			if k.gen == c.gen {
				c.ft.early = append(c.ft.early, ms...)
			}
		}
	}
}

// FTHandler returns the handler SetFTHandler set on c, or nil.
func (c *Comm) FTHandler() FTHandler {
	if c == nil {
		return nil
	}
	c.e.mu.Lock()
	defer c.e.mu.Unlock()
	return c.ft.h
}
