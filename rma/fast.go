//go:build linux

package rma

import (
	"reflect"
	"runtime"
	"sync/atomic"
	"unsafe"

	"github.com/rivet-hpc/rivet/internal/elem"
	"github.com/rivet-hpc/rivet/internal/reduce"
	"github.com/rivet-hpc/rivet/op"
)

// The fast path. Puts, gets and flushes to a target whose memory is
// mapped here (shared memory) are a bounds check and a copy, or nothing;
// taking the window's mutex for them cost more than the copy (two locked
// instructions of some 6 ns each per call on the machines measured). The
// synchronization calls, under the mutex, publish per target what it may
// do without it (gates); an operation announces itself in inflight before
// it reads its gate, and Free closes the gates before it waits for
// inflight to drain and unmaps, so no copy touches memory Free released.
// Both sides use sequentially consistent atomics, so one of them always
// sees the other.

// Gate bits, per target.
const (
	gateCopy  = 1 << iota // an access epoch is open and the memory is mapped here
	gateFlush             // a passive epoch is open and nothing is pending on a NIC
)

// publish recomputes the gates from the synchronization state. Called
// with w.mu held, at the end of every call that changes that state.
func (w *Window) publish() {
	for r := range w.gates {
		w.publishTarget(r)
	}
}

// publishTarget recomputes window rank r's gate.
func (w *Window) publishTarget(r int) {
	if r < 0 || r >= len(w.gates) {
		return
	}
	var g uint32
	if !w.freed && w.flavor != FlavorDynamic && w.st.locks != nil {
		t := &w.targets[r]
		if t.local && w.st.canAccess(r) {
			g |= gateCopy
		}
		if (w.st.lockAll || w.st.locks[r] != 0) && !(w.nic && t.nicRank >= 0) {
			g |= gateFlush
		}
	}
	w.gates[r].Store(g)
}

// endSync publishes the gates and unlocks the window: the deferred end
// of every synchronization call.
func (w *Window) endSync() {
	w.publish()
	w.mu.Unlock()
}

// endSyncTarget is endSync for a call that changes only rank r's state
// (Lock, Unlock).
func (w *Window) endSyncTarget(r int) {
	w.publishTarget(r)
	w.mu.Unlock()
}

// fastCopy is transfer's path without the mutex: it reports false when
// the call must take the slow path (which also reports the errors).
func (w *Window) fastCopy(b []byte, r, disp int, put bool) bool {
	if uint(r) >= uint(len(w.gates)) || w.gates[r].Load()&gateCopy == 0 || disp < 0 {
		return false
	}
	w.inflight.Add(1)
	defer w.inflight.Add(-1)
	if w.gates[r].Load()&gateCopy == 0 {
		return false
	}
	t := &w.targets[r]
	off := uint64(disp) * t.disp
	if off > t.size || uint64(len(b)) > t.size-off || put && !w.recorded(t, off, len(b)) {
		return false
	}
	if put {
		copy(t.data[off:], b)
	} else {
		copy(b, t.data[off:])
	}
	return true
}

// recorded reports whether a write to [off, off+n) of t, mapped here,
// needs no range record: records are off, or this process's block at t
// covers it already (ranges.go). The block is read where the target
// keeps it; only this process writes it, under w.mu.
func (w *Window) recorded(t *target, off uint64, n int) bool {
	if !w.track {
		return true
	}
	b := (*[2 * recSlots]uint64)(unsafe.Pointer(&t.ctl[w.recAt]))
	for i := 0; i < 2*recSlots; i += 2 {
		lo, hi := atomic.LoadUint64(&b[i]), atomic.LoadUint64(&b[i+1])
		if lo < hi && lo <= off && off+uint64(n) <= hi {
			return true
		}
	}
	return false
}

// fastFlush reports whether a flush of r has nothing to do and may skip
// the mutex.
func (w *Window) fastFlush(r int) bool {
	return uint(r) < uint(len(w.gates)) && w.gates[r].Load()&gateFlush != 0 &&
		atomic.LoadUint64(w.rev) == 0 && w.ep.KnownFailed() == 0 && !w.comm.IsRevoked()
}

