//go:build linux

package fabric

import (
	"context"
	"errors"
	"fmt"
	"unsafe"

	"github.com/rivet-hpc/rivet/fabric/internal/wire"
)

// checkDest and checkSource check a send's or a receive's arguments in
// one call (valid's test inlined, not called), and say what is wrong out
// of line.
func (c *Comm) checkDest(dest, tag int) error {
	if !c.usable() || uint(dest) >= uint(len(c.ranks)) && dest != ProcNull || uint(tag) > MaxTag {
		return c.badDest(dest, tag)
	}
	return nil
}

func (c *Comm) badDest(dest, tag int) error {
	if err := c.valid(); err != nil {
		return err
	}
	if dest != ProcNull && (dest < 0 || dest >= len(c.ranks)) {
		return fmt.Errorf("%w: destination %d in a communicator of %d", ErrRank, dest, len(c.ranks))
	}
	return fmt.Errorf("%w: %d (0..%d)", ErrTag, tag, MaxTag)
}

func (c *Comm) checkSource(src, tag int) error {
	if !c.usable() || uint(src) >= uint(len(c.ranks)) && src != ProcNull && src != AnySource || uint(tag) > MaxTag && tag != AnyTag {
		return c.badSource(src, tag)
	}
	return nil
}

func (c *Comm) badSource(src, tag int) error {
	if err := c.valid(); err != nil {
		return err
	}
	if src != ProcNull && src != AnySource && (src < 0 || src >= len(c.ranks)) {
		return fmt.Errorf("%w: source %d in a communicator of %d", ErrRank, src, len(c.ranks))
	}
	return fmt.Errorf("%w: %d (0..%d or AnyTag)", ErrTag, tag, MaxTag)
}

// Send sends buf to rank dest with tag, and returns once buf may be
// reused (MPI_Send). Short messages are buffered; long ones wait for the
// receiver, which reads them straight from buf.
//
// If ctx ends before a long message's receiver has read it, Send returns
// ctx's error but the message is not withdrawn: the receiver may still
// read buf when it posts the matching receive. To reuse buf safely after
// a timeout, use Isend and wait on the Request again.
func (c *Comm) Send(ctx context.Context, buf []byte, dest, tag int) error {
	if err := c.checkDest(dest, tag); err != nil {
		return err
	}
	if dest == ProcNull {
		return nil
	}
	e := c.e
	e.mu.Lock()
	if e.sendNow(c, buf, dest, tag) {
		e.mu.Unlock()
		return nil
	}
	r := e.get()
	c.initSend(r, buf, dest, tag, c.ctxUser())
	e.startSend(r)
	if r.state == stDone {
		err := r.err
		e.release(r)
		e.mu.Unlock()
		return err
	}
	e.mu.Unlock()
	return c.finishBlocking(ctx, r, nil)
}

// finishBlocking waits for a blocking call's pooled request and returns
// it to the pool, or leaves it to be freed on completion if ctx ended
// while data was moving.
func (c *Comm) finishBlocking(ctx context.Context, r *op, st *Status) error {
	e := c.e
	e.mu.Lock()
	err := e.finishLocked(ctx, r, st)
	e.mu.Unlock()
	return err
}

// finishLocked is finishBlocking with e.mu held: the lock a blocking call
// took to start its operation is the one its wait starts with, and the
// last round's is the one it returns the operation to the pool under.
func (e *engine) finishLocked(ctx context.Context, r *op, st *Status) error {
	err := e.waitLocked(ctx, r)
	if errors.Is(err, ErrProcFailedPending) && e.cancel(r) {
		// A blocking receive from AnySource is not left pending: it is
		// withdrawn and raises ErrProcFailed (§16.2.2).
		c := r.comm
		e.release(r)
		return e.anyBlocked(c, ErrProcFailed)
	}
	if r.state != stDone {
		r.orphan = true
		return err
	}
	if st != nil {
		*st = r.status
	}
	if err == nil {
		err = r.err
	}
	e.release(r)
	return err
}

