//go:build linux

package perf

import (
	"context"
	"errors"
	"runtime"
	"slices"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/rivet-hpc/rivet/verbs"
)

// cqMod is how often a request is signaled (perftest's --cq-mod default).
const cqMod = 100

// recvWindow is how many receives send_lat keeps posted.
const recvWindow = 64

// spinLimit bounds every busy wait: a peer that stops answering is an
// error, not a hang.
const spinLimit = 10 * time.Second

var errTimeout = errors.New("the peer stopped answering")

// halves returns the region we send from and the one the peer writes into:
// the two halves of the MR, at the same offsets on both sides.
func (e *env) halves(size int) (src []byte, dst []byte, dstOff uint64) {
	b := e.mr.Bytes()
	off := len(b) / 2
	return b[:size], b[off : off+size], uint64(off)
}

// lastByte loads the word holding b's last byte atomically, so the compiler
// cannot hoist the load out of a polling loop, and returns that byte.
func lastByte(b []byte) byte {
	last := unsafe.Pointer(&b[len(b)-1])
	shift := uintptr(last) & 3 // the region is page-aligned, so the word is inside it
	w := atomic.LoadUint32((*uint32)(unsafe.Add(last, -int(shift))))
	return byte(w >> (8 * shift))
}

// interrupted returns ctx's error every checkEvery-th iteration of a
// latency loop. A ping-pong's waits are short, and a wait looks at ctx
// only once it is long, so without this an interrupt would go unseen for
// as long as both sides keep answering.
func interrupted(ctx context.Context, i int) error {
	if i%checkEvery != checkEvery-1 {
		return nil
	}
	return ctx.Err()
}

// checkEvery is how many iterations a latency loop runs between looks at
// its context: tens of milliseconds on rxe, and one mutex in 256
// iterations costs nothing measurable.
const checkEvery = 256

// waitByte spins until b's last byte is v, for at most spinLimit: a
// peer whose queue pair failed (its writes stop coming) is an error, not
// a wait as long as the spins take — minutes under a loaded emulator.
func waitByte(ctx context.Context, b []byte, v byte) error {
	var deadline time.Time
	for spins := 0; lastByte(b) != v; spins++ {
		if spins&0xfffff == 0xfffff {
			// A scheduling point: this loop calls nothing, so with
			// asynchronous preemption off and one P (as rivet perf
			// runs) the goroutine that cancels ctx on an interrupt
			// would never run.
			runtime.Gosched()
			if err := ctx.Err(); err != nil {
				return err
			}
			if deadline.IsZero() {
				deadline = time.Now().Add(spinLimit)
			} else if time.Now().After(deadline) {
				return errTimeout
			}
		}
	}
	return nil
}

// reap polls the send CQ without waiting and fails on an error completion.
func (e *env) reap(cq *verbs.CQ) (int, error) {
	n, err := cq.Poll(e.wcs)
	if err != nil {
		return 0, err
	}
	for i := range e.wcs[:n] {
		if err := e.wcs[i].Err(); err != nil {
			return 0, err
		}
	}
	return n, nil
}

// waitWC spins until cq yields a completion, which must succeed. The
// deadline is read from the clock only once the wait is long: a clock read
// per operation cost 0.2 µs of a 30 µs atomic under emulation.
func (e *env) waitWC(ctx context.Context, cq *verbs.CQ) error {
	var deadline time.Time
	for spins := 0; ; spins++ {
		n, err := cq.Poll(e.wcs[:1])
		if err != nil {
			return err
		}
		if n == 1 {
			return e.wcs[0].Err()
		}
		if spins&0xffff == 0xffff {
			runtime.Gosched() // as in waitByte
			if err := ctx.Err(); err != nil {
				return err
			}
			if deadline.IsZero() {
				deadline = time.Now().Add(spinLimit)
			} else if time.Now().After(deadline) {
				return errTimeout
			}
		}
	}
}

func (e *env) flags(size int, i int) verbs.SendFlags {
	var f verbs.SendFlags
	if size <= e.cfg.Inline {
		f |= verbs.Inline
	}
	if i%cqMod == cqMod-1 {
		f |= verbs.Signaled
	}
	return f
}

// writeLat is ib_write_lat: each side writes to the other and spins on the
// last byte of its own buffer for the answer.
func (e *env) writeLat(ctx context.Context, size int, client bool) (*Result, error) {
	src, dst, off := e.halves(size)
	// One request, posted again and again: a slice made once, not a copy
	// per call of the variadic PostSend.
	wrs := []verbs.SendWR{{Op: verbs.OpRDMAWrite, Local: []verbs.SGE{{MR: e.mr, Length: uint32(size)}}, Remote: e.remote.At(off)}}
	wr := &wrs[0]
	iters := e.cfg.Iters
	for i := 0; i < iters; i++ {
		if err := interrupted(ctx, i); err != nil {
			return nil, err
		}
		v := byte(i%255 + 1)
		if client {
			e.times[i] = stamp()
		} else if err := waitByte(ctx, dst, v); err != nil {
			return nil, err
		}
		src[size-1] = v
		wr.Flags = e.flags(size, i)
		if err := e.qp.PostSend(wrs...); err != nil {
			return nil, err
		}
		if _, err := e.reap(e.scq); err != nil {
			return nil, err
		}
		if client {
			if err := waitByte(ctx, dst, v); err != nil {
				return nil, err
			}
		}
	}
	e.times[iters] = stamp()
	if !client {
		return nil, nil
	}
	return e.latency(size, 2), nil
}

