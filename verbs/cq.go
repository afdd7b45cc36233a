//go:build linux

package verbs

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/rivet-hpc/rivet/internal/rxe"
	"github.com/rivet-hpc/rivet/internal/uverbs"
)

// WCOpcode says what a work completion completed (ibv_wc_opcode).
type WCOpcode uint32

// Work completion opcodes.
const (
	WCSend            WCOpcode = 0
	WCRDMAWrite       WCOpcode = 1
	WCRDMARead        WCOpcode = 2
	WCCompareSwap     WCOpcode = 3
	WCFetchAdd        WCOpcode = 4
	WCRecv            WCOpcode = 128
	WCRecvRDMAWithImm WCOpcode = 129
)

// WCFlags qualify a work completion (ibv_wc_flags).
type WCFlags uint32

// Work completion flags.
const (
	WCWithGRH WCFlags = 1
	WCWithImm WCFlags = 2
)

// WorkCompletion is one completed work request (ibv_wc).
type WorkCompletion struct {
	ID        uint64 // the work request's ID
	Status    Status
	Opcode    WCOpcode
	VendorErr uint32
	ByteLen   uint32 // bytes received, for receives
	Imm       uint32 // immediate data, host order, when Flags has WCWithImm
	QPN       uint32
	SrcQP     uint32
	Flags     WCFlags
}

// Err returns nil for a successful completion and a *CompletionError
// otherwise.
func (wc *WorkCompletion) Err() error {
	if wc.Status == StatusSuccess {
		return nil
	}
	return &CompletionError{Status: wc.Status, VendorErr: wc.VendorErr, QPN: wc.QPN, WRID: wc.ID, Opcode: wc.Opcode}
}

// CQConfig configures a completion queue.
type CQConfig struct {
	// Size is the minimum number of completions it holds (the device may
	// give more: see CQ.Cap). It must cover every completion that can be
	// outstanding; rxe drops completions that do not fit and reports a
	// CQ_ERR event.
	Size int
	// Channel, if set, receives an event when an armed CQ gets a completion.
	Channel *CompChannel
	// Vector is the completion vector (interrupt); 0 is fine on rxe.
	Vector int
	// Unlocked makes Poll take no lock: the caller promises that no Poll
	// runs at the same time as another Poll or Close, as with ibverbs'
	// IBV_CREATE_CQ_ATTR_SINGLE_THREADED. An engine that serializes its
	// progress under its own lock has no use for a second one, which costs
	// about 50 ns a poll under emulation (docs/performance.md).
	Unlocked bool
}

// CQ is a completion queue (ibv_cq).
type CQ struct {
	ctx     *Context
	handle  uint32
	id      uint64
	channel *CompChannel
	notify  *uverbs.Notifier // Arm's command, with a channel

	lifetime // children: the QPs that use it; mu also guards ring
	ring     *rxe.Queue
	unlocked bool // CQConfig.Unlocked: the caller serializes Poll
}

// NewCQ creates a completion queue.
func (c *Context) NewCQ(cfg CQConfig) (*CQ, error) {
	if cfg.Size < 1 || cfg.Size > c.attr.MaxCQE {
		return nil, invalid("CQ size %d (1 to %d)", cfg.Size, c.attr.MaxCQE)
	}
	if err := c.acquire(); err != nil {
		return nil, err
	}
	id := c.nextID.Add(1)
	chFD := int32(-1)
	if cfg.Channel != nil {
		if err := cfg.Channel.acquire(); err != nil {
			c.release()
			return nil, err
		}
		chFD = int32(cfg.Channel.fd())
	}
	release := func() {
		if cfg.Channel != nil {
			cfg.Channel.release()
		}
		c.release()
	}
	r, err := c.uv.CreateCQ(id, uint32(cfg.Size), uint32(cfg.Vector), chFD)
	if err != nil {
		release()
		return nil, c.wrap(err)
	}
	cq := &CQ{ctx: c, handle: r.CQHandle, id: id, channel: cfg.Channel, lifetime: lifetime{kind: "CQ"},
		unlocked: cfg.Unlocked}
	if cfg.Channel != nil {
		cq.notify = c.uv.NewNotifier(r.CQHandle)
	}
	buf, err := c.uv.MmapRing(r.MI)
	if err == nil {
		cq.ring, err = rxe.NewQueue(buf)
		if err != nil {
			unix.Munmap(buf)
		}
	}
	if err == nil && cq.ring.ElemSize() < uint32(unsafe.Sizeof(uverbs.WC{})) {
		unix.Munmap(buf)
		err = fmt.Errorf("CQ slots of %d bytes cannot hold a completion", cq.ring.ElemSize())
	}
	if err != nil {
		c.uv.DestroyCQ(r.CQHandle)
		release()
		return nil, c.wrap(err)
	}
	cq.ring.InitConsumer()
	c.mu.Lock()
	c.cqs[id] = cq
	c.mu.Unlock()
	return cq, nil
}

// Cap is how many completions the queue holds.
func (cq *CQ) Cap() int { return int(cq.ring.Capacity()) }

