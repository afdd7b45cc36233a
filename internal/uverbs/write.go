//go:build linux

// Package uverbs holds the kernel's uverbs ABI: the write() framing of
// /dev/infiniband/uverbsN, the command structs, and one typed wrapper per
// command. It mirrors include/uapi/rdma/ib_user_verbs.h (Linux 6.1); users
// never see it.
package uverbs

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sync"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/rivet-hpc/rivet/internal/critpath"
)

// CmdGetContext and friends number the commands this file issues itself.
const (
	CmdGetContext  = 0
	CmdQueryDevice = 1
	CmdQueryPort   = 2
)

// Errno is a failed uverbs command. It wraps the errno so callers test it
// with errors.Is(err, unix.EINVAL) and never compare it with ==.
type Errno struct {
	Cmd   string
	Errno unix.Errno
}

func (e *Errno) Error() string { return fmt.Sprintf("uverbs %s: %v", e.Cmd, e.Errno) }

// Unwrap returns the errno.
func (e *Errno) Unwrap() error { return e.Errno }

// Context is an open uverbs device with its user context allocated
// (GET_CONTEXT), which every other command requires.
//
// Responses are written by the kernel into scratch, a page of mmapped
// memory, never into Go memory the runtime might move. mu serializes the
// control commands that share it; the data path (rings, doorbells) does not
// take it.
type Context struct {
	FD             int // the uverbs character device
	AsyncFD        int // async events (AsyncEventDesc records)
	NumCompVectors uint32

	mu      sync.Mutex
	scratch []byte
	closed  bool
}

// scratch layout: command responses at 0, the doorbell's discarded
// response at doorbellResp.
const (
	scratchSize  = 4096
	doorbellResp = 2048
)

// Open opens a uverbs character device such as /dev/infiniband/uverbs0 and
// allocates its user context.
func Open(path string) (*Context, error) {
	fd, err := unix.Open(path, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	scratch, err := unix.Mmap(-1, 0, scratchSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_ANON|unix.MAP_PRIVATE)
	if err != nil {
		unix.Close(fd)
		return nil, fmt.Errorf("mmap: %w", err)
	}
	c := &Context{FD: fd, AsyncFD: -1, scratch: scratch}
	var resp struct{ AsyncFD, NumCompVectors uint32 }
	if err := command(c, "GET_CONTEXT", CmdGetContext, &respOnly{}, &resp); err != nil {
		c.Close()
		return nil, err
	}
	c.AsyncFD, c.NumCompVectors = int(resp.AsyncFD), resp.NumCompVectors
	unix.CloseOnExec(c.AsyncFD)
	return c, nil
}

// ErrClosed is returned by commands on a closed Context.
var ErrClosed = os.ErrClosed

// Close releases the context; it is safe to call more than once. The caller
// destroys every object first: the kernel would do it, but the rings the
// caller mapped would stay mapped.
func (c *Context) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	c.closed = true
	var errs []error
	if c.AsyncFD >= 0 {
		errs = append(errs, unix.Close(c.AsyncFD))
	}
	errs = append(errs, unix.Close(c.FD), unix.Munmap(c.scratch))
	return errors.Join(errs...)
}

// noResp stands for "this command has no response".
type noResp struct{}

// command issues one write() command: an 8-byte ib_uverbs_cmd_hdr, then
// req. If resp is non-nil, req's first 8 bytes (its response field) are
// pointed at the scratch page and the answer is copied into resp.
func command[Req, Resp any](c *Context, name string, cmd uint32, req *Req, resp *Resp) error {
	reqLen := int(unsafe.Sizeof(*req))
	respLen := 0
	if resp != nil {
		respLen = int(unsafe.Sizeof(*resp))
	}
	if (8+reqLen)%4 != 0 || respLen%4 != 0 || respLen > doorbellResp {
		return fmt.Errorf("uverbs %s: bad framing (%d-byte request, %d-byte response)", name, reqLen, respLen)
	}
	buf := make([]byte, 8+reqLen)
	binary.NativeEndian.PutUint32(buf[0:], cmd)
	binary.NativeEndian.PutUint16(buf[4:], uint16(len(buf)/4))
	binary.NativeEndian.PutUint16(buf[6:], uint16(respLen/4))
	copy(buf[8:], unsafe.Slice((*byte)(unsafe.Pointer(req)), reqLen))

	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return fmt.Errorf("uverbs %s: %w", name, ErrClosed)
	}
	if respLen > 0 {
		clear(c.scratch[:respLen])
		binary.NativeEndian.PutUint64(buf[8:], uint64(uintptr(unsafe.Pointer(&c.scratch[0]))))
	}
	if err := writeFull(c.FD, name, buf); err != nil {
		return err
	}
	if respLen > 0 {
		copy(unsafe.Slice((*byte)(unsafe.Pointer(resp)), respLen), c.scratch)
	}
	return nil
}