// sendNow hands a short message straight to its provider, with no
// operation to track, when nothing stands in the way: the path of a
// small blocking send. Otherwise, or if the provider has no room, it
// reports false having sent nothing, and the caller takes the general
// path (startSend), which makes the same checks. Call with e.mu held.
func (e *engine) sendNow(c *Comm, buf []byte, dest, tag int) bool {
	w := c.ranks[dest]
	p := e.route[w]
	if e.closed || e.failed[w] != nil || p == nil || !e.pending[w].empty() || len(buf) > p.eagerMax() || c.revoked.Load() {
		return false
	}
	e.sh = wire.Header{Kind: wire.Eager, Ctx: c.ctxUser(), Src: int32(c.rank), Tag: int32(tag), Size: uint64(len(buf))}
	return p.send(w, &e.sh, buf)
}

func (c *Comm) initSend(r *op, buf []byte, dest, tag int, ctxID uint32) {
	r.comm, r.kind, r.buf, r.peer, r.tag = c, reqSend, buf, c.ranks[dest], tag
	r.h = wire.Header{Ctx: ctxID, Src: int32(c.rank), Tag: int32(tag)}
}

// Recv receives into buf a message from rank src (or AnySource) with tag
// (or AnyTag) (MPI_Recv). A longer message than buf fills buf and returns
// an error matching ErrTruncated.
func (c *Comm) Recv(ctx context.Context, buf []byte, src, tag int) (Status, error) {
	if err := c.checkSource(src, tag); err != nil {
		return Status{}, err
	}
	if src == ProcNull {
		return Status{Source: ProcNull, Tag: AnyTag}, nil
	}
	e := c.e
	e.mu.Lock()
	if src != AnySource && e.direct < 0 {
		if st, err, done := e.recvDirect(ctx, c, buf, src, tag); done {
			e.mu.Unlock()
			return st, err
		}
	}
	if src == AnySource {
		if err := e.anyBlocked(c, ErrProcFailed); err != nil {
			e.mu.Unlock()
			return Status{}, err
		}
	}
	r := e.get()
	c.postRecv(r, buf, src, tag, c.ctxUser())
	var st Status
	err := e.finishLocked(ctx, r, &st)
	e.mu.Unlock()
	return st, err
}

// recvDirect is a blocking receive's fast path. When the message must come
// from one peer, over a provider that can hand over its frames directly,
// with no other receive posted and nothing unexpected queued, the next
// frame from that peer is either this receive's message or one that
// nothing waits for. So the wait reads that peer's frames itself and
// copies a matching eager message straight into buf: no operation to
// post, match, complete and free, and no poll of everything else between
// the message arriving and Recv returning. General progress runs in the
// rounds between. As soon as that no longer holds (a receive posted by
// another goroutine, a frame queued as unexpected, a long message, a
// failure, Close) it reports done false having consumed nothing of the
// receive's, and the caller takes the general path, which finds what
// arrived meanwhile in the unexpected queue. Call with e.mu held.
func (e *engine) recvDirect(ctx context.Context, c *Comm, buf []byte, src, tag int) (st Status, err error, done bool) {
	w := c.ranks[src]
	d, ok := e.route[w].(directProvider)
	if !ok {
		return Status{}, nil, false
	}
	ctxID := c.ctxUser()
	e.direct = w
	wt := waiter{e: e, ctx: ctx}
	for !e.closed && e.posted.head == nil && e.unexp.head == nil && e.failed[w] == nil && c.usable() && !c.revoked.Load() {
		n, t, taken, moved := d.takeDirect(e, w, ctxID, src, tag, buf)
		if taken {
			e.direct = -1
			return Status{Source: src, Tag: t, Count: n}, nil, true
		}
		switch {
		case moved:
			wt.idle = 0
		case wt.i&3 == 0:
			// The rest of the work (buffers to post again, other peers,
			// sends waiting for room) every fourth round, the first
			// included: after a ping-pong's send, while the answer is on
			// its way.
			wt.round()
		default:
			wt.idle++
		}
		if wt.scanDue() {
			_ = e.scan(nil) // with no operation, it only looks for failures
		}
		e.mu.Unlock()
		if wt.pause() {
			e.mu.Lock()
			e.direct = -1
			return Status{Cancelled: true}, ctx.Err(), true // as cancel would say
		}
		e.mu.Lock()
	}
	e.direct = -1
	return Status{}, nil, false
}