// Poll copies up to len(wcs) completions into wcs and returns how many. It
// makes no system call and allocates nothing. A failed work request is a
// completion with a non-success Status, not an error; the error is for a
// closed CQ.
func (cq *CQ) Poll(wcs []WorkCompletion) (int, error) {
	// No defer: this is the busiest loop of every waiting process, and
	// nothing in it can panic.
	locked := !cq.unlocked
	if locked {
		cq.mu.Lock()
	}
	if cq.closed {
		if locked {
			cq.mu.Unlock()
		}
		return 0, ErrClosed
	}
	n := 0
	for n < len(wcs) {
		p := cq.ring.Peek()
		if p == nil {
			break
		}
		w := (*uverbs.WC)(p)
		wcs[n] = WorkCompletion{
			ID: w.WRID, Status: Status(w.Status), Opcode: WCOpcode(w.Opcode), VendorErr: w.VendorErr,
			ByteLen: w.ByteLen, QPN: w.QPNum, SrcQP: w.SrcQP, Flags: WCFlags(w.WCFlags),
		}
		if wcs[n].Flags&WCWithImm != 0 {
			wcs[n].Imm = beUint32(w.ImmData)
		}
		cq.ring.Consume()
		n++
	}
	if locked {
		cq.mu.Unlock()
	}
	return n, nil
}

// Pending reports whether a completion waits to be polled. With Arm it
// closes the race of an event-driven wait: a completion that landed
// before the arm raises no event, so a waiter arms, then checks Pending,
// and sleeps only if it is false. It makes no system call.
func (cq *CQ) Pending() bool {
	locked := !cq.unlocked
	if locked {
		cq.mu.Lock()
	}
	yes := !cq.closed && cq.ring.Peek() != nil
	if locked {
		cq.mu.Unlock()
	}
	return yes
}

// Arm asks for one event on the CQ's channel when the next completion
// (or, with solicitedOnly, the next solicited one) arrives.
// It allocates nothing; it makes one system call.
func (cq *CQ) Arm(solicitedOnly bool) error {
	if cq.channel == nil {
		return invalid("CQ has no completion channel")
	}
	// Under the lock Close destroys under: the device's descriptor, which
	// the command is written to, stays open while the CQ is.
	cq.mu.Lock()
	defer cq.mu.Unlock()
	if cq.closed {
		return ErrClosed
	}
	if err := cq.notify.Arm(solicitedOnly); err != nil {
		return cq.ctx.wrap(err)
	}
	return nil
}

// Wait returns at least one completion, blocking without spinning until one
// arrives or ctx ends. It needs a completion channel used by this CQ alone.
// The loop is the standard one: poll, arm, poll again (a completion may have
// landed before the arm), then sleep on the channel.
func (cq *CQ) Wait(ctx context.Context, wcs []WorkCompletion) (int, error) {
	if cq.channel == nil {
		return 0, invalid("CQ has no completion channel")
	}
	if len(wcs) == 0 {
		return 0, invalid("no room for completions")
	}
	for {
		if n, err := cq.Poll(wcs); n > 0 || err != nil {
			return n, err
		}
		if err := cq.Arm(false); err != nil {
			return 0, err
		}
		if n, err := cq.Poll(wcs); n > 0 || err != nil {
			return n, err
		}
		got, err := cq.channel.Wait(ctx)
		if err != nil {
			return 0, err
		}
		if got != cq {
			return 0, fmt.Errorf("verbs: CQ.Wait: %w: its channel also serves another CQ; use CompChannel.Wait", ErrInvalid)
		}
	}
}

// Close destroys the CQ; queue pairs using it must be closed first.
func (cq *CQ) Close() error {
	return cq.close("queue pairs using it are", func() error {
		_, err := cq.ctx.uv.DestroyCQ(cq.handle)
		return cq.ctx.wrapIf(err)
	}, func() error {
		// Unmapped after the lock is dropped: Poll sees closed first.
		err := unix.Munmap(cq.ring.Bytes())
		cq.ctx.mu.Lock()
		delete(cq.ctx.cqs, cq.id)
		cq.ctx.mu.Unlock()
		if cq.channel != nil {
			cq.channel.release()
		}
		cq.ctx.release()
		return err
	})
}

// CompChannel delivers completion events from armed CQs (ibv_comp_channel).
type CompChannel struct {
	ctx  *Context
	file *os.File
	raw  int     // file's descriptor, for Next's reads that must not wait
	ev   [8]byte // Next's event (struct ib_uverbs_comp_event_desc): not on the heap each call
	// Next's waiting read, through the netpoller: made once, since
	// File.Read would allocate the error of every timeout.
	rc       syscall.RawConn
	readFn   func(fd uintptr) bool
	n        int
	rerr     error
	lifetime // children: the CQs that report to it
}

