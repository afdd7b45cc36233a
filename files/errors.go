//go:build linux

package files

import (
	"errors"
	"fmt"
	"io/fs"
	"syscall"

	"github.com/rivet-hpc/rivet/fabric"
)

// The error classes of MPI's I/O (MPI 4.1 §14.7). Each matches the
// io/fs error a Go user would test for, where there is one, and the
// errno underneath: errors.Is(err, fs.ErrNotExist) works as well as
// errors.Is(err, files.ErrNoSuchFile).
var (
	// ErrAMode: an access mode MPI forbids — none or more than one of
	// ModeRdOnly, ModeWrOnly and ModeRdWr; ModeCreate or ModeExcl with
	// ModeRdOnly; ModeExcl without ModeCreate; an unknown bit. It matches
	// fabric.ErrInvalid.
	ErrAMode = fmt.Errorf("files: invalid access mode: %w", fabric.ErrInvalid)
	// ErrNoSuchFile: the file does not exist (MPI_ERR_NO_SUCH_FILE).
	ErrNoSuchFile = fmt.Errorf("files: no such file: %w", fs.ErrNotExist)
	// ErrFileExists: ModeExcl and the file exists (MPI_ERR_FILE_EXISTS).
	ErrFileExists = fmt.Errorf("files: file exists: %w", fs.ErrExist)
	// ErrAccess: permission denied (MPI_ERR_ACCESS).
	ErrAccess = fmt.Errorf("files: permission denied: %w", fs.ErrPermission)
	// ErrReadOnly: a write to a file opened ModeRdOnly, or a read of one
	// opened ModeWrOnly (MPI_ERR_READ_ONLY, MPI_ERR_ACCESS).
	ErrReadOnly = errors.New("files: the file's access mode forbids it")
	// ErrIO: the file system failed the operation (MPI_ERR_IO); the errno
	// is wrapped too.
	ErrIO = errors.New("files: I/O error")
	// ErrClosed: the file handle is closed (MPI_FILE_NULL).
	ErrClosed = fmt.Errorf("files: file closed: %w", fs.ErrClosed)
	// ErrView: a view or a filetype MPI does not allow — an etype that is
	// not positive, a negative displacement, blocks that overlap or go
	// backwards, a buffer not a whole number of etypes. It matches
	// fabric.ErrInvalid.
	ErrView = fmt.Errorf("files: invalid view or filetype: %w", fabric.ErrInvalid)
)

// ioErr classifies err, from the file system, into the classes above.
func ioErr(op, path string, err error) error {
	if err == nil {
		return nil
	}
	var class error
	switch {
	case errors.Is(err, fs.ErrNotExist):
		class = ErrNoSuchFile
	case errors.Is(err, fs.ErrExist):
		class = ErrFileExists
	case errors.Is(err, fs.ErrPermission), errors.Is(err, syscall.EROFS):
		class = ErrAccess
	default:
		class = ErrIO
	}
	return fmt.Errorf("%w: %s %s: %w", class, op, path, err)
}

// Range is a range of a file's bytes.
type Range struct {
	Off, Len int64
}

// IOError is a data access that a failure (a process's, or the file
// system's) kept from completing everywhere it had to: it says which of
// the call's bytes are not known to have been written (a write) or to
// hold the file's data (a read). The rest of the call completed: for a
// collective write, every byte of this process's data outside Undefined
// is in the file. It unwraps to its cause, so errors.Is(err,
// fabric.ErrProcFailed) recognizes a process failure.
type IOError struct {
	Op string
	// Undefined are the file's bytes, of those this process's call
	// covered, whose state is undefined: a write's may or may not hold
	// the data, a read's buffer positions for them do not hold the file's.
	Undefined []Range
	Err       error
}

func (e *IOError) Error() string {
	var n int64
	for _, r := range e.Undefined {
		n += r.Len
	}
	return fmt.Sprintf("files: %s: %v (%d bytes in %d ranges undefined)", e.Op, e.Err, n, len(e.Undefined))
}

func (e *IOError) Unwrap() error { return e.Err }