func writeFull(fd int, name string, buf []byte) error {
	n, err := unix.Write(fd, buf)
	var errno unix.Errno
	switch {
	case errors.As(err, &errno):
		return &Errno{name, errno}
	case err != nil:
		return fmt.Errorf("uverbs %s: %w", name, err)
	case n != len(buf):
		return fmt.Errorf("uverbs %s: short write %d of %d", name, n, len(buf))
	}
	return nil
}

// Doorbell is a ready-made POST_SEND command with no work requests: on rxe
// it tells the kernel to process what user space put in the send ring.
// Ringing it allocates nothing and makes one syscall.
type Doorbell struct {
	fd  int
	buf [8 + 24]byte
}

// NewDoorbell prepares the doorbell of queue pair qpHandle.
func (c *Context) NewDoorbell(qpHandle uint32) *Doorbell {
	d := DoorbellOnFD(c.FD)
	binary.NativeEndian.PutUint64(d.buf[8:], uint64(uintptr(unsafe.Pointer(&c.scratch[doorbellResp]))))
	binary.NativeEndian.PutUint32(d.buf[16:], qpHandle)
	return d
}

// Ring rings the doorbell. It is a raw system call: the write returns once
// the kernel has run the requester for what was posted (microseconds), so
// the scheduler's bookkeeping for a blocking call would cost more than it
// could give back.
func (d *Doorbell) Ring() error {
	critpath.Doorbell()
	n, errno := ringWrite(d.fd, unsafe.Pointer(&d.buf[0]), len(d.buf))
	if errno != 0 {
		return &Errno{"POST_SEND", unix.Errno(errno)}
	}
	if n != len(d.buf) {
		return fmt.Errorf("uverbs POST_SEND: short write %d", n)
	}
	return nil
}

// Notifier is a ready-made REQ_NOTIFY_CQ command for one CQ, as Doorbell
// is POST_SEND's: a process that sleeps on completions arms its CQs
// before every sleep, and arming this way allocates nothing.
type Notifier struct {
	fd  int
	buf [8 + 8]byte // ib_uverbs_cmd_hdr, ib_uverbs_req_notify_cq
}

// NewNotifier prepares the REQ_NOTIFY_CQ command of CQ cqHandle.
func (c *Context) NewNotifier(cqHandle uint32) *Notifier {
	n := &Notifier{fd: c.FD}
	binary.NativeEndian.PutUint32(n.buf[0:], CmdReqNotifyCQ)
	binary.NativeEndian.PutUint16(n.buf[4:], uint16(len(n.buf)/4))
	binary.NativeEndian.PutUint32(n.buf[8:], cqHandle)
	return n
}

// Arm arms the CQ for one completion event (or one solicited one).
func (n *Notifier) Arm(solicitedOnly bool) error {
	var s uint32
	if solicitedOnly {
		s = 1
	}
	binary.NativeEndian.PutUint32(n.buf[12:], s)
	w, errno := ringWrite(n.fd, unsafe.Pointer(&n.buf[0]), len(n.buf))
	if errno != 0 {
		return &Errno{"REQ_NOTIFY_CQ", unix.Errno(errno)}
	}
	if w != len(n.buf) {
		return fmt.Errorf("uverbs REQ_NOTIFY_CQ: short write %d", w)
	}
	return nil
}

// MmapRing maps a ring the kernel described with mi.
func (c *Context) MmapRing(mi MMInfo) ([]byte, error) {
	b, err := unix.Mmap(c.FD, int64(mi.Offset), int(mi.Size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("mmap ring (offset %#x, %d bytes): %w", mi.Offset, mi.Size, err)
	}
	return b, nil
}

// DoorbellOnFD is the POST_SEND framing without a QP or a response
// buffer: NewDoorbell completes it, and benchmarks aim it at /dev/null to
// measure the user-space half of posting without a device.
func DoorbellOnFD(fd int) *Doorbell {
	d := &Doorbell{fd: fd}
	binary.NativeEndian.PutUint32(d.buf[0:], CmdPostSend)
	binary.NativeEndian.PutUint16(d.buf[4:], uint16(len(d.buf)/4))
	binary.NativeEndian.PutUint16(d.buf[6:], 1)   // a 4-byte bad_wr nobody reads
	binary.NativeEndian.PutUint32(d.buf[28:], 56) // wqe_size: sizeof(ib_uverbs_send_wr), checked even with no WRs
	return d
}