// NewCompChannel creates a completion channel.
func (c *Context) NewCompChannel() (*CompChannel, error) {
	if err := c.acquire(); err != nil {
		return nil, err
	}
	fd, err := c.uv.CreateCompChannel()
	if err != nil {
		c.release()
		return nil, c.wrap(err)
	}
	unix.CloseOnExec(fd)
	if err := unix.SetNonblock(fd, true); err != nil {
		unix.Close(fd)
		c.release()
		return nil, c.wrap(err)
	}
	ch := &CompChannel{ctx: c, file: os.NewFile(uintptr(fd), c.dev.Name+"-comp"), raw: fd,
		lifetime: lifetime{kind: "completion channel"}}
	rc, err := ch.file.SyscallConn()
	if err != nil {
		ch.file.Close()
		c.release()
		return nil, c.wrap(err)
	}
	ch.rc = rc
	ch.readFn = func(fd uintptr) bool {
		ch.n, ch.rerr = unix.Read(int(fd), ch.ev[:])
		return ch.rerr != unix.EAGAIN
	}
	return ch, nil
}

// fd is the channel's descriptor; the caller holds a reference (acquire),
// so the file is open.
func (ch *CompChannel) fd() int {
	fd := -1
	if rc, err := ch.file.SyscallConn(); err == nil {
		rc.Control(func(f uintptr) { fd = int(f) })
	}
	return fd
}

// Wait blocks until an armed CQ on this channel has a completion, and
// returns that CQ (re-arm it to get another event). It sleeps in the Go
// netpoller; ctx ending wakes it with ctx's error.
func (ch *CompChannel) Wait(ctx context.Context) (*CQ, error) {
	ch.file.SetReadDeadline(time.Time{}) // (Next's may be left)
	stop := context.AfterFunc(ctx, func() { ch.file.SetReadDeadline(time.Unix(1, 0)) })
	defer stop()
	var ev [8]byte // struct ib_uverbs_comp_event_desc
	if _, err := io.ReadFull(ch.file, ev[:]); err != nil {
		if ctx.Err() != nil {
			ch.file.SetReadDeadline(time.Time{})
			return nil, ctx.Err()
		}
		if errors.Is(err, os.ErrClosed) {
			return nil, fmt.Errorf("verbs: completion channel: %w", ErrClosed)
		}
		return nil, fmt.Errorf("verbs: completion channel: %w", err)
	}
	id := binary.NativeEndian.Uint64(ev[:])
	ch.ctx.mu.Lock()
	cq := ch.ctx.cqs[id]
	ch.ctx.mu.Unlock()
	if cq == nil {
		return nil, fmt.Errorf("verbs: completion event for unknown CQ %d", id)
	}
	return cq, nil
}

// Next waits up to d for an event and returns the armed CQ that raised
// it, or nil when none came in time; d ≤ 0 only takes an event already
// there. Unlike Wait it allocates nothing, for waiters that sleep between
// polls: the thread sleeps in the Go netpoller until the event or the
// deadline. Calls must not overlap with each other or with Wait.
func (ch *CompChannel) Next(d time.Duration) (*CQ, error) {
	var n int
	var err error
	if d <= 0 {
		// A read with a deadline already past would not look at all: a
		// plain nonblocking read, under the lock Close destroys under, so
		// that the descriptor is still the channel's.
		ch.mu.Lock()
		if ch.closed {
			err = os.ErrClosed
		} else if n, err = unix.Read(ch.raw, ch.ev[:]); errors.Is(err, unix.EAGAIN) {
			ch.mu.Unlock()
			return nil, nil
		}
		ch.mu.Unlock()
	} else {
		if err := ch.file.SetReadDeadline(time.Now().Add(d)); err != nil {
			return nil, fmt.Errorf("verbs: completion channel: %w", err)
		}
		if err = ch.rc.Read(ch.readFn); errors.Is(err, os.ErrDeadlineExceeded) {
			return nil, nil
		}
		if err == nil {
			n, err = ch.n, ch.rerr
		}
	}
	if err != nil && !errors.Is(err, os.ErrClosed) {
		ch.mu.Lock() // (Close destroys under it: done, if under way)
		if ch.closed {
			err = os.ErrClosed
		}
		ch.mu.Unlock()
	}
	switch {
	case errors.Is(err, os.ErrClosed):
		return nil, fmt.Errorf("verbs: completion channel: %w", ErrClosed)
	case err != nil:
		return nil, fmt.Errorf("verbs: completion channel: %w", err)
	case n != len(ch.ev):
		return nil, fmt.Errorf("verbs: completion channel: a %d-byte event", n)
	}
	id := binary.NativeEndian.Uint64(ch.ev[:])
	ch.ctx.mu.Lock()
	cq := ch.ctx.cqs[id]
	ch.ctx.mu.Unlock()
	return cq, nil
}

// Close closes the channel; CQs using it must be closed first.
func (ch *CompChannel) Close() error {
	return ch.close("CQs using it are", ch.file.Close, func() error { ch.ctx.release(); return nil })
}

func beUint32(v uint32) uint32 {
	var b [4]byte
	binary.NativeEndian.PutUint32(b[:], v)
	return binary.BigEndian.Uint32(b[:])
}