// postRecv matches r against the unexpected messages or posts it; it
// completes r at once when its source has failed with nothing left from it.
func (c *Comm) postRecv(r *op, buf []byte, src, tag int, ctxID uint32) {
	e := c.e
	r.comm, r.kind, r.buf, r.peer, r.tag = c, reqRecv, buf, src, tag
	r.h.Ctx = ctxID
	if e.revokedCtx(ctxID) {
		e.finish(r, c.errRevoked())
		return
	}
	for u := e.unexp.head; u != nil; u = u.next {
		if u.h.Matches(ctxID, src, tag) {
			e.unexp.remove(u)
			e.pl = wire.Payload{Flat: u.buf}
			e.receive(r, u.peer, &u.h, &e.pl)
			u.next, e.freeU = e.freeU, u
			return
		}
	}
	if src != AnySource {
		if w := c.ranks[src]; e.failed[w] != nil {
			e.finish(r, e.peerError(c, w, e.failed[w]))
			return
		}
	}
	r.state = stPosted
	e.posted.push(r)
}

// Isend starts a send (MPI_Isend); buf belongs to the fabric until the
// request completes.
func (c *Comm) Isend(buf []byte, dest, tag int) (Request, error) {
	if err := c.checkDest(dest, tag); err != nil {
		return Request{}, err
	}
	return c.isend(buf, dest, tag, c.ctxUser()), nil
}

func (c *Comm) isend(buf []byte, dest, tag int, ctxID uint32) Request {
	if dest == ProcNull {
		return Request{}
	}
	e := c.e
	e.mu.Lock()
	r := e.get()
	c.initSend(r, buf, dest, tag, ctxID)
	e.startSend(r)
	h := e.handle(r)
	e.mu.Unlock()
	return h
}

// Irecv starts a receive (MPI_Irecv); buf belongs to the fabric until the
// request completes.
func (c *Comm) Irecv(buf []byte, src, tag int) (Request, error) {
	if err := c.checkSource(src, tag); err != nil {
		return Request{}, err
	}
	return c.irecv(buf, src, tag, c.ctxUser()), nil
}

func (c *Comm) irecv(buf []byte, src, tag int, ctxID uint32) Request {
	if src == ProcNull {
		return Request{}
	}
	e := c.e
	e.mu.Lock()
	r := e.get()
	c.postRecv(r, buf, src, tag, ctxID)
	h := e.handle(r)
	e.mu.Unlock()
	return h
}

// Iprobe reports whether a message from src with tag could be received
// now, and its status, without receiving it (MPI_Iprobe).
func (c *Comm) Iprobe(src, tag int) (Status, bool, error) {
	if err := c.checkSource(src, tag); err != nil {
		return Status{}, false, err
	}
	if src == ProcNull {
		return Status{Source: ProcNull, Tag: AnyTag}, true, nil
	}
	e := c.e
	e.mu.Lock()
	defer e.mu.Unlock()
	e.progress()
	if c.revoked.Load() {
		return Status{}, false, c.errRevoked()
	}
	if src == AnySource {
		// Until every known failure is acknowledged (AckFailed).
		if err := e.anyBlocked(c, ErrProcFailed); err != nil {
			return Status{}, false, err
		}
	}
	st, ok := c.probe(src, tag)
	if !ok && src != AnySource {
		// What it sent before it failed is still there to probe.
		if w := c.ranks[src]; e.failed[w] != nil {
			return Status{}, false, e.peerError(c, w, e.failed[w])
		}
	}
	return st, ok, nil
}

