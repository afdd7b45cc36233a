//go:build linux

package files

import (
	"context"
	"fmt"
	"io"

	"github.com/rivet-hpc/rivet/fabric"
)

// Offsets are in etypes of this process's view, from the view's start;
// buffers are whole numbers of etypes. A read that reaches the end of
// the file returns how many bytes it read and io.EOF, as io.ReaderAt.

// check validates an access of buf at etype offset off.
func (f *File) check(write bool, off int64, buf []byte) (view, error) {
	if err := f.live(); err != nil {
		return view{}, err
	}
	if write && !f.mode.canWrite() || !write && !f.mode.canRead() {
		what := "read"
		if write {
			what = "write"
		}
		return view{}, fmt.Errorf("%w: %s of a file opened %v", ErrReadOnly, what, f.mode)
	}
	f.mu.Lock()
	v := f.view
	f.mu.Unlock()
	if off < 0 {
		return v, fmt.Errorf("%w: files: offset %d", fabric.ErrInvalid, off)
	}
	if int64(len(buf))%v.esize != 0 {
		return v, fmt.Errorf("%w: a buffer of %d bytes in etypes of %d", ErrView, len(buf), v.esize)
	}
	return v, nil
}

// WriteAt writes buf at offset off (MPI_File_write_at): independent.
func (f *File) WriteAt(off int64, buf []byte) (int, error) {
	v, err := f.check(true, off, buf)
	if err != nil {
		return 0, err
	}
	return f.pwrite(v.runs(off*v.esize, int64(len(buf)), nil), buf)
}

// ReadAt reads into buf from offset off (MPI_File_read_at): independent.
func (f *File) ReadAt(off int64, buf []byte) (int, error) {
	v, err := f.check(false, off, buf)
	if err != nil {
		return 0, err
	}
	return f.pread(v.runs(off*v.esize, int64(len(buf)), nil), buf)
}

// pwrite writes buf to the runs of the file.
func (f *File) pwrite(runs []run, buf []byte) (int, error) {
	n := 0
	for _, r := range runs {
		k, err := f.fd.WriteAt(buf[r.buf:r.buf+r.n], r.file)
		n += k
		if err != nil {
			return n, ioErr("write", f.path, err)
		}
	}
	return n, nil
}

func (f *File) pread(runs []run, buf []byte) (int, error) {
	n := 0
	for _, r := range runs {
		k, err := f.fd.ReadAt(buf[r.buf:r.buf+r.n], r.file)
		n += k
		if err == io.EOF {
			return n, io.EOF
		}
		if err != nil {
			return n, ioErr("read", f.path, err)
		}
	}
	return n, nil
}

// Write writes buf at the individual file pointer and moves it past
// what it wrote (MPI_File_write).
func (f *File) Write(buf []byte) (int, error) {
	off, err := f.advance(buf)
	if err != nil {
		return 0, err
	}
	return f.WriteAt(off, buf)
}

// Read reads into buf at the individual file pointer and moves it past
// what it read (MPI_File_read).
func (f *File) Read(buf []byte) (int, error) {
	off, err := f.advance(buf)
	if err != nil {
		return 0, err
	}
	return f.ReadAt(off, buf)
}

// advance moves the individual pointer past buf and returns where it was.
func (f *File) advance(buf []byte) (int64, error) {
	if err := f.live(); err != nil {
		return 0, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if int64(len(buf))%f.view.esize != 0 {
		return 0, fmt.Errorf("%w: a buffer of %d bytes in etypes of %d", ErrView, len(buf), f.view.esize)
	}
	off := f.pos
	f.pos += int64(len(buf)) / f.view.esize
	return off, nil
}

// Seek moves the individual file pointer (MPI_File_seek): to off etypes
// from the view's start (io.SeekStart), from where it is
// (io.SeekCurrent), or from the end of the file as the view sees it
// (io.SeekEnd). It returns the new position.
func (f *File) Seek(off int64, whence int) (int64, error) {
	var base int64
	switch whence {
	case io.SeekStart:
	case io.SeekCurrent:
		base = f.Position()
	case io.SeekEnd:
		end, err := f.endPos()
		if err != nil {
			return 0, err
		}
		base = end
	default:
		return 0, fmt.Errorf("%w: files: whence %d", fabric.ErrInvalid, whence)
	}
	if err := f.live(); err != nil {
		return 0, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if base+off < 0 {
		return 0, fmt.Errorf("%w: files: seek to %d", fabric.ErrInvalid, base+off)
	}
	f.pos = base + off
	return f.pos, nil
}

// Position returns the individual file pointer, in etypes
// (MPI_File_get_position).
func (f *File) Position() int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.pos
}

// ByteOffset returns the file's byte at etype offset off of this
// process's view (MPI_File_get_byte_offset).
func (f *File) ByteOffset(off int64) int64 {
	f.mu.Lock()
	v := f.view
	f.mu.Unlock()
	r := v.runs(off*v.esize, 1, nil)
	return r[0].file
}

// Request is a nonblocking data access (MPI_Request of MPI_File_iwrite
// and its kin). Its buffer belongs to the access until Wait or Test has
// reported it complete.
type Request struct {
	done chan struct{}
	n    int
	err  error
}

func start(do func() (int, error)) *Request {
	q := &Request{done: make(chan struct{})}
	go func() {
		q.n, q.err = do()
		close(q.done)
	}()
	return q
}

// Wait waits until the access is complete, or ctx ends, and returns what
// the blocking call would have. A collective access goes on when ctx
// ends: Wait again to complete it.
func (q *Request) Wait(ctx context.Context) (int, error) {
	select {
	case <-q.done:
		return q.n, q.err
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// Test reports whether the access is complete, and if so what the
// blocking call returned.
func (q *Request) Test() (bool, int, error) {
	select {
	case <-q.done:
		return true, q.n, q.err
	default:
		return false, 0, nil
	}
}

// IWriteAt starts WriteAt (MPI_File_iwrite_at).
func (f *File) IWriteAt(off int64, buf []byte) (*Request, error) {
	if _, err := f.check(true, off, buf); err != nil {
		return nil, err
	}
	return start(func() (int, error) { return f.WriteAt(off, buf) }), nil
}

// IReadAt starts ReadAt (MPI_File_iread_at).
func (f *File) IReadAt(off int64, buf []byte) (*Request, error) {
	if _, err := f.check(false, off, buf); err != nil {
		return nil, err
	}
	return start(func() (int, error) { return f.ReadAt(off, buf) }), nil
}

// IWrite starts Write (MPI_File_iwrite); the pointer moves at once.
func (f *File) IWrite(buf []byte) (*Request, error) {
	off, err := f.advance(buf)
	if err != nil {
		return nil, err
	}
	return f.IWriteAt(off, buf)
}

// IRead starts Read (MPI_File_iread); the pointer moves at once.
func (f *File) IRead(buf []byte) (*Request, error) {
	off, err := f.advance(buf)
	if err != nil {
		return nil, err
	}
	return f.IReadAt(off, buf)
}