// drain closes the gates and waits for the operations already past them.
// Called with w.mu held, before the window's memory is released.
func (w *Window) drain() {
	for r := range w.gates {
		w.gates[r].Store(0)
	}
	for w.inflight.Load() != 0 {
		runtime.Gosched()
	}
}

// The inline accumulates: on windows in the CPU domain, sum, replace and
// no-op on integer and floating-point elements are computed here, on a
// word copy on the stack, rather than through the op's function value
// (which would make the operands escape, and the call take the mutex for
// the window's operand buffer).

// numKind is how an element adds: as an integer (any sign; two's
// complement wraps the same), or as a float of 4 or 8 bytes.
type numKind uint8

const (
	numNone numKind = iota // not computed inline
	numInt
	numF32
	numF64
)

// numKindOf returns how T's elements add, or numNone.
func numKindOf(k reflect.Kind) numKind {
	switch {
	case k >= reflect.Int && k <= reflect.Uintptr:
		return numInt
	case k == reflect.Float32:
		return numF32
	case k == reflect.Float64:
		return numF64
	}
	return numNone
}

// numKindFor is numKindOf for T by a type switch, which costs less than
// reflection on every call; named types fall back to reflection.
func numKindFor[T any]() numKind {
	var z T
	switch any(z).(type) {
	case int, int8, int16, int32, int64, uint, uint8, uint16, uint32, uint64, uintptr:
		return numInt
	case float32:
		return numF32
	case float64:
		return numF64
	}
	return numKindOf(reflect.TypeFor[T]().Kind())
}

// fastAccumulate is accumulate's path for the inline ops; it reports
// false when the call must take the slow path.
func fastAccumulate[T any](w *Window, origin, result []T, r, disp int, o *op.Op[T]) bool {
	u := reduce.Ref(o)
	if w.nic || u.Fn == nil || (u.Kind != reduce.KSum && u.Kind != reduce.KReplace && u.Kind != reduce.KNoOp) {
		return false
	}
	nk := numKindOf(u.Elem)
	if nk == numNone {
		return false
	}
	n := len(origin)
	var in, out []byte
	if u.Kind == reduce.KNoOp {
		n = max(n, len(result))
	} else {
		in = elem.Bytes(origin)
	}
	if result != nil {
		out = elem.Bytes(result)
	}
	esz := int(unsafe.Sizeof(*new(T)))
	return w.fastRMW(r, disp, n*esz, esz, u.Kind, nk, nil, in, out)
}

// laneAdd adds a and b in independent esz-byte lanes (no carry crosses
// a lane): the low bits of each lane add without overflow, and each
// lane's top bit is the two top bits and that carry, exclusive-ored.
func laneAdd(a, b uint64, esz int) uint64 {
	var h uint64
	switch esz {
	case 8:
		return a + b
	case 4:
		h = 0x8000_0000_8000_0000
	case 2:
		h = 0x8000_8000_8000_8000
	default:
		h = 0x8080_8080_8080_8080
	}
	return ((a &^ h) + (b &^ h)) ^ ((a ^ b) & h)
}

// applyInline computes seg = in ⊕ seg for esz-byte elements.
func applyInline(opk reduce.Kind, nk numKind, esz int, in, seg []byte) {
	switch opk {
	case reduce.KReplace:
		copy(seg, in)
		return
	case reduce.KNoOp:
		return
	}
	for i := 0; i < len(seg); i += esz {
		p, q := unsafe.Pointer(&seg[i]), unsafe.Pointer(&in[i])
		switch {
		case nk == numF32:
			*(*float32)(p) += *(*float32)(q)
		case nk == numF64:
			*(*float64)(p) += *(*float64)(q)
		case esz == 1:
			*(*uint8)(p) += *(*uint8)(q)
		case esz == 2:
			*(*uint16)(p) += *(*uint16)(q)
		case esz == 4:
			*(*uint32)(p) += *(*uint32)(q)
		default:
			*(*uint64)(p) += *(*uint64)(q)
		}
	}
}

