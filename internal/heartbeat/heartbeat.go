//go:build linux

// Package heartbeat runs a process's heartbeat: a thread that adds one
// to a few words of memory every period, whatever the rest of the
// process is doing. A failure detector reads those words — a load on the
// node, an RDMA read across nodes — and suspects the process when they
// stop moving.
//
// On amd64 the thread is made with clone(2) outside the Go runtime: a
// loop of a few instructions on a stack of its own, every signal
// blocked, that sleeps in futex(2) between beats. The Go scheduler never
// runs it, so a goroutine computing for seconds on a process confined to
// one CPU with GOMAXPROCS 1 — where no goroutine of a ticker would run
// until the computation yields — cannot delay it: the kernel wakes it
// like any sleeping thread. It stops with the process (SIGSTOP) and dies
// with it. Elsewhere it is a goroutine on a locked thread, which a busy
// process can delay (Independent reports which).
//
// The same thread enforces a verdict: it watches fence words, which the
// process's peers set when they declare it failed, and ends the process
// with a message and an exit status of its own once one is set — so a
// process that was stopped, convicted and continued leaves within a
// period, whatever its goroutines are doing (fail-stop).
package heartbeat

import (
	"fmt"
	"sync/atomic"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// MaxWords is how many words one heartbeat adds to, and how many fence
// words it watches.
const MaxWords = 4

// maxMessage is the longest message a fenced process writes.
const maxMessage = 256

// Config says what a heartbeat does.
type Config struct {
	Period time.Duration
	// Words are added to, one each period. They must be 8-byte aligned
	// memory that the Go runtime does not manage (mmapped: a
	// shared-memory segment, registered NIC memory) and stay mapped until
	// Stop returns; so must Fences.
	Words []*uint64
	// Fences are watched every period: once one is not zero, the thread
	// writes Message to standard error and ends the process with Status.
	Fences  []*uint64
	Message string
	Status  int
}

// The thread's arguments, at the start of its mapping (the stack is the
// rest): where the thread and Stop meet, and what the thread may touch —
// memory the Go runtime never moves or frees.
type args struct {
	stop   uint32 // set by Stop; the thread's futex
	_      uint32
	tid    uint32 // the thread's id while it runs; the kernel clears it at its exit
	_      uint32
	period unix.Timespec
	n      uint64
	words  [MaxWords]*uint64
	nf     uint64
	fences [MaxWords]*uint64
	status uint64
	msgLen uint64
	msg    [maxMessage]byte
}

const mapSize = 64 << 10 // arguments, then the stack

// Beat is a running heartbeat.
type Beat struct {
	mem  []byte
	a    *args
	stop func() // the fallback's
}

// Start starts the heartbeat c describes.
func Start(c Config) (*Beat, error) {
	if c.Period <= 0 || len(c.Words) == 0 || len(c.Words) > MaxWords || len(c.Fences) > MaxWords {
		return nil, fmt.Errorf("heartbeat: a period of %v over %d words, watching %d", c.Period, len(c.Words), len(c.Fences))
	}
	if len(c.Message) > maxMessage || c.Status < 0 || c.Status > 255 {
		return nil, fmt.Errorf("heartbeat: a %d-byte message, exit status %d", len(c.Message), c.Status)
	}
	for _, w := range append(c.Words[:len(c.Words):len(c.Words)], c.Fences...) {
		if w == nil || uintptr(unsafe.Pointer(w))%8 != 0 {
			return nil, fmt.Errorf("heartbeat: word %p is not 8-byte aligned", w)
		}
	}
	mem, err := unix.Mmap(-1, 0, mapSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		return nil, fmt.Errorf("heartbeat: mapping its stack: %w", err)
	}
	b := &Beat{mem: mem, a: (*args)(unsafe.Pointer(&mem[0]))}
	b.a.period = unix.NsecToTimespec(c.Period.Nanoseconds())
	b.a.n = uint64(copy(b.a.words[:], c.Words))
	b.a.nf = uint64(copy(b.a.fences[:], c.Fences))
	b.a.status = uint64(c.Status)
	b.a.msgLen = uint64(copy(b.a.msg[:], c.Message))
	if err := b.start(); err != nil {
		unix.Munmap(mem)
		return nil, err
	}
	return b, nil
}

// Thread is the heartbeat thread's id (its TID), 0 once it has exited:
// a peer on the node reads its scheduling state in /proc to tell a
// process that is stopped from one that waits for a CPU.
func (b *Beat) Thread() int {
	if b.a == nil {
		return 0
	}
	return int(atomic.LoadUint32(&b.a.tid))
}

// Stop ends the heartbeat and waits until its thread has exited.
func (b *Beat) Stop() error {
	if b.mem == nil {
		return ErrStopped
	}
	atomic.StoreUint32(&b.a.stop, 1)
	if b.stop != nil {
		b.stop()
	} else {
		// Wake it from its sleep, then wait for the kernel to clear its
		// id, which it does once the thread has left its stack for good.
		const futexWakePrivate = 1 | 128 // FUTEX_WAKE|FUTEX_PRIVATE_FLAG
		unix.Syscall6(unix.SYS_FUTEX, uintptr(unsafe.Pointer(&b.a.stop)), futexWakePrivate, 1, 0, 0, 0)
		for atomic.LoadUint32(&b.a.tid) != 0 {
			time.Sleep(50 * time.Microsecond)
		}
	}
	err := unix.Munmap(b.mem)
	b.mem, b.a = nil, nil
	return err
}
