//go:build linux

package rma

import (
	"context"
	"encoding/binary"
	"fmt"
	"reflect"
	"unsafe"

	"github.com/rivet-hpc/rivet/fabric"
	"github.com/rivet-hpc/rivet/internal/elem"
	"github.com/rivet-hpc/rivet/internal/reduce"
	"github.com/rivet-hpc/rivet/op"
)

// Operations name their target by its rank in the window's group and a
// displacement in units of the target's displacement unit, as MPI does.
// Put and Get are complete (their buffers free, a Get's data in place)
// at the end of the epoch or the next flush to the target; the
// accumulate family completes at the target before it returns, and its
// results are in place at return.

// access checks that an operation of n bytes at disp of window rank r
// is inside an access epoch and the target's window; it returns the
// target and the byte offset. Called with w.mu held.
func (w *Window) access(ctx context.Context, r, disp, n int) (*target, uint64, error) {
	if r < 0 || r >= w.n {
		return nil, 0, fmt.Errorf("%w: rank %d of a %d-process window", fabric.ErrRank, r, w.n)
	}
	if !w.st.canAccess(r) {
		return nil, 0, fmt.Errorf("%w: an operation to rank %d outside any access epoch (Fence, Start, Lock or LockAll first)", ErrEpoch, r)
	}
	if disp < 0 {
		return nil, 0, fmt.Errorf("%w: displacement %d", ErrRange, disp)
	}
	if w.flavor == FlavorDynamic {
		return w.dynAccess(ctx, r, uint64(disp), uint64(n))
	}
	t := &w.targets[r]
	off := uint64(disp) * t.disp
	if off > t.size || uint64(n) > t.size-off {
		return nil, 0, fmt.Errorf("%w: %d bytes at byte %d of rank %d's %d-byte window", ErrRange, n, off, r, t.size)
	}
	return t, off, nil
}

func plainCheck[T any]() error {
	if !elem.Plain[T]() {
		return fmt.Errorf("%w: %v holds pointers", ErrType, reflect.TypeFor[T]())
	}
	return nil
}

// Put writes origin into window rank r's memory at displacement disp
// (MPI_Put). origin must not change until the operation completes;
// memory from AllocMem moves with zero copies over verbs, other memory
// is staged.
func Put[T any](ctx context.Context, w *Window, origin []T, r, disp int) error {
	return transfer(ctx, w, origin, r, disp, true)
}

// Get reads window rank r's memory at displacement disp into result
// (MPI_Get); result holds it once the operation completes.
func Get[T any](ctx context.Context, w *Window, result []T, r, disp int) error {
	return transfer(ctx, w, result, r, disp, false)
}

// transfer is Put (put) or Get: a copy when the target's memory is
// mapped here, an RDMA write or read otherwise.
func transfer[T any](ctx context.Context, w *Window, buf []T, r, disp int, put bool) error {
	if numKindFor[T]() != numNone && w.fastCopy(elem.Bytes(buf), r, disp, put) {
		return nil // numbers hold no pointers: no need to ask reflection
	}
	if err := plainCheck[T](); err != nil {
		return err
	}
	b := elem.Bytes(buf)
	if err := w.begin(); err != nil {
		return err
	}
	defer w.mu.Unlock()
	t, off, err := w.access(ctx, r, disp, len(b))
	if err != nil || len(b) == 0 {
		return err
	}
	if put {
		if err := w.record(ctx, r, disp, off, len(b)); err != nil {
			return w.targetErr(r, err)
		}
	}
	switch {
	case t.local && put:
		copy(t.data[off:], b)
	case t.local:
		copy(b, t.data[off:])
	case put:
		w.targets[r].pending = true
		return w.targetErr(r, w.ep.Put(ctx, t.nicRank, t.rdata, off, b))
	default:
		w.targets[r].pending = true
		w.reading(r, b)
		return w.targetErr(r, w.ep.Get(ctx, t.nicRank, t.rdata, off, b))
	}
	return nil
}

// Accumulate combines origin into window rank r's memory at disp with o
// (MPI_Accumulate): target = origin ⊕ target, element by element,
// atomically per element with respect to every accumulate-family call.
// o is a built-in operation, Replace or NoOp.
func Accumulate[T any](ctx context.Context, w *Window, origin []T, r, disp int, o op.Op[T]) error {
	return accumulate(ctx, w, origin, nil, r, disp, &o)
}

// GetAccumulate is Accumulate that also returns the target's previous
// elements in result (MPI_Get_accumulate); with NoOp it is an atomic
// read.
func GetAccumulate[T any](ctx context.Context, w *Window, origin, result []T, r, disp int, o op.Op[T]) error {
	if len(result) != len(origin) && !(len(origin) == 0 && reduce.Erase(o).Kind == reduce.KNoOp) {
		return fmt.Errorf("%w: GetAccumulate with %d origin and %d result elements", fabric.ErrInvalid, len(origin), len(result))
	}
	if result == nil {
		result = []T{}
	}
	return accumulate(ctx, w, origin, result, r, disp, &o)
}

// FetchAndOp is GetAccumulate of one element (MPI_Fetch_and_op): it
// returns the target element's previous value.
func FetchAndOp[T any](ctx context.Context, w *Window, origin T, r, disp int, o op.Op[T]) (T, error) {
	var res [1]T
	in := [1]T{origin}
	err := accumulate(ctx, w, in[:], res[:], r, disp, &o)
	return res[0], err
}

