//go:build linux

package files

import (
	"context"
	"fmt"
	"io"

	"github.com/rivet-hpc/rivet/collectives"
	"github.com/rivet-hpc/rivet/fabric"
	"github.com/rivet-hpc/rivet/op"
	"github.com/rivet-hpc/rivet/rma"
)

// The shared file pointer (MPI 4.1 §14.4.4) is one word in rank 0's
// memory, moved by a fetch-and-add through a window (package rma): a CPU
// atomic on a node, a NIC atomic across nodes; rank 0 does nothing for
// it. Every member must use the same view with it. If rank 0 fails, the
// shared pointer is lost: the calls that use it raise
// fabric.ErrProcFailed.

// shared moves the shared pointer by delta etypes and returns where it
// was.
func (f *File) shared(ctx context.Context, delta int64) (int64, error) {
	if f.comm.IsRevoked() {
		return 0, f.errRevoked()
	}
	return rma.FetchAndOp(ctx, f.sp, delta, 0, 0, op.Sum[int64]())
}

// WriteShared writes buf at the shared file pointer and moves it past
// what it wrote (MPI_File_write_shared): independent; concurrent calls
// write one after another in some order.
func (f *File) WriteShared(ctx context.Context, buf []byte) (int, error) {
	v, err := f.check(true, 0, buf)
	if err != nil {
		return 0, err
	}
	off, err := f.shared(ctx, int64(len(buf))/v.esize)
	if err != nil {
		return 0, err
	}
	return f.WriteAt(off, buf)
}

// ReadShared reads into buf at the shared file pointer and moves it
// past what it read (MPI_File_read_shared).
func (f *File) ReadShared(ctx context.Context, buf []byte) (int, error) {
	v, err := f.check(false, 0, buf)
	if err != nil {
		return 0, err
	}
	off, err := f.shared(ctx, int64(len(buf))/v.esize)
	if err != nil {
		return 0, err
	}
	return f.ReadAt(off, buf)
}

// IWriteShared starts WriteShared (MPI_File_iwrite_shared): the shared
// pointer moves before it returns, so the accesses of one process take
// their places in the order it started them.
func (f *File) IWriteShared(ctx context.Context, buf []byte) (*Request, error) {
	return f.ishared(ctx, true, buf)
}

// IReadShared starts ReadShared (MPI_File_iread_shared).
func (f *File) IReadShared(ctx context.Context, buf []byte) (*Request, error) {
	return f.ishared(ctx, false, buf)
}

func (f *File) ishared(ctx context.Context, write bool, buf []byte) (*Request, error) {
	v, err := f.check(write, 0, buf)
	if err != nil {
		return nil, err
	}
	off, err := f.shared(ctx, int64(len(buf))/v.esize)
	if err != nil {
		return nil, err
	}
	if write {
		return f.IWriteAt(off, buf)
	}
	return f.IReadAt(off, buf)
}

// WriteOrdered writes every member's buf at the shared file pointer in
// rank order, and moves it past them all (MPI_File_write_ordered):
// collective; a log's way to append.
func (f *File) WriteOrdered(ctx context.Context, buf []byte) (int, error) {
	return f.ordered(ctx, true, buf)
}

// ReadOrdered reads each member's buf from the shared file pointer in
// rank order, and moves it past them all (MPI_File_read_ordered).
func (f *File) ReadOrdered(ctx context.Context, buf []byte) (int, error) {
	return f.ordered(ctx, false, buf)
}

func (f *File) ordered(ctx context.Context, write bool, buf []byte) (int, error) {
	done, err := f.collective()
	if err != nil {
		return 0, err
	}
	defer done()
	// Invalid arguments at one member are told to all (a count of -1),
	// so that none is left waiting in the collective.
	v, bad := f.check(write, 0, buf)
	mine := []int64{-1}
	if bad == nil {
		mine[0] = int64(len(buf)) / v.esize
	}
	counts := make([]int64, f.n)
	if err := collectives.Allgather(ctx, f.comm, mine, counts); err != nil {
		return 0, err
	}
	if bad != nil {
		return 0, bad
	}
	var before, total int64
	for r, c := range counts {
		if c < 0 {
			return 0, fmt.Errorf("%w: files: rank %d's arguments to the ordered access are invalid", fabric.ErrInvalid, r)
		}
		if r < f.me {
			before += c
		}
		total += c
	}
	base := []int64{0}
	if f.me == 0 {
		if base[0], err = f.shared(ctx, total); err != nil {
			// The others learn it from Bcast: -1 says rank 0 failed here.
			base[0] = -1
		}
	}
	if e := collectives.Bcast(ctx, f.comm, base, 0); e != nil {
		return 0, e
	}
	if base[0] < 0 {
		if err != nil {
			return 0, err
		}
		return 0, fmt.Errorf("%w: files: the shared file pointer could not move at rank 0", ErrIO)
	}
	if write {
		return f.WriteAt(base[0]+before, buf)
	}
	return f.ReadAt(base[0]+before, buf)
}

// SeekShared moves the shared file pointer (MPI_File_seek_shared), as
// Seek the individual one; collective, with the same arguments at every
// member.
func (f *File) SeekShared(ctx context.Context, off int64, whence int) (int64, error) {
	done, err := f.collective()
	if err != nil {
		return 0, err
	}
	defer done()
	pos := []int64{0}
	if f.me == 0 {
		var base int64
		switch whence {
		case io.SeekStart:
		case io.SeekCurrent:
			base, err = f.shared(ctx, 0)
		case io.SeekEnd:
			base, err = f.endPos()
		default:
			err = fmt.Errorf("%w: files: whence %d", fabric.ErrInvalid, whence)
		}
		if err == nil && base+off < 0 {
			err = fmt.Errorf("%w: files: seek to %d", fabric.ErrInvalid, base+off)
		}
		if err == nil {
			_, err = rma.FetchAndOp(ctx, f.sp, base+off, 0, 0, op.Replace[int64]())
		}
		pos[0] = base + off
		if err != nil {
			pos[0] = -1
		}
	}
	if e := collectives.Bcast(ctx, f.comm, pos, 0); e != nil {
		return 0, e
	}
	if pos[0] < 0 {
		if err != nil {
			return 0, err
		}
		return 0, fmt.Errorf("%w: files: SeekShared failed at rank 0", fabric.ErrInvalid)
	}
	return pos[0], nil
}

// PositionShared returns the shared file pointer, in etypes
// (MPI_File_get_position_shared).
func (f *File) PositionShared(ctx context.Context) (int64, error) {
	if err := f.live(); err != nil {
		return 0, err
	}
	return f.shared(ctx, 0)
}