// fastRMW is the CPU-domain read-modify-write of n bytes at disp of
// window rank r without the mutex: each covered word is swapped in with
// the elements changed, by an inline op (cmp == nil) or, for
// compare-and-swap, replaced by in where they equal cmp. out, if not
// nil, receives what the swaps replaced. It reports false when the call
// must take the slow path.
func (w *Window) fastRMW(r, disp, n, esz int, opk reduce.Kind, nk numKind, cmp, in, out []byte) bool {
	if w.nic || uint(r) >= uint(len(w.gates)) || w.gates[r].Load()&gateCopy == 0 || disp < 0 {
		return false
	}
	w.inflight.Add(1)
	t := &w.targets[r]
	off := uint64(disp) * t.disp
	if w.gates[r].Load()&gateCopy == 0 || off > t.size || uint64(n) > t.size-off || off%uint64(esz) != 0 || n == 0 ||
		in != nil && !w.recorded(t, off, n) {
		w.inflight.Add(-1)
		return false
	}
	if n == 8 && esz == 8 && w.wordRMW(word(t.data, off), opk, nk, cmp, in, out) {
		w.inflight.Add(-1)
		return true
	}
	lo, hi := off&^7, (off+uint64(n)+7)&^7
	for a := lo; a < hi; a += 8 {
		p := word(t.data, a)
		s, e := max(a, off), min(a+8, off+uint64(n))
		var buf [8]byte
		if cmp == nil && opk == reduce.KSum && nk == numInt {
			// An integer sum adds lane by lane in one word: the operand
			// has zeros in the lanes the call does not cover.
			copy(buf[s-a:e-a], in[s-off:e-off])
			add := ne.Uint64(buf[:])
			for {
				old := atomic.LoadUint64(p)
				if out != nil {
					ne.PutUint64(buf[:], old)
					copy(out[s-off:e-off], buf[s-a:e-a])
				}
				if atomic.CompareAndSwapUint64(p, old, laneAdd(old, add, esz)) {
					break
				}
			}
			continue
		}
		for {
			old := atomic.LoadUint64(p)
			ne.PutUint64(buf[:], old)
			seg := buf[s-a : e-a]
			if out != nil {
				copy(out[s-off:e-off], seg)
			}
			if cmp == nil {
				if in != nil { // nil for no-op
					applyInline(opk, nk, esz, in[s-off:e-off], seg)
				}
			} else if string(seg) == string(cmp) {
				copy(seg, in)
			}
			if nw := ne.Uint64(buf[:]); nw == old || atomic.CompareAndSwapUint64(p, old, nw) {
				break
			}
		}
	}
	w.inflight.Add(-1)
	return true
}

// wordRMW is fastRMW on one aligned 8-byte element, with the one atomic
// instruction that does the operation where there is one: an add, a
// swap, a load, or a compare-and-swap after a load. It reports false for
// what it leaves to the general loop (floating-point sums).
func (w *Window) wordRMW(p *uint64, opk reduce.Kind, nk numKind, cmp, in, out []byte) bool {
	var old uint64
	switch {
	case cmp != nil:
		c, v := ne.Uint64(cmp), ne.Uint64(in)
		for {
			// A value other than c is the answer as of the load; so is c
			// when v is c (the swap would change nothing).
			if old = atomic.LoadUint64(p); old != c || c == v || atomic.CompareAndSwapUint64(p, c, v) {
				break
			}
		}
	case opk == reduce.KNoOp:
		old = atomic.LoadUint64(p)
	case opk == reduce.KReplace:
		old = atomic.SwapUint64(p, ne.Uint64(in))
	case opk == reduce.KSum && nk == numInt:
		add := ne.Uint64(in)
		old = atomic.AddUint64(p, add) - add
	default:
		return false
	}
	if out != nil {
		ne.PutUint64(out, old)
	}
	return true
}