// accumulate checks the element type and op and runs the read-modify-
// write; result is nil for Accumulate.
func accumulate[T any](ctx context.Context, w *Window, origin, result []T, r, disp int, o *op.Op[T]) error {
	if fastAccumulate(w, origin, result, r, disp, o) {
		return nil
	}
	if err := plainCheck[T](); err != nil {
		return err
	}
	u, err := reduce.Check(*o)
	if err != nil {
		return err
	}
	if u.Kind == reduce.User {
		return fmt.Errorf("%w: accumulates take built-in operations, Replace and NoOp, not %q", ErrType, u.Name)
	}
	esz := elem.Size[T]()
	if esz != 1 && esz != 2 && esz != 4 && esz != 8 {
		return fmt.Errorf("%w: %d-byte %v elements (accumulates update 1, 2, 4 or 8 bytes atomically)", ErrType, esz, reflect.TypeFor[T]())
	}
	n := len(origin)
	if u.Kind == reduce.KNoOp && len(result) > n {
		n = len(result)
	}
	if err := w.begin(); err != nil {
		return err
	}
	defer w.mu.Unlock()
	t, off, err := w.access(ctx, r, disp, n*esz)
	if err != nil || n == 0 {
		return err
	}
	if off%uint64(esz) != 0 {
		return fmt.Errorf("%w: an accumulate at byte %d, not aligned to its %d-byte elements", ErrType, off, esz)
	}
	var out []byte
	if result != nil {
		out = elem.Bytes(result)
	}
	if u.Kind != reduce.KNoOp {
		if err := w.record(ctx, r, disp, off, n*esz); err != nil {
			return w.targetErr(r, err)
		}
	}
	k := reflect.TypeFor[T]().Kind()
	integer := k >= reflect.Int && k <= reflect.Uintptr
	if w.nic && u.Kind == reduce.KSum && esz == 8 && integer {
		// The NIC's fetch-and-add reads the operands: no op to call.
		err = w.faddElems(ctx, t, off, elem.Bytes(origin), out)
	} else {
		var in []byte
		if u.Kind != reduce.KNoOp {
			// A copy the window keeps: the op is a function value, which
			// escape analysis must assume keeps its operands, and the
			// caller's (often on its stack) would move to the heap.
			w.obuf = append(w.obuf[:0], elem.Bytes(origin)...)
			in = w.obuf
		}
		err = w.rmw(ctx, t, off, n*esz, func(seg []byte, at int) {
			if in != nil {
				u.Fn(in[at:at+len(seg)], seg)
			}
		}, out)
	}
	if err != nil && ctx.Err() == nil {
		w.lostResult(r, w.rangeAt(disp, off), n*esz, u.Kind != reduce.KNoOp, out)
	}
	return w.targetErr(r, err)
}

// CompareAndSwap stores new in window rank r's element at disp if that
// element equals old (MPI_Compare_and_swap), atomically, and returns the
// element's previous value: the swap happened if it equals old. T is an
// integer, bool or byte type.
//
// The arguments are in sync/atomic's order — old, then new, as in
// atomic.CompareAndSwapUint64(addr, old, new) — not MPI's C binding's
// (origin, compare, result), which passes the new value first:
//
//	prev, err := rma.CompareAndSwap(ctx, w, int64(0), int64(me+1), 0, 0) // claim slot 0 if free
//	if err == nil && prev == 0 { /* this process claimed it */ }
func CompareAndSwap[T comparable](ctx context.Context, w *Window, old, new T, r, disp int) (T, error) {
	var zero T
	esz := int(unsafe.Sizeof(zero))
	vals := [3]T{old, new}
	cmp, in, out := elem.Bytes(vals[0:1]), elem.Bytes(vals[1:2]), elem.Bytes(vals[2:3])
	if numKindFor[T]() == numInt && w.fastRMW(r, disp, esz, esz, 0, numNone, cmp, in, out) {
		return vals[2], nil
	}
	switch k := reflect.TypeFor[T]().Kind(); {
	case k == reflect.Bool, k >= reflect.Int && k <= reflect.Uintptr:
	default:
		return zero, fmt.Errorf("%w: CompareAndSwap on %v (MPI defines it for integer, logical and byte types)", ErrType, reflect.TypeFor[T]())
	}
	if err := w.begin(); err != nil {
		return zero, err
	}
	defer w.mu.Unlock()
	t, off, err := w.access(ctx, r, disp, esz)
	if err != nil {
		return zero, err
	}
	if off%uint64(esz) != 0 {
		return zero, fmt.Errorf("%w: CompareAndSwap at byte %d, not aligned to its %d-byte element", ErrType, off, esz)
	}
	if err := w.record(ctx, r, disp, off, esz); err != nil {
		return zero, w.targetErr(r, err)
	}
	if esz == 8 {
		var prev uint64
		prev, err = w.casWord(ctx, t, regionData, off, ne.Uint64(cmp), ne.Uint64(in))
		ne.PutUint64(out, prev)
	} else {
		err = w.rmw(ctx, t, off, esz, func(seg []byte, _ int) {
			if string(seg) == string(cmp) {
				copy(seg, in)
			}
		}, out)
	}
	if err != nil && ctx.Err() == nil {
		w.lostResult(r, w.rangeAt(disp, off), esz, true, nil)
		return zero, w.targetErr(r, err)
	}
	return vals[2], err
}

var ne = binary.NativeEndian
