//go:build linux

package osu

import (
	"context"
	"fmt"
	"unsafe"

	"github.com/rivet-hpc/rivet/op"
	"github.com/rivet-hpc/rivet/rma"
)

// typedOps are the -T-typed operations of osu_acc_latency,
// osu_fop_latency and osu_cas_latency over byte buffers, with MPI_SUM.
type typedOps struct {
	acc func(ctx context.Context, w *rma.Window, sbuf []byte, count, peer, disp int) error
	fop func(ctx context.Context, w *rma.Window, sbuf, tbuf []byte, peer, disp int) error
	cas func(ctx context.Context, w *rma.Window, sbuf, cbuf, tbuf []byte, peer, disp int) error
}

// typedOpsFor returns t's operations. MPI defines compare-and-swap on
// integers only (MPI 4.1 §12.3.4) and Rivet refuses it on floats; OSU's
// osu_cas_latency -T mpi_float compares and swaps the float's four bytes,
// which is what Rivet does there.
func typedOpsFor(t Datatype, cas bool) (typedOps, error) {
	switch t {
	case TypeChar:
		return opsOf[int8](), nil
	case TypeInt:
		return opsOf[int32](), nil
	case TypeFloat:
		o := opsOf[float32]()
		if cas {
			o.cas = opsOf[uint32]().cas
		}
		return o, nil
	case TypeLong:
		return opsOf[int64](), nil
	}
	return typedOps{}, fmt.Errorf("%w: no datatype %q", ErrUsage, t.Name)
}

func opsOf[T int8 | int32 | int64 | uint32 | float32]() typedOps {
	sum := op.Sum[T]()
	return typedOps{
		acc: func(ctx context.Context, w *rma.Window, sbuf []byte, count, peer, disp int) error {
			return rma.Accumulate(ctx, w, view[T](sbuf, count), peer, disp, sum)
		},
		fop: func(ctx context.Context, w *rma.Window, sbuf, tbuf []byte, peer, disp int) error {
			v, err := rma.FetchAndOp(ctx, w, view[T](sbuf, 1)[0], peer, disp, sum)
			view[T](tbuf, 1)[0] = v
			return err
		},
		cas: func(ctx context.Context, w *rma.Window, sbuf, cbuf, tbuf []byte, peer, disp int) error {
			v, err := rma.CompareAndSwap(ctx, w, view[T](cbuf, 1)[0], view[T](sbuf, 1)[0], peer, disp)
			view[T](tbuf, 1)[0] = v
			return err
		},
	}
}

// view is b's first n elements of type T; b comes from AllocMem, so it is
// page-aligned and holds no Go pointers.
func view[T any](b []byte, n int) []T {
	if n*int(unsafe.Sizeof(*new(T))) > len(b) {
		panic("osu: view beyond its buffer")
	}
	return unsafe.Slice((*T)(unsafe.Pointer(unsafe.SliceData(b))), n)
}