func (c *Comm) probe(src, tag int) (Status, bool) {
	for u := c.e.unexp.head; u != nil; u = u.next {
		if u.h.Matches(c.ctxUser(), src, tag) {
			return Status{Source: int(u.h.Src), Tag: int(u.h.Tag), Count: int(u.h.Size)}, true
		}
	}
	return Status{}, false
}

// Probe waits until a message from src with tag can be received and
// returns its status (MPI_Probe).
func (c *Comm) Probe(ctx context.Context, src, tag int) (Status, error) {
	if err := c.checkSource(src, tag); err != nil {
		return Status{}, err
	}
	if src == ProcNull {
		return Status{Source: ProcNull, Tag: AnyTag}, nil
	}
	var st Status
	var perr error
	err := c.e.waitUntil(ctx, func() bool {
		if c.revoked.Load() {
			perr = c.errRevoked()
			return true
		}
		var ok bool
		if st, ok = c.probe(src, tag); ok {
			return true
		}
		if src != AnySource {
			if w := c.ranks[src]; c.e.failed[w] != nil {
				perr = c.e.peerError(c, w, c.e.failed[w])
				return true
			}
		} else if perr = c.e.anyBlocked(c, ErrProcFailed); perr != nil {
			return true
		}
		return false
	})
	if err == nil {
		err = perr
	}
	return st, err
}

// Sendrecv sends sendbuf to dest and receives into recvbuf from src, at
// once, so that a ring of Sendrecv calls cannot deadlock (MPI_Sendrecv).
func (c *Comm) Sendrecv(ctx context.Context, sendbuf []byte, dest, sendtag int, recvbuf []byte, src, recvtag int) (Status, error) {
	if err := c.checkSource(src, recvtag); err != nil {
		return Status{}, err
	}
	if err := c.checkDest(dest, sendtag); err != nil {
		return Status{}, err
	}
	var reqs [2]Request
	var sts [2]Status
	reqs[0] = c.irecv(recvbuf, src, recvtag, c.ctxUser())
	reqs[1] = c.isend(sendbuf, dest, sendtag, c.ctxUser())
	err := WaitAll(ctx, reqs[:], sts[:])
	return sts[0], err
}

// Elem is the element types typed messages carry: fixed-size numbers,
// sent in the machine's byte order, as MPI's predefined types are.
type Elem interface {
	~int8 | ~int16 | ~int32 | ~int64 | ~int | ~uint8 | ~uint16 | ~uint32 | ~uint64 | ~uint | ~uintptr |
		~float32 | ~float64 | ~complex64 | ~complex128
}

func sizeOf[T Elem]() int {
	var z T
	return int(unsafe.Sizeof(z))
}

// asBytes views a typed slice as bytes, without copying.
func asBytes[T Elem](s []T) []byte {
	if len(s) == 0 {
		return []byte{}
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&s[0])), len(s)*sizeOf[T]())
}

// SendSlice is Send of a typed slice.
func SendSlice[T Elem](ctx context.Context, c *Comm, buf []T, dest, tag int) error {
	return c.Send(ctx, asBytes(buf), dest, tag)
}

// RecvSlice is Recv into a typed slice; Count[T] of the status gives the
// number of elements received.
func RecvSlice[T Elem](ctx context.Context, c *Comm, buf []T, src, tag int) (Status, error) {
	return c.Recv(ctx, asBytes(buf), src, tag)
}

// IsendSlice is Isend of a typed slice.
func IsendSlice[T Elem](c *Comm, buf []T, dest, tag int) (Request, error) {
	return c.Isend(asBytes(buf), dest, tag)
}

// IrecvSlice is Irecv into a typed slice.
func IrecvSlice[T Elem](c *Comm, buf []T, src, tag int) (Request, error) {
	return c.Irecv(asBytes(buf), src, tag)
}
