//go:build linux

// Package falloc allocates a file's space with fallocate(2) in a way that
// signals cannot defeat.
//
// A Go program takes signals at any moment: the runtime's preemption
// (SIGURG), a profiler's SIGPROF, SIGCHLD from its children. On tmpfs
// (/dev/shm; Linux 6.1, as Debian 12 ships it) fallocate returns EINTR
// when any signal arrives while it runs, and first frees every page that
// call had allocated, so retrying the same range can lose again and
// again while the range takes longer to allocate than the gap between
// signals. Allocate retries an interrupted range in halves, keeping what
// each completed call allocated.
package falloc

import (
	"os"

	"golang.org/x/sys/unix"
)

// minStep is the shortest range Allocate asks for after interruptions: 16
// pages, which even an emulated machine allocates in well under the 10 ms
// between the runtime's preemption signals.
const minStep = 64 << 10

// fallocate is the system call (a variable so that tests can interrupt it
// as the kernel does).
var fallocate = unix.Fallocate

// Allocate makes the file system allocate the first size bytes of the
// file fd, extending the file if it is shorter (fallocate(2) mode 0,
// posix_fallocate). Where a call is interrupted by a signal it goes on in
// smaller steps, from where the completed ones reached. An error is an
// *os.SyscallError wrapping the errno (errors.Is(err, unix.EOPNOTSUPP)
// where the file system cannot allocate); after one the file may have
// been extended part of the way, as file systems that allocate in steps
// (ext4) leave it.
func Allocate(fd int, size int64) error {
	if size <= 0 {
		return nil
	}
	step := size
	for off := int64(0); off < size; {
		n := min(step, size-off)
		switch err := fallocate(fd, 0, off, n); err {
		case nil:
			off += n
			step = max(step, 2*n) // signals seem to have gone: longer steps again
		case unix.EINTR:
			step = max(n/2, minStep)
		default:
			return os.NewSyscallError("fallocate", err)
		}
	}
	return nil
}