// sendLat is ib_send_lat: a ping-pong of sends, each side reposting its
// receive as it consumes one.
func (e *env) sendLat(ctx context.Context, size int, client bool) (*Result, error) {
	// Receives span the whole receive half, so the ones left posted after
	// one size (each side reposts as it consumes) serve every later size.
	b := e.mr.Bytes()
	off := len(b) / 2
	recv := verbs.RecvWR{Local: []verbs.SGE{{MR: e.mr, Offset: uint64(off), Length: uint32(len(b) - off)}}}
	if !e.recvsPosted {
		for i := 0; i < recvWindow; i++ {
			if err := e.qp.PostRecv(recv); err != nil {
				return nil, err
			}
		}
		e.recvsPosted = true
	}
	if err := e.sync(); err != nil { // both have receives posted
		return nil, err
	}
	wrs := []verbs.SendWR{{Op: verbs.OpSend, Local: []verbs.SGE{{MR: e.mr, Length: uint32(size)}}}}
	wr := &wrs[0]
	iters := e.cfg.Iters
	for i := 0; i < iters; i++ {
		if err := interrupted(ctx, i); err != nil {
			return nil, err
		}
		if client {
			e.times[i] = stamp()
		} else if err := e.recvOne(ctx, recv); err != nil {
			return nil, err
		}
		wr.Flags = e.flags(size, i)
		if err := e.qp.PostSend(wrs...); err != nil {
			return nil, err
		}
		if _, err := e.reap(e.scq); err != nil {
			return nil, err
		}
		if client {
			if err := e.recvOne(ctx, recv); err != nil {
				return nil, err
			}
		}
	}
	e.times[iters] = stamp()
	if !client {
		return nil, nil
	}
	return e.latency(size, 2), nil
}

func (e *env) recvOne(ctx context.Context, recv verbs.RecvWR) error {
	if err := e.waitWC(ctx, e.rcq); err != nil {
		return err
	}
	return e.qp.PostRecv(recv)
}

// opLat is ib_read_lat and ib_atomic_lat: one signaled operation at a time.
func (e *env) opLat(ctx context.Context, size int) (*Result, error) {
	_, _, off := e.halves(size)
	wrs := []verbs.SendWR{{Op: verbs.OpRDMARead, Flags: verbs.Signaled, Local: []verbs.SGE{{MR: e.mr, Length: uint32(size)}},
		Remote: e.remote.At(off)}}
	wr := &wrs[0]
	if e.cfg.Test == AtomicLat {
		wr.Op, wr.CompareAdd = verbs.OpFetchAdd, 1
		if e.cfg.Atomic == "CMP_AND_SWAP" {
			wr.Op, wr.CompareAdd, wr.Swap = verbs.OpCompareSwap, 0, 0
		}
	}
	iters := e.cfg.Iters
	for i := 0; i < iters; i++ {
		if err := interrupted(ctx, i); err != nil {
			return nil, err
		}
		e.times[i] = stamp()
		if err := e.qp.PostSend(wrs...); err != nil {
			return nil, err
		}
		if err := e.waitWC(ctx, e.scq); err != nil {
			return nil, err
		}
	}
	e.times[iters] = stamp()
	return e.latency(size, 1), nil
}

// latency turns the timestamps into perftest's statistics; div is 2 for
// round trips reported as one-way latency.
func (e *env) latency(size, div int) *Result {
	n := e.cfg.Iters
	d := make([]float64, n)
	samples := make([]time.Duration, n)
	for i := range d {
		d[i] = ticksToNs(e.times[i+1]-e.times[i]) / float64(div)
		samples[i] = time.Duration(d[i])
	}
	slices.Sort(d)
	var sum, sq float64
	for _, v := range d {
		sum += v
	}
	avg := sum / float64(n)
	for _, v := range d {
		sq += (v - avg) * (v - avg)
	}
	ns := func(v float64) time.Duration { return time.Duration(v) }
	return &Result{
		Size: size, Iters: n, Min: ns(d[0]), Max: ns(d[n-1]), Typical: ns(d[n/2]), Avg: ns(avg),
		Stdev: ns(sqrt(sq / float64(n))), P99: ns(d[int(0.99*float64(n))]), P999: ns(d[min(n-1, int(0.999*float64(n)))]),
		Samples: samples,
	}
}

func sqrt(x float64) float64 {
	if x <= 0 {
		return 0
	}
	z := x
	for i := 0; i < 50; i++ {
		z = (z + x/z) / 2
	}
	return z
}

var start = time.Now()

// nanotime is a monotonic clock reading; time.Since on a fixed start uses
// the vDSO and allocates nothing.
func nanotime() int64 { return int64(time.Since(start)) }
